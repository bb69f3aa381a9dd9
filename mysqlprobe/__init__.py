"""mysqlprobe: where an INSERT's time goes inside mysqld, from eBPF uprobes."""

__version__ = "0.1.0"
