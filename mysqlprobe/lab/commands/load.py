"""Run the seed load (INSERT ... SELECT into a partitioned emp table) on a server."""

from __future__ import annotations

import json

from mysqlprobe.lab import workload

EXAMPLES = """examples:
  mysqlprobe lab load --socket /path/mysqld.sock --rows 100003 --partitioning range --partitions 5
  mysqlprobe lab load --socket /path/mysqld.sock --partitioning none
"""


def add_arguments(p) -> None:
    p.add_argument("--socket", required=True, help="the server's unix socket")
    p.add_argument("--user", default="root")
    p.add_argument("--rows", type=int, default=100003, help="rows to insert (default: 100003, a prime)")
    p.add_argument("--partitioning", choices=workload.KINDS, default="range")
    p.add_argument("--partitions", type=int, default=5)


def run(args, parser) -> int:
    if args.rows <= 0:
        parser.error("--rows must be positive")
    t = workload.table(args.partitioning, args.partitions)
    conn = workload.connect(args.socket, user=args.user)
    workload.prepare_source(conn, args.rows)
    workload.create_target(conn, t)
    affected, seconds = workload.insert_select(conn, t)
    result = {"table": t.name, "rows": affected, "seconds": round(seconds, 3)}
    if t.kind != "none":
        result["partitions"] = workload.partition_counts(conn, t)
    print(json.dumps(result))
    return 0
