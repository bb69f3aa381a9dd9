"""The Performance Schema collector: statements, stages and waits of the
window, and the server's row counter the duty cycles pace on.

Any trouble (no connection, P_S off, no privilege) becomes one note and a
probes-only report; the row counter then still works if the server could
be reached. The setup it changes is put back on every path: by close(),
or by a guard process should this one be killed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from mysqlprobe.collectors.perfschema.connection import Connection


from typing import Any

import time

from mysqlprobe.collectors.perfschema import connection
from mysqlprobe.flamegraphs.stacks import OWN_CONNECTION
from mysqlprobe.collectors.base import Background, Collector, Cost, Facts, Phases, Section, hold_if_asked, opened
from mysqlprobe.collectors.perfschema.connection import ConnectOptions, pymysql
from mysqlprobe.collectors.safety.guard_process import GuardProcess
from mysqlprobe.collectors.perfschema.settings import (PerfSchema, deltas, leave_out_own_statements, rows_changed,
                                              server_settings)
from mysqlprobe.collectors.kernel.process import ServerProcess, thread_cpu_seconds
from mysqlprobe.collectors.perfschema.guard import RESUME_WAIT_S
from mysqlprobe.collectors.perfschema.build_progress import (BuildProgress, ProgressReads, Reading, compression_counts,
                                                             compression_deltas, source_of)
from mysqlprobe.collectors.perfschema.lease import SetupLease
from mysqlprobe.collectors.perfschema.threads import ThreadWatch, merge_threads


def _why(e: Exception) -> str:
    return str(e.args[-1] if e.args else e)


CONNECTION_LOST = (2006, 2013)  # server has gone away, lost connection during query


def _server_gone(e: Exception) -> bool:
    return isinstance(e, pymysql.err.InterfaceError) or (
        isinstance(e, pymysql.err.OperationalError) and bool(e.args) and e.args[0] in CONNECTION_LOST)


GONE = ("Performance Schema: the server went away during the window; what it held of the window is lost, "
        "and its setup lived in its memory: there is nothing to restore")
# the window's own reads (progress, thread watch) give up on a server that does not answer this soon
QUICK_TIMEOUT_S = 2
PAUSED = ("Performance Schema: the server was stopped (SIGSTOP) at the window's end: what P_S held of the window "
          "was not read; its setup is left to the guard, which restores it once the server answers again "
          f"(it waits up to {RESUME_WAIT_S // 60} minutes while the same server process lives)")
NOT_ANSWERING = ("Performance Schema: the server did not answer at the window's end (hung, or stopped): what P_S "
                 "held of the window was not read; its setup is left to the guard, which restores it once the "
                 f"server answers again (it waits up to {RESUME_WAIT_S // 60} minutes while the same server "
                 "process lives)")


def thread_names(record: dict[str, Any] | None) -> dict[int, str]:
    """tid -> 'innodb/page_cleaner_thread', 'sql/one_connection', ... where
    Performance Schema knows the OS thread id."""
    out = {}
    for t in (record or {}).get("threads", []):
        os_id, name = t.get("os_tid"), t.get("name") or ""
        if os_id:
            out[int(os_id)] = "/".join(name.split("/")[-2:]) if name.startswith("thread/") else name
    for tid in (record or {}).get("own_os_tids", []):
        out[int(tid)] = OWN_CONNECTION   # its stacks are not the load's
    return out


T = TypeVar("T")


class PerfSchemaCollector(Collector):
    name = "perf_schema"
    optional = True
    # started before the samplers (its setup queries are not the window's);
    # collected first, its thread names name the stacks collected after it
    phases = Phases(begin=40, prepare=60, start=10, collect=0)

    def __init__(self, pid: int, opts: ConnectOptions, waits: str = "io", full_sql: bool = False,
                 whole_window: bool = False, build_progress: bool = False):
        super().__init__()
        self.pid, self.opts, self.waits, self.full_sql = pid, opts, waits, full_sql
        self.server = ServerProcess.of(pid)  # paused or gone, told apart from /proc
        self.settings: dict[str, str] = {}
        self._paused_reads = 0
        self.whole_window = whole_window  # the setup on in the quiet phases too
        self.ps: PerfSchema | None = None
        self.conn = None
        self.progress = None  # reads the load's progress, also with P_S off
        self.watch: ThreadWatch | None = None
        self.guard: GuardProcess | None = None
        self.lease: SetupLease | None = None
        self._restore_tried = False
        self._setup: Background[Any] | None = None
        self.record: dict[str, Any] = {"status": "not requested"}
        self.query_s = 0.0  # wall time of this collector's own queries
        # the server's CPU for this collector's connections in the window, from
        # their threads (None where the server does not name them)
        self.server_cpu_s: float | None = None
        self._own_cpu0: dict[int, float] = {}
        self.own_rows_changed = 0  # setup rows this collector's quiet phases changed
        self.wants_build_progress = build_progress
        # an index build's progress, read once a second: the server's, or the probes' where it reports none
        self.build_progress: ProgressReads | None = None
        self._compressions0: dict[int, tuple[int, int]] | None = None  # InnoDB's page compressions at start()

    def _timed(self, fn: Callable[..., T], *args: Any) -> T:
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.query_s += time.monotonic() - t0

    def read_build_progress(self, at_s: float) -> Reading | None:
        """An index build's progress now, as the server reports it (None: none under way, or unreadable)."""
        if self.build_progress is None or self.server.stopped():
            return None
        try:
            return self._timed(self.build_progress.read, at_s)
        except pymysql.err.MySQLError as e:
            self.notes.append(f"reading the index build's progress failed: {_why(e)}")
            self.build_progress = None
            return None

    def rows_changed(self) -> int | None:
        """The server's rows changed so far, less the P_S setup rows this
        collector changed meanwhile; None without a connection."""
        if self.progress is None:
            return None
        if self.server.stopped():   # no query waits on a paused server: the read is skipped
            self._paused_reads += 1
            if self._paused_reads == 1:
                self.notes.append("the server was stopped (SIGSTOP) during the window: its row counters were not "
                                  "read while it was")
            return None
        try:
            return self._timed(rows_changed, self.progress) - self._own_setup_rows()
        except pymysql.err.MySQLError as e:
            self.notes.append(f"reading the server's row counters failed: {_why(e)}")
            self.progress = None
            return None

    def _own_setup_rows(self) -> int:
        """P_S setup rows mysqlprobe's own updates changed in the window (quiet
        phases, the thread watch): the server counts them in Handler_update."""
        return self.own_rows_changed + (self.watch.rows_changed if self.watch else 0)

    def _give_up(self, status: str, reason: str) -> None:
        self.record = {"status": status, "reason": reason}
        self.notes.append(f"Performance Schema: {reason}; the report has the probes only")
        self.ps = None

    def begin(self) -> None:
        """Connect and set the server up in a thread (a tenth of a second of
        round trips) while the other collectors get ready."""
        self._setup = Background(self._set_up, "ps-setup")

    def prepare(self) -> None:
        setup, self._setup = self._setup, None
        if setup:
            setup.join()
        else:
            self._set_up()

    def _set_up(self) -> None:
        conn, args, why = connection.connect(self.pid, self.opts)
        if conn is None or args is None:
            return self._give_up("unavailable", why or "no connection")
        self.conn = self.progress = conn
        self.ps = PerfSchema(conn, self.waits, full_sql=self.full_sql)
        try:
            self.settings = server_settings(conn)  # with P_S off too: compare sets them side by side
            if not self.ps.enabled():
                return self._give_up("off", "the server runs with performance_schema=OFF")
            self.lease = SetupLease.for_server(self.pid)
            self._start_guard(args)  # before anything changes: a kill -9 may come at any point
            changed = self._timed(self._change_setup)
            hold_if_asked("ps-setup")
            self.record = {"status": "collected", "connection": connection.describe(args),
                           "server_version": conn.get_server_info(), "setup_rows_changed": changed,
                           "thread_os_id": self.ps.has_os_id, "os_tid_source": self.ps.os_tid_source,
                           "waits": self.waits,
                           "statement_text": "full" if self.full_sql else "digest",
                           "stage_names": self.ps.stage_names()}
            self.progress = self._progress_connection(args)
            if self.wants_build_progress and self.progress is not None:
                source = source_of(self.progress)
                self.build_progress = BuildProgress(self.progress, source) if source else None
                self.record["build_progress"] = {"source": source, "reads": 0, "readings": []}
            self.watch = self._thread_watch(args)
            self.live_guard.send({"connections": self._connection_ids()})
        except pymysql.err.MySQLError as e:
            self.restore()
            self._give_up("unavailable", f"cannot use performance_schema as {connection.describe(args)}: {_why(e)}")

    @property
    def live_ps(self) -> PerfSchema:
        return opened(self.ps, "Performance Schema's connection")

    @property
    def live_guard(self) -> GuardProcess:
        return opened(self.guard, "the setup's guard")

    @property
    def can_quiet(self) -> bool:
        """Only with the setup lease: a quiet phase must not take the
        consumers from under another profiler of the same server."""
        return (not self.whole_window and self.ps is not None and self.lease is not None
                and any(self.ps.quieted_setup()))

    def _silence(self, on: bool) -> bool:
        """The window's setup off for a quiet phase, while this is the
        server's only profiler; back on whatever the others do. Not on a
        paused server: no query waits on one."""
        if self.server.stopped():
            return False

        def change() -> None:
            self.own_rows_changed += self._timed(self.live_ps.quiet, on)

        try:
            if on:
                return opened(self.lease, "the setup lease").if_alone(change)
            change()
            return True
        except pymysql.err.MySQLError as e:
            self.notes.append(f"Performance Schema: switching its setup for a quiet phase failed: {_why(e)}")
            return False

    def own_os_threads(self) -> list[int]:
        """The Linux thread ids of mysqlprobe's own connections, where the server tells them."""
        if not self.ps:
            return []
        try:
            return self._own_tids(self.ps.threads())
        except pymysql.err.MySQLError:
            return []

    def _own_tids(self, threads: list[dict[str, Any]]) -> list[int]:
        return [t["os_tid"] for t in threads if t["thread_id"] in self.live_ps.own_threads and t["os_tid"]]

    def start(self) -> None:
        if not self.ps:
            return
        try:
            self.before = self._timed(self.ps.summaries)
            self.t0 = self.ps.timer_now()
            self.threads_at_start = self.ps.threads()  # connections that end in the window
            self._own_cpu0 = self._own_threads_cpu(self._own_tids(self.threads_at_start))
            if self.build_progress is not None:
                self._compressions0 = self._timed(compression_counts, self.build_progress.conn)
        except pymysql.err.MySQLError as e:
            self.restore()
            self._give_up("unavailable", f"reading performance_schema failed: {_why(e)}")
            return
        self._answer_within(QUICK_TIMEOUT_S)  # the window's own queries (quiet phases) never hold it

    def _answer_within(self, seconds: float) -> None:
        """The P_S connection's read and write timeouts from its next query on."""
        if self.conn is not None:
            self.conn._read_timeout = self.conn._write_timeout = seconds

    def _unrecorded_connection(self, connect_args: dict[str, Any]) -> Connection | None:
        """Another connection to the server, whose statements P_S does not
        record; None if there is none."""
        try:
            conn = pymysql.connect(**{**connect_args, "read_timeout": QUICK_TIMEOUT_S,
                                      "write_timeout": QUICK_TIMEOUT_S})
        except pymysql.err.MySQLError:
            return None
        thread_id = leave_out_own_statements(conn)
        if thread_id is None:
            conn.close()
            return None
        self.live_ps.own_threads.add(thread_id)
        return conn

    def _progress_connection(self, connect_args: dict[str, Any]) -> Connection | None:
        """The connection for the progress reads: one P_S does not record,
        else the P_S connection itself."""
        conn = self._unrecorded_connection(connect_args)
        self.record["progress_reads"] = "recorded" if conn is None else "not recorded"
        return conn or self.conn

    def _thread_watch(self, connect_args: dict[str, Any]) -> ThreadWatch | None:
        quiet = self.live_ps.saved_background_history_off is not None
        conn = self._unrecorded_connection(connect_args)
        self.record["background_history"] = ("kept (no threads.HISTORY, or no right to change it)" if not quiet else
                                             "off" if conn else "off for the threads there at the start")
        return ThreadWatch(conn, self.live_ps.os_tid_source, quiet).start() if conn else None

    def stop(self) -> None:
        """Read what the window left in P_S, then restore its setup."""
        if not self.ps:
            return
        if self.server.stopped():
            return self._hand_over(PAUSED)
        self._answer_within(connection.ANSWER_TIMEOUT_S)  # the window's reads may take a while under load
        self._measure_own_cpu()
        try:
            t1 = self.ps.timer_now()
            after = self._timed(self.ps.summaries)
            seen = self.watch.stop() if self.watch else []
            if self.watch and self.watch.error:
                self.notes.append(f"Performance Schema: watching the threads failed: {self.watch.error}")
            statements, stages = self._timed(self.ps.window_events, self.t0, t1)
            self._check_consumers()
            self.record.update({"timer_start_ps": self.t0, "timer_end_ps": t1,
                                "deltas": deltas(self.before, after), "statements": statements, "stages": stages,
                                "threads": merge_threads(self.threads_at_start, seen, self.ps.threads())})
            if self.build_progress is not None:
                self.record["build_progress"] = self.build_progress.record()
                if self._compressions0 is not None:
                    now = self._timed(compression_counts, self.build_progress.conn)
                    self.record["compressions"] = compression_deltas(self._compressions0, now)
            # mysqlprobe's own connections: not the load's threads in the wall-time account
            self.record["own_os_tids"] = sorted(int(t) for t in self.own_os_threads())
        except pymysql.err.MySQLError as e:
            if _server_gone(e) and not self.server.gone():
                return self._hand_over(NOT_ANSWERING)
            if _server_gone(e):
                self._restore_tried = True
                self.notes.append(GONE)
            else:
                self.notes.append(f"Performance Schema: reading the window failed: {_why(e)}")
        finally:
            self.restore()

    def _own_threads_cpu(self, tids: list[int]) -> dict[int, float]:
        cpu = {tid: thread_cpu_seconds(self.pid, tid) for tid in tids}
        return {tid: s for tid, s in cpu.items() if s is not None}

    def _measure_own_cpu(self) -> None:
        """The server's CPU for mysqlprobe's connections since start(): what
        the progress reads and the thread watch cost it, in every phase."""
        now = self._own_threads_cpu(list(self._own_cpu0))
        if self._own_cpu0 and len(now) == len(self._own_cpu0):
            self.server_cpu_s = sum(now[tid] - self._own_cpu0[tid] for tid in now)
            self.record["own_connections_cpu_s"] = round(self.server_cpu_s, 4)

    def _check_consumers(self) -> None:
        """Say so if the window's consumers were turned off under it."""
        off = self.live_ps.turned_off()
        if off:
            self.record["turned_off_in_window"] = off
            self.notes.append(f"Performance Schema: {', '.join(off)} turned off during the window by something "
                              "else: statements and stages after that are missing from this report")

    def collect(self, facts: Facts) -> Section:
        if self.quiet_s and self.ps:
            consumers, instruments = self.ps.quieted_setup()
            self.record["quieted"] = {"consumers": consumers, "instruments": instruments,
                                      "quiet_s": round(self.quiet_s, 6)}
        if "deltas" in self.record:
            self.record["own_rows_changed"] = self._own_setup_rows()
        if self.settings:
            self.record["settings"] = self.settings
        if self.server_cpu_s is not None:
            cost = Cost(target_s=self.server_cpu_s, method="the server's CPU time for this collector's connections "
                                                           "in the window, from their threads; what the instruments "
                                                           "add to each statement is not seen from here")
        else:
            cost = Cost(target_s=self.query_s, method="wall time of this collector's own queries (the server's "
                                                      "work for them); what the instruments add to each statement "
                                                      "is not seen from here")
        return Section(self.name, {self.name: self.record}, list(self.notes), cost)

    def _start_guard(self, connect_args: dict[str, Any]) -> None:
        """A process that restores the setup should this one die first (kill -9)."""
        state = {"connect": connect_args, "saved": None, "lease": self.lease.to_json() if self.lease else None,
                 "connections": self._connection_ids(),
                 "server": {"pid": self.server.pid, "start_ticks": self.server.start_ticks}}
        self.guard = GuardProcess("mysqlprobe.collectors.perfschema.guard", state)

    def _change_setup(self) -> int:
        """The window's setup on; the rows' old state is in the lease's record
        (or told the guard) before they change."""
        ps, guard = self.live_ps, self.live_guard
        if self.lease:
            return self.lease.join(ps)
        ps.plan()
        guard.send({"saved": ps.saved_state()})
        changed = ps.apply()
        guard.send({"saved": ps.saved_state()})  # the threads' history may have stayed as it was
        return changed

    def _connection_ids(self) -> list[int]:
        """The server's ids of this collector's connections (the guard ends them)."""
        conns = (self.conn, self.progress, self.watch.conn if self.watch else None)
        return sorted({c.thread_id() for c in conns if c is not None})

    def restore(self) -> None:
        """Put the setup back (the last profiler of the server to leave does),
        once; and tell the guard it is done."""
        if self.watch:
            self.watch.stop()
        if self.ps and not self.ps.restored and not self._restore_tried:
            if self.server.stopped():
                return self._hand_over(PAUSED)
            self._restore_tried = True
            try:
                self._restore_setup()
            except (pymysql.err.MySQLError, OSError) as e:
                if _server_gone(e) and not self.server.gone():
                    return self._hand_over(NOT_ANSWERING)
                self.notes.append(GONE if _server_gone(e) else
                                  f"Performance Schema: could not restore its setup: {_why(e)}")
        if self.guard:
            self.guard.finish(done=self.ps is None or self.ps.restored)

    def _hand_over(self, note: str) -> None:
        """A server that is paused or does not answer keeps its setup until it
        answers again: the guard, told nothing more, waits for that and
        restores it; this run ends now."""
        self._restore_tried = True
        if self.watch:
            self.watch.stop()
        self.notes.append(note)
        if self.guard:
            self.guard.hand_over()
            self.guard = None

    def _restore_setup(self) -> None:
        ps = self.live_ps
        if not self.lease:
            ps.restore()
            return

        def restore(saved: dict[str, Any]) -> None:
            ps.adopt(saved)
            ps.restore()

        if not self.lease.leave(restore):
            ps.restored = True  # another profiler of this server is still running: it will
            self.record["setup_restored"] = "left to another mysqlprobe still recording this server"

    def close(self) -> None:
        if self._setup:  # a setup under way ends before it is undone
            self._setup.settle()
            self._setup = None
        self.restore()
