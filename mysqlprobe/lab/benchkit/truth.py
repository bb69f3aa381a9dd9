"""The truth the bench holds mysqlprobe's figures to: perf sampling every
CPU of an unprobed run, a function's CPU read off the stacks its samples
hold (its callees' with it), by this module's own reader of `perf script`;
and the wall time of an unprobed load's threads by stack, on CPU and off
it, from perf alone (WallRecorder); an index build's phases timed at
their functions' edges by bpftrace (PhaseTimer); each statement's time as
the server itself timed it, from its slow query log (server_timed)."""

from __future__ import annotations

import functools
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.profile import t95
from mysqlprobe.lab.benchkit import MYSQLPROBE
from mysqlprobe.lab.commands.bench import RUNS_PER_REPEAT
from mysqlprobe.flamegraphs.stacks import CONNECTION_FRAMES, WAITING_FOR_CPU


def record_truth(wait, workdir: Path, hz: int) -> Path:
    """`perf record -g` of every CPU for as long as wait() waits, stopped: its data file."""
    data = workdir / "truth.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", str(hz), "-a",
                             "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait()
    perf.send_signal(2)
    perf.wait()
    return data


def on_stack_ns(pid: int, data: Path, groups: dict[str, str]) -> tuple[Counter, int]:
    """CPU ns of the unprobed server's samples with a function whose mangled
    name holds groups[g] anywhere on the stack, per group g (each sample
    counted once in a group), and of all its samples: the functions' CPU
    with their callees'. Read here, not by mysqlprobe's own reader of its
    bursts."""
    script = subprocess.Popen(["perf", "script", "-i", str(data), "--pid", str(pid), "-F", "period,ip,sym",
                               "--no-demangle"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ns: Counter = Counter()
    stack: list[str] = []
    period = total = 0
    assert script.stdout is not None

    def count() -> None:
        for g, part in groups.items():
            if any(part in frame for frame in stack):
                ns[g] += period

    for line in script.stdout:
        if line.startswith("\t"):  # a frame: address, then symbol
            stack.append(line.split(None, 1)[-1])
        elif line.strip().isdigit():  # a sample's period: the frames follow
            count()
            total += period
            period, stack = int(line), []
    count()
    total += period
    script.wait()
    data.unlink()
    return ns, total


# --- the wall-time truth: where an unprobed load's threads' time went -------

SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)")
KERNEL_DSO = "[kernel.kallsyms]"


def _frames(lines: list[str]) -> list[str]:
    """A perf script sample's frames (leaf first in the text), root first, as
    mysqlprobe's stacks name them: kernel frames end in _[k]."""
    out = []
    for line in reversed(lines):
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        sym, _, dso = parts[1].rpartition(" (")
        sym = sym.split("+0x")[0] or "[unknown]"
        out.append(sym + "_[k]" if dso.startswith(KERNEL_DSO) else sym)
    return out


def _samples(text: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(header, frames root first) of each sample of a perf script's output."""
    header, lines = None, []
    for line in text:
        if line.startswith("\t"):
            lines.append(line)
        elif line.strip():
            if header is not None:
                yield header, _frames(lines)
            header, lines = line, []
    if header is not None:
        yield header, _frames(lines)


def _script(data: Path, fields: str, *options: str) -> Iterator[str]:
    """The lines of `perf script` of a data file, its fields those named;
    no inlined function as a frame of its own (with DWARF stacks perf adds
    them; mysqlprobe's stacks, symbolized by address, have none: a mutex
    entered inline in log_write_up_to would be a latch there, the redo log here)."""
    script = subprocess.Popen(["perf", "script", "-i", str(data), "-F", fields, "--no-inline", *options],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert script.stdout is not None
    yield from script.stdout
    script.wait()


@dataclass
class WallTruth:
    """An unprobed load's server threads' time by stack: CPU (perf cpu-clock
    samples, ns by their periods) and off CPU (perf's sched_switch events,
    each switch-out timed to the thread's switch-in: blocked, or runnable
    and waiting for a CPU), per thread id. A thread's waits of a kind none of
    whose switches was sampled have no stack: their time is unsampled (an
    idle connection's one long wait, mostly), in no mechanism."""

    on_cpu: dict[int, Counter] = field(default_factory=dict)     # tid -> stack (root first, ';') -> ns
    off_cpu: dict[int, Counter] = field(default_factory=dict)    # tid -> stack -> ns; leaf [waiting for a CPU]
    unsampled: dict[int, int] = field(default_factory=dict)     # tid -> ns off CPU with no stack sampled

    def load_threads(self) -> set[int]:
        """The threads whose stacks ran a connection's loop."""
        def connection(stacks: Counter) -> bool:
            return any(M.frame_name(f) in CONNECTION_FRAMES for s in stacks for f in s.split(";"))
        return {tid for threads in (self.on_cpu, self.off_cpu) for tid, stacks in threads.items() if connection(stacks)}

    def unsampled_ns(self) -> int:
        """The load's threads' time off CPU with no stack sampled."""
        return sum(self.unsampled.get(tid, 0) for tid in self.load_threads())

    def mechanisms(self) -> dict[str, float]:
        """ns by mechanism over the load's threads, each stack charged as
        mysqlprobe's account charges it (analysis/mechanisms.py); idle and
        probes' parts among them."""
        load = self.load_threads()
        out: dict[str, float] = defaultdict(float)
        for off, threads in ((False, self.on_cpu), (True, self.off_cpu)):
            for tid, stacks in threads.items():
                for stack, ns in stacks.items() if tid in load else ():
                    charge, _ = M.of_folded("thread;" + stack, off_cpu=off)
                    out[charge.mechanism] += ns
        return out


SHM = Path("/dev/shm")
CPU_RECORD = "perf record -g -e cpu-clock -F 999 -a"
SWITCH_RECORD = "perf record -g -e sched:sched_switch -c N --no-period --switch-events -a"
# the switch-outs' user stacks unwound by DWARF (.eh_frame): through glibc, which keeps no
# frame pointers and, in select(), holds another value in %rbp, where -g's stacks stop
SWITCH_STACKS = {"fp": ["-g"], "dwarf": ["--call-graph", "dwarf,16384"]}
# before 2026-11-28 20:00 the CPU samples were per task (-p PID), and so was the switch record
# (results keep its command): per-task events cost at every context switch of the task
TASK_CPU_RECORD = "perf record -g -e cpu-clock -F 999 -p PID"
OLD_SWITCH_RECORD = "perf record -g -e sched:sched_switch -a"   # before 2026-11-28: its switch-ins lost
# how a wait is timed; against the kernel's schedstat for one thread through three
# builds (wall less on-CPU): from the tracepoint +16-17%, from the switch-out record 0-6% under
SWITCH_TIMING = "from perf's switch-out record to its switch-in"
OLD_SWITCH_TIMING = "from the sched_switch tracepoint to the switch-in"   # before 2026-11-28 13:30


def switch_record(stacks: str = "fp", every: int | None = None) -> str:
    """The switch record's command as a section names it: N written out if one for all runs."""
    command = SWITCH_RECORD.replace("-g ", f"{' '.join(SWITCH_STACKS[stacks])} ", 1)
    return command if every is None else command.replace("-c N", f"-c {every}")


def switch_truth(result: dict) -> str:
    """The off-CPU truth a bench result was recorded with, in words for its section."""
    return (f"`{result.get('switch_record', OLD_SWITCH_RECORD)}`, each wait of a server thread timed "
            f"{result.get('switch_timing', OLD_SWITCH_TIMING)}")


def cpu_truth(result: dict) -> str:
    """The on-CPU truth a bench result was recorded with, as a command."""
    return f"`{result.get('cpu_record', TASK_CPU_RECORD)}`"


@dataclass
class Waits:
    """One thread's waits of one kind (blocked, or runnable and waiting for
    a CPU): all of them timed, and those whose switch-out was sampled with
    its stack."""

    total_ns: int = 0
    sampled: Counter = field(default_factory=Counter)   # stack -> ns of the sampled waits

    def by_stack(self) -> Counter:
        """The total spread over the sampled stacks by their waits' shares (a
        ratio estimate: every Nth switch is sampled, whatever it waits for);
        none if no switch was (the total is then unsampled_ns)."""
        seen = sum(self.sampled.values())
        return Counter({stack: round(ns * self.total_ns / seen) for stack, ns in self.sampled.items()} if seen else {})

    @property
    def unsampled_ns(self) -> int:
        return 0 if self.sampled else self.total_ns


class WallRecorder:
    """Two CPU-wide perf records beside an unprobed load, read for the
    server's threads alone: its CPU samples, and the context switches: perf's
    own switch records (--switch-events) for every switch, out and back in,
    a wait timed from the one to the other (the out record says whether the
    thread was preempted, still runnable); and the sched_switch tracepoint
    at every Nth switch-out of a CPU (-c N), with the stack and the state
    it left in. A thread's blocked time and its time waiting for a CPU are
    each spread over its sampled stacks of that kind.

    Why CPU-wide: per-task events (-p PID) cost the kernel at each context
    switch of the task; under 8 sysbench clients they took a quarter of the
    rows away with the CPU samples alone. Why the switch-ins from perf's
    switch records: on this VM the tracepoint records no switch out of the
    idle task on CPU1, so a thread woken onto an idle CPU1 has no
    tracepoint switch-in (17 against 1,752 switch-outs of one build). Why
    every Nth stack: walking a stack at every switch of an OLTP load slowed
    it by a fifth; every 11th adds nothing measurable to the switch records,
    which themselves cost it 10-16% (bench/wall.py's SYSBENCH_STACK_EVERY)."""

    def __init__(self, pid: int, workdir: Path, hz: int = 999, switch_stacks: str = "fp", every: int = 1):
        """switch_stacks: how the switch-outs' stacks are walked, "fp" or
        "dwarf" (copies 16 KB of stack a switch: for loads of few switches);
        every: the tracepoint's period, one stack each `every` switches of a CPU."""
        self.pid = pid
        # in memory where there is a tmpfs: its hundreds of MB (DWARF stacks) written back to
        # the disk would slow the fsyncs of the run after this one
        self.data_dir = Path(tempfile.mkdtemp(dir=SHM if SHM.is_dir() else workdir))
        self.cpu_data, self.switch_data = self.data_dir / "wall-cpu.data", self.data_dir / "wall-switch.data"
        self.procs = [subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", str(hz), "-a",
                                        "-o", str(self.cpu_data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                      subprocess.Popen(["perf", "record", "-q", *SWITCH_STACKS[switch_stacks], "-e",
                                        "sched:sched_switch", "-c", str(every), "--no-period", "-a",
                                        "--switch-events", "-o", str(self.switch_data)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)]

    def stop(self) -> WallTruth:
        for p in self.procs:
            p.send_signal(2)
        for p in self.procs:
            p.wait()
        truth = WallTruth()
        for header, frames in _samples(_script(self.cpu_data, "pid,tid,period,ip,sym,dso")):
            pid, tid, period = _ids(header) + (int(header.split()[1]),)
            if pid == self.pid:
                truth.on_cpu.setdefault(tid, Counter())[";".join(frames)] += period
        switches = _script(self.switch_data, "pid,tid,time,event,trace,ip,sym,dso", "--show-switch-events")
        for tid, waits in waits_by_thread(switches, self.pid).items():
            off = truth.off_cpu.setdefault(tid, Counter())
            for kind in waits.values():
                off.update(kind.by_stack())
                truth.unsampled[tid] = truth.unsampled.get(tid, 0) + kind.unsampled_ns
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return truth


def _ids(header: str) -> tuple[int, int]:
    """(pid, tid) of a perf script line that begins with them as pid/tid."""
    pid, _, tid = header.split()[0].partition("/")
    return int(pid), int(tid)


def waits_by_thread(text: Iterable[str], server: int) -> dict[int, dict[bool, Waits]]:
    """tid -> (preempted? -> its waits) of the server's threads, from a perf
    script of switch records and sampled sched_switch tracepoints."""
    out: dict[int, dict[bool, Waits]] = defaultdict(lambda: {False: Waits(), True: Waits()})
    leaving: dict[int, str] = {}                          # tid -> the stack its sampled switch-out saw
    away: dict[int, tuple[float, bool, str | None]] = {}  # tid -> when it left, preempted?, the stack if sampled
    for header, frames in _samples(text):
        pid, tid = _ids(header)
        if pid != server:
            continue
        at = float(header.split(":")[0].split()[-1])
        if "PERF_RECORD_SWITCH" in header:
            if " OUT" in header:
                # the wait starts at the switch itself, not at the tracepoint before it:
                # between them perf took the sample and walked its call chain (5-30 us)
                away[tid] = (at, " preempt " in header, leaving.pop(tid, None))
            elif tid in away:
                t0, preempted, stack = away.pop(tid)
                waits = out[tid][preempted]
                ns = round((at - t0) * 1e9)
                waits.total_ns += ns
                if stack is not None:
                    waits.sampled[stack] += ns
            continue
        m = SWITCH.search(header)
        if not m or int(m.group(1)) != tid or m.group(2) == "X":
            continue
        user = [f for f in frames if not f.endswith("_[k]")]
        kernel = [f for f in frames if f.endswith("_[k]") and not f.startswith(("__traceiter", "__schedule",
                                                                                 "schedule_"))]
        leaving[tid] = ";".join(user + ([WAITING_FOR_CPU] if m.group(2).startswith("R") else kernel))
    return out


# --- a build's phases timed at their functions' edges ---------------------------

PHASE_TIMER = "bpftrace uprobes and uretprobes on row_merge_build_indexes and its phase functions"
STOP_TRIES, STOP_WAIT_S = 3, 10.0


@functools.lru_cache(maxsize=8)
def _local_symbols(exe: str, names: frozenset[str]) -> dict[str, str]:
    """name -> the binary's symbol for each function named (C++ mangled, static ones too);
    read once a binary (two passes of nm, 0.1 s on 10.2.11), not once a build."""
    raw = subprocess.run(["nm", "-p", "--defined-only", exe], capture_output=True, text=True, check=True).stdout
    plain = subprocess.run(["nm", "-p", "-C", "--defined-only", exe], capture_output=True, text=True, check=True).stdout
    out: dict[str, str] = {}
    for mangled, demangled in zip(raw.splitlines(), plain.splitlines()):
        name = demangled.split(" ", 2)[-1].split("(")[0]
        if name in names and name not in out:
            out[name] = mangled.split(" ", 2)[-1]
    return out


class PhaseTimer:
    """The phases of an index build timed where they begin and end: bpftrace
    on the build function and each phase function, an entry and a return
    probe each (about ten hits a build, nothing a row). A phase's wall time
    is the time its function was the innermost phase open on the building
    thread (as the tool charges a stack to its innermost phase function);
    the build's own time outside every phase is `rest`."""

    def __init__(self, pid: int, exe: str, build: str, phases: dict[str, str], rest: str):
        symbols = _local_symbols(exe, frozenset({build, *phases}))
        found = [f for f in phases if f in symbols]   # 10.1 has no FlushObserver
        self.labels = [rest] + [phases[f] for f in found]
        probes = [(i, symbols[f]) for i, f in enumerate([build] + found)]
        # BEGIN runs once every probe is attached: "Attaching N probes..." comes before they are
        program = 'BEGIN { printf("ready\\n"); } ' + " ".join(
            f'uprobe:{exe}:{sym} {{ printf("E %d %d %lld\\n", {i}, tid, nsecs); }} '
            f'uretprobe:{exe}:{sym} {{ printf("R %d %d %lld\\n", {i}, tid, nsecs); }}'
            for i, sym in probes)
        # -p: the probes go into that process alone. A predicate on pid would leave them in every
        # process of the binary, their uretprobe trampolines on the stacks of the bench's other
        # builds, where perf's DWARF unwinding stops
        self.proc = subprocess.Popen(["bpftrace", "-p", str(pid), "-e", program], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
        else:
            raise RuntimeError("bpftrace did not attach its probes")

    def stop(self) -> dict[str, float]:
        """Each phase's share of the builds' wall time (rest included)."""
        out = ""
        for _ in range(STOP_TRIES):   # an interrupt can go unheeded (seen once in 90 stops): again, then more firmly
            self.proc.send_signal(2)
            try:
                out, _ = self.proc.communicate(timeout=STOP_WAIT_S)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            self.proc.terminate()
            out, _ = self.proc.communicate(timeout=STOP_WAIT_S)
        events = [(kind, int(i), int(tid), int(ts)) for kind, i, tid, ts in
                  (line.split() for line in out.splitlines() if line[:2] in ("E ", "R "))]
        return innermost_shares(events, self.labels)


def innermost_shares(events: list[tuple[str, int, int, int]], labels: list[str]) -> dict[str, float]:
    """Each label's share of the time some label was open, charged to the
    innermost one open on its thread; events ("E" entry or "R" return,
    label index, thread id, ns), in any order."""
    open_phases: dict[int, list[int]] = defaultdict(list)
    last: dict[int, int] = {}
    ns: Counter = Counter()
    for kind, i, tid, ts in sorted(events, key=lambda e: e[3]):
        stack = open_phases[tid]
        if stack:
            ns[labels[stack[-1]]] += ts - last[tid]
        last[tid] = ts
        if kind == "E":
            stack.append(i)
        elif stack:
            stack.pop()
    total = sum(ns.values())
    return {label: n / total for label, n in ns.items()} if total else {}


SLOW_LOG = ("slow_query_log_file", "long_query_time", "log_slow_admin_statements", "slow_query_log")


@contextmanager
def server_timed(conn, path: Path) -> Iterator[None]:
    """The server's own slow query log at long_query_time 0 into `path` for
    the sessions opened in the block, DDL such as CREATE INDEX with the rest:
    each statement's Query_time as the server timed it, an outside clock on
    runs the tool times itself. The settings are put back after."""
    with conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(f"@@{v}" for v in SLOW_LOG))
        before = cur.fetchone()
        for variable, value in zip(SLOW_LOG, (str(path), 0, 1, 1)):
            cur.execute(f"SET GLOBAL {variable} = %s", (value,))
    try:
        yield
    finally:
        with conn.cursor() as cur:
            for variable, value in reversed(list(zip(SLOW_LOG, before))):
                cur.execute(f"SET GLOBAL {variable} = %s", (value,))


def server_seconds(path: Path, statement: str) -> list[float]:
    """The Query_time of each statement in a slow log that begins with
    `statement`, in the order the server ran them."""
    times, query_time = [], None
    for line in path.read_text().splitlines():
        if line.startswith("# Query_time:"):
            query_time = float(line.split()[2])
        elif query_time is not None and line.startswith(statement):
            times.append(query_time)
            query_time = None
    return times


def bench_timed_by_servers(servers: list[tuple[int, str, object]], cell: str, rows: int, repeats: int,
                           out: Path, statement: str) -> tuple[dict, list[list[float]]]:
    """`lab bench --pid A,B` on two running servers (pid, socket, connection)
    into `out`, each server timing its statements in a slow log there, then
    compare on the two: compare's JSON, and each side's unprobed runs (the
    statements beginning with `statement`, the first of each repeat's) in
    ns a row as its server timed them."""
    out.mkdir(parents=True, exist_ok=True)
    logs = [out / f"slow-{side}.log" for side in "ab"]
    with ExitStack() as stack:
        for (_, _, conn), log in zip(servers, logs):
            stack.enter_context(server_timed(conn, log))
        done = subprocess.run([MYSQLPROBE, "lab", "bench", "--pid", ",".join(str(p) for p, _, _ in servers),
                               "--socket", ",".join(s for _, s, _ in servers), "--cells", cell, "--rows", str(rows),
                               "--repeats", str(repeats), "-q", "-o", str(out)],
                              capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"lab bench failed: {done.stderr[-2000:]}")
    cmp = subprocess.run([MYSQLPROBE, "compare", str(out / "a" / cell), str(out / "b" / cell), "--json"],
                         capture_output=True, text=True)
    if cmp.returncode != 0:
        raise RuntimeError(f"compare failed: {cmp.stderr}")
    unprobed = []
    for log in logs:
        runs = server_seconds(log, statement)
        if len(runs) != repeats * RUNS_PER_REPEAT:
            raise RuntimeError(f"{log}: {len(runs)} statements timed, not {repeats * RUNS_PER_REPEAT}: {runs}")
        unprobed.append([s * 1e9 / rows for s in runs[::RUNS_PER_REPEAT]])
    return json.loads(cmp.stdout), unprobed


def tied_with_top(mech_pairs: list[dict[str, float]], per: dict[str, float], unnamed: Iterable[str] = ()) -> list[str]:
    """The mechanisms (but `unnamed`) that alternated pairs cannot rank below
    the top one, from each mechanism's B - A per pair (mech_pairs) and their
    means (per): the top first, then each whose paired difference from it
    (in the top's direction) has a 95% interval holding 0. Two mechanisms of about equal
    size (a 32 MB buffer pool's free page search and latch waits: perf
    ranked them one way in one repeat, the other way in the next) are both
    the truth's top; the tool naming either is not wrong."""
    named = {k: v for k, v in per.items() if k not in set(unnamed)}
    top = max(named, key=lambda k: abs(named[k]))
    sign = 1.0 if named[top] >= 0 else -1.0
    tied = [top]
    for name in sorted(named, key=lambda k: -abs(named[k])):
        if name == top or len(mech_pairs) < 2:
            continue
        gaps = [sign * (p[top] - p[name]) for p in mech_pairs]
        half = t95(len(gaps) - 1) * statistics.stdev(gaps) / len(gaps) ** 0.5
        if statistics.fmean(gaps) - half <= 0:
            tied.append(name)
    return tied
