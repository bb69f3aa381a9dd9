"""Puts the Performance Schema setup back if mysqlprobe dies without doing
it (kill -9). Started by mysqlprobe with the saved setup on stdin; its
stdin stays open while mysqlprobe lives. "done" means mysqlprobe restored
the setup itself; end of file without it means mysqlprobe is gone.

Started by collectors/guard_process.py (not for people)."""

from __future__ import annotations

import signal
import sys

from mysqlprobe.collectors.guard_process import receive, told_done


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    state = receive(sys.stdin)
    if told_done(sys.stdin):
        return 0
    # imported only now: the guard starts beside mysqlprobe's own start, on the
    # same CPUs, and pymysql alone took 0.05 s of it
    import pymysql

    from mysqlprobe.collectors.perfschema import PerfSchema
    from mysqlprobe.collectors.ps_lease import SetupLease

    def restore(saved: dict) -> None:
        conn = pymysql.connect(**state["connect"])
        ps = PerfSchema(conn)
        ps.adopt(saved)
        ps.restore()
        conn.close()

    try:
        if state.get("lease"):  # leave for mysqlprobe: restore only if it was the last one
            SetupLease.from_json(state["lease"]).leave(restore)
        else:
            restore(state["saved"])
    except pymysql.err.MySQLError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
