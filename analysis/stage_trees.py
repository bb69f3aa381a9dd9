"""Stage-rooted trees: for each catalog stage, the CPU samples, off-CPU time
and I/O system calls whose user stack passes through the stage's function,
folded from that function down.

The root is the stage's name (innodb.row_insert), not its function's, so
two versions whose functions differ in name line up; below it the frames
are function names without parameter lists. A stack that passes through
the stage's functions more than once (recursion) counts once, from the
outermost. Values are per row, for the whole window: what a collector saw
in part of it (on-phases, outside quiet phases) is scaled up to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

from pathlib import Path

from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.views import Probe
from mysqlprobe.flamegraphs.folded import Folded
from dataclasses import dataclass, field

# kinds of evidence: what a tree's node holds, per row
CPU_NS, OFFCPU_NS, IO_NS, IO_BYTES, IO_CALLS = "cpu_ns", "offcpu_ns", "io_ns", "io_bytes", "io_calls"
KINDS = (CPU_NS, OFFCPU_NS, IO_NS, IO_BYTES, IO_CALLS)
# the capture's folded files behind each kind: (section, its field naming the file)
SOURCES = {CPU_NS: ("cpu_profile", "stacks_file"), OFFCPU_NS: ("off_cpu", "stacks_file"), IO_NS: ("io", "stacks_file"),
           IO_BYTES: ("io", "bytes_file"), IO_CALLS: ("io", "calls_file")}


@dataclass
class Node:
    values: dict[str, float] = field(default_factory=dict)
    children: dict[str, "Node"] = field(default_factory=dict)

    def add(self, frames: list[str], kind: str, value: float) -> None:
        node = self
        node.values[kind] = node.values.get(kind, 0.0) + value
        for f in frames:
            node = node.children.setdefault(f, Node())
            node.values[kind] = node.values.get(kind, 0.0) + value

    def get(self, kind: str) -> float:
        return self.values.get(kind, 0.0)

    @property
    def wall_ns(self) -> float:
        """A thread's time is on CPU or off it: the two add up; time in
        system calls is inside them, evidence rather than more time."""
        return self.get(CPU_NS) + self.get(OFFCPU_NS)

    def at(self, path: list[str]) -> "Node | None":
        node: Node | None = self
        for f in path:
            node = node.children.get(f) if node is not None else None
            if node is None:
                return None
        return node

    def folded(self, kinds: tuple[str, ...], root: str, scale: float = 1.0) -> Folded:
        """The tree's `kinds`, summed, as folded stacks (self weights times
        scale, rounded), for a flame graph."""
        out = Folded()

        def total(node: Node) -> float:
            return sum(node.get(k) for k in kinds)

        todo: list[tuple[Node, list[str]]] = [(self, [root])]   # no recursion: trees are as deep as stacks
        while todo:
            node, path = todo.pop()
            own = total(node) - sum(total(c) for c in node.children.values())
            if round(own * scale) > 0:
                out.add(path, round(own * scale))
            todo.extend((child, path + [name]) for name, child in node.children.items())
        return out


def stage_functions(probes: Sequence[Probe]) -> dict[str, set[str]]:
    """Each probed stage's function names, as the stacks name them
    (probe:NAME for a --probe function, as compare names it)."""
    out: dict[str, set[str]] = {}
    for p in probes:
        if p.name:   # a function probed outside the catalog stands for itself
            out.setdefault(p.stage, set()).add(p.name)
    return out


def unit_ns(profile: Profile, kind: str) -> float | None:
    """What one unit of a folded file's weight is worth in the kind's unit."""
    if kind == CPU_NS:
        hz = profile.stacks["cpu_profile"].frequency_hz
        return 1e9 / hz if hz else None
    return 1000.0 if kind in (OFFCPU_NS, IO_NS) else 1.0


def nested_stage(stage: str) -> str:
    """The frame that stands for a nested stage in an exclusive tree."""
    return f"[stage {stage}]"


def stage_trees(profile: Profile, stacks: dict[str, Folded], rows: int, exclusive: bool = False) -> dict[str, Node]:
    """Per stage, its tree: `stacks` are the capture's folded files by kind.
    Exclusive: a stack that goes on into another stage's function ends
    there, in a frame naming that stage (its own tree holds the rest)."""
    functions = stage_functions(profile.probes)
    stage_of = {name: stage for stage, names in functions.items() for name in names}
    trees = {stage: Node() for stage in functions}
    for kind, folded in stacks.items():
        unit = unit_ns(profile, kind)
        if unit is None or not folded:
            continue
        per = unit * profile.stacks[SOURCES[kind][0]].scale(profile.window.duration_s) / rows
        for stack, weight in folded.stacks.items():
            frames = stack.split(";")[1:]   # the thread's name is not a frame
            for stage, names in functions.items():
                i = next((k for k, f in enumerate(frames) if f in names), None)
                if i is None:
                    continue
                below = frames[i + 1:]
                if exclusive:
                    j = next((k for k, f in enumerate(below) if stage_of.get(f, stage) != stage), None)
                    if j is not None:
                        below = below[:j] + [nested_stage(stage_of[below[j]])]
                trees[stage].add(below, kind, weight * per)
    return {s: t for s, t in trees.items() if t.values}


def read_capture_stacks(capture_dir: str | Path, profile: Profile, read: Callable[[str | Path, str | None], Folded | None],
                        kinds: tuple[str, ...] = KINDS) -> dict[str, Folded]:
    """The capture's folded files of those kinds (those it has); `read` parses
    the file a capture names (None when it has none). The stacks the Profile holds already (its account's) are not read again."""
    out = {}
    for kind in kinds:
        section, key = SOURCES[kind]
        if key == "stacks_file" and section in profile.folded:
            out[kind] = profile.folded[section]
            continue
        got = read(capture_dir, profile.stacks[section].files.get(key))
        if got is not None:
            out[kind] = got
    return out
