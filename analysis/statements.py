"""Where each kind of statement's time went, per execution: the statement
probe (on the server's command dispatcher) kept, per statement shape, the
executions that began and ended while the probes were on, their latency,
the probed calls inside them and the probes' own cost there. Shapes with
the same normalized text are one digest, joined to P_S's summary by digest
for the window's executions and rows.

Per execution: the probed functions' inclusive and exclusive time (as the
calls nested), the probes' own cost, and what no probed function holds;
and per P_S stage, the probed calls that began in it (the stage probe on
start_stage keeps each thread's stage key; P_S's setup_instruments names
it), beside the stage's own time from the executions P_S's history kept.
Figures are per execution, so the on-phases of a sampled window give them
as they are; executions over the whole window come from P_S where it joined,
else from the counted ones scaled to the window."""

from __future__ import annotations

import re

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.attribution import PS_PER_NS, Node, probe_tree, stage_edges
from mysqlprobe.analysis.profile import window_scale
from mysqlprobe.analysis.views import PerfSchema, StatementShape, Statements
from mysqlprobe.sqltext import TRUNCATED, join_key
from mysqlprobe.probes.histogram import Histogram

if TYPE_CHECKING:   # the Profile is made of these figures
    from mysqlprobe.analysis.model import Profile

UNKNOWN_STAGE = "stage unknown"


def _digest_rows(profile: Profile) -> list[dict[str, Any]]:
    return (profile.ps_summaries.get("digests") or []) if profile.perf_schema.collected else []


def join_digest(text: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The P_S digest row of a normalized text (a prefix of it where the
    text was cut): the one that matches, None if none or several do."""
    key = join_key(text)
    if text.endswith(TRUNCATED):
        found = [r for r in rows if join_key(r["name"]).startswith(key)]
    else:
        found = [r for r in rows if join_key(r["name"]) == key]
    return found[0] if len(found) == 1 else None


def _groups(statements: Statements) -> dict[str, list[StatementShape]]:
    """Shapes by normalized text (the kernel splits a digest by the length of its value lists)."""
    out: dict[str, list[StatementShape]] = {}
    for shape in statements.shapes:
        out.setdefault(shape.text, []).append(shape)
    return out


def _edges(stages: dict[int, str], shapes: list[StatementShape], ps_stage: int | None | bool = False) -> dict[Any, Any]:
    """stage_edges of the calls inside the shapes' executions: of the calls
    that began in one P_S stage key (None: not known), or all (False)."""
    return stage_edges(stages, ((c.probe, c.parent, c.calls, c.total_ns) for s in shapes for c in s.calls
                                if ps_stage is False or c.stage == ps_stage))


def _per_execution(nodes: list[Node], executions: int) -> tuple[Node, ...]:
    return tuple(n.per(executions) for n in nodes)


@dataclass(slots=True)
class FunctionTime:
    """A probed stage's time per execution, summed over the places it shows up in a digest's tree."""

    stage: str
    inclusive_ns: int = 0
    exclusive_ns: int = 0
    calls: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _flat(nodes: tuple[Node, ...]) -> list[FunctionTime]:
    """stage -> inclusive and exclusive ns per execution, summed where a stage shows up in several places."""
    out: dict[str, FunctionTime] = {}

    def walk(ns: tuple[Node, ...]) -> None:
        for n in ns:
            f = out.setdefault(n.stage, FunctionTime(n.stage))
            f.inclusive_ns += n.inclusive_ns
            f.exclusive_ns += n.exclusive_ns
            f.calls = round(f.calls + n.calls, 3)
            walk(n.children)
    walk(nodes)
    return sorted(out.values(), key=lambda f: -f.inclusive_ns)


@dataclass(frozen=True, slots=True)
class DigestStage:
    """A P_S stage of a digest per execution: its time (from the history;
    None: none kept) and the probed calls that began in it."""

    stage: str
    ps_ns: int | None
    probed: tuple[Node, ...]
    probed_ns: int

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "ps_ns": self.ps_ns, "probed": [n.to_json() for n in self.probed],
                "probed_ns": self.probed_ns}


def _by_stage(profile: Profile, shapes: list[StatementShape], executions: int,
              ps_stages: list[dict[str, Any]]) -> list[DigestStage]:
    """Per P_S stage: its time per execution (from the history) and the
    probed calls that began in it; longest first, the unknown stage last."""
    names = profile.perf_schema.stage_names
    keys = {c.stage for s in shapes for c in s.calls}
    ps_ns = {s["stage"]: s["ns"] for s in ps_stages}
    out: dict[str, DigestStage] = {}
    for key in keys:
        name = UNKNOWN_STAGE if key is None else names[key - 1] if 0 < key <= len(names) else f"stage #{key}"
        tree = _per_execution(probe_tree(_edges(profile.stage_of, shapes, key)), executions)
        out[name] = DigestStage(name, ps_ns.get(name), tree, sum(n.inclusive_ns for n in tree))
    for name, ns in ps_ns.items():
        out.setdefault(name, DigestStage(name, ns, (), 0))
    return sorted(out.values(), key=lambda s: (s.stage == UNKNOWN_STAGE, -max(s.ps_ns or 0, s.probed_ns)))


def _ps_stages(ps: PerfSchema, digest_text: str) -> tuple[list[dict[str, Any]], int]:
    """P_S stage time per execution of a digest, from the executions whose
    stages its history kept (statements whose text is the digest's; the stage
    history holds fewer statements than the statement history): stages, executions."""
    keys = {s.key for s in ps.statements
            if s.timer_end is not None and join_key(s.sql_text) == join_key(digest_text)}
    per: dict[str, int] = {}
    kept: set[tuple[int, int]] = set()
    for s in ps.stages:
        if s.statement in keys and s.timer_wait is not None:
            per[s.event_name] = per.get(s.event_name, 0) + s.timer_wait
            kept.add(s.statement)
    n = len(kept)
    if not n:
        return [], 0
    return [{"stage": k, "ns": round(v / PS_PER_NS / n)} for k, v in sorted(per.items(), key=lambda kv: -kv[1])], n


@dataclass(frozen=True, slots=True)
class Digest:
    """A statement digest over the window, per execution: where its time
    went (the probed stages' tree and flat times, under each P_S stage),
    what the probes cost in it and what they leave; its executions (P_S's
    count where its digest summary joins, else the probe's, scaled), its
    rows, the server's own mean, and notes where a figure was held at 0."""

    digest_text: str
    text: str
    joined: str | None
    executions: int
    executions_probed: int
    executions_from: str
    rows_per_execution: float | None
    mean_ns: int
    raw_mean_ns: int
    ps_mean_ns: int | None
    p99_ns: float | None
    functions: tuple[FunctionTime, ...]
    tree: tuple[Node, ...]
    probe_cost_ns: int
    unattributed_ns: int
    stages: tuple[DigestStage, ...]
    ps_stage_executions: int
    total_ns: int
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out.update(functions=[f.to_json() for f in self.functions], tree=[n.to_json() for n in self.tree],
                   stages=[s.to_json() for s in self.stages], notes=list(self.notes))
        return out


def by_digest(profile: Profile) -> list[Digest]:
    """The digests, the one that took most time in the window first."""
    statements = profile.statements
    if not statements.shapes:
        return []
    rows = _digest_rows(profile)
    own_ns = next((p.own_cost_ns for p in profile.probes if p.id == statements.probe), 0.0)
    scale = window_scale(profile)
    out = []
    for text, shapes in _groups(statements).items():
        seen = sum(s.executions for s in shapes)
        histogram = Histogram.total(s.latency.histogram for s in shapes)
        latency = sum(s.latency.total_ns for s in shapes) / seen
        probe_cost = sum(s.probe_cost_ns for s in shapes) / seen
        tree = _per_execution(probe_tree(_edges(profile.stage_of, shapes)), seen)
        probed = sum(n.inclusive_ns for n in tree)
        # the statement's own time: the latency less what the probes added to it
        own = latency - probe_cost - own_ns
        notes = []
        if own < 0:   # a statement of almost nothing (COM_QUIT): the probe's cost is most of it
            notes.append(f"the probes' calibrated cost exceeds the statement's measured time by "
                         f"{H.format_ns(-own)} per execution: within its calibration's doubt")
            own = 0.0
        unattributed = own - probed
        if unattributed < 0:
            notes.append(f"the probed functions' corrected time exceeds the statement's by "
                         f"{H.format_ns(-unattributed)} per execution: the probes' cost inside it is "
                         "known to its calibration's doubt")
            unattributed = 0.0
        row = join_digest(text, rows)
        executions = row["count"] if row else round(seen * scale)
        ps_stages, stage_sample = _ps_stages(profile.perf_schema, row["name"] if row else text)
        out.append(Digest(
            row["name"].strip() if row else text, text, "P_S digest summary" if row else None,
            executions, seen,
            "P_S digest summary" if row else ("statement probe" if scale == 1.0 else
                                              "statement probe, scaled to the window"),
            round(row["rows_affected"] / row["count"], 3) if row and row["count"] else None,
            round(own), round(latency),
            # the server's own timer over every execution of the window, probed or not
            round(row["timer_ps"] / PS_PER_NS / row["count"]) if row and row["count"] else None,
            histogram.percentile(0.99), tuple(_flat(tree)), tree, round(probe_cost + own_ns), round(unattributed),
            tuple(_by_stage(profile, shapes, seen, ps_stages)), stage_sample, round(own * executions),
            tuple(notes)))
    out.sort(key=lambda d: -d.total_ns)
    # the load's statements are the subject: a session's USE, SET or SHOW, a ping, are not
    return [d for d in out if not administrative(d.digest_text)]


# statements that set a session up or look at the server, not the load's work
ADMINISTRATIVE = re.compile(r"^\s*(?:USE\b|SET\b|SHOW\b|SELECT\s+@@|SELECT\s+(?:DATABASE|VERSION|CONNECTION_ID)\s*\(|"
                            r"\((?:Ping|Quit|Init DB|Change user|Statistics|Reset connection)\))", re.I)


def administrative(text: str) -> bool:
    return bool(ADMINISTRATIVE.match(text))
