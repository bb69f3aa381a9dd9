"""mysqlprobe --pid PID --insert-profile: plan the probes, record a window
through the recorder, save the capture, print the report."""

from __future__ import annotations

import argparse
import math
import sys
import time

from mysqlprobe import catalog
from mysqlprobe.caches import PlanCache
from mysqlprobe.capture import Capture
from mysqlprobe.collectors.perfschema import connection
from mysqlprobe.collectors.target import debuginfod
from mysqlprobe.collectors.perfschema.connection import ConnectOptions
from mysqlprobe.collectors.cpu.cpu_bursts import BURST_FREQUENCY
from mysqlprobe.collectors.cpu.perf import PerfOptions
from mysqlprobe.collectors.cpu.perf_record import DEFAULT_FREQUENCY
from mysqlprobe.privileges import require_attach_privileges
from mysqlprobe.collectors.target.symbols import Binary, load_binary, load_target_binary, resolve_target
from mysqlprobe.errors import TargetError, UsageError
from mysqlprobe.output import check_output_dir, save_capture
from mysqlprobe.recorder.options import Control, RecordOptions
from mysqlprobe.recorder.plan import Plan, check_symbols, list_plan, plan_cached, plan_probes, usdt_stand_ins
from mysqlprobe.recorder.priority import add_start_nice
from mysqlprobe.recorder.recorder import Recorder
from mysqlprobe.recorder.window import RunSignals, StatusLine

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mysqlprobe.analysis.model import Profile

EXAMPLES = """examples:
  mysqlprobe -p $(pidof mysqld) --insert-profile          # until Ctrl-C
  mysqlprobe -p $(pidof mariadbd) --insert-profile -d 30 -o /tmp/run1
  mysqlprobe -p $(pidof mariadbd) --index-profile -o /tmp/idx   # around a CREATE INDEX
  mysqlprobe -p 4242 --probe 'get_partition_id_*' --probe row_ins_clust_index_entry_low
  mysqlprobe -p 4242 --stage innodb.btr_insert -d 10
  mysqlprobe -p 4242 --insert-profile --list              # what would be probed
  mysqlprobe --binary /usr/sbin/mariadbd --list --insert-profile
  mysqlprobe report /tmp/run1                             # the report again, no root
  mysqlprobe lab demo                                     # sandbox MariaDB + seed load
"""


def add_probe_argument(p) -> None:
    p.add_argument("--probe", action="append", default=[], metavar="NAME",
                   help="add any function: a qualified C++ name (ha_partition::write_row), a glob "
                        "(get_partition_id_*), a full signature or a mangled name (repeatable)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--pid", type=_pid, help="the mysqld / mariadbd process to probe")
    p.add_argument("--binary", help="with --list: inspect this binary instead of a process")
    p.add_argument("--insert-profile", action="store_true",
                   help="probe the insert path (the default when no --stage or --probe is named): "
                        + ", ".join(catalog.INSERT_PROFILE))
    p.add_argument("--index-profile", action="store_true",
                   help="probe InnoDB's index build (CREATE INDEX, ALTER TABLE ... ADD INDEX) phase by phase, "
                        "counting every call (as --exact): "
                        + ", ".join(catalog.INDEX_PROFILE))
    p.add_argument("--stage", action="append", default=[], metavar="STAGE",
                   help="add a catalog stage (repeatable): " + ", ".join(catalog.BY_NAME))
    add_probe_argument(p)
    p.add_argument("--progress-counter", metavar="VARIABLE",
                   help="the load's progress, in place of the server's rows changed: a 4- or 8-byte integer "
                        "variable of the target read from its memory (global_query_id: one a statement), for a "
                        "run without a server connection or on another program; costs the target nothing")
    p.add_argument("-d", "--duration", type=float, metavar="SECONDS",
                   help="stop after this many seconds (default: at Ctrl-C or SIGTERM)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write the capture, report.html and the flame graphs into DIR (default: a new "
                        "mysqlprobe-YYYYmmdd-HHMMSS/ in the working directory)")
    p.add_argument("--json", action="store_true",
                   help="print the derived profile as JSON on stdout instead of the text report")
    p.add_argument("--all-threads", action="store_true",
                   help="off-CPU and I/O flame graphs of every thread (default: the load's, its client "
                        "connections; the server's idle background threads would fill them)")
    p.add_argument("--debug-file", metavar="PATH", help="separate debug symbols for a stripped binary (its "
                   "build-id and layout must be the binary's)")
    p.add_argument("--force-debug-file", action="store_true", help="use a --debug-file whose build-id is missing "
                   "or differs, once its sections and function starts match the binary's")
    p.add_argument("--debuginfod", metavar="URL", help="fetch a stripped binary's debug symbols from these "
                   "debuginfod servers (space-separated; default: $DEBUGINFOD_URLS)")
    p.add_argument("--list", action="store_true", help="list the functions that would be probed, and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no status line while running")
    add_start_nice(p)
    p.add_argument("--strict", action="store_true",
                   help="fail when a requested stage cannot be probed (a stripped binary without debug symbols); "
                        "by default the capture goes on with what can run: Performance Schema, process, CPU "
                        "samples, off-CPU and I/O")
    _mode_arguments(p.add_argument_group("Mode and the probes' own cost"))
    g = p.add_argument_group("Performance Schema (statements, stages and waits of the window)")
    g.add_argument("--socket", help="the server's unix socket (default: found from the PID)")
    g.add_argument("--host", help="connect over TCP instead")
    g.add_argument("--port", type=int)
    g.add_argument("--user", help="default: from --defaults-file or ~/.my.cnf, else root")
    g.add_argument("--password-file", metavar="FILE", help="a file holding the password")
    g.add_argument("--defaults-file", metavar="FILE", help="a MySQL option file ([client] section)")
    g.add_argument("--no-ps", "--no-perf-schema", dest="no_perf_schema", action="store_true",
                   help="probes only: do not connect to the server")
    g.add_argument("--ps-waits", choices=("io", "all"), default="io",
                   help="wait instruments to enable: table and file I/O (default), or synch waits too")
    g.add_argument("--ps-whole-window", action="store_true",
                   help="keep the window's consumers and instruments on in the quiet phases too: every "
                        "statement in the history, at a cost the measured slowdown then does not show")
    g.add_argument("--full-sql", action="store_true",
                   help="keep the statements' full text, literal values and all (default: their digests, "
                        "literals made ?)")
    _sampling_arguments(p.add_argument_group("CPU sampling (for flame graphs)"))
    g = p.add_argument_group("Off-CPU time (where threads wait: I/O, locks, a CPU)")
    g.add_argument("--no-off-cpu", action="store_true", help="no off-CPU stacks")
    g = p.add_argument_group("I/O system calls (reads, writes, syncs, async submissions: per stack and file)")
    g.add_argument("--no-io", action="store_true", help="no I/O system calls")


def _sampling_arguments(g) -> None:
    g.add_argument("--no-cpu", "--no-perf", dest="no_perf", action="store_true", help="no CPU sampling")
    g.add_argument("-F", "--frequency", "--perf-freq", dest="perf_freq", type=int, default=None,
                   metavar="HZ",
                   help=f"samples per second of CPU time (default {DEFAULT_FREQUENCY}; with a -d under "
                        f"{STACKS_WANTED // DEFAULT_FREQUENCY} s, enough for {STACKS_WANTED} samples a busy "
                        f"thread, at most {SHORT_WINDOW_MAX_HZ})")
    g.add_argument("--perf-callgraph", choices=("auto", "fp", "dwarf"), default="auto",
                   help="stack unwinding: frame pointers, DWARF, or chosen from the binary (default)")
    g.add_argument("--keep-perf-data", action="store_true", help="keep DIR/perf.data (needs -o and perf record)")
    g.add_argument("--sampler", choices=("auto", "bpf", "perf"), default="auto",
                   help="who takes the CPU samples: a BPF program on the kernel's cpu-clock events, counting in "
                        "the kernel (frame-pointer stacks only), the perf tool (perf record), or BPF where the "
                        "binary keeps frame pointers and perf where it does not (default)")
    g.add_argument("--burst-freq", type=int, default=BURST_FREQUENCY, metavar="HZ",
                   help="sampled mode: samples per second and CPU, without stacks, in the off-phases; they give "
                        f"short functions' cost per call (default {BURST_FREQUENCY}; 0: none)")


def _mode_arguments(g) -> None:
    g.add_argument("--raw", action="store_true",
                   help="report latencies with the probes' own cost in them (no correction)")
    g.add_argument("--recalibrate", action="store_true",
                   help="measure the probes' cost afresh (five bursts); by default a start on the same kernel and "
                        "CPU begins from the last run's bursts, if one new burst agrees with them")
    g.add_argument("--exact", action="store_true",
                   help="count every call (probes on all the time); default: duty cycles within the budget")
    g.add_argument("--budget", "--overhead-budget", dest="overhead_budget", type=float, default=5.0, metavar="PCT",
                   help="sampled mode: slow the load down by at most PCT%% (default 5)")


# spellings of before, still taken: the line that says what to write instead
RENAMED = {"--perf-freq": "-F/--frequency", "--overhead-budget": "--budget", "--no-perf": "--no-cpu",
           "--no-perf-schema": "--no-ps"}


def _pid(text: str) -> int:
    """-p's value: one PID. $(pidof mysqld) with two servers running gives two."""
    pids = text.replace(",", " ").split()
    if len(pids) > 1:
        raise argparse.ArgumentTypeError(f"{len(pids)} PIDs ({' '.join(pids)}): one server at a time; pidof found "
                                         "several, so give one of them (pgrep -n mysqld for the newest, or the "
                                         "server's pid-file)")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}") from None


def renamed_options(argv) -> list[str]:
    return [f"mysqlprobe: {old} is now {new} (the old spelling will go)" for old, new in RENAMED.items()
            if any(a == old or a.startswith(old + "=") for a in argv)]


def default_output_dir() -> str:
    """A new directory in the working directory, named by the time, like perf.data."""
    return time.strftime("mysqlprobe-%Y%m%d-%H%M%S")


# a short window's flame graph wants this many samples of a busy thread; the rate
# for it stays within the budget: ~15 us a sample (bench/SAMPLE_COST.md), 1.5% at 999 Hz
STACKS_WANTED = 1000
SHORT_WINDOW_MAX_HZ = 999


def sampling_frequency(duration: float | None) -> int:
    """The CPU sampling rate when -F is not given: the default, or for a
    window known to be short (-d) the rate that gives STACKS_WANTED samples
    of a thread busy all along, at most SHORT_WINDOW_MAX_HZ."""
    if not duration or duration * DEFAULT_FREQUENCY >= STACKS_WANTED:
        return DEFAULT_FREQUENCY
    wanted = math.ceil(STACKS_WANTED / duration)
    return min(wanted | 1, SHORT_WINDOW_MAX_HZ)   # odd: off the beat of round-rate timers


def check_arguments(args, parser: argparse.ArgumentParser) -> None:
    if not (args.insert_profile or args.index_profile or args.stage or args.probe):
        args.insert_profile = True  # what the tool is for
    if args.index_profile:
        # the duty cycles pace on the rows the server changes, and a build changes none; its
        # once-per-index phase functions would lose their returns to an off-phase
        args.exact = True
    if args.pid is None and not (args.binary and args.list):
        parser.error("-p/--pid is required (or --binary with --list)")
    if args.pid is not None and args.pid <= 0:
        parser.error(f"invalid PID {args.pid}")
    if not 0 < args.overhead_budget <= 100:
        parser.error("--budget takes a percentage above 0 and at most 100")
    if args.duration is not None and not (0 < args.duration < math.inf):
        parser.error("-d/--duration must be a positive, finite number of seconds (leave it out to run until Ctrl-C)")
    if args.perf_freq is None:
        args.perf_freq = sampling_frequency(args.duration)
    if not 1 <= args.perf_freq <= 10000:
        parser.error("-F/--frequency takes 1 to 10000 samples per second")
    if not 0 <= args.burst_freq <= 20000:
        parser.error("--burst-freq takes 0 (none) to 20000 samples per second")
    if args.keep_perf_data and args.sampler == "bpf":
        parser.error("--keep-perf-data needs perf record: --sampler perf (or auto)")
    for name in args.stage:
        if name not in catalog.BY_NAME:
            parser.error(f"unknown stage {name!r}; known: {', '.join(catalog.BY_NAME)}")
    connect = connect_options(args)
    why = connection.check_files(connect) if connect else None
    if why:
        raise UsageError(why)


def load_binary_for(args, target) -> Binary:
    urls = None if args.debuginfod is None else debuginfod.server_urls(args.debuginfod)
    progress = None if args.quiet else download_progress
    if target is None:
        return load_binary(args.binary, debug_file=args.debug_file, debuginfod_urls=urls, progress=progress,
                           force_debug_file=args.force_debug_file)
    return load_target_binary(target, args.debug_file, urls, progress, args.force_debug_file)


def download_progress(url: str, done: int, total: int | None) -> None:
    of = f" of {total / 1e6:.0f} MB" if total else " MB"
    print(f"fetching debug symbols from {url}: {done / 1e6:.0f}{of}", file=sys.stderr, flush=True)


def connect_options(args) -> ConnectOptions | None:
    if args.no_perf_schema:
        return None
    return ConnectOptions(args.socket, args.host, args.port, args.user, args.password_file, args.defaults_file)


def options_from(args) -> RecordOptions:
    return RecordOptions(
        duration=args.duration, exact=args.exact, budget=args.overhead_budget / 100, correct=not args.raw,
        connect=connect_options(args),
        ps_waits=args.ps_waits, full_sql=args.full_sql, ps_whole_window=args.ps_whole_window,
        off_cpu=not args.no_off_cpu, io=not args.no_io, verbose=args.verbose, argv=tuple(sys.argv),
        perf=None if args.no_perf else PerfOptions(args.perf_freq, args.perf_callgraph, args.keep_perf_data),
        burst_freq=0 if args.no_perf else args.burst_freq, sampler=args.sampler, reuse_calibration=not args.recalibrate,
        progress_counter=args.progress_counter, start_nice=args.start_nice, build_progress=args.index_profile)


def report(cap: Capture, out_dir: str | None, signals: RunSignals | None = None, as_json: bool = False,
           all_threads: bool = False) -> Profile:
    """Save the capture (if asked), then print its report: the text is made
    from the document as saved, so `mysqlprobe report DIR` prints the same."""
    # imported here, not on the path to the probes' attach (0.03-0.07 s)
    from mysqlprobe.analysis.reporters import STREAM_REPORTERS
    from mysqlprobe.reports import capture_profile
    if signals:
        signals.reached("report")
    profile = capture_profile(cap)  # plain already; built once, for the files and the text alike
    failure = save_capture(cap, out_dir, profile, all_threads) if out_dir else None
    STREAM_REPORTERS["json" if as_json else "text"](profile, sys.stdout)
    if failure:
        raise failure
    return profile


def run(args, parser) -> int:
    check_arguments(args, parser)
    for line in renamed_options(sys.argv[1:]):
        print(line, file=sys.stderr)
    if args.output is None and args.pid is not None and not args.list:
        args.output = default_output_dir()
    control = Control(status=StatusLine(enabled=not args.quiet))
    with RunSignals(control.stop) as control.signals:
        return record(args, control)


def record(args, control: Control) -> int:
    stages = list(catalog.INSERT_PROFILE) if args.insert_profile else []
    stages += [s for s in catalog.INDEX_PROFILE if args.index_profile and s not in stages]
    if (args.insert_profile or args.index_profile) and not args.no_perf_schema:
        stages.append(catalog.STAGE_CHANGE)  # P_S names the stages the probed calls ran in
    stages += [s for s in args.stage if s not in stages]
    assert control.signals is not None   # run() set them
    control.signals.reached("symbols")
    if args.pid is not None and not args.list:
        require_attach_privileges("profiling a server")
    target = None if args.pid is None else resolve_target(args.pid)

    def make() -> tuple[Binary, Plan]:
        binary = load_binary_for(args, target)
        if stages and binary.server.family == "unknown":
            who = f"PID {target.pid} runs {binary.display_path}" if target else binary.display_path
            raise TargetError(f"{who}, which does not look like mysqld or mariadbd (no MySQL/MariaDB version "
                              f"string or handler functions); use --probe for other programs")
        return binary, plan_probes(binary, stages, args.probe)

    path, shown = (target.proc_exe, target.exe) if target else (args.binary, args.binary)
    binary, plan = plan_cached(path, shown, PlanCache(), (stages, args.probe, args.debug_file, args.force_debug_file), make)
    if args.index_profile and not any(s.stage == "index.build" for s in plan.specs):
        # (where it applies but is missing, plan.unavailable says why)
        if not any(c.expected_in(binary.server) for c in catalog.stage("index.build").candidates):
            note = (f"--index-profile: the index build of {catalog.family_name(binary.server.family)} "
                    f"{binary.server.version or ''} is not catalogued (MySQL 8.0.27+ builds through "
                    "ddl::Builder): no index_build in this capture")
            plan.warnings.append(note)
            print(f"mysqlprobe: {note}", file=sys.stderr)
    stripped = check_symbols(binary, plan, stages)
    if stripped and (args.strict or args.list or not target):
        raise stripped
    if args.list:
        list_plan(binary, plan)
        return 0
    if stripped:   # what can run without symbols still runs: one line per stage lost, one on the fix
        for stage in stripped.lost:
            print(f"mysqlprobe: {stage}: not probed, no symbols in the stripped {binary.display_path}",
                  file=sys.stderr)
        print(f"mysqlprobe: to probe them: {stripped.fix} (--strict: fail instead)", file=sys.stderr)
        plan.warnings.append(str(stripped))
        stand_ins = usdt_stand_ins(binary, stages) if args.insert_profile else []
        if stand_ins:
            plan_probes(binary, stand_ins, [], into=plan)
            print(f"mysqlprobe: probed instead from the server's USDT probes: {', '.join(stand_ins)}",
                  file=sys.stderr)
    elif not plan.specs:
        raise UsageError(f"nothing to probe in {binary.display_path}: "
                         + "; ".join(f"{u['stage']}: {u['reason']}" for u in plan.unavailable))
    binary.symbols.release()  # planned: the window and the collection reuse its memory
    if args.output:
        check_output_dir(args.output)  # before anything is attached: a typo must not cost the window
    assert target is not None   # --binary goes with --list only (the parser holds it)
    cap = Recorder(target, binary, plan, options_from(args), control).record()
    report(cap, args.output, control.signals, as_json=args.json, all_threads=args.all_threads)
    return 0
