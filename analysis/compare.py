"""Two runs side by side, per row inserted: what changed between them and
where the difference in wall time per row went.

Each side is one capture or several (repeats of the same cell): figures are
medians over the repeats, with their spread. Stages line up through the
catalog, whatever the functions are called in each version (ha_partition::
write_row on one side, ha_innopart::write_row_in_part on the other are both
partition.write_row). The difference in wall time per row is shared out to
the probed stages by their exclusive time (time in the stage, not in a
probed stage nested in it), and what the stages do not hold is broken down
by the CPU samples' functions. A difference smaller than the two sides'
run-to-run spread is marked as noise, not reported as a finding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import textwrap
from collections import Counter

from mysqlprobe.analysis.compare_figures import Change, Figure, figure_of, ns_text, signed_ns
from mysqlprobe.analysis import mechanisms
from mysqlprobe.analysis.compare_account import Explanation, detail as account_detail, headline as account_headline
from mysqlprobe.analysis.compare_wall import Wall, unprobed_wall
from mysqlprobe.analysis.index_build import SUBJECT as INDEX_BUILD_SUBJECT
from mysqlprobe.analysis.drilldown import DrillPath, drilldown, drilldown_lines
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.consistency import TOLERANCE, stage_threads
from mysqlprobe.analysis.figures import exclusive_totals
from mysqlprobe.analysis.profile import window_scale
from mysqlprobe.analysis.stage_trees import Node, stage_trees
from mysqlprobe.analysis.views import UNRESOLVED, Probe
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import PROBES, connection_stacks, fold_probe_frames
from dataclasses import dataclass, field

PS_PER_NS = 1000
WRITE_EVENTS = ("statement/sql/insert", "statement/sql/replace", "statement/sql/load")


def rows_of(profile: Profile) -> tuple[int | None, str, Probe | None]:
    """Rows the load inserted in the window, where the figure comes from,
    and the probe whose calls stand for rows where no server counts them."""
    rows, source = profile.rows_inserted   # the one figure every per-row output divides by
    if rows:
        return rows, source, None
    top = outermost_probe(profile.probes)
    if top:   # no server counter: a call of the function the others run inside is the unit
        return round(top.calls * window_scale(profile)), f"calls of {top.name}", top
    return None, "unknown", None


def outermost_probe(probes: Sequence[Probe]) -> Probe | None:
    """The probed function whose calls are all at the top of the probed
    tree, the one with most time (the load's own entry, as probed)."""
    return max((p for p in probes if p.top_level), key=lambda p: p.total_ns, default=None)


def load_seconds(profile: Profile, unit_probe: Probe | None = None) -> tuple[float, str, bool]:
    """The load's wall time: the load driver's own timing (bench, demo), else
    the longest write statement P_S saw, else the time in the probe whose
    calls are the unit, else the window; and whether it is a probe's time,
    from which the probes' cost is taken already."""
    if profile.workload.seconds:
        return profile.workload.seconds, "the load's own timing", False
    writes = [s.timer_wait for s in profile.perf_schema.statements
              if s.event_name.startswith(WRITE_EVENTS) and s.timer_wait]
    if writes:
        return max(writes) / 1e12, "P_S statement time", False
    if unit_probe:
        return unit_probe.total_ns * window_scale(profile) / 1e9, f"the time in {unit_probe.name}", True
    return profile.window.duration_s, "the window", False


def probe_free_seconds(profile: Profile, seconds: float) -> float:
    """The wall time a load would have taken without the probes: less what
    they added as calibrated, when that is less than the whole."""
    probes_s = profile.overhead.estimated_ns / 1e9
    return seconds - probes_s if 0 < probes_s < seconds else seconds


def stage_bounds(profile: Profile, rows: int, wall_ns_per_row: float) -> tuple[dict[str, float], dict[str, str]]:
    """Per stage, its exclusive time per row (analysis/figures.py's, the
    figures the report prints; an upper bound held to what the measured
    ones leave of the row's wall), and the stages whose figure cannot be
    attributed, with why: a withheld figure (a physical bound broken), or
    the run's measured stages together taking more per row than the row's
    wall time on the threads that ran them."""
    exclusive, withheld, bounded = {}, {}, set()
    figures = {f.stage: f for f in profile.figures}
    for stage, ns in exclusive_totals(profile).items():
        if ns is None:
            bound = next((v.bound for v in profile.consistency if v.stage == stage), "a bound broken")
            withheld[stage] = f"withheld: {bound}"
        else:
            exclusive[stage] = ns / rows
            if figures[stage].total_bound:
                bounded.add(stage)
    threads = max((len(t) for t in stage_threads(profile.probes).values()), default=0) or 1
    limit = threads * wall_ns_per_row * (1 + TOLERANCE)
    # measured figures first; an upper bound then holds to what of the row's wall they leave
    total = sum(v for stage, v in exclusive.items() if stage not in bounded)
    left = max(limit - total, 0.0)
    for stage in sorted(bounded, key=lambda st: exclusive[st]):
        exclusive[stage] = min(exclusive[stage], left)
        left -= exclusive[stage]
    if exclusive and total > limit:
        why = (f"the stages take {ns_text(total)} per row together, more than the row's "
               f"{ns_text(wall_ns_per_row)} wall time on {threads} thread{'s' if threads > 1 else ''}")
        return {}, {stage: why for stage in exclusive} | withheld
    return exclusive, withheld


@dataclass
class Run:
    """One capture's figures, per row."""
    label: str
    server: str
    rows: int
    rows_source: str
    seconds: float
    seconds_source: str
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)      # stage -> per-row figures
    exclusive_ns: dict[str, float] = field(default_factory=dict)  # stage -> ns per row
    ps_stages: dict[str, float] = field(default_factory=dict)  # P_S stage -> ns per row
    ps_waits: dict[str, float] = field(default_factory=dict)
    cpu_self_ns: dict[str, float] = field(default_factory=dict)  # function -> CPU ns per row (samples)
    stacks: Folded | None = None
    trees: dict[str, Node] = field(default_factory=dict)       # stage -> exclusive stage-rooted tree, per row
    withheld: dict[str, str] = field(default_factory=dict)    # stage -> why it is not attributed
    cpu_waits_left_out: bool = False  # the probed calls' waits for a CPU are out of their times
    unprobed_ns_per_row: float | None = None  # the same load timed with nothing attached (lab bench's twin)
    settings: dict[str, str] | None = None  # the server's InnoDB and insert-path settings
    ddl: str | None = None                  # the table's, where the load is known (lab bench, demo)
    subject: str = "insert"                 # or "index build": its rows are the rows it indexed

    @property
    def wall_ns_per_row(self) -> float:
        return self.seconds * 1e9 / self.rows


def run_of(profile: Profile, label: str, stacks: Folded | None = None,
           evidence: dict[str, Folded] | None = None) -> Run:
    """evidence: the capture's folded files by kind (stage_trees.SOURCES),
    for the drill-down below the stages."""
    rows, rows_source, unit_probe = rows_of(profile)
    if not rows:
        raise ValueError(f"{label}: the capture does not tell how many rows were inserted")
    seconds, seconds_source, corrected = load_seconds(profile, unit_probe)
    free = seconds if corrected else probe_free_seconds(profile, seconds)
    if free < seconds:
        seconds, seconds_source = free, seconds_source + ", less the probes' calibrated cost"
    run = Run(label, profile.target.server, rows, rows_source, seconds,
              seconds_source, stacks=stacks,
              cpu_waits_left_out=profile.engine.cpu_waits_left_out, subject=profile.subject)
    scale = window_scale(profile)
    marks = {f.stage: f.mark for f in profile.figures}
    for s in profile.stages:
        if not s.calls:
            continue
        # percentiles within the probes' doubt per call are withheld here as in the report
        p = s.percentiles() if marks.get(s.stage) != UNRESOLVED else {"p50": None, "p99": None}
        run.stages[s.stage] = {"calls_per_row": profile.estimated_calls(s).value / rows,
                               "ns_per_row": s.total_ns * scale / rows, "p50_ns": p["p50"], "p99_ns": p["p99"],
                               "symbols": s.symbols}
    run.exclusive_ns, run.withheld = stage_bounds(profile, rows, run.wall_ns_per_row)
    deltas = profile.ps_summaries
    run.ps_stages = {r["name"]: r["timer_ps"] / PS_PER_NS / rows for r in deltas.get("stages", [])}
    run.ps_waits = {r["name"]: r["timer_ps"] / PS_PER_NS / rows for r in deltas.get("waits", [])
                    if not r["name"].startswith("idle")}
    hz = profile.stacks["cpu_profile"].frequency_hz
    if stacks is not None and hz:
        per_sample_ns = 1e9 / hz
        own: Counter[Any] = Counter()
        stacks, _ = fold_probe_frames(stacks)  # the probes' own frames are never a finding
        run.stacks = stacks
        for stack, count in stacks.stacks.items():
            frames = stack.split(";")
            if len(frames) > 1 and frames[-1] != PROBES:
                own[frames[-1]] += count
        run.cpu_self_ns = {f: n * per_sample_ns / rows for f, n in own.items()}
    if evidence:
        run.trees = stage_trees(profile, evidence, rows, exclusive=True)
    run.settings = profile.perf_schema.settings
    run.ddl = profile.workload.ddl
    twin = profile.workload
    if twin.unprobed_rows and twin.unprobed_seconds:
        run.unprobed_ns_per_row = twin.unprobed_seconds * 1e9 / twin.unprobed_rows
    return run


@dataclass(frozen=True, slots=True)
class ComparedSide:
    """What one side of a comparison is: its runs, server and rows."""

    labels: tuple[str, ...]
    server: str
    runs: int
    rows: Figure
    rows_source: str
    seconds_source: str
    subject: str

    def to_json(self) -> dict[str, Any]:
        return {"labels": list(self.labels), "server": self.server, "runs": self.runs, "rows": self.rows.to_json(),
                "rows_source": self.rows_source, "seconds_source": self.seconds_source, "subject": self.subject}


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two sides per row: the wall delta (profiled runs; unprobed and sampled
    runs' where the bench took them), the probed stages' changes and what
    they leave, the functions, P_S, the drill-down paths and the why."""

    a: ComparedSide
    b: ComparedSide
    wall: Change                      # the profiled runs' wall time per row
    wall_unprobed: Wall | None        # the unprobed twins' (lab bench), unpaired
    ranked: list[Change]              # the stages' exclusive time per row, largest change first
    attributed_ns: float
    unattributed_ns: float            # what the stages do not hold of the delta explained
    withheld: list[dict[str, str]]    # {stage, why}: left out of both sides
    functions: list[Change]           # CPU self time per row
    stages: dict[str, dict[str, dict[str, Any]]]   # stage -> side -> per-row figures (JSON)
    perf_schema: dict[str, list[Change]]           # ps_stage, ps_wait
    drilldown: list[DrillPath]
    why: list[dict[str, Any]]
    caveats: list[str]
    explanation: Explanation | None   # the delta by mechanism, from the sampled runs

    @property
    def explained_delta(self) -> tuple[float, str]:
        """The wall delta per row the stages are shares of, and where it comes from."""
        w = self.wall_unprobed
        return (w.delta, "unprobed runs") if w is not None else (self.wall.delta, "profiled runs")

    def wall_json(self) -> dict[str, Any]:
        """compare.json's wall: the sampled runs' twins' delta (paired where the
        sides alternated), else the unprobed runs', else the profiled runs'."""
        if self.explanation is not None:
            return self.explanation.wall_json()
        if self.wall_unprobed is not None:
            out: dict[str, Any] = self.wall_unprobed.to_json()
            return out
        c = self.wall

        def side(f: Figure) -> dict[str, Any]:
            return {"mean": round(f.median, 3), "ci95": None, "runs": f.runs}
        return {"delta": round(c.delta, 3), "ci95": None, "verdict": c.verdict, "method": PROBED_METHOD,
                "a": side(c.a), "b": side(c.b)}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"a": self.a.to_json(), "b": self.b.to_json(),
                               "wall": self.wall_json(), "wall_probed": self.wall.to_json(),
                               "ranked": [c.to_json() for c in self.ranked],
                               "attributed_ns": round(self.attributed_ns, 3),
                               "unattributed_ns": round(self.unattributed_ns, 3),
                               "withheld": self.withheld, "functions": [c.to_json() for c in self.functions],
                               "stages": self.stages,
                               "perf_schema": {kind: [c.to_json() for c in cs] for kind, cs in self.perf_schema.items()},
                               "drilldown": [e.to_json() for e in self.drilldown], "why": self.why, "caveats": self.caveats}
        if self.explanation is not None:
            doc = self.explanation.to_json()
            out.update({key: doc[key] for key in doc if key != "wall"})
            out["explanation_method"] = doc["wall"]["method"]
        return out


def _changes(a: list[Run], b: list[Run], attr: str, kind: str) -> list[Change]:
    """One change per name in the runs' `attr` (a name -> ns per row dict),
    absent names counting as 0, largest change first."""
    names = sorted({n for r in a + b for n in getattr(r, attr)})
    changes = [Change(n, kind, figure_of(a, lambda r: getattr(r, attr).get(n, 0.0)),
                      figure_of(b, lambda r: getattr(r, attr).get(n, 0.0))) for n in names]
    return sorted(changes, key=lambda c: -abs(c.delta))


def compare(a: list[Run], b: list[Run], explanation: Explanation | None = None,
            top_functions: int = 8) -> Comparison:
    """The comparison of two sides (lists of repeats), per row; explanation:
    the delta by mechanism from the sampled runs beside them (compare_account.py)."""
    wall = Change("wall time per row", "total", figure_of(a, lambda r: r.wall_ns_per_row),
                  figure_of(b, lambda r: r.wall_ns_per_row))
    # a stage withheld on any run is left out on both sides: its absence would read as a change
    held_back = {stage: f"{side} run {i}: {why}" for side, runs in (("A", a), ("B", b))
                 for i, r in enumerate(runs, 1) for stage, why in r.withheld.items()}
    ranked = [c for c in _changes(a, b, "exclusive_ns", "stage") if c.name not in held_back]
    attributed = sum(c.delta for c in ranked)
    # what the stages do not hold, by the functions on CPU (self time per row)
    fn_changes = _changes(a, b, "cpu_self_ns", "function")
    detail = {}
    for s in sorted({s for r in a + b for s in r.stages}):
        # a figure withheld on some runs (None) is the median of the runs that have it
        detail[s] = {side: {k: figure_of(having, lambda r: r.stages[s][k]).to_json()
                            for k in ("calls_per_row", "ns_per_row", "p50_ns", "p99_ns")
                            if (having := [r for r in runs if s in r.stages and r.stages[s][k] is not None])}
                     | {"symbols": sorted({sym for r in runs for sym in r.stages.get(s, {}).get("symbols", [])})}
                     for side, runs in (("a", a), ("b", b))}
    ps = {kind: _changes(a, b, attr, kind)[:8] for kind, attr in (("ps_stage", "ps_stages"), ("ps_wait", "ps_waits"))}
    paths = drilldown(a, b, wall, ranked)
    measured = None
    if all(r.unprobed_ns_per_row for r in a + b):
        measured = unprobed_wall([r.unprobed_ns_per_row or 0.0 for r in a], [r.unprobed_ns_per_row or 0.0 for r in b])
    return Comparison(
        a=_side(a), b=_side(b), wall=wall, wall_unprobed=measured, ranked=ranked, attributed_ns=attributed,
        # what the stages do not hold of the delta the comparison explains
        unattributed_ns=(measured.delta if measured is not None else wall.delta) - attributed,
        withheld=[{"stage": k, "why": v} for k, v in sorted(held_back.items())],
        functions=fn_changes[:top_functions], stages=detail, perf_schema=ps, drilldown=paths,
        why=why(a, b, ranked, paths) if explanation is None else [], caveats=caveats(a, b),
        explanation=explanation)


def why(a: list[Run], b: list[Run], ranked: list[Change], paths: list[DrillPath], top: int = 3) -> list[dict[str, Any]]:
    """For the stages that changed most (not noise), the mechanism of the
    deepest catalog function on the path the drill-down followed (else the
    stage's own), what it does, and its settings that differ between A and
    B; then the tables' DDL where it differs."""
    out = []
    settings_a, settings_b = a[0].settings, b[0].settings
    for c in [c for c in ranked if c.verdict != "noise" and abs(c.delta) >= 1][:top]:
        path = next((list(p.path) for p in paths if p.stage == c.name), [c.name])
        m = mechanisms.of_path(path)
        if m is None:
            continue
        out.append({"stage": c.name, "path": path, "delta_ns_per_row": round(c.delta, 1), "mechanism": m.name,
                    "what": m.what, "settings": [{"name": n, "a": va, "b": vb}
                                                 for n, va, vb in mechanisms.differing_settings(m, settings_a,
                                                                                                settings_b)]})
    if a[0].ddl and b[0].ddl and a[0].ddl != b[0].ddl:
        out.append({"stage": None, "mechanism": "table definition", "what": "the two loads' tables differ",
                    "ddl": {"a": a[0].ddl, "b": b[0].ddl}, "settings": []})
    return out


def caveats(a: list[Run], b: list[Run]) -> list[str]:
    """What makes the two sides' stage times unlike, beside what they measure."""
    out = []
    kept_in = [r.label for r in a + b if not r.cpu_waits_left_out]
    if kept_in and len(kept_in) < len(a + b):
        out.append(f"the stage times of {', '.join(kept_in)} keep the calls' waits for a CPU in (a mysqlprobe "
                   "from before they were left out), the other runs' leave them out: under more runnable "
                   "threads than CPUs that alone moves a stage; record all with one mysqlprobe")
    return out


def _side(runs: list[Run]) -> ComparedSide:
    r = runs[0]
    return ComparedSide(tuple(x.label for x in runs), r.server, len(runs), figure_of(runs, lambda x: x.rows),
                        r.rows_source, r.seconds_source, r.subject)


PROBED_METHOD = ("profiled runs, less the probes' calibrated cost (no unprobed runs: mysqlprobe lab bench "
                 "times one beside each profiled run); verdict from the runs' spread")


def merged_stacks(runs: list[Run]) -> Folded:
    """The runs' CPU stacks of the load's threads (client connections), the probes' frames folded."""
    out = Folded()
    for r in runs:
        if r.stacks:
            out.stacks.update(connection_stacks(r.stacks).stacks)
    return out


def _row(name: str, width: int, rest: str) -> list[str]:
    """A table row: the name whole, on a line of its own where it is wider
    than its column (no name is cut: two that share a prefix stay apart)."""
    if len(name) <= width:
        return [f"  {name:<{width}}{rest}"]
    return [f"  {name}", f"  {'':<{width}}{rest}"]


def _fig(f: Figure) -> str:
    return ns_text(f.median) + (f" ±{ns_text(f.spread)}" if f.runs > 1 else "")


def _mark(c: Change) -> str:
    return {"noise": "noise", "single run": "1 run", "finding": ""}[c.verdict]


def _headline(result: Comparison, top: int = 3) -> list[str]:
    """The answer: the wall delta per row, then the probed stages that carry
    it (findings only, the load's threads' own: P_S waits and CPU functions
    are all threads' and stay in their sections), as shares of it."""
    delta, source = result.explained_delta
    w = result.wall_unprobed
    lines = []
    if w is not None:
        way = "faster" if w.delta < 0 else "slower"
        lines += textwrap.wrap(f"B is {abs(w.share):.0%} {way} per row than A without the probes: A "
                               f"{ns_text(w.a.mean)}, B {ns_text(w.b.mean)}; B - A {signed_ns(w.delta)} (95% "
                               f"{signed_ns(w.low)} to {signed_ns(w.high)}): {w.verdict}", 78)
        if w.verdict == "noise":
            return lines + ["The two sides' unprobed intervals overlap: no finding.", ""]
    pool = [c for c in result.ranked if c.verdict != "noise" and abs(c.delta) >= 1]
    pool.sort(key=lambda c: -abs(c.delta))
    if not pool:
        return lines + ["No stage changed beyond the runs' spread.", ""]
    lines.append(f"of it, per row (B - A of the {source}: {signed_ns(delta)}):")
    named = {e["stage"]: e for e in result.why if e.get("stage")}
    for c in pool[:top]:
        share = f"{c.delta / delta:6.0%}" if delta else "     -"
        entry = named.get(c.name)
        lines.append(f"  {signed_ns(c.delta):>9} {share}  {c.name}" + (f": {entry['mechanism']}" if entry else ""))
        for s in (entry or {}).get("settings", []):
            lines.append(f"{'':22}{s['name']}: A {s['a']}, B {s['b']}")
    return lines + [""]


def why_lines(entries: list[dict[str, Any]]) -> list[str]:
    """Why, in plain words: each changed stage's mechanism and the settings that govern it."""
    if not entries:
        return []
    lines = ["", "why (the mechanism on each changed path, and its settings where A and B differ):"]
    for w in entries:
        head = (f"{w['stage']}: {w['mechanism']}" if w.get("stage") else w["mechanism"])
        lines += textwrap.wrap(f"{head} - {w['what']}", 78, initial_indent="  ", subsequent_indent="    ")
        if w.get("path") and len(w["path"]) > 1:
            lines += textwrap.wrap("path: " + " -> ".join(w["path"]), 78, initial_indent="    ",
                                   subsequent_indent="      ")
        lines += [f"    {s['name']}: A {s['a']}, B {s['b']}" for s in w.get("settings", [])]
        if w.get("ddl"):
            lines += ["    A: " + w["ddl"]["a"], "    B: " + w["ddl"]["b"]]
    return lines


WITHHELD_LISTED = 3   # more stages withheld than this: one line names them all


def row_unit(subject: str | None) -> str:
    """What compare's figures are per: a row inserted, or a row an index build indexed."""
    return "row indexed" if subject == INDEX_BUILD_SUBJECT else "row inserted"


def render_text(result: Comparison) -> str:
    a, b, wall = result.a, result.b, result.wall
    unit = a.rows_source.replace("calls of", "call of", 1) if a.rows_source.startswith("calls of") \
        else row_unit(a.subject)
    lines = [f"mysqlprobe compare, per {unit}",
             f"A  {a.server}: {a.runs} run(s), {a.rows.median:.0f} rows ({a.rows_source})",
             f"B  {b.server}: {b.runs} run(s), {b.rows.median:.0f} rows ({b.rows_source})",
             f"wall time per row, profiled ({a.seconds_source}):",
             f"   A {_fig(wall.a)}, B {_fig(wall.b)}: {signed_ns(wall.delta)}"
             + (f" ({100 * wall.delta / wall.a.median:+.0f}%)" if wall.a.median else "")
             + (f"  {_mark(wall)}" if result.explanation is None else "  (the probes' counts come from these)"),
             ""]
    x = result.explanation
    lines += (account_headline(x, a.server, b.server) + [""]) if x is not None else _headline(result)
    for note in result.caveats:
        lines += textwrap.wrap(note, 78, initial_indent="note: ", subsequent_indent="      ")
    if wall.verdict == "noise" and result.wall_unprobed is None:
        lines.append("The difference is within the runs' own spread: no finding.")
    delta, source = result.explained_delta
    lines += ["what changed (B - A), time per row outside nested probed stages:",
              f"  {'stage':<32}{'A':>10}{'B':>10}{'B - A':>10}  note"]
    for c in result.ranked:
        lines += _row(c.name, 32, f"{ns_text(c.a.median):>10}{ns_text(c.b.median):>10}{signed_ns(c.delta):>10}  "
                                  f"{_mark(c)}")
    attributed = result.attributed_ns
    if x is None:   # with the sampled runs, the mechanisms above hold the delta; stages are evidence
        lines.append(f"  {'in probed stages':<32}{'':>20}{signed_ns(attributed):>10}"
                     + (f"  {attributed / delta:.0%} of B - A" if delta else ""))
        lines.append(f"  {'not attributed to a stage':<32}{'':>20}{signed_ns(delta - attributed):>10}")
    withheld = result.withheld
    if len(withheld) > WITHHELD_LISTED:   # nested per-row probes (an index build's): one line, not one a stage
        lines += textwrap.wrap(f"not attributed: {', '.join(w['stage'] for w in withheld)} (for instance "
                               f"{withheld[0]['why']})", 78, initial_indent="  ", subsequent_indent="    ")
    for w in withheld if len(withheld) <= WITHHELD_LISTED else []:
        lines += textwrap.wrap(f"{w['stage']}: not attributed ({w['why']})", 78, initial_indent="  ",
                               subsequent_indent="    ")
    if result.functions and x is None:   # with sampled runs, their mechanisms hold the CPU's changes
        lines += ["", "functions on CPU that grew or shrank most (self time per row, all threads; the",
                  "probes' own frames left out):", f"  {'function':<42}{'A':>9}{'B':>9}{'B - A':>9}  note"]
        for c in result.functions:
            lines += _row(c.name, 42, f"{ns_text(c.a.median):>9}{ns_text(c.b.median):>9}{signed_ns(c.delta):>9}"
                                      f"  {_mark(c)}")
    lines += drilldown_lines(result.drilldown)
    lines += why_lines(result.why)
    if x is not None:
        lines += account_detail(x)
    lines += ["", "stages side by side (A -> B):",
              f"  {'stage':<27}{'calls/row':>13}{'p50':>19}{'p99':>19}"]
    for s, sides in result.stages.items():
        def pair(key: str, fmt: Callable[[float], str]) -> str:
            va, vb = sides["a"].get(key), sides["b"].get(key)
            return f"{fmt(va['median']) if va else '-'} -> {fmt(vb['median']) if vb else '-'}"
        lines += _row(s, 27, f"{pair('calls_per_row', lambda v: f'{v:.2f}'):>13}"
                             f"{pair('p50_ns', ns_text):>19}{pair('p99_ns', ns_text):>19}")
        if sides["a"]["symbols"] != sides["b"]["symbols"]:
            for side in ("a", "b"):
                for sym in sides[side]["symbols"][:2]:
                    lines.append(f"    {side.upper()}: {sym}")
    for kind, title in (("ps_stage", "P_S stages"), ("ps_wait", "P_S waits (all threads)")):
        changes = [c for c in result.perf_schema[kind] if max(abs(c.a.median), abs(c.b.median)) >= 1]
        if changes:
            lines += ["", f"{title} per row (A -> B):"]
            for c in changes[:5]:
                lines += _row(c.name, 40, f" {ns_text(c.a.median):>8} -> {ns_text(c.b.median):<8}"
                                          f"{signed_ns(c.delta):>9}  {_mark(c)}")
    lines += ["", "noise: a change within the two sides' run-to-run spread (half the min-max",
              "range of each, summed); 1 run: no spread known"]
    return "\n".join(lines) + "\n"
