"""Folded stacks, the interchange format of FlameGraph and inferno: one line
per distinct stack, `root;caller;leaf count`, root first.

Written sorted, so the same samples always give the same file; read
leniently, as flamegraph.pl does, but the lines left out are counted and
reported rather than dropped in silence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from dataclasses import dataclass, field

from typing import Any, TYPE_CHECKING
if TYPE_CHECKING:
    from typing import TextIO


@dataclass
class Folded:
    """Folded stacks ("a;b;c" -> count), as FlameGraph and inferno read them."""

    stacks: Counter[Any] = field(default_factory=Counter)  # "a;b;c" -> count
    ignored: int = 0                                  # malformed lines read

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def add(self, frames: Iterable[str], count: int = 1) -> None:
        # ';' separates frames and ' ' ends the stack: neither may appear inside a frame
        names = [f.replace(";", ":").replace("\n", " ") for f in frames]
        key = ";".join(n.strip() or "[unknown]" for n in names)
        self.stacks[key] += count


def parse(lines: Iterable[str]) -> Folded:
    out = Folded()
    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        stack, sep, count = line.rpartition(" ")
        if not sep or not stack or not count.isdigit():
            out.ignored += 1
            continue
        out.stacks[stack] += int(count)
    return out


def write(folded: Folded, stream: TextIO) -> None:
    for stack in sorted(folded.stacks):
        stream.write(f"{stack} {folded.stacks[stack]}\n")


def write_diff(before: Folded, after: Folded, stream: TextIO) -> None:
    """`stack count_before count_after`, the input of flamegraph.pl for a
    differential graph (as difffolded.pl writes it)."""
    for stack in sorted(set(before.stacks) | set(after.stacks)):
        stream.write(f"{stack} {before.stacks.get(stack, 0)} {after.stacks.get(stack, 0)}\n")
