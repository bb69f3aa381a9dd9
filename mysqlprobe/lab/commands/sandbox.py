"""Start, stop or inspect a sandbox MariaDB server (10.1.23, 10.2.11, 10.11.5)."""

from __future__ import annotations

import sys

from mysqlprobe.lab import sandbox

EXAMPLES = """examples:
  mysqlprobe lab sandbox start 10.2.11     # fetch (Maven Central), install-db, start
  mysqlprobe lab sandbox status 10.2.11    # PID and socket
  mysqlprobe lab sandbox stop 10.2.11
"""


def add_arguments(p) -> None:
    p.add_argument("action", choices=("start", "stop", "status", "fetch"))
    p.add_argument("version", choices=sandbox.VERSIONS)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def run(args, parser) -> int:
    sb = sandbox.Sandbox(args.version)
    if args.action == "fetch":
        inst = sandbox.install(args.version, _log)
        print(inst.mysqld)
    elif args.action == "start":
        started = sb.start(_log)
        print(f"MariaDB {args.version} PID {started} socket {sb.socket}")
    elif args.action == "stop":
        print(f"MariaDB {args.version} " + ("stopped" if sb.stop() else "was not running"))
    else:
        pid = sb.pid()
        print(f"MariaDB {args.version} " + (f"PID {pid} socket {sb.socket}" if pid else "not running"))
        return 0 if pid else 1
    return 0
