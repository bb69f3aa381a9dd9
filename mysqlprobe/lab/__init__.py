"""The lab: sandbox servers fetched from Maven Central, the seed loads, and
the commands around them (mysqlprobe lab sandbox|load|demo|bench). Not the
product: nothing under mysqlprobe/ outside this package imports it."""
