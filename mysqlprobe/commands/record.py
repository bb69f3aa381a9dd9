"""mysqlprobe --pid PID --insert-profile: attach, time, detach, report."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import signal
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from mysqlprobe import catalog
from mysqlprobe.analysis.report import render_text
from mysqlprobe.analysis.sampling import Pacer, in_situ_factor
from mysqlprobe.capture import build_profile, now_utc, write_capture
from mysqlprobe.collectors import connection, process
from mysqlprobe.collectors.connection import ConnectOptions
from mysqlprobe.collectors.offcpu import OffCpuWindow
from mysqlprobe.collectors.perf import DEFAULT_FREQUENCY, PerfOptions, PerfWindow, thread_names_from_perf_schema
from mysqlprobe.collectors.perfschema import (ROW_COUNTERS, PerfSchema, ThreadWatch, leave_out_own_statements,
                                              merge_threads, rows_changed)
from mysqlprobe.collectors.perfschema import deltas as perfschema_deltas
from mysqlprobe.collectors.calibration import COST_CLASS, Calibrator, entry_point
from mysqlprobe.collectors.symbols import Binary, load_binary, load_target_binary, resolve_target
from mysqlprobe.collectors.uprobe import ProbeSpec, UprobeSession
from mysqlprobe.errors import NoSymbolsError, PermissionProblem, TargetError, UsageError

EXAMPLES = """examples:
  mysqlprobe -p $(pidof mysqld) --insert-profile          # until Ctrl-C
  mysqlprobe -p $(pidof mariadbd) --insert-profile -d 30 -o /tmp/run1
  mysqlprobe -p 4242 --probe 'get_partition_id_*' --probe row_ins_clust_index_entry_low
  mysqlprobe -p 4242 --stage innodb.btr_insert -d 10
  mysqlprobe -p 4242 --insert-profile --list              # what would be probed
  mysqlprobe --binary /usr/sbin/mariadbd --list --insert-profile
  mysqlprobe report /tmp/run1                             # the report again, no root
  mysqlprobe demo                                         # sandbox MariaDB + seed load
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--pid", type=int, help="the mysqld / mariadbd process to probe")
    p.add_argument("--binary", help="with --list: inspect this binary instead of a process")
    p.add_argument("--insert-profile", action="store_true",
                   help="probe the insert path: " + ", ".join(catalog.INSERT_PROFILE))
    p.add_argument("--stage", action="append", default=[], metavar="STAGE",
                   help="add a catalog stage (repeatable): " + ", ".join(catalog.BY_NAME))
    p.add_argument("--probe", action="append", default=[], metavar="NAME",
                   help="add any function: a qualified C++ name (ha_partition::write_row), a glob "
                        "(get_partition_id_*), a full signature or a mangled name (repeatable)")
    p.add_argument("-d", "--duration", type=float, metavar="SECONDS",
                   help="stop after this many seconds (default: at Ctrl-C or SIGTERM)")
    p.add_argument("-o", "--output", metavar="DIR", help="write DIR/profile.json")
    p.add_argument("--debug-file", metavar="PATH", help="separate debug symbols for a stripped binary")
    p.add_argument("--list", action="store_true", help="list the functions that would be probed, and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no status line while running")
    p.add_argument("--raw", action="store_true",
                   help="report latencies with the probes' own cost in them (no correction)")
    p.add_argument("--exact", action="store_true",
                   help="count every call (probes on all the time); default: duty cycles within the budget")
    p.add_argument("--overhead-budget", type=float, default=10.0, metavar="PCT",
                   help="sampled mode: slow the load down by at most PCT%% (default 10)")
    g = p.add_argument_group("Performance Schema (statements, stages and waits of the window)")
    g.add_argument("--socket", help="the server's unix socket (default: found from the PID)")
    g.add_argument("--host", help="connect over TCP instead")
    g.add_argument("--port", type=int)
    g.add_argument("--user", help="default: from --defaults-file or ~/.my.cnf, else root")
    g.add_argument("--password-file", metavar="FILE", help="a file holding the password")
    g.add_argument("--defaults-file", metavar="FILE", help="a MySQL option file ([client] section)")
    g.add_argument("--no-perf-schema", action="store_true", help="probes only: do not connect")
    g.add_argument("--ps-waits", choices=("io", "all"), default="io",
                   help="wait instruments to enable: table and file I/O (default), or synch waits too")
    g = p.add_argument_group("CPU sampling (perf, for flame graphs)")
    g.add_argument("--no-perf", action="store_true", help="no CPU sampling")
    g.add_argument("--perf-freq", type=int, default=DEFAULT_FREQUENCY, metavar="HZ",
                   help=f"samples per second of CPU time (default {DEFAULT_FREQUENCY})")
    g.add_argument("--perf-callgraph", choices=("auto", "fp", "dwarf"), default="auto",
                   help="stack unwinding: frame pointers, DWARF, or chosen from the binary (default)")
    g.add_argument("--keep-perf-data", action="store_true", help="keep DIR/perf.data (needs -o)")
    g = p.add_argument_group("Off-CPU time (where threads wait: I/O, locks, a CPU)")
    g.add_argument("--no-off-cpu", action="store_true", help="no off-CPU stacks")


def check_arguments(args, parser: argparse.ArgumentParser) -> None:
    if not (args.insert_profile or args.stage or args.probe):
        parser.error("nothing to probe: give --insert-profile, --stage or --probe")
    if args.pid is None and not (args.binary and args.list):
        parser.error("-p/--pid is required (or --binary with --list)")
    if args.pid is not None and args.pid <= 0:
        parser.error(f"invalid PID {args.pid}")
    if not 0 < args.overhead_budget <= 100:
        parser.error("--overhead-budget takes a percentage above 0 and at most 100")
    if not 1 <= args.perf_freq <= 10000:
        parser.error("--perf-freq takes 1 to 10000 samples per second")
    if args.keep_perf_data and not args.output:
        parser.error("--keep-perf-data needs -o DIR")
    if args.duration is not None and args.duration <= 0:
        parser.error("-d/--duration must be a positive number of seconds")
    for name in args.stage:
        if name not in catalog.BY_NAME:
            parser.error(f"unknown stage {name!r}; known: {', '.join(catalog.BY_NAME)}")


@dataclass
class Plan:
    specs: list[ProbeSpec] = field(default_factory=list)
    unavailable: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0  # reading symbols and resolving the probes


def plan_probes(binary: Binary, stages: list[str], patterns: list[str]) -> Plan:
    started = time.monotonic()
    plan = Plan()
    seen: set[int] = set()

    def add(sym, stage, partition):
        if sym.address in seen:
            return
        seen.add(sym.address)
        skip, klass = entry_point(binary.path, sym.offset)
        plan.specs.append(ProbeSpec(len(plan.specs), sym, stage, partition, skip=skip, entry_class=klass))

    for res in catalog.resolve(stages, binary.symbols, binary.server):
        if not res.available and res.applicable:
            names = ", ".join(c.name for c in res.stage.candidates)
            plan.unavailable.append({"stage": res.stage.name,
                                     "reason": f"none of {names} is in the binary (not built, or inlined)"})
        for cand, sym in res.probes:
            add(sym, res.stage.name, cand.partition)
    for pattern in patterns:
        found = binary.symbols.glob(pattern) if any(c in pattern for c in "*?[") \
            else binary.symbols.lookup(pattern)
        if not found:
            hint = binary.symbols.similar(pattern)
            raise UsageError(f"--probe {pattern}: no such function in {binary.display_path}"
                             + (f" (did you mean {', '.join(hint)}?)" if hint else ""))
        for sym in found:
            add(sym, None, None)
    plan.seconds = time.monotonic() - started + binary.load_seconds
    return plan


def owning_package(path: str) -> str | None:
    """The Debian package that installed path, from dpkg's file lists."""
    info = "/var/lib/dpkg/info"
    real = os.path.realpath(path)
    try:
        names = [n for n in os.listdir(info) if n.endswith(".list")]
    except OSError:
        return None
    for n in names:
        try:
            with open(os.path.join(info, n), errors="replace") as f:
                if any(line.rstrip("\n") in (path, real) for line in f):
                    return n[: -len(".list")].split(":")[0]
        except OSError:
            continue
    return None


def check_symbols(binary: Binary, plan: Plan, stages: list[str]) -> None:
    """A stripped binary without debug symbols cannot be probed by name: say
    which stages that costs and what to install."""
    if binary.image.has_symtab or binary.debug_file or not stages:
        return
    lost = [u["stage"] for u in plan.unavailable]
    if not lost:
        return
    pkg = owning_package(binary.display_path)
    what = (f"install {pkg}-dbgsym (from the Debian debug archive)"
            if pkg else "install the server's debug symbols package")
    build_id = f" (build-id {binary.image.build_id})" if binary.image.build_id else ""
    raise NoSymbolsError(f"{binary.display_path} is stripped and no debug symbols were found{build_id}: "
                         f"{', '.join(lost)} cannot be probed; {what}, or pass --debug-file")


def load_binary_for(args) -> tuple[object | None, Binary]:
    if args.pid is None:
        return None, load_binary(args.binary, debug_file=args.debug_file)
    target = resolve_target(args.pid)
    return target, load_target_binary(target, args.debug_file)


def list_plan(binary: Binary, plan: Plan, out=sys.stdout) -> None:
    print(f"{binary.display_path}: {binary.server.describe()} ({binary.server.line}), "
          f"{'PIE' if binary.image.pie else 'non-PIE'}, symbols from {symbols_source(binary)}", file=out)
    for s in plan.specs:
        part = f"  [partition: {s.partition.describe()}]" if s.partition else ""
        entry = f"  [entry {s.entry_class}{', after endbr64' if s.skip else ''}]"
        print(f"{s.stage or '-':<30} {s.symbol.address:#x} {s.symbol.demangled}{part}{entry}", file=out)
    for u in plan.unavailable:
        print(f"{u['stage']:<30} unavailable: {u['reason']}", file=out)


def symbols_source(binary: Binary) -> str:
    if binary.debug_file:
        return f"debug file {binary.debug_file}"
    return ".symtab" if binary.image.has_symtab else ".dynsym only (stripped)"


def target_record(target, binary: Binary) -> dict:
    return {
        "pid": target.pid,
        "comm": target.comm,
        "binary": binary.display_path,
        "binary_deleted": target.deleted,
        "build_id": binary.image.build_id,
        "pie": binary.image.pie,
        "symbols": symbols_source(binary),
        "server": {"family": binary.server.family, "version": binary.server.version,
                   "line": binary.server.line},
    }


class StopSignals:
    """SIGINT and SIGTERM end the window; while the probes come off, further
    signals are ignored so detaching cannot be cut short."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.reason: str | None = None
        self._old: dict = {}

    def _handler(self, signum, _frame):
        self.reason = "interrupt" if signum == signal.SIGINT else "sigterm"
        self.stop.set()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handler)
        return self

    def ignore(self):
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


ON_PHASE_S = 0.05  # probes on, per duty cycle
MAX_OFF_S = 2.0    # longest gap between two on-phases
MIN_ON_S = 0.01
MEASURE_OFF_S = 0.1  # probes off, to learn the load's speed before pacing on it


class _Window:
    """When the window ends: its duration, a stop (Ctrl-C, SIGTERM, the
    caller), or the target's exit."""

    def __init__(self, pid: int, duration: float | None, stop: threading.Event, signals, stop_reason: str,
                 status, session):
        self.pid, self.duration, self.stop = pid, duration, stop
        self.signals, self.stop_reason, self.status, self.session = signals, stop_reason, status, session
        self.start = time.monotonic()
        self.ended_by: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds`; True once the window has ended."""
        until = time.monotonic() + seconds
        while self.ended_by is None:
            now = time.monotonic()
            remaining = None if self.duration is None else self.duration - (now - self.start)
            if remaining is not None and remaining <= 0:
                self.ended_by = "duration"
                break
            if now >= until:
                return False
            step = min(0.5, until - now, remaining if remaining is not None else 0.5)
            if self.stop.wait(step):
                self.ended_by = self.signals.reason if self.signals and self.signals.reason else self.stop_reason
                break
            if not _alive(self.pid):
                self.ended_by = "target exited"
                break
            if self.status:
                self.status.tick(self.elapsed(), self.session)
        return True


class PerfSchemaWindow:
    """The Performance Schema side of a window. Any trouble (no connection,
    P_S off, no privilege) becomes one warning and a probes-only report."""

    def __init__(self, pid: int, opts: ConnectOptions | None, waits: str, warnings: list[str]):
        self.pid, self.opts, self.waits, self.warnings = pid, opts, waits, warnings
        self.ps: PerfSchema | None = None
        self.conn = None
        self.progress = None  # reads the load's progress, also with P_S off
        self.watch: ThreadWatch | None = None
        self.record: dict = {"status": "not requested"}

    def rows_changed(self) -> int | None:
        """The server's rows changed so far, or None without a connection."""
        import pymysql

        if self.progress is None:
            return None
        try:
            return rows_changed(self.progress)
        except pymysql.err.MySQLError as e:
            self.warnings.append(f"reading the server's row counters failed: {e.args[-1] if e.args else e}")
            self.progress = None
            return None

    def _give_up(self, status: str, reason: str) -> None:
        self.record = {"status": status, "reason": reason}
        self.warnings.append(f"Performance Schema: {reason}; the report has the probes only")
        self.ps = None

    def open(self) -> None:
        import pymysql

        if self.opts is None:
            return
        conn, args, why = connection.connect(self.pid, self.opts)
        if conn is None:
            return self._give_up("unavailable", why)
        self.conn = self.progress = conn
        self.ps = PerfSchema(conn, self.waits)
        try:
            if not self.ps.enabled():
                return self._give_up("off", "the server runs with performance_schema=OFF")
            changed = self.ps.enable()
            self._start_guard(args)
            self.before = self.ps.summaries()
            self.t0 = self.ps.timer_now()
            self.record = {"status": "collected", "connection": connection.describe(args),
                           "server_version": conn.get_server_info(), "setup_rows_changed": changed,
                           "thread_os_id": self.ps.has_os_id, "os_tid_source": self.ps.os_tid_source,
                           "waits": self.waits}
            self.threads_at_start = self.ps.threads()  # connections that end in the window
            self.progress = self._progress_connection(args)
            self.watch = self._thread_watch(args)
        except pymysql.err.MySQLError as e:
            self.restore()
            why = e.args[-1] if e.args else e
            self._give_up("unavailable", f"cannot use performance_schema as {connection.describe(args)}: {why}")

    def _unrecorded_connection(self, connect_args: dict):
        """Another connection to the server, whose statements P_S does not
        record; None if there is none."""
        import pymysql

        try:
            conn = pymysql.connect(**connect_args)
        except pymysql.err.MySQLError:
            return None
        thread_id = leave_out_own_statements(conn)
        if thread_id is None:
            conn.close()
            return None
        self.ps.own_threads.add(thread_id)
        return conn

    def _progress_connection(self, connect_args: dict):
        """The connection for the progress reads: one P_S does not record,
        else the P_S connection itself."""
        conn = self._unrecorded_connection(connect_args)
        self.record["progress_reads"] = "recorded" if conn is None else "not recorded"
        return conn or self.conn

    def _thread_watch(self, connect_args: dict) -> ThreadWatch | None:
        quiet = self.ps.saved_background_history_off is not None
        conn = self._unrecorded_connection(connect_args)
        self.record["background_history"] = ("kept (no threads.HISTORY, or no right to change it)" if not quiet else
                                             "off" if conn else "off for the threads there at the start")
        return ThreadWatch(conn, self.ps.os_tid_source, quiet).start() if conn else None

    def close(self) -> None:
        """Read what the window left in P_S, then restore its setup."""
        import pymysql

        if not self.ps:
            return
        try:
            t1 = self.ps.timer_now()
            after = self.ps.summaries()
            seen = self.watch.stop() if self.watch else []
            if self.watch and self.watch.error:
                self.warnings.append(f"Performance Schema: watching the threads failed: {self.watch.error}")
            statements, stages = self.ps.window_events(self.t0, t1)
            self.record.update({"timer_start_ps": self.t0, "timer_end_ps": t1,
                                "deltas": perfschema_deltas(self.before, after), "statements": statements,
                                "stages": stages,
                                "threads": merge_threads(self.threads_at_start, seen, self.ps.threads())})
        except pymysql.err.MySQLError as e:
            self.warnings.append(f"Performance Schema: reading the window failed: {e.args[-1] if e.args else e}")
        finally:
            self.restore()

    def _start_guard(self, connect_args: dict) -> None:
        """A process that restores the setup should this one die first (kill -9)."""
        state = {"connect": connect_args, "consumers": self.ps.saved_consumers,
                 "instruments": {k: list(v) for k, v in self.ps.saved_instruments.items()},
                 "background_history_off": self.ps.saved_background_history_off}
        self.guard = subprocess.Popen([sys.executable, "-I", "-m", "mysqlprobe.collectors.ps_guard"],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.guard.stdin.write(json.dumps(state) + "\n")
        self.guard.stdin.flush()

    def restore(self) -> None:
        if self.watch:
            self.watch.stop()
        if self.ps and not self.ps.restored:
            try:
                self.ps.restore()
            except Exception as e:  # the server went away: say so, the setup is in-memory
                self.warnings.append(f"Performance Schema: could not restore its setup: {e}")
        guard = getattr(self, "guard", None)
        if guard and guard.poll() is None:
            try:
                guard.stdin.write("done\n" if self.ps is None or self.ps.restored else "")
                guard.stdin.close()
            except OSError:
                pass
            guard.wait(timeout=30)


def cost_uncertainty(cal, specs: list[ProbeSpec]) -> float:
    """Relative doubt on the probes' calibrated cost: the spread of the bursts,
    at least 10%."""
    rel = [c.spread_ns / c.pair_ns for k, c in cal.classes.items()
           if c.pair_ns > 0 and any(s.entry_class == k for s in specs)]
    return max([0.10] + rel)


def _duty_cycles(session: UprobeSession, specs: list[ProbeSpec], win: _Window, budget: float,
                 calibrator: Calibrator, rows_changed, started: tuple[float, int | None]) -> tuple[list[dict], int | None]:
    """Probes on for short phases, off long enough that the load slows down by
    at most `budget`. The first on-phase is already open. Returns the cycles
    (on-time, calls per probe, rows the server changed, time the load lost)
    and the server's rows counter at the end."""
    pacer = Pacer(budget, on_s=ON_PHASE_S, min_on_s=MIN_ON_S, max_off_s=MAX_OFF_S)
    cycles: list[dict] = []
    last = {s.index: 0 for s in specs}
    on_s = pacer.longest_on_s()
    on_t0 = started[0]
    cycle_t0, cycle_rows0 = started  # a cycle: attach, on-phase, detach
    indices = [s.index for s in specs]
    counts = lambda: session.calls(indices)  # noqa: E731
    while True:
        # rows and calls read together inside the on-phase (rows read between
        # a switch and a status query would be at unprobed speed); the calls
        # on either side of the query, averaged, are those as it read the rows
        calls0, rows0, read0 = _rows_and_calls(rows_changed, counts)
        ended = win.wait(on_s)
        calls1, rows1, read1 = _rows_and_calls(rows_changed, counts)
        session.stop()
        t_on = time.monotonic() - on_t0
        now = counts()
        delta = {i: now[i] - last[i] for i in now}
        last = now
        cal = calibrator.current()
        probe_s = sum(delta[s.index] * cal.pair(s.entry_class) for s in specs) / 1e9
        cycle = {"on_s": round(t_on, 6), "probe_s": round(probe_s, 6), "calls": delta,
                 "rows": _difference(rows1, rows0), "row_s": round(read1 - read0, 6),
                 "row_calls": {i: calls1[i] - calls0[i] for i in now}}  # averages: may end in .5
        cycles.append(cycle)
        if ended:
            return cycles, rows1
        session.detach_target()
        off_t0, off_rows0 = time.monotonic(), rows_changed()
        cycle_s, cycle_rows = off_t0 - cycle_t0, _difference(off_rows0, cycle_rows0)
        lost = pacer.lost(cycle_s, cycle_rows)
        speed_t0, speed_rows0 = off_t0, off_rows0  # where the off-phase's speed is measured from
        if lost is None and off_rows0 is not None:
            # the load's unprobed speed is not known yet (the first cycle):
            # measure it before pacing on a guess
            if win.wait(MEASURE_OFF_S):
                return cycles, rows_changed()
            speed_t0, speed_rows0 = time.monotonic(), rows_changed()
            pacer.off_phase(_difference(speed_rows0, off_rows0), speed_t0 - off_t0)
            lost = pacer.lost(cycle_s, cycle_rows)
        cycle["lost_s"] = None if lost is None else round(lost, 6)
        cycle["unprobed_rows_per_s"] = None if lost is None else round(pacer.speed(), 1)
        on_s, off = pacer.next_phases(t_on, cycle_s, lost, probe_s, elapsed_s=off_t0 - started[0])
        if win.wait(max(off - (time.monotonic() - off_t0), 0.0)):
            return cycles, rows_changed()
        cycle_t0, cycle_rows0 = time.monotonic(), rows_changed()
        pacer.off_phase(_difference(cycle_rows0, speed_rows0), cycle_t0 - speed_t0)
        session.attach_target()
        on_t0 = time.monotonic()
        session.start()


def _measure_in_situ_cost(calibrator: Calibrator, cycles: list[dict], specs: list[ProbeSpec]) -> None:
    """What the on-phases show the probes cost the target, against their calibration."""
    cal = calibrator.current()
    factor = in_situ_factor([{**c, "row_calls": [c["row_calls"][s.index] for s in specs]} for c in cycles],
                            [cal.pair(s.entry_class) for s in specs])
    if factor is not None:
        calibrator.in_situ = factor


TIGHT_READ_S = 0.002  # calls read on either side of a row-counter query at most this far apart
READ_TRIES = 3


def _rows_and_calls(rows_changed, counts) -> tuple[dict[int, float], int | None, float]:
    """The server's rows counter, the calls as it was read (the calls on
    either side of the query, averaged) and when. A read that took long (this process
    preempted, a slow reply) would misplace the rows against the calls; it is
    taken again, and the tightest of a few kept."""
    best = None
    for _ in range(READ_TRIES):
        t0 = time.monotonic()
        before = counts()
        rows = rows_changed()
        after = counts()
        width = time.monotonic() - t0
        if best is None or width < best[0]:
            best, best_t0 = (width, before, rows, after), t0
        if width <= TIGHT_READ_S or rows is None:
            break
    width, before, rows, after = best
    return {i: (before[i] + after[i]) / 2 for i in before}, rows, best_t0 + width / 2


def _difference(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def _sum_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known), 6) if known else None


def record(target, binary: Binary, plan: Plan, *, duration: float | None, stop: threading.Event,
           argv: list[str], status=None, verbose: bool = False, signals: StopSignals | None = None,
           stop_reason: str = "stopped", correct: bool = True, exact: bool = True,
           budget: float = 0.10, connect: ConnectOptions | None = None, ps_waits: str = "io",
           perf: PerfOptions | None = None, off_cpu: bool = True, out_dir: str | None = None) -> dict:
    """Calibrate, attach, keep the window open (all along with `exact`, else
    in duty cycles within the overhead budget), read the maps, detach.
    CPU samples of the same window go to out_dir/stacks.folded.
    Returns profile.json's document."""
    if os.geteuid() != 0:
        raise PermissionProblem("attaching uprobes needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)")
    calibrator = Calibrator(first_index=len(plan.specs))
    specs = [replace(s, cost_class=COST_CLASS.get(s.entry_class, 0) if correct else 0) for s in plan.specs]
    session = UprobeSession(target.pid, target.proc_exe, specs, verbose, calibration=calibrator.group,
                            defer_target=True)
    warnings = list(plan.warnings)
    timings = {"symbols_s": round(plan.seconds, 3)}
    with ExitStack() as stack:
        stack.enter_context(calibrator)
        # perf first: a sampled process pays more per probe hit, and the
        # calibration should see the conditions of the window
        sampler = PerfWindow(target.pid, binary.image, perf, out_dir, warnings)
        stack.callback(sampler.cleanup)
        sampler.start()
        t0 = time.monotonic()
        stack.enter_context(session)
        calibrator.calibrate(session)
        timings["calibration_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        session.attach_target()  # after calibrating: the target pays for no probe that does not count
        timings["attach_s"] = round(time.monotonic() - t0, 3)
        if not exact and session.link_kind != "uprobe_multi":
            warnings.append("duty cycles need uprobe_multi links (Linux 6.6+): every call was counted")
            exact = True
        ps = PerfSchemaWindow(target.pid, connect, ps_waits, warnings)
        stack.callback(ps.restore)
        ps.open()
        if status:
            status.sampler = sampler
        waits = OffCpuWindow(target.pid, off_cpu, out_dir, warnings, verbose)
        stack.callback(waits.close)
        start_wall = now_utc()
        proc_start = process.snapshot(target.pid)
        win = _Window(target.pid, duration, stop, signals, stop_reason, status, session)
        calibrator.follow(session)
        started = (time.monotonic(), ps.rows_changed())
        session.start()  # before the announcement: a load started on it is counted from its first call
        waits.start()
        if status:
            status.started(session, len(plan.specs), exact, budget)
        if exact:
            while not win.wait(3600):
                pass
            session.stop()
            cycles, rows_at_end = None, ps.rows_changed()
        else:
            cycles, rows_at_end = _duty_cycles(session, specs, win, budget, calibrator, ps.rows_changed, started)
            _measure_in_situ_cost(calibrator, cycles, specs)
        elapsed = win.elapsed()
        waits.stop()
        sampler.stop()  # perf takes a moment to write its data: not part of the window
        proc_end = process.snapshot(target.pid)
        ps.close()
        if signals:
            signals.ignore()
        calibrator.close()
        cal = calibrator.current()
        session.detach()
        snapshot = session.snapshot()
        attached = session.attached_count
        links = session.link_kind
        thread_names = thread_names_from_perf_schema(ps.record)
        sampler.finish(thread_names)
        waits.finish(thread_names, proc_end.thread_names if proc_end else {}, target.comm)
    if status:
        status.done()
    window = {"start": start_wall, "duration_s": round(elapsed, 6), "requested_s": duration,
              "ended_by": win.ended_by,
              "rows_changed": _difference(rows_at_end, started[1]), "rows_counter": "+".join(ROW_COUNTERS)}
    sampling = {"mode": "exact"} if cycles is None else {
        "mode": "sampled", "overhead_budget": budget, "cycles": len(cycles),
        "cost_uncertainty": round(cost_uncertainty(cal, specs), 3),
        "on_s": round(sum(c["on_s"] for c in cycles), 6),
        "lost_s": _sum_known(c.get("lost_s") for c in cycles),
        "calls_per_cycle": [{**c, **{k: [c[k][s.index] for s in specs] for k in ("calls", "row_calls")}}
                            for c in cycles]}
    return build_profile(argv=argv, target=target_record(target, binary), window=window, specs=specs,
                         snapshot=snapshot, unavailable=plan.unavailable, warnings=warnings,
                         attached=attached, calibration=cal, links=links, sampling=sampling,
                         corrected=correct, timings=timings,
                         process=process.window_record(proc_start, proc_end), perf_schema=ps.record,
                         perf=sampler.record, off_cpu=waits.record)


class StatusLine:
    """One line on stderr, rewritten in place: elapsed time and calls so far."""

    def __init__(self, stream=sys.stderr, enabled: bool = True):
        self.stream = stream
        self.enabled = enabled and stream.isatty()
        self._last = 0.0
        self.sampler = None

    def started(self, session, functions: int, exact: bool = True, budget: float = 0.10) -> None:
        mode = "every call" if exact else f"sampled within {100 * budget:g}% overhead, --exact for every call"
        print(f"Tracing PID {session.pid}: {functions} functions, {session.attached_count} probes ({mode}). "
              f"Ctrl-C to end.", file=self.stream, flush=True)

    def tick(self, elapsed: float, session) -> None:
        if not self.enabled or elapsed - self._last < 1:
            return
        self._last = elapsed
        samples = self.sampler.samples_so_far() if self.sampler else None
        self.stream.write(f"\r{elapsed:7.1f}s  {session.total_calls():>12,} calls"
                          + (f"  ~{samples:,} samples" if samples is not None else ""))
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()


def run(args, parser) -> int:
    check_arguments(args, parser)
    stages = list(catalog.INSERT_PROFILE) if args.insert_profile else []
    stages += [s for s in args.stage if s not in stages]
    target, binary = load_binary_for(args)
    if stages and binary.server.family == "unknown":
        who = f"PID {target.pid} runs {binary.display_path}" if target else binary.display_path
        raise TargetError(f"{who}, which does not look like mysqld or mariadbd (no MySQL/MariaDB version "
                          f"string or handler functions); use --probe for other programs")
    plan = plan_probes(binary, stages, args.probe)
    check_symbols(binary, plan, stages)
    if args.list:
        list_plan(binary, plan)
        return 0
    if not plan.specs:
        raise UsageError(f"nothing to probe in {binary.display_path}: "
                         + "; ".join(f"{u['stage']}: {u['reason']}" for u in plan.unavailable))
    stop = threading.Event()
    with StopSignals(stop) as signals:
        doc = record(target, binary, plan, duration=args.duration, stop=stop, argv=sys.argv,
                     status=StatusLine(enabled=not args.quiet), verbose=args.verbose, signals=signals,
                     correct=not args.raw, exact=args.exact, budget=args.overhead_budget / 100,
                     connect=None if args.no_perf_schema else ConnectOptions(
                         args.socket, args.host, args.port, args.user, args.password_file, args.defaults_file),
                     ps_waits=args.ps_waits, out_dir=args.output,
                     perf=None if args.no_perf else PerfOptions(args.perf_freq, args.perf_callgraph,
                                                                args.keep_perf_data),
                     off_cpu=not args.no_off_cpu)
    sys.stdout.write(render_text(doc))
    if args.output:
        print(f"wrote {', '.join(write_capture(args.output, doc))}", file=sys.stderr)
    return 0
