"""The compare's drill-down: below the stages that hold a difference per
row, walk both sides' stage-rooted trees (analysis/stage_trees.py) down to
the deepest paths where it concentrates, and give each with the evidence
that supports it: CPU and off-CPU time, the I/O system calls with their
files, bytes and time, per row on both sides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import re
import textwrap
from statistics import median

from mysqlprobe.analysis.compare_figures import Change, figure_of, ns_text, signed_ns
from mysqlprobe.analysis.stage_trees import CPU_NS, IO_BYTES, IO_CALLS, IO_NS, OFFCPU_NS, Node
from mysqlprobe.analysis.textfit import size

FOLLOW = 0.6      # a child holding this share of its parent's difference is where the difference lies
MIN_SHARE = 0.1   # paths holding less of the wall-time difference per row are not reported
TOP_CALLS = 4


def _node(run: Any, stage: str, path: list[str]) -> Node | None:
    """run: a compare.Run (its stage trees)."""
    tree = run.trees.get(stage)
    return tree.at(path) if tree else None


def _path_change(a: list[Any], b: list[Any], stage: str, path: list[str]) -> Change:
    def wall(r: Any) -> float:
        n = _node(r, stage, path)
        return n.wall_ns if n else 0.0
    return Change(";".join([stage] + path), "path", figure_of(a, wall), figure_of(b, wall))


def _children(runs: list[Any], stage: str, path: list[str]) -> set[str]:
    """The user functions below a path: kernel frames, files and nested
    stages are the evidence of a path, not places to go."""
    return {c for r in runs for n in [_node(r, stage, path)] if n for c in n.children
            if not c.endswith("_[k]") and not c.startswith("[")}


def _walk(a: list[Any], b: list[Any], stage: str, path: list[str], here: Change, floor: float, found: list[Any]) -> None:
    """Down the stage's tree while one child holds most of the difference;
    where none does, the path (whose change is `here`) is a finding. The
    children that hold enough on their own are walked too, beside the one
    that leads."""
    todo = [(path, here)]   # depth first, as a recursion would go, without one: trees are as deep as stacks
    while todo:
        path, here = todo.pop()
        kids = sorted(((k, _path_change(a, b, stage, path + [k])) for k in sorted(_children(a + b, stage, path))),
                      key=lambda kc: -abs(kc[1].delta))
        leads = bool(kids) and kids[0][1].delta * here.delta > 0 and abs(kids[0][1].delta) >= FOLLOW * abs(here.delta)
        if not leads:
            found.append((path, here))
        todo.extend(reversed([(path + [name], change) for i, (name, change) in enumerate(kids)
                              if (leads and i == 0) or abs(change.delta) >= floor]))


@dataclass(frozen=True, slots=True)
class SyscallFigures:
    """A system call on a file (its table's, for partitions) below a path, per row."""

    call: str
    file: str
    calls: float
    bytes: float
    ns: float

    def to_json(self) -> dict[str, Any]:
        return {"call": self.call, "file": self.file, "calls": self.calls, "bytes": self.bytes, "ns": self.ns}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One side's figures below a path, per row, medians over its repeats:
    CPU, off-CPU, the I/O calls (their time, bytes and count) and the
    largest system calls by file."""

    cpu_ns: float
    offcpu_ns: float
    io_ns: float
    io_bytes: float
    io_calls: float
    syscalls: tuple[SyscallFigures, ...]

    def to_json(self) -> dict[str, Any]:
        return {"cpu_ns": self.cpu_ns, "offcpu_ns": self.offcpu_ns,
                "io": {"ns": self.io_ns, "bytes": self.io_bytes, "calls": self.io_calls},
                "syscalls": [c.to_json() for c in self.syscalls]}

    def line(self, side: str) -> str:
        text = f"{side}: cpu {ns_text(self.cpu_ns)}, off-CPU {ns_text(self.offcpu_ns)}"
        if self.io_calls:
            text += f"; I/O {self.io_calls:.3g} calls {size(self.io_bytes)} {ns_text(self.io_ns)}"
        return text


@dataclass(frozen=True, slots=True)
class DrillPath:
    """A path below a stage where the difference per row concentrates: its
    change, its share of the wall-time difference, and each side's evidence."""

    stage: str
    path: tuple[str, ...]          # the stage, then the functions below it
    delta_ns_per_row: float
    share: float
    verdict: str
    a: Evidence
    b: Evidence
    spread_a_ns: float
    spread_b_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "path": list(self.path), "delta_ns_per_row": self.delta_ns_per_row,
                "share": self.share, "verdict": self.verdict, "a": self.a.to_json(), "b": self.b.to_json(),
                "spread_ns": {"a": self.spread_a_ns, "b": self.spread_b_ns}}


def _evidence(runs: list[Any], stage: str, path: list[str]) -> Evidence:
    """Per row, medians over the repeats: CPU, off-CPU, the I/O calls and
    the system calls below the path (call and file)."""
    nodes = [_node(r, stage, path) for r in runs]

    def med(kind: str) -> float:
        return median([n.get(kind) if n else 0.0 for n in nodes]) if nodes else 0.0

    calls: dict[tuple[Any, ...], float] = {}
    for n in nodes:
        for key, figures in (_syscalls(n) if n else {}).items():
            for kind, v in figures.items():
                calls[key + (kind,)] = calls.get(key + (kind,), 0.0) + v / len(nodes)
    keys = sorted({k[:2] for k in calls}, key=lambda k: -calls[k + (IO_NS,)])[:TOP_CALLS]
    return Evidence(round(med(CPU_NS), 1), round(med(OFFCPU_NS), 1), round(med(IO_NS), 1), round(med(IO_BYTES), 1),
                    round(med(IO_CALLS), 4),
                    tuple(SyscallFigures(c, f, round(calls[(c, f, IO_CALLS)], 4), round(calls[(c, f, IO_BYTES)], 1),
                                         round(calls[(c, f, IO_NS)], 1)) for c, f in keys))


def file_group(file: str) -> str:
    """A partition's file as its table's (t1#P#p7.ibd -> t1#P#*.ibd): the
    partitions of one table do the same thing."""
    return re.sub(r"#[Pp]#[^.#/]*(#[Ss][Pp]#[^.#/]*)?", "#P#*", file)


def _syscalls(node: Node) -> dict[tuple[str, str], dict[str, float]]:
    """The I/O below a node by (system call, file): an I/O stack ends in the
    call's kernel frame and then the file's."""
    out: dict[tuple[str, str], dict[str, float]] = {}

    # depth first in the children's order, as a recursion would go, without one: trees are as deep as stacks
    todo = list(reversed(node.children.items()))
    while todo:
        name, child = todo.pop()
        if name.endswith("_[k]") and any(c.get(IO_CALLS) for c in child.children.values()):
            for file, leaf in child.children.items():
                acc = out.setdefault((name[:-4], file_group(file.strip("[]"))), {})
                for kind in (IO_NS, IO_BYTES, IO_CALLS):
                    acc[kind] = acc.get(kind, 0.0) + leaf.get(kind)
        else:
            todo.extend(reversed(child.children.items()))
    return out


def _nearest_below(change: Change, found: list[Any]) -> list[Change]:
    """The reported paths below change's path, none reported between them and it."""
    below = [c for _, c in found if c.name.startswith(change.name + ";")]
    return [c for c in below if not any(c.name.startswith(q.name + ";") for q in below)]


def drilldown(a: list[Any], b: list[Any], wall: Change, ranked: list[Change]) -> list[DrillPath]:
    """Below the stages that hold the difference, the deepest paths where
    it concentrates, most first: each with its share of the wall-time
    difference per row and, per side, the evidence."""
    if not wall.delta or not any(r.trees for r in a + b):
        return []
    floor = MIN_SHARE * abs(wall.delta)
    found: list[Any] = []
    for stage_change in ranked:
        if abs(stage_change.delta) >= floor and stage_change.verdict != "noise":
            _walk(a, b, stage_change.name, [], _path_change(a, b, stage_change.name, []), floor, found)
    entries = []
    for path, change in found:
        if abs(change.delta) < floor:
            continue
        stage = change.name.split(";")[0]
        # an ancestor whose reported descendants explain most of it says no more than they do
        below = sum(c.delta for c in _nearest_below(change, found))
        if below and below * change.delta > 0 and abs(below) >= FOLLOW * abs(change.delta):
            continue
        entries.append(DrillPath(stage, (stage, *path), round(change.delta, 1), round(change.delta / wall.delta, 4),
                                 change.verdict, _evidence(a, stage, path), _evidence(b, stage, path),
                                 round(change.a.spread, 1), round(change.b.spread, 1)))
    entries.sort(key=lambda e: -abs(e.delta_ns_per_row))
    return entries


def drilldown_lines(entries: list[DrillPath], top: int = 5) -> list[str]:
    """Each path whole (wrapped, never cut), then per side the evidence and
    the system calls below it."""
    if not entries:
        return []
    lines = ["", "drill-down: where below the stages the difference concentrates (per row):"]
    for e in entries[:top]:
        lines.append(f"  {signed_ns(e.delta_ns_per_row)}, {100 * e.share:.0f}% of the difference"
                     + (f" ({e.verdict})" if e.verdict != "finding" else "") + ":")
        lines += textwrap.wrap(" > ".join(e.path), 80, initial_indent="    ", subsequent_indent="      ",
                               break_long_words=True, break_on_hyphens=False)
        lines.append("    " + e.a.line("A"))
        lines.append("    " + e.b.line("B"))
        sides = {side: {(c.call, c.file): c for c in evidence.syscalls} for side, evidence in (("a", e.a), ("b", e.b))}
        for key in dict.fromkeys(list(sides["b"]) + list(sides["a"])):
            figures = [f"{side.upper()} {c.calls:.3g}/row {size(c.bytes)} {ns_text(c.ns)}"
                       if (c := sides[side].get(key)) else f"{side.upper()} none" for side in ("a", "b")]
            lines += textwrap.wrap(f"{key[0]} {key[1]}: " + ", ".join(figures), 80, initial_indent="    ",
                                   subsequent_indent="      ", break_long_words=True)
    return lines
