"""Where a statement's time went: statement -> P_S stage -> probed stages
(inclusive and exclusive, corrected) -> what the probes did not explain.

Probe time is joined to a statement through its thread's Linux thread id, the
one the probes key by (P_S threads.THREAD_OS_ID on MariaDB 10.5+ and MySQL
5.7+, information_schema.PROCESSLIST.TID on MariaDB 10.1-10.4). The probes
count per thread, not per statement: a thread's statements in the window are
taken together, their stages summed, under the longest. Where no thread id is
known (MySQL 5.6) the probe time of all threads goes to the longest write,
and the tree says so.
Probe time of background threads (page cleaner checksums, compression),
told apart by P_S's threads.TYPE, is shown apart as background work; where
the server does not say (no thread ids), the other threads' is, as other
threads' work. A thread that ran more statements in the window than P_S's
history kept has more probe time than its kept statements ran: its tree
leaves the probed part out, and the per-digest view holds it.

The nesting of probed stages comes from the kernel: every call is recorded
with its thread and its innermost probed caller."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

from mysqlprobe.analysis.profile import window_scale
from mysqlprobe.analysis.views import PerfSchema, Probe, PsStatement

if TYPE_CHECKING:   # the Profile is made of these figures
    from mysqlprobe.analysis.model import Profile

PS_PER_NS = 1000


# a probe's calls under one caller: (probe id, probed caller's id or None, calls, ns)
Calls = tuple[int, int | None, int, float]


def stage_edges(stages: dict[int, str], calls: Iterable[Calls], scale: float = 1.0) -> dict[Any, Any]:
    """(stage, calling stage or None) -> ns and calls (times scale); stages:
    probe id -> its stage. A call nested in a call of the same stage is
    inside its time already."""
    out: dict[tuple[str, str | None], dict[str, float]] = {}
    for probe, parent_probe, n, ns in calls:
        stage = stages.get(probe, f"probe {probe}")
        parent = stages.get(parent_probe) if parent_probe is not None else None
        if parent == stage:
            continue
        e = out.setdefault((stage, parent), {"ns": 0.0, "calls": 0.0})
        e["ns"] += ns * scale
        e["calls"] += n * scale
    return out


def _edges(profile: Profile, tids: set[int] | None, exclude: bool = False) -> dict[Any, Any]:
    """stage_edges of the probes' per-thread caller edges of some threads
    (None: all; exclude: all but those), scaled to the window."""
    return stage_edges(profile.stage_of, ((p.id, c.parent, c.calls, c.total_ns) for p in profile.probes
                                          for c in p.callers if tids is None or (c.tid in tids) != exclude),
                       window_scale(profile))


def probe_cost_ns(probes: Sequence[Probe], tids: set[int] | None) -> float:
    """What the probes themselves added to these threads' time (calibrated):
    the calls they timed, not the window's estimate (they were off outside
    the duty cycles' on-phases, and cost nothing there)."""
    return float(sum(c.calls * p.pair_cost_ns for p in probes for c in p.callers if tids is None or c.tid in tids))


def as_printed(edges: dict[Any, Any], base: dict[str, float], figures: dict[str, tuple[float | None, str]]) -> dict[Any, Any]:
    """Edges scaled per stage so that a stage's edges over all threads come
    to the figure the stage table prints (its total over the window: a bound
    where its mean is one, the CPU samples' where they timed it). base:
    stage -> its edges' ns over all threads; figures: stage -> (total, mark)."""
    out = {}
    for (stage, parent), v in edges.items():
        total, _ = figures.get(stage, (None, ""))
        factor = total / base[stage] if total is not None and base.get(stage) else 1.0
        out[(stage, parent)] = {"ns": v["ns"] * factor, "calls": v["calls"]}
    return out


def without(edges: dict[Any, Any], stages: set[str]) -> dict[Any, Any]:
    """Edges with these stages left out, their callees given to the stage's
    own caller (the one it spent most time under)."""
    caller: dict[str, str | None] = {}
    for stage in stages:
        above = [(v["ns"], parent) for (s, parent), v in edges.items() if s == stage]
        caller[stage] = max(above, key=lambda a: a[0])[1] if above else None

    def lifted(parent: str | None) -> str | None:
        seen = set()
        while parent in stages and parent not in seen:
            seen.add(parent)
            parent = caller.get(parent)
        return None if parent in stages else parent

    out: dict[tuple[str, str | None], dict[str, float]] = {}
    for (stage, parent), v in edges.items():
        if stage in stages:
            continue
        e = out.setdefault((stage, lifted(parent)), {"ns": 0.0, "calls": 0.0})
        e["ns"] += v["ns"]
        e["calls"] += v["calls"]
    return out


def stage_totals(edges: dict[Any, Any]) -> dict[str, float]:
    """Per stage, its edges' ns summed over its callers."""
    out: dict[str, float] = {}
    for (stage, _), v in edges.items():
        out[stage] = out.get(stage, 0.0) + v["ns"]
    return out


@dataclass(frozen=True, slots=True)
class PartitionShare:
    """A node's share of its stage's partitions (by their time in the window)."""

    id: int
    share: float
    ns: int


@dataclass(frozen=True, slots=True)
class Node:
    """A probed stage in a tree of nested calls: its time with its callees'
    (inclusive) and without (exclusive: 0 where the callees' corrected time
    came to more, the excess in callees_exceed_ns), its calls, its mark ("<"
    a bound, "?" withheld; exclusive_mark "?" where a callee's is marked),
    its partitions where the call came through the partitioning layer."""

    stage: str
    inclusive_ns: int
    calls: float
    children: tuple[Node, ...]
    exclusive_ns: int
    mark: str = ""
    exclusive_mark: str | None = None
    callees_exceed_ns: int | None = None
    partitions: tuple[PartitionShare, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage, "inclusive_ns": self.inclusive_ns, "calls": self.calls,
                               "children": [c.to_json() for c in self.children],
                               "exclusive_ns": self.exclusive_ns, "mark": self.mark}
        if self.exclusive_mark is not None:
            out["exclusive_mark"] = self.exclusive_mark
        if self.callees_exceed_ns is not None:
            out["callees_exceed_ns"] = self.callees_exceed_ns
        if self.partitions is not None:
            out["partitions"] = [{"id": p.id, "share": p.share, "ns": p.ns} for p in self.partitions]
        return out

    def per(self, executions: int) -> Node:
        """The node and its children per execution of a statement."""
        return replace(self, inclusive_ns=round(self.inclusive_ns / executions),
                       calls=round(self.calls / executions, 3), exclusive_ns=round(self.exclusive_ns / executions),
                       callees_exceed_ns=None if self.callees_exceed_ns is None
                       else round(self.callees_exceed_ns / executions),
                       children=tuple(c.per(executions) for c in self.children))


def probe_tree(edges: dict[Any, Any], partitions: dict[str, Any] | None = None,
               marks: dict[str, str] | None = None) -> list[Node]:
    """The probed stages as the calls nested: inclusive and exclusive time.
    Each time is corrected for the probes' cost on its own, so callees may
    come to more than their caller: its exclusive time is then 0 and the
    excess is kept as callees_exceed_ns. A stage called from several places shares its callees out in proportion.
    partitions (stage -> [{id, calls, total_ns}] of the whole window) are
    shared out the same way to the nodes in the partitioning layer or below it.
    marks: stage -> "<" (its time an upper bound) or "?" (withheld); a
    caller of a marked stage has no exclusive time of its own printed."""
    marks = marks or {}
    total = stage_totals(edges)
    children: dict[str | None, list[tuple[str, dict[str, float]]]] = {}
    for (stage, parent), v in edges.items():
        children.setdefault(parent, []).append((stage, v))

    def node(stage: str, ns: float, calls: float, path: frozenset[Any]) -> Node:
        share = ns / total[stage] if total.get(stage) else 0.0
        kids = sorted((node(c, v["ns"] * share, v["calls"] * share, path | {c})
                       for c, v in children.get(stage, []) if c not in path), key=lambda k: -k.inclusive_ns)
        exclusive = round(ns) - sum(k.inclusive_ns for k in kids)
        mark = marks.get(stage, "")
        # partition ids come down from the partitioning layer: a call outside it had none
        parts = (partitions or {}).get(stage) if any(s.startswith(PARTITION_LAYER) for s in path) else None
        whole = sum(p["total_ns"] for p in parts or ()) or 1
        return Node(stage, round(ns), round(calls), tuple(kids), max(exclusive, 0), mark,
                    "?" if mark or any(k.mark for k in kids) else None,
                    # the callees' corrected time is more than the caller's: said, not printed negative
                    -exclusive if exclusive < 0 else None,
                    tuple(PartitionShare(p["id"], round(p["total_ns"] / whole, 4), round(ns * p["total_ns"] / whole))
                          for p in parts) if parts else None)

    roots = [node(s, v["ns"], v["calls"], frozenset({s})) for s, v in children.get(None, [])]
    return sorted(roots, key=lambda r: -r.inclusive_ns)


UNKNOWN_STAGE = "(stages not kept by P_S)"
STATEMENT_STAGES = {"sql.statement"}   # the catalog's stage of a whole client command
PARTITION_LAYER = "partition."  # the catalog's stages of the partitioning layer
WRITES = ("statement/sql/insert", "statement/sql/replace", "statement/sql/load", "statement/sql/update",
          "statement/sql/delete")


def _clip(start: int | None, end: int | None, t0: int, t1: int) -> int:
    """Picoseconds of [start, end] inside [t0, t1] (end None: still running)."""
    end = t1 if end is None else end
    return max(min(end, t1) - max(start or t0, t0), 0)


def _thread_stages(ps: PerfSchema, thread_id: int) -> list[tuple[str, int]]:
    """A thread's stage time in the window from the per-thread summaries,
    for a statement whose stage events the history no longer held."""
    prefix = f"{thread_id} "
    rows = [(r["name"][len(prefix):], r["timer_ps"] // PS_PER_NS)
            for r in ps.deltas.get("thread_stages", []) if r["name"].startswith(prefix)]
    return sorted(rows, key=lambda x: -x[1])


def _units(ps: PerfSchema, window: Callable[[PsStatement], int],
           os_tid: dict[int, int | None]) -> list[list[PsStatement]]:
    """What the probe time can be joined to: all the statements in the
    window of a thread whose Linux thread id is known (the probes count per
    thread, not per statement), else single statements; most time first."""
    units: list[list[PsStatement]] = []
    by_thread: dict[int, list[PsStatement]] = {}
    for st in ps.statements:
        if not window(st):
            continue
        if os_tid.get(st.thread_id):
            by_thread.setdefault(st.thread_id, []).append(st)
        else:
            units.append([st])
    units += by_thread.values()
    return sorted(units, key=lambda u: -sum(window(st) for st in u))


def _stage_ns(ps: PerfSchema, unit: list[PsStatement], t0: int, t1: int) -> dict[str, int]:
    """Stage name -> ns in the window, over the statements of a unit, from the stage history."""
    keys = {st.key for st in unit}
    out: dict[str, int] = {}
    for s in ps.stages:
        if s.statement in keys:
            out[s.event_name] = out.get(s.event_name, 0) + _clip(s.timer_start, s.timer_end, t0, t1) // PS_PER_NS
    return out


@dataclass(frozen=True, slots=True)
class StageTime:
    """A P_S stage of a statement in the window, with the probed stages
    under it (on its longest stage only), what the probes cost there and
    what they leave ("unexplained"; its mark ">" at least, "?" withheld)."""

    stage: str
    ns: int
    probed: tuple[Node, ...]
    probe_cost_ns: int
    unexplained_ns: float
    unexplained_mark: str

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "ns": self.ns, "probed": [n.to_json() for n in self.probed],
                "probe_cost_ns": self.probe_cost_ns, "unexplained_ns": self.unexplained_ns,
                "unexplained_mark": self.unexplained_mark}


@dataclass(frozen=True, slots=True)
class StatementTree:
    """Where a statement's time went (with the others of its thread in the
    window: the probes count per thread): its P_S stages and the probed
    stages under them, how probe time was joined to it, where its stages
    came from, and the other (or background) threads' probed work."""

    statement: str
    statements: int
    thread_id: int
    os_tid: int | None
    join: str
    stages_from: str
    history_short: bool
    background_from: str
    in_window_ns: int
    stages: tuple[StageTime, ...]
    background: tuple[Node, ...]

    def to_json(self) -> dict[str, Any]:
        return {"statement": self.statement, "statements": self.statements, "thread_id": self.thread_id,
                "os_tid": self.os_tid, "join": self.join, "stages_from": self.stages_from,
                "history_short": self.history_short, "background_from": self.background_from,
                "in_window_ns": self.in_window_ns, "stages": [s.to_json() for s in self.stages],
                "background": [n.to_json() for n in self.background]}


def attribute(profile: Profile, parts: dict[str, list[dict[str, Any]]], top: int = 3,
              figures: dict[str, tuple[float | None, str]] | None = None) -> list[StatementTree]:
    """The trees of the statements that ran longest in the window. parts:
    stage -> its partitions' figures over the whole window; figures: stage
    -> (the window total the stage table prints, its mark: "<" a bound, "?"
    withheld), which the trees' times are scaled to (one value a figure)."""
    figures = figures or {}
    base = stage_totals(_edges(profile, None))
    marks = {stage: mark for stage, (_, mark) in figures.items() if mark}
    measures: dict[str, tuple[float | None, str]] = {s: v for s, v in figures.items() if not v[1]}
    ps = profile.perf_schema
    if not ps.collected or not ps.statements or ps.timer_start_ps is None or ps.timer_end_ps is None:
        return []
    t0, t1 = ps.timer_start_ps, ps.timer_end_ps
    os_tid = {t.thread_id: t.os_tid for t in ps.threads}
    typed = [t for t in ps.threads if t.type and t.os_tid]
    background_tids = {t.os_tid for t in typed if t.type == "BACKGROUND" and t.os_tid}
    def window(st: PsStatement) -> int:
        return _clip(st.timer_start, st.timer_end, t0, t1)
    # without a thread id the probes' time goes to the longest writing statement
    writes = [st for st in ps.statements if st.event_name.startswith(WRITES)]
    by_time = sorted(writes or ps.statements, key=lambda st: -window(st))
    longest: dict[int, PsStatement] = {}  # per thread, its statement longest in the window
    for st in sorted(ps.statements, key=window):
        longest[st.thread_id] = st
    out = []
    for unit in _units(ps, window, os_tid)[:top]:
        lead = max(unit, key=window)
        in_window = sum(window(st) for st in unit)
        tid = os_tid.get(lead.thread_id)
        if tid:
            join, edges = "thread", _edges(profile, {tid})
            background = _edges(profile, background_tids) if typed else _edges(profile, {tid}, exclude=True)
            cost = probe_cost_ns(profile.probes, {tid})
        elif lead is by_time[0]:
            join = (f"time window (no Linux thread id): the probes of every thread in the "
                    f"{(t1 - t0) / PS_PER_NS / 1e9:.2f}s window, given to the longest write")
            edges, background, cost = _edges(profile, None), {}, probe_cost_ns(profile.probes, None)
        else:
            join, edges, background, cost = "none", {}, {}, 0.0
        # the statement probe's calls are the statement itself, the tree's top line
        edges, background = without(edges, STATEMENT_STAGES), without(background, STATEMENT_STAGES)
        stage_ns = sorted(_stage_ns(ps, unit, t0, t1).items(), key=lambda x: -x[1])
        stages_from = "history"
        if not stage_ns and (tid or lead is longest[lead.thread_id]):
            # the thread's summary holds all its statements of the window
            stage_ns, stages_from = _thread_stages(ps, lead.thread_id), "thread summary"
        if not stage_ns and edges:
            # neither the history nor a live thread kept its stages: the probed
            # time still goes under the statement, as one stage of its own
            stage_ns, stages_from = [(UNKNOWN_STAGE, in_window // PS_PER_NS)], "none"
        # the figures (a bound's own measure in its place) decide whether the thread's
        # history fell short, and cap the probes' cost
        measured = sum(round(v["ns"]) for (_, parent), v in as_printed(edges, base, measures).items()
                       if parent is None)   # the tree's roots
        history_short = join == "thread" and measured > in_window // PS_PER_NS
        tree = probe_tree(as_printed(edges, base, figures), parts, marks)
        probed = sum(r.inclusive_ns for r in tree)
        if history_short:
            tree, probed, measured, cost = [], 0, 0, 0
        main = stage_ns[0][0] if stage_ns else None
        cost = round(min(cost, max(stage_ns[0][1] - measured, 0))) if stage_ns else 0
        # what the probed stages leave is a figure only where theirs all are
        rest_mark = "?" if any(r.mark == "?" for r in tree) else ">" if any(r.mark for r in tree) else ""
        out.append(StatementTree(
            lead.sql_text, len(unit), lead.thread_id, tid, join, stages_from, history_short,
            "P_S threads.TYPE" if typed else "all other threads", in_window // PS_PER_NS,
            tuple(StageTime(name, ns, tuple(tree), cost, ns - probed - cost, rest_mark) if name == main
                  else StageTime(name, ns, (), 0, ns, "") for name, ns in stage_ns if ns),
            tuple(probe_tree(as_printed(background, base, figures), marks=marks))))
    return out
