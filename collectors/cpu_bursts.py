"""CPU bursts: what a short function costs per call, from CPU samples taken
while the probes are off.

A function of tens of nanoseconds costs less than its probes' calibration
can be trusted to (a probe hit costs about 1.5 us, and 1.1-1.9x that inside
a large server). Sampling sees the function as it runs unprobed: in every
other ordinary off-phase of the duty cycles a `perf record -a` without
stacks samples every CPU at BURST_FREQUENCY, and the samples that land in a probed
function's own code, each worth its period of CPU time, sum to the time the
function ran there. The analysis divides that by the calls the off-phases
held (the probes' calls per row times the rows the server changed in them).

The quiet off-phases stay clean (this sampler is off there), so what the
bursts cost the load is inside the measured slowdown. They start once a
short function (a partition lookup, or a function named with --probe) has
been called: a load that calls none, such as OLTP on plain tables, pays
nothing for them."""

from __future__ import annotations

import os
import shutil
from collections import Counter

from mysqlprobe.collectors.base import CollectorUnavailable, Cost, Facts, Section
from mysqlprobe.collectors.perf import read_perf_script
from mysqlprobe.collectors.perf_record import PerfProcessCollector, PerfRecorder, PerfUnavailable
from mysqlprobe.collectors.workdir import work_dir

# Hz per CPU. A sample costs the target about 20 us on a VM of this kind
# (one INSERT ... SELECT thread: 1.12x slower at 4999 Hz, 1.01-1.05x at
# 1999 Hz); on in every other ordinary off-phase, about a fifth of the
# window, that is about 1% of the load.
BURST_FREQUENCY = 1999


def samples_by_symbol(lines) -> tuple[Counter, Counter]:
    """From `perf script -F period,ip,sym --no-demangle` lines: per symbol
    ("" where perf had none), its samples and the CPU ns they stand for."""
    samples, ns = Counter(), Counter()
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        sym = parts[2].strip() if len(parts) == 3 else ""
        samples[sym] += 1
        ns[sym] += int(parts[0])
    return samples, ns


def self_time(lines, symbols: set[str]) -> tuple[tuple[dict[str, dict], int], int]:
    """Per symbol of `symbols`, its samples and their CPU ns, and the CPU ns
    of all the samples read (the target's); and how many those were."""
    samples, ns = samples_by_symbol(lines)
    return ({s: {"samples": samples[s], "self_ns": ns[s]} for s in symbols}, sum(ns.values())), sum(samples.values())


class CpuBurstCollector(PerfProcessCollector):
    """Samples without stacks, on in the ordinary off-phases only (resume()
    and pause() from the duty cycles)."""

    name = "cpu_bursts"
    can_burst = True
    unavailable_note = "CPU bursts: {error}; short functions' costs come from the probes alone"

    def __init__(self, pid: int, symbols: list[str], frequency: int = BURST_FREQUENCY):
        super().__init__()
        self.pid, self.symbols, self.frequency = pid, sorted(set(symbols)), frequency
        self._tmp: str | None = None
        self.switch_failures = 0

    def new_recorder(self) -> PerfRecorder:
        self._tmp = work_dir("bursts")
        return PerfRecorder(self.pid, os.path.join(self._tmp, "bursts.data"), None, self.frequency, start_off=True)

    def prepare(self) -> None:
        self.wait_recording()
        if not self.recorder.controlled:  # it would sample all along, probes on or not
            self.recorder.stop()
            raise CollectorUnavailable("perf record does not take --control",
                                       "CPU bursts: this perf cannot switch sampling on and off; short "
                                       "functions' costs come from the probes alone")

    def start(self) -> None:
        self.recorder.window_opens()

    def _turn(self, on: bool) -> None:
        if not self.recorder.sample(on):
            self.switch_failures += 1

    def stop(self) -> None:
        self.pause()
        if self.recorder and self.recorder.proc:
            self.recorder.stop()

    def collect(self, facts: Facts) -> Section:
        self.stop()
        if self.recorder.error:
            return self.unavailable("unavailable", self._note(f"perf record failed: {self.recorder.error}"))
        try:
            (functions, ns), samples = read_perf_script(self.recorder.perf_data, self.pid, "period,ip,sym",
                                                        lambda lines: self_time(lines, set(self.symbols)),
                                                        "--no-demangle")
        except PerfUnavailable as e:
            return self.unavailable("unavailable", self._note(str(e)))
        record = {"status": "collected", "event": "cpu-clock", "frequency_hz": self.frequency,
                  "on_s": round(self.on_s, 6), "samples": samples, "target_cpu_s": round(ns / 1e9, 6),
                  "switch_failures": self.switch_failures,
                  "functions": {s: f for s, f in functions.items() if f["samples"]},
                  "command": " ".join(self.recorder.command())}
        cost = Cost(cpu_s=self.recorder.window_cpu_s, method="perf's own CPU time in the window; what sampling costs the "
                    "target falls in the ordinary off-phases, and so in the measured slowdown")
        return Section(self.name, {self.name: record}, list(self.notes), cost)

    def _note(self, reason: str) -> str:
        self.notes.append(f"CPU bursts: {reason}; short functions' costs come from the probes alone")
        return reason

    def close(self) -> None:
        if self.recorder:
            self.recorder.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
