"""What the Performance Schema collector changes for the window, and reads.

For the window only, it enables the consumers and instruments the analysis
needs, and puts back exactly what it changed afterwards (restore() is
registered on every exit path by the caller). It takes the global summaries
before and after (stored as deltas) and the statements and stages that ran in
the window from the history tables.

Versions: MariaDB 10.5+ and MySQL 5.7+ have threads.THREAD_OS_ID, which joins
P_S threads to the Linux thread ids the probes key by. MariaDB 10.1/10.2 carry
MySQL 5.6's P_S without it, but list each connection's Linux thread in
information_schema.PROCESSLIST.TID; MySQL 5.6 has neither. MySQL 8.0.17+
calls 'Sending data' 'executing'."""

from __future__ import annotations

from mysqlprobe.collectors.perfschema.connection import Connection

from typing import Any

import re

from mysqlprobe.collectors.perfschema.connection import pymysql

from mysqlprobe.collectors.perfschema.threads import (OS_THREAD_ID, PROCESSLIST_TID, list_threads,
                                              quiet_background_threads)
from dataclasses import dataclass, field
from mysqlprobe.sqltext import normalized, redacted

# only the shared histories are read: the per-thread ones (events_*_history)
# would copy every statement and stage once more for nothing
CONSUMERS = ("events_statements_current", "events_statements_history_long",
             "events_stages_current", "events_stages_history_long")
WAIT_CONSUMERS = ("events_waits_current", "events_waits_history", "events_waits_history_long")
INSTRUMENTS = ("statement/%", "stage/%", "wait/io/table/%", "wait/io/file/%")
KEPT_THROUGH_QUIET = ("events_statements_current", "events_statements_history_long")
KEPT_INSTRUMENTS = ("statement/",)
SYNCH_INSTRUMENTS = ("wait/synch/%",)
STATUS = ("Handler_write", "Handler_update", "Handler_delete", "Innodb_rows_inserted", "Innodb_pages_written",
          "Innodb_data_written", "Innodb_data_fsyncs", "Innodb_os_log_written", "Innodb_os_log_fsyncs",
          "Com_insert", "Com_insert_select", "Questions")
PS_TIMER_PER_NS = 1000  # P_S timers count picoseconds

# rows that never counted are left out (a window's deltas take a missing row
# as zero): on an idle server 1 in 10 of the rows, and the P_S read that
# opens the window takes a third of the time
SUMMARIES = {
    "stages": ("SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT FROM performance_schema."
               "events_stages_summary_global_by_event_name WHERE COUNT_STAR > 0"),
    # per thread: a statement's stages when the shared stage history (1000 rows
    # by default) was overrun by background threads before the window ended
    "thread_stages": ("SELECT CONCAT(THREAD_ID, ' ', EVENT_NAME), COUNT_STAR, SUM_TIMER_WAIT FROM "
                      "performance_schema.events_stages_summary_by_thread_by_event_name WHERE COUNT_STAR > 0"),
    "waits": ("SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT FROM performance_schema."
              "events_waits_summary_global_by_event_name WHERE COUNT_STAR > 0"),
    "files": ("SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT, SUM_NUMBER_OF_BYTES_READ, SUM_NUMBER_OF_BYTES_WRITE "
              "FROM performance_schema.file_summary_by_event_name WHERE COUNT_STAR > 0"),
    "tables": ("SELECT CONCAT(OBJECT_SCHEMA, '.', OBJECT_NAME), COUNT_STAR, SUM_TIMER_WAIT, COUNT_WRITE, "
               "SUM_TIMER_WRITE FROM performance_schema.table_io_waits_summary_by_table WHERE COUNT_STAR > 0"),
    "digests": ("SELECT CONCAT(IFNULL(SCHEMA_NAME, ''), ':', IFNULL(DIGEST, '')), COUNT_STAR, SUM_TIMER_WAIT, "
                "SUM_ROWS_AFFECTED, SUM_ROWS_EXAMINED, DIGEST_TEXT "
                "FROM performance_schema.events_statements_summary_by_digest WHERE COUNT_STAR > 0"),
}
COLUMNS = {
    "stages": ("count", "timer_ps"), "thread_stages": ("count", "timer_ps"), "waits": ("count", "timer_ps"),
    "files": ("count", "timer_ps", "bytes_read", "bytes_written"),
    "tables": ("count", "timer_ps", "writes", "write_timer_ps"),
    "digests": ("count", "timer_ps", "rows_affected", "rows_examined"),
}


ROW_COUNTERS = ("Handler_write", "Handler_update", "Handler_delete")


def global_status(conn: Connection, names: tuple[str, ...]) -> dict[str, int]:
    """These of the server's status variables, read by name (not all 500)."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({', '.join(['%s'] * len(names))})", names)
        return {name: int(value) for name, value in cur.fetchall()}


def rows_changed(conn: Connection) -> int:
    """Rows the server has written, updated or deleted since it started (all
    sessions): the load's progress, cheap enough to read between duty cycles."""
    return sum(global_status(conn, ROW_COUNTERS).values())


# a variable whose value may be a credential: its name is kept, its value not
SECRET_SETTING = re.compile(r"password|passwd|_auth|secret|credential|_key$", re.I)
NOT_KEPT = "(not kept)"


def server_settings(conn: Connection) -> dict[str, str]:
    """SHOW GLOBAL VARIABLES, every one (compare sets the two servers' side
    by side); a credential's value is not kept."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES")
        return {name: NOT_KEPT if SECRET_SETTING.search(name) else value for name, value in cur.fetchall()}


def leave_out_own_statements(conn: Connection) -> int | None:
    """Have P_S stop recording this connection's statements; its P_S thread
    id, or None where that was refused. The history tables are small shared
    rings (1000 stage rows by default): progress reads every few hundred ms
    would push the load's stages out of them. The setting lives in the
    connection's own threads row and goes with it."""
    try:
        thread_id = own_thread_id(conn)
        with conn.cursor() as cur:
            cur.execute("UPDATE performance_schema.threads SET INSTRUMENTED = 'NO' WHERE THREAD_ID = %s",
                        (thread_id,))
            return thread_id if cur.rowcount == 1 else None
    except (pymysql.err.MySQLError, TypeError):
        return None


def has_column(conn: Connection, schema: str, table: str, column: str) -> bool:
    """Whether the server's table has the column (the columns differ between servers and versions)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                    "AND COLUMN_NAME = %s", (schema, table, column))
        return bool(cur.fetchone()[0])


def own_thread_id(conn: Connection) -> int | None:
    """The P_S thread id of this connection."""
    with conn.cursor() as cur:
        cur.execute("SELECT THREAD_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()")
        row = cur.fetchone()
    return row[0] if row else None


class PerfSchemaError(Exception):
    pass


@dataclass
class PerfSchema:
    """The server's Performance Schema: its setup as the window needs it and as it was, and reads."""

    conn: Connection
    waits: str = "io"                          # "io" or "all" (synch waits too)
    full_sql: bool = False                     # statements' own text, literals and all; else digests
    saved_consumers: dict[str, str] = field(default_factory=dict)
    saved_instruments: dict[str, tuple[str, str]] = field(default_factory=dict)
    thread_id: int | None = None
    os_tid_source: str | None = None           # where the threads' Linux thread ids come from
    # background threads whose history was off before the window; None: the
    # server cannot turn a thread's history off (no threads.HISTORY)
    saved_background_history_off: list[int] | None = None
    own_threads: set[int] = field(default_factory=set)  # this process's connections
    restored: bool = True

    def _rows(self, sql: str, args: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def stage_names(self) -> list[str]:
        """Stage instruments in the order P_S registered them: the key that
        start_stage is called with is the position here, from 1."""
        return [r[0] for r in self._rows("SELECT NAME FROM performance_schema.setup_instruments "
                                         "WHERE NAME LIKE 'stage/%%'")]

    def enabled(self) -> bool:
        return bool(self._rows("SELECT @@performance_schema")[0][0])

    def setup_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        consumers = dict(self._rows("SELECT NAME, ENABLED FROM performance_schema.setup_consumers"))
        patterns = INSTRUMENTS + (SYNCH_INSTRUMENTS if self.waits == "all" else ())
        where = " OR ".join(["NAME LIKE %s"] * len(patterns))
        instruments = {n: (e, t) for n, e, t in self._rows(
            f"SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments WHERE {where}", patterns)}
        return consumers, instruments

    def plan(self) -> None:
        """Read the setup and keep the rows the window will change as they
        are now (saved_*: only those, so a row nobody here touched is never
        put back). Nothing changes yet: a guard can be told first."""
        consumers, instruments = self.setup_state()
        # the summaries need no wait consumer; events_waits_* would cost every row's handler call
        want = CONSUMERS + (WAIT_CONSUMERS if self.waits == "all" else ())
        self.saved_consumers = {n: "NO" for n in want if consumers.get(n) == "NO"}
        self.saved_instruments = {n: state for n, state in instruments.items() if state != ("YES", "YES")}
        self.saved_background_history_off = (
            [r[0] for r in self._rows("SELECT THREAD_ID FROM performance_schema.threads "
                                      "WHERE TYPE = 'BACKGROUND' AND HISTORY = 'NO'")]
            if self._has_column("performance_schema", "threads", "HISTORY") else None)
        self.restored = False

    def apply(self) -> int:
        """Turn on what plan() found off; how many setup rows changed."""
        changed = 0
        with self.conn.cursor() as cur:
            for name in self.saved_consumers:
                cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = %s",
                            (name,))
                changed += 1
            off = list(self.saved_instruments)
            set_by_name(cur, "setup_instruments", "ENABLED = 'YES', TIMED = 'YES'", (), off)
            changed += len(off)
        if self.saved_background_history_off is not None:
            changed += self._quiet_background()
        self.thread_id = own_thread_id(self.conn)
        if self.thread_id is not None:
            self.own_threads.add(self.thread_id)
        self.os_tid_source = (OS_THREAD_ID if self._has_column("performance_schema", "threads", "THREAD_OS_ID")
                              else PROCESSLIST_TID if self._has_column("information_schema", "PROCESSLIST", "TID")
                              else None)
        return changed

    def enable(self) -> int:
        """Turn on what the window needs (plan, then apply); how many setup rows changed."""
        self.plan()
        return self.apply()

    @property
    def has_os_id(self) -> bool:
        """P_S threads has THREAD_OS_ID (MySQL 5.7+, MariaDB 10.5+)."""
        return self.os_tid_source == OS_THREAD_ID

    def _quiet_background(self) -> int:
        """Background threads out of the history (see ThreadWatch); without the
        privilege to, the window goes on with them in it."""
        try:
            return quiet_background_threads(self.conn)
        except pymysql.err.MySQLError:
            self.saved_background_history_off = None
            return 0

    def _has_column(self, schema: str, table: str, column: str) -> bool:
        return has_column(self.conn, schema, table, column)

    def saved_state(self) -> dict[str, Any]:
        """The rows enable() changes, as they were (JSON)."""
        return {"consumers": self.saved_consumers,
                "instruments": {k: list(v) for k, v in self.saved_instruments.items()},
                "background_history_off": self.saved_background_history_off}

    def adopt(self, saved: dict[str, Any]) -> None:
        """Restore to `saved` (a saved_state(), maybe several profilers' merged) from now on."""
        self.saved_consumers = dict(saved.get("consumers") or {})
        self.saved_instruments = {k: tuple(v) for k, v in (saved.get("instruments") or {}).items()}
        self.saved_background_history_off = saved.get("background_history_off")
        self.restored = False

    def quieted_setup(self) -> tuple[list[str], list[str]]:
        """What a quiet phase turns off: the consumers the window turned on,
        and the instruments it enabled. Their TIMED stays as the window set
        it: a stage started untimed and ended timed would be summed from a
        zero start (the stage timer is read at its end by the class's TIMED
        then), and one started in the window keeps its whole time. An
        instrument that was already enabled, only untimed, stays as the
        window has it for the same reason. The statements' consumers and
        instruments stay on: a statement that ends in a quiet phase would
        otherwise leave P_S with no record of it (one row a statement, not
        one a stage)."""
        return (sorted(c for c in self.saved_consumers if c not in KEPT_THROUGH_QUIET),
                sorted(n for n, (enabled, _timed) in self.saved_instruments.items()
                       if enabled == "NO" and not n.startswith(KEPT_INSTRUMENTS)))

    def quiet(self, on: bool) -> int:
        """The window's own consumers and instruments off for a quiet phase
        (on=True), so that P_S costs the load what it did before the window,
        or back on; how many setup rows changed (the server counts each in
        Handler_update, as if the load had changed a row)."""
        consumers, instruments = self.quieted_setup()
        value = ("NO" if on else "YES",)
        with self.conn.cursor() as cur:
            return (set_by_name(cur, "setup_consumers", "ENABLED = %s", value, consumers)
                    + set_by_name(cur, "setup_instruments", "ENABLED = %s", value, instruments))

    def turned_off(self) -> list[str]:
        """Consumers the window needs that are off now: someone turned them off meanwhile."""
        want = CONSUMERS + (WAIT_CONSUMERS if self.waits == "all" else ())
        consumers, _ = self.setup_state()
        return [n for n in want if consumers.get(n) == "NO"]

    def restore(self) -> None:
        """Put back every setup row enable() changed, as it was."""
        if self.restored:
            return
        with self.conn.cursor() as cur:
            now_consumers, now_instruments = self.setup_state()
            for name, enabled in self.saved_consumers.items():
                if now_consumers.get(name) != enabled:
                    cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = %s WHERE NAME = %s",
                                (enabled, name))
            groups: dict[tuple[str, str], list[str]] = {}
            for name, state in self.saved_instruments.items():
                if now_instruments.get(name) != state:
                    groups.setdefault(state, []).append(name)
            for (enabled, timed), names in groups.items():
                set_by_name(cur, "setup_instruments", "ENABLED = %s, TIMED = %s", (enabled, timed), names)
            if self.saved_background_history_off is not None:
                keep = self.saved_background_history_off or [0]  # thread ids start at 1
                cur.execute("UPDATE performance_schema.threads SET HISTORY = 'YES' WHERE TYPE = 'BACKGROUND' "
                            f"AND HISTORY = 'NO' AND THREAD_ID NOT IN ({', '.join(['%s'] * len(keep))})", keep)
        self.restored = True

    def timer_now(self) -> int:
        """The P_S timer now (ps since server start): this statement's own start."""
        return int(self._rows("SELECT TIMER_START FROM performance_schema.events_statements_current "
                              "WHERE THREAD_ID = %s", (self.thread_id,))[0][0] or 0)

    def summaries(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sql in SUMMARIES.items():
            rows = {}
            for row in self._rows(sql):
                key, values = row[0], row[1:1 + len(COLUMNS[name])]
                rows[key] = {"values": [int(v or 0) for v in values]}
                if name == "digests":
                    rows[key]["text"] = row[-1]
            out[name] = rows
        out["status"] = global_status(self.conn, STATUS)
        return out

    def threads(self) -> list[dict[str, Any]]:
        return list_threads(self.conn, self.os_tid_source)

    def _text(self, sql: str | None, digest_text: str | None) -> str:
        """What a capture keeps of a statement: its digest (literals made ?) unless asked for all of it."""
        if self.full_sql:
            return redacted(sql or "")
        return digest_text or normalized(sql or "")

    def window_events(self, t0: int, t1: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Statements of other threads than this process's that ran in
        [t0, t1], and their stages."""
        cols = ("THREAD_ID, EVENT_ID, TIMER_START, TIMER_END, TIMER_WAIT, SQL_TEXT, DIGEST, ROWS_AFFECTED, "
                "ROWS_EXAMINED, EVENT_NAME, DIGEST_TEXT")
        rows = self._rows(f"SELECT {cols} FROM performance_schema.events_statements_history_long "
                          "WHERE TIMER_END >= %s AND TIMER_START <= %s", (t0, t1))
        rows += self._rows(f"SELECT {cols} FROM performance_schema.events_statements_current "
                           "WHERE TIMER_START <= %s AND TIMER_END IS NULL", (t1,))
        rows = [r for r in rows if r[0] not in self.own_threads]
        statements = [{"thread_id": r[0], "event_id": r[1], "timer_start": r[2], "timer_end": r[3],
                       "timer_wait": r[4], "sql_text": self._text(r[5], r[10])[:1000], "digest": r[6],
                       "rows_affected": r[7], "rows_examined": r[8], "event_name": r[9]} for r in rows]
        keys = {(s["thread_id"], s["event_id"]) for s in statements}
        stage_rows = []
        # the work a stage did against its estimate, where P_S keeps it (MySQL 5.7+, MariaDB 10.5+)
        work = self._has_column("performance_schema", "events_stages_current", "WORK_COMPLETED")
        columns = STAGE_COLUMNS + (", WORK_COMPLETED, WORK_ESTIMATED" if work else "")
        for table in ("events_stages_history_long", "events_stages_current"):
            stage_rows += self._rows(
                f"SELECT {columns} FROM performance_schema.{table} WHERE TIMER_START <= %s "
                "AND (TIMER_END IS NULL OR TIMER_END >= %s)", (t1, t0))
        stages = [{"thread_id": r[0], "statement_event_id": r[1], "event_name": r[2], "timer_start": r[3],
                   "timer_end": r[4], "timer_wait": r[5],
                   **({"work_completed": r[6], "work_estimated": r[7]} if work and r[7] else {})}
                  for r in stage_rows if (r[0], r[1]) in keys]
        return statements, stages


def set_by_name(cur: Any, table: str, assignments: str, values: tuple[Any, ...], names: list[str]) -> int:
    """UPDATE performance_schema.TABLE SET assignments (their %s from
    values) for the rows of these names, 200 at a time; the rows changed."""
    changed = 0
    for i in range(0, len(names), 200):
        chunk = names[i:i + 200]
        changed += cur.execute(f"UPDATE performance_schema.{table} SET {assignments} "
                               f"WHERE NAME IN ({', '.join(['%s'] * len(chunk))})", (*values, *chunk))
    return changed


STAGE_COLUMNS = "THREAD_ID, NESTING_EVENT_ID, EVENT_NAME, TIMER_START, TIMER_END, TIMER_WAIT"


def deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before per summary row; rows that did not move are left out."""
    out: dict[str, Any] = {}
    for name, rows in after.items():
        if name == "status":
            out[name] = {k: v - before.get(name, {}).get(k, 0) for k, v in rows.items()}
            continue
        cols = COLUMNS[name]
        moved = []
        for key, row in rows.items():
            prev = before.get(name, {}).get(key, {"values": [0] * len(cols)})["values"]
            d = [a - b for a, b in zip(row["values"], prev)]
            if d[0] > 0:
                rec = {"name": row.get("text") or key, **dict(zip(cols, d))}
                moved.append(rec)
        out[name] = sorted(moved, key=lambda r: -r["timer_ps"])
    return out
