"""Puts the Performance Schema setup back if mysqlprobe dies without doing
it (kill -9). Started by mysqlprobe before it changes anything, with how to
connect and the setup lease on stdin; the rows' old state follows before
they change (the lease's record has it too). Its stdin stays open while
mysqlprobe lives. "done" means mysqlprobe restored the setup itself; end
of file without it means mysqlprobe is gone: the guard ends its
connections (a statement sent before it died may still run), then puts
the rows back, if mysqlprobe was the server's last profiler.

Started by collectors/safety/guard_process.py (not for people)."""

from __future__ import annotations

import signal
import sys

from mysqlprobe.collectors.safety.guard_process import receive, told_done

# typing is not imported at run time: a guard waits on two CPUs and imports no more than it needs
TYPE_CHECKING = False
if TYPE_CHECKING:
    from mysqlprobe.collectors.perfschema.connection import Connection
    from typing import Any

CONNECTIONS_END_S = 5.0  # for the server to end a killed mysqlprobe's connections
RESUME_WAIT_S = 600      # how long a paused (SIGSTOPped) or hung server is waited for
RETRY_S = 1.0


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    state = receive(sys.stdin)
    if told_done(sys.stdin, state):
        return 0
    # imported only now: the guard starts beside mysqlprobe's own start, on the
    # same CPUs, and pymysql alone took 0.05 s of it
    import pymysql

    from mysqlprobe.collectors.perfschema.settings import PerfSchema
    from mysqlprobe.collectors.perfschema.lease import SetupLease

    def restore(saved: dict[str, Any]) -> None:
        ps = PerfSchema(conn)
        ps.adopt(saved)
        ps.restore()

    try:
        conn = connect_when_answering(state)
        if conn is None:
            return 1
        end_connections(conn, state.get("connections") or [])
        if state.get("lease"):  # leave for mysqlprobe: restore only if it was the last one
            SetupLease.from_json(state["lease"]).leave(restore)
        elif state.get("saved"):
            restore(state["saved"])
        conn.close()
    except pymysql.err.MySQLError:
        return 1
    return 0


def _same_server(server: dict[str, Any] | None) -> bool:
    """The server process the setup was changed on still runs (paused or not);
    one restarted under its PID has a setup of its own."""
    if not server:
        return True
    try:
        with open(f"/proc/{server['pid']}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and int(fields[19]) == server["start_ticks"]


def connect_when_answering(state: dict[str, Any]) -> Connection | None:
    """A connection once the server answers; None once it is gone, or after
    RESUME_WAIT_S of not answering."""
    import time

    import pymysql
    until = time.monotonic() + RESUME_WAIT_S
    while True:
        try:
            return pymysql.connect(**state["connect"])
        except pymysql.err.MySQLError:
            if not _same_server(state.get("server")) or time.monotonic() > until:
                return None
            time.sleep(RETRY_S)


def end_connections(conn: Connection, ids: list[int], timeout_s: float = CONNECTIONS_END_S) -> None:
    """mysqlprobe's connections, which may still run a statement it sent
    before it died (an UPDATE of the setup): ended, and waited for, so that
    none lands after the restore."""
    import time

    import pymysql
    if not ids:
        return
    with conn.cursor() as cur:
        for connection_id in ids:
            try:
                cur.execute("KILL %s", (connection_id,))
            except pymysql.err.MySQLError:  # ended already
                pass
        until = time.monotonic() + timeout_s
        while time.monotonic() < until:
            cur.execute(f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN "
                        f"({', '.join(['%s'] * len(ids))})", ids)
            if not cur.fetchone()[0]:
                return
            time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
