"""Folded stacks, the interchange format of FlameGraph and inferno: one line
per distinct stack, `root;caller;leaf count`, root first.

Written sorted, so the same samples always give the same file; read
leniently, as flamegraph.pl does, but the lines left out are counted and
reported rather than dropped in silence.

Read bounded: whatever a file holds, what is kept is at most LIMITS (a
line's length, a stack's frames, the distinct stacks and their frames in
all), so memory follows the limits, not the input. A stack deeper than the
limit keeps its leaf-most frames under one `[N frames cut]` root, as perf
keeps the innermost frames of a deep stack; the samples of stacks past the
limit on distinct stacks go to one `[more stacks than kept]` stack, so the
total stays whole. What was cut is counted in `Folded.cut`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from dataclasses import dataclass, field

from typing import Any, TYPE_CHECKING
if TYPE_CHECKING:
    from typing import TextIO


@dataclass(frozen=True)
class Limits:
    """What a read keeps. A real capture has hundreds of distinct stacks of
    under 128 frames (the kernel's perf_event_max_stack); these are two
    orders of magnitude above that and keep a worst-case input under the
    readers' memory ceiling (docs/faults.md)."""

    line_bytes: int = 64 << 10        # one stack line
    frames: int = 512                 # one stack
    stacks: int = 100_000             # distinct stacks
    total_frames: int = 500_000       # the frames of the distinct stacks, all told
    total_bytes: int = 32 << 20       # the text of the distinct stacks, all told
    count: int = 1 << 62              # one line's count (a larger one is not a sample count)


LIMITS = Limits()
OVERFLOW_STACK = "[more stacks than kept]"


@dataclass
class Cut:
    """What a bounded read left out or shortened, by reason."""

    long_lines: int = 0        # lines over the line limit, skipped
    deep_stacks: int = 0       # stacks over the frame limit, kept leaf-most
    overflow_samples: int = 0  # samples of stacks past the stack limits, kept as OVERFLOW_STACK

    def describe(self, limits: Limits = LIMITS) -> list[str]:
        out = []
        if self.long_lines:
            out.append(f"{self.long_lines} line(s) over {limits.line_bytes >> 10} KiB skipped")
        if self.deep_stacks:
            out.append(f"{self.deep_stacks} stack(s) over {limits.frames} frames kept to their "
                       f"{limits.frames} innermost")
        if self.overflow_samples:
            out.append(f"{self.overflow_samples} sample(s) of stacks past {limits.stacks:,} distinct stacks "
                       f"({limits.total_frames:,} frames, {limits.total_bytes >> 20} MiB) counted as '{OVERFLOW_STACK}'")
        return out


@dataclass
class Folded:
    """Folded stacks ("a;b;c" -> count), as FlameGraph and inferno read them."""

    stacks: Counter[Any] = field(default_factory=Counter)  # "a;b;c" -> count
    ignored: int = 0                                  # malformed lines read
    cut: Cut = field(default_factory=Cut)             # what a bounded read left out

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def add(self, frames: Iterable[str], count: int = 1) -> None:
        # ';' separates frames and ' ' ends the stack: neither may appear inside a frame
        names = [f.replace(";", ":").replace("\n", " ") for f in frames]
        key = ";".join(n.strip() or "[unknown]" for n in names)
        self.stacks[key] += count


def _shortened(stack: str, limits: Limits) -> str:
    frames = stack.split(";")
    if len(frames) <= limits.frames:
        return stack
    keep = limits.frames - 1
    return ";".join([f"[{len(frames) - keep} frames cut]"] + frames[-keep:])


def parse(lines: Iterable[str], limits: Limits = LIMITS) -> Folded:
    out = Folded()
    kept_frames = kept_bytes = 0
    for raw in lines:
        if len(raw) > limits.line_bytes:
            out.cut.long_lines += 1
            continue
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        stack, sep, count = line.rpartition(" ")
        if not sep or not stack or not count.isdigit() or len(count) > 19 or int(count) > limits.count:
            out.ignored += 1
            continue
        n = int(count)
        if stack not in out.stacks:
            if stack.count(";") >= limits.frames:
                out.cut.deep_stacks += 1
                stack = _shortened(stack, limits)
            depth = stack.count(";") + 1
            if stack not in out.stacks and (len(out.stacks) >= limits.stacks
                                            or kept_frames + depth > limits.total_frames
                                            or kept_bytes + len(stack) > limits.total_bytes):
                out.cut.overflow_samples += n
                stack = OVERFLOW_STACK
            elif stack not in out.stacks:
                kept_frames += depth
                kept_bytes += len(stack)
        out.stacks[stack] += n
    return out


def write(folded: Folded, stream: TextIO) -> None:
    for stack in sorted(folded.stacks):
        stream.write(f"{stack} {folded.stacks[stack]}\n")


def write_diff(before: Folded, after: Folded, stream: TextIO) -> None:
    """`stack count_before count_after`, the input of flamegraph.pl for a
    differential graph (as difffolded.pl writes it)."""
    for stack in sorted(set(before.stacks) | set(after.stacks)):
        stream.write(f"{stack} {before.stacks.get(stack, 0)} {after.stacks.get(stack, 0)}\n")
