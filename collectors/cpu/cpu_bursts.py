"""CPU bursts: what a short function costs per call, from CPU samples taken
while the probes are off.

A function of tens of nanoseconds costs less than its probes' calibration
can be trusted to (a probe hit costs about 1.5 us, and 1.1-1.9x that inside
a large server). Sampling sees the function as it runs unprobed: in every
other ordinary off-phase of the duty cycles a `perf record -a` samples
every CPU at BURST_FREQUENCY, and the samples that land in a probed
function's own code, each worth its period of CPU time, sum to the time the
function ran there. The analysis divides that by the calls the off-phases
held (the probes' calls per row times the rows the server changed in them).

A function's own code leaves its callees out: 17 ns a call for
page_cur_insert_rec_low on 10.2.11, whose calls take about 100 ns with
theirs. Where the binary keeps frame pointers the samples take their
stacks too (the kernel walks the frame chain), and each stage gets the
samples with one of its functions anywhere on the stack, each sample
counted once: its CPU with its callees. (A sample in a callee's first or
last instructions, before its frame is pushed or after it is popped,
skips the caller: a few percent of a short callee's samples at most.)

The quiet off-phases stay clean (this sampler is off there), so what the
bursts cost the load is inside the measured slowdown. They start once a
short function (a partition lookup, or a function named with --probe) has
been called: a load that calls none, such as OLTP on plain tables, pays
nothing for them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from mysqlprobe.collectors.target.elf import ElfImage
    from mysqlprobe.collectors.uprobes.session import ProbeSpec

from typing import Any

import os
from collections import Counter

from mysqlprobe.collectors.base import CollectorUnavailable, Cost, Facts, Phases, Section
from mysqlprobe.collectors.cpu.perf import read_perf_script
from mysqlprobe.collectors.cpu.perf_record import (PerfProcessCollector, PerfRecorder, PerfUnavailable, Unwinding,
                                               choose_unwinding)
from mysqlprobe.collectors.workdir import work_dir
from dataclasses import dataclass

# Hz per CPU. A sample costs the target about 20 us on a VM of this kind
# (one INSERT ... SELECT thread: 1.12x slower at 4999 Hz, 1.01-1.05x at
# 1999 Hz); on in every other ordinary off-phase, about a fifth of the
# window, that is about 1% of the load.
BURST_FREQUENCY = 1999


def sample_stacks(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(period, symbols from the sampled one outwards) per sample of `perf
    script -F period,ip,sym --no-demangle`: one line a sample without
    stacks, or a line of the period and a tab-indented line a frame ("" for
    a frame perf could not name)."""
    period, frames = None, []
    for line in lines:
        if line.startswith("\t"):
            if period is not None:
                parts = line.split(None, 1)
                frames.append(_named(parts[1]) if len(parts) == 2 else "")
            continue
        parts = line.split(None, 2)
        if not parts or not parts[0].isdigit():
            continue
        if period is not None:
            yield period, frames
        period = int(parts[0])
        frames = [_named(parts[2]) if len(parts) == 3 else ""] if len(parts) >= 2 else []
    if period is not None:
        yield period, frames


def _named(sym: str) -> str:
    sym = sym.strip()
    return "" if sym == "[unknown]" else sym


@dataclass
class BurstTime:
    """What the CPU bursts sampled: per function and per stage, and in all."""

    functions: dict[str, dict[str, Any]]  # mangled symbol: its own samples and CPU ns
    stages: dict[str, dict[str, Any]]     # stage: samples with one of its functions on the stack, and their ns
    target_ns: int
    samples: int


def burst_time(lines: Iterable[str], stages: dict[str, list[str]]) -> tuple[BurstTime, int]:
    """burst_time_of the samples of `perf script -F period,ip,sym` lines."""
    return burst_time_of(((period, frames, 1) for period, frames in sample_stacks(lines)), stages)


def burst_time_of(samples: Iterable[tuple[int, list[str], int]], stages: dict[str, list[str]]) -> tuple[BurstTime, int]:
    """The samples in each function's own code and, where they have stacks,
    those with one of a stage's functions anywhere on the stack. samples:
    (period in ns, mangled symbols from the sampled one outwards, how many)."""
    owner = {sym: stage for stage, syms in stages.items() for sym in syms}
    own: Counter[str] = Counter()
    own_ns: Counter[str] = Counter()
    on_stack: Counter[str] = Counter()
    on_stack_ns: Counter[str] = Counter()
    total_ns = count = 0
    for period, frames, n in samples:
        count += n
        total_ns += period * n
        if frames and frames[0] in owner:
            own[frames[0]] += n
            own_ns[frames[0]] += period * n
        for stage in {owner[f] for f in frames if f in owner}:
            on_stack[stage] += n
            on_stack_ns[stage] += period * n
    functions = {s: {"samples": own[s], "self_ns": own_ns[s]} for s in owner if own[s]}
    staged = {s: {"samples": on_stack[s], "ns": on_stack_ns[s]} for s in stages if on_stack[s]}
    return BurstTime(functions, staged, total_ns, count), count


def burst_stacks(image: ElfImage) -> Unwinding | None:
    """Frame-pointer stacks where the binary keeps them, else none: a DWARF
    stack copies kilobytes a sample, too dear to take beside the load."""
    unwinding = choose_unwinding(image)
    return unwinding if unwinding.mode == "fp" else None


def burst_stages(specs: Iterable[ProbeSpec]) -> dict[str, list[str]]:
    """The probed functions' mangled symbols by stage (probe:NAME for a
    --probe function, as the analysis names it)."""
    stages: dict[str, list[str]] = {}
    for spec in specs:
        stage = stages.setdefault(spec.stage or f"probe:{spec.symbol.name}", [])
        if spec.symbol.mangled not in stage:
            stage.append(spec.symbol.mangled)
    return stages


class CpuBurstCollector(PerfProcessCollector):
    """Samples (with frame-pointer stacks where the binary keeps them), on in
    the ordinary off-phases only (resume() and pause() from the duty cycles)."""

    name = "cpu_bursts"
    optional = True
    # its perf begins before the window's and is collected after it: each perf's
    # CPU (its children's between its start and end) then leaves the other's out
    phases = Phases(begin=0, prepare=20, start=40, collect=90)
    can_burst = True
    unavailable_note = "CPU bursts: {error}; short functions' costs come from the probes alone"

    def __init__(self, pid: int, stages: dict[str, list[str]], frequency: int = BURST_FREQUENCY,
                 stacks: Unwinding | None = None):
        # stages: stage -> the mangled symbols of its functions; stacks: frame pointers or None
        super().__init__()
        self.pid, self.stages, self.frequency, self.stacks = pid, stages, frequency, stacks
        self.switch_failures = 0

    def new_recorder(self) -> PerfRecorder:
        self._tmp = work_dir("bursts")
        return PerfRecorder(self.pid, os.path.join(self._tmp, "bursts.data"), self.stacks, self.frequency,
                            start_off=True)

    def prepare(self) -> None:
        self.wait_recording()
        if not self.perf.controlled:  # it would sample all along, probes on or not
            self.perf.stop()
            raise CollectorUnavailable("perf record does not take --control",
                                       "CPU bursts: this perf cannot switch sampling on and off; short "
                                       "functions' costs come from the probes alone")

    def start(self) -> None:
        self.perf.window_opens()

    def _turn(self, on: bool) -> None:
        if not self.perf.sample(on):
            self.switch_failures += 1

    def stop(self) -> None:
        self.pause()
        if self.recorder and self.recorder.proc:
            self.perf.stop()

    def collect(self, facts: Facts) -> Section:
        self.stop()
        if self.perf.error:
            return self.unavailable("unavailable", self._note(f"perf record failed: {self.perf.error}"))
        try:
            read, samples = read_perf_script(self.perf.perf_data, self.pid, "period,ip,sym",
                                             lambda lines: burst_time(lines, self.stages), "--no-demangle")
        except PerfUnavailable as e:
            return self.unavailable("unavailable", self._note(str(e)))
        record = {"status": "collected", "event": "cpu-clock", "frequency_hz": self.frequency,
                  "on_s": round(self.on_s, 6), "samples": samples, "target_cpu_s": round(read.target_ns / 1e9, 6),
                  "switch_failures": self.switch_failures, "functions": read.functions,
                  "stacks": self.stacks.describe() if self.stacks else None,
                  "command": " ".join(self.perf.command())}
        if self.stacks:
            record["stages"] = read.stages
        cost = Cost(cpu_s=self.perf.window_cpu_s, method="perf's own CPU time in the window; what sampling costs the "
                    "target falls in the ordinary off-phases, and so in the measured slowdown")
        return Section(self.name, {self.name: record}, list(self.notes), cost)

    def _note(self, reason: str) -> str:
        self.notes.append(f"CPU bursts: {reason}; short functions' costs come from the probes alone")
        return reason
