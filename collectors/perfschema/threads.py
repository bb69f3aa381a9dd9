"""The server's threads as Performance Schema lists them, with their Linux
thread ids, and the watch that keeps background threads out of the history
while the window is open."""

from __future__ import annotations

from mysqlprobe.collectors.perfschema.connection import Connection

from typing import Any

import threading

from mysqlprobe.collectors.perfschema.connection import pymysql

class ThreadWatch:
    """Watches the server's threads through the window, from a thread of this
    process on a connection P_S does not record.

    Every `period` seconds, where the server lets a thread's history be
    turned off (threads.HISTORY: MySQL 5.7+, MariaDB 10.5+), it keeps new
    background threads out of the history tables. The stage history is one
    ring for all threads (1000 rows by default); MariaDB 10.11's InnoDB
    thread pool fills it with thousands of 'closing tables' a second while it
    purges after an insert, and starts threads as it goes, so the load's
    stages would be gone before the window's end reads them. Their summaries
    are not affected; PerfSchema.restore() turns their history back on.

    Every `list_every` periods it lists the threads with their Linux thread
    ids, so that a connection that came and went inside the window is still
    joined to the probes by its thread."""

    def __init__(self, conn: Connection, os_tid_source: str | None, quiet: bool, period: float = 0.25, list_every: int = 4):
        self.conn, self.os_tid_source, self.quiet = conn, os_tid_source, quiet
        self.period, self.list_every = period, list_every
        self.seen: dict[int, dict[str, Any]] = {}
        self.rows_changed = 0  # P_S rows its updates changed: the server counts them as Handler_update
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-watch", daemon=True)

    def start(self) -> "ThreadWatch":
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.period):
            try:
                if self.quiet:
                    self.rows_changed += quiet_background_threads(self.conn)
                if n % self.list_every == 0:
                    self.seen.update((t["thread_id"], t) for t in list_threads(self.conn, self.os_tid_source))
            except pymysql.err.MySQLError as e:
                self.error = str(e.args[-1] if e.args else e)
                return
            n += 1

    def stop(self) -> list[dict[str, Any]]:
        """Stop (again: no harm); the threads seen."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=10)
            try:
                self.conn.close()
            except Exception:  # closing a connection the server dropped
                pass
        return list(self.seen.values())


OS_THREAD_ID = "performance_schema.threads.THREAD_OS_ID"
PROCESSLIST_TID = "information_schema.PROCESSLIST.TID"


def list_threads(conn: Connection, os_tid_source: str | None) -> list[dict[str, Any]]:
    """P_S threads with their Linux thread ids: THREAD_OS_ID (MySQL 5.7+,
    MariaDB 10.5+), else for connections MariaDB's PROCESSLIST.TID
    (10.1-10.4); MySQL 5.6 has neither."""
    with conn.cursor() as cur:
        cols = "THREAD_ID, NAME, PROCESSLIST_ID, TYPE" + (", THREAD_OS_ID" if os_tid_source == OS_THREAD_ID else "")
        cur.execute(f"SELECT {cols} FROM performance_schema.threads")
        rows = cur.fetchall()
        if os_tid_source == OS_THREAD_ID:
            os_tid = {r[0]: r[4] for r in rows}
        else:
            tid = {}
            if os_tid_source == PROCESSLIST_TID:
                cur.execute("SELECT ID, TID FROM information_schema.PROCESSLIST")
                tid = dict(cur.fetchall())
            os_tid = {r[0]: tid.get(r[2]) for r in rows}
    return [{"thread_id": r[0], "name": r[1], "processlist_id": r[2], "type": r[3], "os_tid": os_tid[r[0]]}
            for r in rows]


def quiet_background_threads(conn: Connection) -> int:
    """Turn the history of every background thread off; how many changed."""
    with conn.cursor() as cur:
        cur.execute("UPDATE performance_schema.threads SET HISTORY = 'NO' "
                    "WHERE TYPE = 'BACKGROUND' AND HISTORY = 'YES'")
        return int(cur.rowcount)


def merge_threads(*lists: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The threads of all the lists (read in this order through the window),
    each as last read: a connection that ended in the window keeps its row
    and Linux thread id."""
    by_id = {}
    for threads in lists:
        by_id.update({t["thread_id"]: t for t in threads if t["os_tid"] or t["thread_id"] not in by_id})
    return [by_id[k] for k in sorted(by_id)]


