"""mysqlprobe watch: profile a server continuously within a small budget and
serve the figures to Prometheus at /metrics (and pprof profiles to a
directory), following the server when it restarts.

It records one window after another (`--interval` seconds each, duty
cycles within `--budget`, 1% by default) and adds each window's figures to
what /metrics serves, so counters only grow. When the server's process
ends, watch looks for the server again (a process running the same
binary in the same data directory, or --binary and --datadir) and goes on; meanwhile /metrics says
`mysqlprobe_up 0`."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

from mysqlprobe import catalog
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.headline import slowdown_words
from mysqlprobe.analysis.profile import memory_counter
from mysqlprobe.analysis.prometheus import Totals, WatchState, watch_exposition
from mysqlprobe.caches import PlanCache
from mysqlprobe.capture import OFFCPU_FILE, STACKS_FILE
from mysqlprobe.collectors.perfschema.connection import ConnectOptions
from mysqlprobe.collectors.cpu.cpu_bursts import BURST_FREQUENCY
from mysqlprobe.collectors.cpu.perf import PerfOptions
from mysqlprobe.collectors.target.symbols import resolve_target
from mysqlprobe.commands.record import add_probe_argument
from mysqlprobe.errors import Interrupted, MysqlprobeError, PermissionProblem, TargetError, UsageError
from mysqlprobe.files import make_dir, write_new
from mysqlprobe.httpserve import MetricsServer, Routes
from mysqlprobe.privileges import require_attach_privileges
from mysqlprobe.reports import capture_profile, pprof_of
from mysqlprobe.recorder.options import Control, RecordOptions
from mysqlprobe.recorder.plan import plan_cached, plan_in_child
from mysqlprobe.recorder.priority import add_start_nice
from mysqlprobe.recorder.recorder import Recorder
from mysqlprobe.recorder.window import RunSignals

EXAMPLES = """examples:
  mysqlprobe watch -p $(pidof mariadbd) --listen 127.0.0.1:9465
  mysqlprobe watch --binary /usr/sbin/mariadbd --datadir /var/lib/mysql --listen :9465 --pprof-dir /var/lib/mysqlprobe
"""
FIND_EVERY_S = 1.0   # while the server is away: how often to look for it
PPROF_KINDS = {STACKS_FILE: ("cpu", False), OFFCPU_FILE: ("offcpu", True)}
PPROF_KEEP = 100   # windows' profiles of each kind kept in --pprof-dir by default
PROGRESS_FRESH_S = 3.0   # a build's progress read longer ago than this is no build under way


def add_arguments(p) -> None:
    p.add_argument("-p", "--pid", type=int, help="the server process to watch")
    p.add_argument("--binary", help="the server's binary: watch the process running it (also after restarts)")
    p.add_argument("--datadir", help="with --binary: the server of this data directory (several may share a binary)")
    p.add_argument("--listen", default="127.0.0.1:9465", metavar="HOST:PORT",
                   help="serve /metrics here (default 127.0.0.1:9465)")
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                   help="length of each profiled window (default 60)")
    p.add_argument("--budget", type=float, default=1.0, metavar="PCT",
                   help="slow the load down by at most PCT%% (default 1)")
    add_probe_argument(p)
    p.add_argument("--pprof-dir", metavar="DIR", help="write each window's CPU and off-CPU profiles here (pprof)")
    p.add_argument("--pprof-keep", type=int, default=PPROF_KEEP, metavar="N",
                   help=f"keep the newest N windows' profiles of each kind in --pprof-dir (default {PPROF_KEEP})")
    p.add_argument("--sampler", choices=("auto", "bpf", "perf"), default="auto",
                   help="who takes the CPU samples, as for a recording (default auto: in BPF where the "
                        "binary keeps frame pointers, perf record with DWARF stacks where not)")
    p.add_argument("--socket", help="the server's unix socket (default: found from the PID)")
    p.add_argument("--user")
    p.add_argument("--password-file", metavar="FILE")
    p.add_argument("--defaults-file", metavar="FILE")
    p.add_argument("--no-ps", "--no-perf-schema", dest="no_perf_schema", action="store_true",
                   help="do not connect to the server")
    p.add_argument("--progress-counter", metavar="VARIABLE",
                   help="the server's progress read from its memory in place of its rows changed (as for record: "
                        "global_query_id, one a statement), where no connection counts them")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per window on stderr")
    add_start_nice(p)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {text}: give HOST:PORT (for example 127.0.0.1:9465)")
    return host or "0.0.0.0", int(port)


def datadir_of(pid: int) -> str | None:
    """A server's data directory: mysqld works in it (its cwd)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def running(binary: str, datadir: str | None = None) -> int | None:
    """The oldest process running this binary (in this data directory, when
    given: several servers may share one binary), if any."""
    want = os.path.realpath(binary)
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                exe = os.readlink(d / "exe").removesuffix(" (deleted)")
            except OSError:
                continue
            if exe == want and (datadir is None or datadir_of(int(d.name)) == datadir):
                found.append(int(d.name))
    return min(found) if found else None


class Metrics:
    """What /metrics serves: the windows' totals and watch's own state."""

    def __init__(self):
        self.totals = Totals()
        self.lock = threading.Lock()
        self.up = 0
        self.windows = self.failures = 0
        self.probes = self.functions = 0
        self.pid: int | None = None
        # the index build under way: (stage, percent, seconds left, when read), read once a second
        self.build: tuple[str, float, float | None, float] | None = None

    def build_progress(self, stage: str, percent: float, left_s: float | None) -> None:
        with self.lock:
            self.build = (stage, percent, left_s, time.monotonic())

    def add(self, profile: Profile) -> None:
        with self.lock:
            self.totals.add(profile)
            self.windows += 1
            self.probes = profile.engine.probes_attached or 0
            self.functions = len(profile.probes)

    def text(self) -> str:
        with self.lock:
            build = self.build
            if build is not None and time.monotonic() - build[3] > PROGRESS_FRESH_S:
                build = None
            state = WatchState(self.up, self.windows, self.failures, self.probes, self.functions,
                               None if build is None else build[:3])
            return watch_exposition(state, self.totals)


def serve(metrics: Metrics, host: str, port: int) -> MetricsServer:
    """/metrics on host:port, from a thread of its own (mysqlprobe/httpserve.py:
    no client can hold it)."""
    routes: Routes = {"/metrics": ("text/plain; version=0.0.4; charset=utf-8", lambda: metrics.text().encode())}
    try:
        return MetricsServer(host, port, routes).start()
    except OSError as e:
        raise UsageError(f"--listen {host}:{port}: {e.strerror}") from None


def write_profiles(directory: str, cap, profile: Profile, keep: int = PPROF_KEEP) -> None:
    """The window's CPU and off-CPU stacks as pprof files, named by the
    window's start; then only the newest `keep` of each kind are kept."""
    stamp = profile.window.start.replace(":", "")
    for f in cap.files:
        if f.name in PPROF_KINDS and not isinstance(f.content, str):
            name, off_cpu = PPROF_KINDS[f.name]
            write_new(directory, f"{name}-{stamp}.pb.gz", pprof_of(profile, f.content, off_cpu))
    prune_profiles(directory, keep)


def prune_profiles(directory: str, keep: int) -> list[str]:
    """The older windows' pprof files of each kind past the newest `keep`,
    removed (their names sort by the window's start); the names removed."""
    removed = []
    for kind, _ in PPROF_KINDS.values():
        mine = sorted(p for p in os.listdir(directory)
                      if p.startswith(f"{kind}-") and p.endswith(".pb.gz") and p[len(kind) + 1:len(kind) + 2].isdigit())
        for name in mine[:max(len(mine) - keep, 0)]:
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


class Watch:
    def __init__(self, args):
        self.args = args
        self.stop = threading.Event()
        self.metrics = Metrics()
        self.binary_path, self.datadir = args.binary, args.datadir
        self.options = RecordOptions(
            duration=args.interval, exact=False, budget=args.budget / 100, argv=tuple(sys.argv),
            connect=None if args.no_perf_schema else ConnectOptions(args.socket, None, None, args.user,
                                                                    args.password_file, args.defaults_file),
            perf=PerfOptions(), off_cpu=True, verbose=args.verbose,
            # the CPU bursts' rate shrinks with the budget: 1999 Hz at 10%, 200 Hz at 1%
            burst_freq=max(round(BURST_FREQUENCY * min(args.budget / 10, 1.0)), 1),
            progress_counter=args.progress_counter, sampler=args.sampler, start_nice=args.start_nice,
            build_progress=not args.no_perf_schema)   # one query a second: the gauge of a build under way
        self._plans: dict = {}

    def log(self, msg: str) -> None:
        if not self.args.quiet:
            print(f"mysqlprobe watch: {msg}", file=sys.stderr, flush=True)

    def find(self) -> int | None:
        """The server's PID: the one given, until it ends; then whatever runs its binary."""
        if self.args.pid and not self.binary_path:
            return self.args.pid
        return running(self.binary_path, self.datadir) if self.binary_path else None

    def plan(self, target):
        """The binary and its plan, read once per server process (attached through its /proc/PID/exe)."""
        st = os.stat(target.proc_exe)
        key = (target.pid, target.exe, st.st_size, st.st_mtime_ns)
        if key not in self._plans:
            stages = list(catalog.INSERT_PROFILE) + ([] if self.args.no_perf_schema else [catalog.STAGE_CHANGE])
            # weeks of windows need none of the table: read in a child, or not at all (the plan cache)
            functions = list(self.args.probe)
            self._plans = {key: plan_cached(target.proc_exe, target.exe, PlanCache(), (stages, functions, None),
                                            lambda: plan_in_child(target, stages, functions))}
        return self._plans[key]

    def one_window(self, pid: int) -> None:
        target = resolve_target(pid)
        if not self.binary_path:   # to find the server again after a restart
            self.binary_path, self.datadir = target.exe, datadir_of(pid)
        binary, plan = self.plan(target)
        if not plan.specs:
            raise TargetError(f"PID {pid}: nothing of the insert profile to probe in {binary.display_path}")
        control = Control(stop=self.stop, build_progress=self.metrics.build_progress)
        with RunSignals(self.stop) as control.signals:
            cap = Recorder(target, binary, plan, self.options, control).record()
        profile = capture_profile(cap)  # plain already (the recorder made it so); read, not written
        self.metrics.add(profile)
        if self.args.pprof_dir:
            write_profiles(self.args.pprof_dir, cap, profile, self.args.pprof_keep)
        w = profile.window
        counter = memory_counter(profile.window)
        unit = f"of {counter}" if counter else "rows"
        self.log(f"PID {pid}: window of {w.duration_s:.1f}s ended by {w.ended_by}, "
                 f"{w.rows_changed or 0} {unit}; {slowdown_words(profile.overhead)}")

    def run(self) -> int:
        host, port = parse_listen(self.args.listen)
        server = serve(self.metrics, host, port)
        self.log(f"serving http://{host}:{port}/metrics")
        try:
            with RunSignals(self.stop) as between_windows:
                between_windows.window_opens()  # a signal between windows ends watch
                self._loop()
        finally:
            server.shutdown()
        return 0

    def _loop(self) -> None:
        while not self.stop.is_set():
            pid = self.find()
            if pid is None or not Path(f"/proc/{pid}").is_dir():
                self.metrics.up, self.metrics.pid = 0, None
                self.stop.wait(FIND_EVERY_S)
                continue
            if pid != self.metrics.pid:
                self.log(f"watching PID {pid}")
            self.metrics.up, self.metrics.pid = 1, pid
            try:
                self.one_window(pid)
            except Interrupted:
                break
            except (UsageError, PermissionProblem):  # the command line's, or privileges: no window will do
                raise
            except Exception as e:  # one window's trouble must not end a watch of weeks
                self.metrics.failures += 1
                self.metrics.up, self.metrics.pid = 0, None
                why = str(e) if isinstance(e, MysqlprobeError) else f"internal error: {type(e).__name__}: {e}"
                self.log(f"window failed: {why}")
                if self.args.verbose:
                    traceback.print_exc()
                self.stop.wait(FIND_EVERY_S)


def run(args, parser) -> int:
    if not (args.pid or args.binary):
        parser.error("give -p PID or --binary PATH")
    if args.interval < 1:
        parser.error("--interval takes at least 1 second")
    if not 0 < args.budget <= 100:
        parser.error("--budget takes a percentage above 0 and at most 100")
    if args.pprof_keep < 1:
        parser.error("--pprof-keep takes at least 1")
    require_attach_privileges("watch")
    if args.pprof_dir:
        make_dir(args.pprof_dir, "--pprof-dir")
    return Watch(args).run()
