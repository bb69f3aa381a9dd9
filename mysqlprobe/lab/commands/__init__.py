"""mysqlprobe lab COMMAND: the lab's commands."""
