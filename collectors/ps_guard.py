"""Puts the Performance Schema setup back if mysqlprobe dies without doing
it (kill -9). Started by mysqlprobe with the saved setup on stdin; its
stdin stays open while mysqlprobe lives. "done" means mysqlprobe restored
the setup itself; end of file without it means mysqlprobe is gone.

    python -m mysqlprobe.collectors.ps_guard   (not for people)"""

from __future__ import annotations

import json
import signal
import sys


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    state = json.loads(sys.stdin.readline())
    if sys.stdin.readline().strip() == "done":
        return 0
    import pymysql

    from mysqlprobe.collectors.perfschema import PerfSchema

    try:
        conn = pymysql.connect(**state["connect"])
    except pymysql.err.MySQLError:
        return 1
    ps = PerfSchema(conn, saved_consumers=state["consumers"],
                    saved_instruments={k: tuple(v) for k, v in state["instruments"].items()},
                    saved_background_history_off=state.get("background_history_off"), restored=False)
    ps.restore()
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
