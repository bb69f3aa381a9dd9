"""The CPU samples by slice of time (the BPF sampler's slices_file): what
report.html's timeline brush draws the flame graph of. The file is folded
stacks under one more root frame, the slice's number; a slice's time is
its number times the capture's slice_s from slices_origin_s, less the
window's opening (both on the host's CLOCK_MONOTONIC)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mysqlprobe.analysis.model import Profile
from mysqlprobe.flamegraphs.folded import Folded

MAX_SLICES = 400   # what a page carries: adjacent slices are merged down to this many
# cpu_profile.dropped's count of samples the slices' map was too full to take (probes/abi.py's SAMPLE_SLICES_FULL)
SLICES_FULL = "samples without their time"


@dataclass(frozen=True)
class TimeSlice:
    start_s: float     # from the window's opening
    seconds: float
    stacks: Counter[str] = field(default_factory=Counter)   # "thread;frame;frame" -> samples

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())


@dataclass(frozen=True)
class TimeSlices:
    """The window's CPU samples in slices of time, those with samples, in
    time order; untimed: samples the file holds under no slice (its
    bounded read's overflow stack)."""

    slice_s: float
    slices: tuple[TimeSlice, ...]
    untimed: int = 0

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.slices)

    def between(self, start_s: float, end_s: float) -> Counter[str]:
        """The samples of the slices that overlap [start_s, end_s)."""
        out: Counter[str] = Counter()
        for s in self.slices:
            if s.start_s < end_s and s.start_s + s.seconds > start_s:
                out.update(s.stacks)
        return out

    def merged(self, most: int = MAX_SLICES) -> TimeSlices:
        """Adjacent slices merged k at a time, so that at most `most` are left."""
        if not self.slices:
            return self
        first, last = self.slices[0].start_s, self.slices[-1].start_s
        k = 1
        while (last - first) / (self.slice_s * k) + 1 > most:
            k *= 2
        if k == 1:
            return self
        width = self.slice_s * k
        groups: dict[int, TimeSlice] = {}
        for s in self.slices:
            g = int(round((s.start_s - first) / self.slice_s)) // k
            slot = groups.setdefault(g, TimeSlice(first + g * width, width))
            slot.stacks.update(s.stacks)
        return TimeSlices(width, tuple(groups[g] for g in sorted(groups)), self.untimed)


def time_slices(profile: Profile, by_time: Folded) -> TimeSlices | None:
    """The slices of a capture's slices_file, read; None where the capture
    does not place them in its window (no slice length, origin or window
    opening recorded)."""
    cpu = profile.stacks["cpu_profile"]
    opened = profile.window.start_monotonic_s
    if not cpu.slice_s or cpu.slices_origin_s is None or opened is None:
        return None
    slices: dict[int, TimeSlice] = {}
    untimed = 0
    for stack, count in by_time.stacks.items():
        number, _, rest = stack.partition(";")
        if not number.isdigit() or not rest:
            untimed += count
            continue
        i = int(number)
        start = cpu.slices_origin_s + i * cpu.slice_s - opened
        slices.setdefault(i, TimeSlice(round(start, 9), cpu.slice_s)).stacks[rest] += count
    return TimeSlices(cpu.slice_s, tuple(slices[i] for i in sorted(slices)), untimed)
