"""The workload's SQL, without a server: one INSERT's parameters match the
table's columns, and the table is named as its DDL names it."""

import re

from mysqlprobe.lab import workload


def test_a_rows_insert_has_a_parameter_for_each_column():
    t = workload.table("range", 100)
    columns = re.findall(r"^\s+(\w+) ", workload.COLUMNS, re.M)
    sql = t.insert_row_sql()
    assert sql.startswith(f"INSERT INTO {t.name} VALUES (") and sql.count("%s") == len(columns) == 7
    assert t.insert_row_sql(workload.SCHEMA).startswith(f"INSERT INTO {workload.SCHEMA}.{t.name} VALUES")
    assert f"CREATE TABLE {t.name} " in t.ddl()
