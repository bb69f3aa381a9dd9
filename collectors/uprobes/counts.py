"""What the latency program's maps hold for one read: per probe its calls,
times and histograms (corrected and raw), per partition and per caller,
and per statement shape."""

from __future__ import annotations

from dataclasses import dataclass, field

from mysqlprobe.probes.abi import ProbeStats
from mysqlprobe.probes.histogram import Histogram


@dataclass
class PartCounts:
    """One probe's counts for one partition."""

    calls: int
    total_ns: int
    hist: Histogram
    corrected_ns: int = 0
    chist: Histogram = Histogram()


@dataclass
class ProbeCounts:
    """One probe's counts read from the BPF maps: calls, times and histograms."""

    calls: int = 0
    total_ns: int = 0
    nested_hits: int = 0
    hist: Histogram = Histogram()
    corrected_ns: int = 0
    chist: Histogram = Histogram()
    partitions: dict[int, PartCounts] = field(default_factory=dict)
    # (tid, probed caller's index or None) -> (calls, total_ns, corrected_ns)
    callers: dict[tuple[int, int | None], tuple[int, int, int]] = field(default_factory=dict)
    preempted_ns: int = 0     # the calls' waits for a CPU, left out of their times
    preempted_calls: int = 0  # the calls that waited


def probe_counts(value: ProbeStats) -> ProbeCounts:
    return ProbeCounts(value.calls, value.total_ns, value.nested_hits, Histogram.of_slots(value.hist),
                       value.corrected_ns, Histogram.of_slots(value.chist),
                       preempted_ns=value.preempted_ns, preempted_calls=value.preempted_calls)


@dataclass
class StatementCounts:
    """One statement shape: executions that began and ended in the window,
    their latency, the probe hits and calibrated probe cost inside them, and
    the probed calls inside them by (probe, probed caller, stage they began in)."""

    command: int
    text: bytes
    text_complete: bool
    executions: int
    total_ns: int
    hist: Histogram
    probe_hits: int
    probe_cost_ns: int
    # (probe, probed caller or None, P_S stage key or None) -> (calls, total_ns, corrected_ns)
    calls: dict[tuple[int, int | None, int | None], tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class Snapshot:
    """Everything the probes' maps held at one read."""

    probes: dict[int, ProbeCounts]
    counters: dict[str, int]
    statements: dict[int, StatementCounts] = field(default_factory=dict)
