"""The truth the bench holds mysqlprobe's figures to: perf sampling every
CPU of an unprobed run, a function's CPU read off the stacks its samples
hold (its callees' with it), by this module's own reader of `perf script`;
and the wall time of an unprobed load's threads by stack, on CPU and off
it, from perf alone (WallRecorder); an index build's phases timed at
their functions' edges by bpftrace (PhaseTimer)."""

from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.flamegraphs.stacks import CONNECTION_FRAMES


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


def _samples(script: subprocess.Popen) -> Iterator[tuple[str, list[str]]]:
    """(header, frames root first) of each sample of a perf script's output."""
    assert script.stdout is not None
    header, lines = None, []
    for line in script.stdout:
        if line.startswith("\t"):
            lines.append(line)
        elif line.strip():
            if header is not None:
                yield header, _frames(lines)
            header, lines = line, []
    if header is not None:
        yield header, _frames(lines)
    script.wait()


@dataclass
class WallTruth:
    """An unprobed load's server threads' time by stack: CPU (perf cpu-clock
    samples, ns by their periods) and off CPU (perf's sched_switch events,
    each switch-out timed to the thread's switch-in: blocked, or runnable
    and waiting for a CPU), per thread id."""

    on_cpu: dict[int, Counter] = field(default_factory=dict)     # tid -> stack (root first, ';') -> ns
    off_cpu: dict[int, Counter] = field(default_factory=dict)    # tid -> stack -> ns; leaf [waiting for a CPU]

    def mechanisms(self) -> dict[str, float]:
        """ns by mechanism over the load's threads (their stacks ran a
        connection's loop), each stack charged as mysqlprobe's account
        charges it (analysis/mechanisms.py); idle and probes' parts among
        them."""
        def connection(stacks: Counter) -> bool:
            return any(M.frame_name(f) in CONNECTION_FRAMES for s in stacks for f in s.split(";"))
        load = {tid for threads in (self.on_cpu, self.off_cpu) for tid, stacks in threads.items() if connection(stacks)}
        out: dict[str, float] = defaultdict(float)
        for off, threads in ((False, self.on_cpu), (True, self.off_cpu)):
            for tid, stacks in threads.items():
                for stack, ns in stacks.items() if tid in load else ():
                    charge, _ = M.of_folded("thread;" + stack, off_cpu=off)
                    out[charge.mechanism] += ns
        return out


SWITCH_RECORD = "perf record -g -e sched:sched_switch -p PID --switch-events"
# the switch-outs' user stacks unwound by DWARF (.eh_frame): through glibc, which keeps no
# frame pointers and, in select(), holds another value in %rbp, where -g's stacks stop
SWITCH_STACKS = {"fp": ["-g"], "dwarf": ["--call-graph", "dwarf,16384"]}
DWARF_SWITCH_RECORD = SWITCH_RECORD.replace(" -g ", f" {' '.join(SWITCH_STACKS['dwarf'])} ", 1)
OLD_SWITCH_RECORD = "perf record -g -e sched:sched_switch -a"   # before 2026-11-28: its switch-ins lost
# how a wait is timed; against the kernel's schedstat for one thread through three
# builds (wall less on-CPU): from the tracepoint +16-17%, from the switch-out record 0-6% under
SWITCH_TIMING = "from perf's switch-out record to its switch-in"
OLD_SWITCH_TIMING = "from the sched_switch tracepoint to the switch-in"   # before 2026-11-28 13:30


def switch_truth(result: dict) -> str:
    """The off-CPU truth a bench result was recorded with, in words for its section."""
    return (f"`{result.get('switch_record', OLD_SWITCH_RECORD)}`, each wait of a server thread timed "
            f"{result.get('switch_timing', OLD_SWITCH_TIMING)}")


class WallRecorder:
    """Two perf records beside an unprobed load: its CPU samples (-p PID),
    and its threads' context switches (-p PID): the sched_switch tracepoint
    at each switch-out, with the stack and the state it left in, and
    perf's own switch records (--switch-events) for the switch itself,
    out and back in: a wait is timed from the one to the other. A
    CPU-wide record of sched_switch (-a) misses switches out of the idle
    task on some CPUs of this VM (a blocked thread's wake-up onto an idle
    CPU1: 17 switch-ins recorded against 1,752 switch-outs of one build),
    so its waits ran on until the thread's next switch-out, lost."""

    def __init__(self, pid: int, workdir: Path, hz: int = 999, switch_stacks: str = "fp"):
        """switch_stacks: how the switch-outs' stacks are walked, "fp" or
        "dwarf" (copies 16 KB of stack a switch: for loads of few switches)."""
        self.pid, self.cpu_data, self.switch_data = pid, workdir / "wall-cpu.data", workdir / "wall-switch.data"
        self.procs = [subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", str(hz), "-p", str(pid),
                                        "-o", str(self.cpu_data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                      subprocess.Popen(["perf", "record", "-q", *SWITCH_STACKS[switch_stacks], "-e",
                                        "sched:sched_switch", "-p", str(pid),
                                        "--switch-events", "-o", str(self.switch_data)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)]

    def stop(self) -> WallTruth:
        for p in self.procs:
            p.send_signal(2)
        for p in self.procs:
            p.wait()
        truth = WallTruth()
        cpu = subprocess.Popen(["perf", "script", "-i", str(self.cpu_data), "-F", "tid,period,ip,sym,dso"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for header, frames in _samples(cpu):
            tid, period = (int(x) for x in header.split()[:2])
            truth.on_cpu.setdefault(tid, Counter())[";".join(frames)] += period
        switches = subprocess.Popen(["perf", "script", "-i", str(self.switch_data), "-F",
                                     "tid,time,event,trace,ip,sym,dso", "--show-switch-events"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        leaving: dict[int, str] = {}              # tid -> the stack its last switch-out's tracepoint saw
        away: dict[int, tuple[float, str]] = {}   # tid -> when it left the CPU, and that stack
        for header, frames in _samples(switches):
            tid, at = int(header.split()[0]), float(header.split(":")[0].split()[-1])
            if "PERF_RECORD_SWITCH OUT" in header:
                # the wait starts at the switch itself, not at the tracepoint before it:
                # between them perf took the sample and walked its call chain (5-30 us)
                if tid in leaving:
                    away[tid] = (at, leaving.pop(tid))
                continue
            if "PERF_RECORD_SWITCH IN" in header:
                if tid in away:
                    t0, stack = away.pop(tid)
                    truth.off_cpu.setdefault(tid, Counter())[stack] += round((at - t0) * 1e9)
                continue
            m = SWITCH.search(header)
            if not m or int(m.group(1)) != tid or m.group(2) == "X":
                continue
            user = [f for f in frames if not f.endswith("_[k]")]
            kernel = [f for f in frames if f.endswith("_[k]") and not f.startswith(("__traceiter", "__schedule",
                                                                                     "schedule_"))]
            leaf = ["[waiting for a CPU]"] if m.group(2).startswith("R") else kernel
            leaving[tid] = ";".join(user + leaf)
        for data in (self.cpu_data, self.switch_data):
            data.unlink(missing_ok=True)
        return truth


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
