"""compare's why: the unprobed wall delta per row explained by mechanism,
from runs the probes did not distort.

`mysqlprobe lab bench` runs each repeat of a cell three times on each side:
unprobed (its time per row is the delta's truth), sampled only (CPU samples
and traced switches, no uprobe: the wall-time account, analysis/account.py)
and profiled (counts and latencies per call). With two servers the runs
alternate, A then B, so that each repeat is a pair adjacent in time and the
delta is taken pair by pair (a paired 95% interval): the host's drift
between repeats falls on both sides alike and leaves the difference.

Each sampled run's mechanisms are its shares of the row's thread time,
applied to its unprobed twin's time per row: the mechanisms of a run sum to
its unprobed row time, so their deltas sum to the wall delta, and what the
accounts could not name (stacks with no mechanism, blocked time never
traced) is the unattributed part. A mechanism's delta is a finding only
where its interval leaves out zero and it is more than a few CPU samples'
worth per row and 1% of A's row time (twenty mechanisms' 95% intervals
would otherwise name one that did not move in most comparisons)."""

from __future__ import annotations

import math
import statistics
import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.account import NOT_TRACED, Account
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.sampling import t95

UNNAMED = (M.OTHER, NOT_TRACED)
MIN_SAMPLES = 3          # a change worth fewer CPU samples per row than this is below the resolution
MIN_SHARE = 0.01         # nor is a change under this share of A's row time a finding
EFFICIENCY = (("cpu_us_foreground", "CPU us, the load's threads"), ("cpu_us_background", "CPU us, background"),
              ("context_switches", "context switches"), ("kb_written", "KB written"), ("fsyncs", "fsyncs"),
              ("redo_bytes", "redo bytes"))


@dataclass(frozen=True, slots=True)
class WallRun:
    """One sampled run (no probe) of a side: its account per row, scaled to
    its unprobed twin's time per row."""

    label: str
    started: datetime | None
    pair: int | None
    interleaved: bool
    rows: int
    unprobed_ns_per_row: float
    scale: float                            # the twin's time per row over the account's row time
    mechanisms: dict[str, tuple[float, float]]   # name -> (on CPU, off CPU) ns per row, scaled
    functions: dict[str, dict[str, float]]       # name -> its innermost functions, ns per row, scaled
    efficiency: dict[str, float]
    resolution_ns: float                    # a CPU sample's worth per row, scaled
    settings: dict[str, str]
    statement: str | None
    ddl: str | None
    # an index build's phases (analysis/index_build.py), ns per row, scaled as the mechanisms are
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def unattributed_ns(self) -> float:
        return sum(sum(self.mechanisms.get(n, (0.0, 0.0))) for n in UNNAMED)


def wall_run(profile: Profile, label: str) -> WallRun | None:
    """A sampled run's figures, or None where it has no account or no unprobed twin."""
    a: Account | None = profile.account
    w = profile.workload
    twin = w.unprobed_ns_per_row
    if a is None or not a.rows or not twin or a.row_time_ns <= 0:
        return None
    row_ns = a.row_time_ns / a.rows
    scale = twin / row_ns
    mech = {p.name: (p.on_cpu_ns / a.rows * scale, p.off_cpu_ns / a.rows * scale) for p in a.mechanisms}
    functions = {p.name: {f: ns / a.rows * scale for f, ns in p.functions} for p in a.mechanisms}
    eff = a.efficiency.to_json() if a.efficiency else {}
    build = profile.index_build
    phases = {ph.name: ph.share * build.shares_of_ns / a.rows * scale for ph in build.phases
              if ph.share is not None} if build is not None and build.shares_of_ns else {}
    return WallRun(label, _time(w.unprobed_started or profile.window.start), w.pair, w.interleaved, a.rows, twin,
                   scale, mech, functions, {k: v for k, v in eff.items() if v is not None},
                   a.per_sample_ns / a.rows * scale * MIN_SAMPLES, profile.perf_schema.settings or {},
                   w.statement, w.ddl, phases)


def _time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat((text or "").replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Delta:
    """B - A of one figure per row, with its 95% interval: paired (the mean
    of the pairs' differences) where the sides alternated, else Welch's."""

    a: float
    b: float
    delta: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_json(self, digits: int = 1) -> dict[str, Any]:
        return {"a": round(self.a, digits), "b": round(self.b, digits), "delta": round(self.delta, digits),
                "ci95": [round(self.low, digits), round(self.high, digits)]}


def delta_of(a: list[float], b: list[float], pairs: list[tuple[float, float]] | None) -> Delta:
    """B - A: paired over `pairs` when given (two or more), else Welch's
    (a side of one run: no interval)."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if pairs and len(pairs) >= 2:
        d = [y - x for x, y in pairs]
        mean = statistics.fmean(d)
        half = t95(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
        return Delta(statistics.fmean(x for x, _ in pairs), statistics.fmean(y for _, y in pairs), mean,
                     mean - half, mean + half)
    if len(a) < 2 or len(b) < 2:
        return Delta(ma, mb, mb - ma, -math.inf, math.inf)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0)) \
        if va + vb else len(a) + len(b) - 2
    half = t95(max(int(dof), 1)) * se
    return Delta(ma, mb, mb - ma, mb - ma - half, mb - ma + half)


@dataclass(frozen=True, slots=True)
class MechanismDelta:
    name: str
    total: Delta
    on_cpu: Delta
    off_cpu: Delta
    settings: tuple[tuple[str, str, str], ...]   # (variable, A, B) where they differ
    finding: bool
    what: str
    how: tuple[tuple[str, float, float], ...] = ()   # its innermost functions: (name, A, B) ns per row

    def how_text(self, top: int = 3) -> str:
        """What ran in it on each side: 'A: fsync 420ns, pwrite64 300ns; B: posix_fallocate64 25ns'."""
        def side(i: int) -> str:
            ranked = sorted(((f, v[i]) for f, *v in ((f, a, b) for f, a, b in self.how)), key=lambda kv: -kv[1])
            return ", ".join(f"{f} {ns_figure(ns)}" for f, ns in ranked[:top] if ns >= 1) or "-"
        return f"A: {side(0)}; B: {side(1)}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "delta_ns_per_row": round(self.total.delta, 1),
                "ci95": [round(self.total.low, 1), round(self.total.high, 1)],
                "a_ns_per_row": round(self.total.a, 1), "b_ns_per_row": round(self.total.b, 1),
                "on_cpu_delta_ns_per_row": round(self.on_cpu.delta, 1),
                "off_cpu_delta_ns_per_row": round(self.off_cpu.delta, 1),
                "settings": {n: [va, vb] for n, va, vb in self.settings}, "finding": self.finding,
                "functions": [{"function": f, "a_ns_per_row": round(va, 1), "b_ns_per_row": round(vb, 1)}
                              for f, va, vb in self.how]}


@dataclass(frozen=True, slots=True)
class Explanation:
    """The wall delta per row and its parts by mechanism."""

    wall: Delta
    paired: bool
    pairs: int
    runs: tuple[int, int]
    mechanisms: tuple[MechanismDelta, ...]       # largest |delta| first, the named ones
    unattributed: Delta
    efficiency: tuple[tuple[str, Delta], ...]
    scale: tuple[float, float]                   # the sampled runs' row time over the unprobed, per side
    apart_s: float | None                        # between the sides' mean start times
    warnings: tuple[str, ...] = ()
    phases: tuple[tuple[str, Delta], ...] = ()   # an index build's, in the order they run

    @property
    def verdict(self) -> str:
        return "finding" if self.wall.excludes_zero else "noise"

    @property
    def attributed_share(self) -> float | None:
        named = sum(m.total.delta for m in self.mechanisms if m.finding)
        return named / self.wall.delta if self.wall.delta else None

    def wall_json(self) -> dict[str, Any]:
        """compare.json's wall, in last round's fields, with `paired`."""
        w = self.wall
        return {"delta": round(w.delta, 3), "ci95": [round(w.low, 3), round(w.high, 3)], "verdict": self.verdict,
                "method": METHOD_PAIRED if self.paired else METHOD_UNPAIRED,
                "a": {"mean": round(w.a, 3), "ci95": None, "runs": self.runs[0]},
                "b": {"mean": round(w.b, 3), "ci95": None, "runs": self.runs[1]},
                "paired": self.paired, "pairs": self.pairs}

    def to_json(self) -> dict[str, Any]:
        return {"wall": self.wall_json(),
                "mechanisms": [m.to_json() for m in self.mechanisms],
                "unattributed_ns_per_row": round(self.unattributed.delta, 1),
                "unattributed_ci95": [round(self.unattributed.low, 1), round(self.unattributed.high, 1)],
                "efficiency": {k: d.to_json(4) for k, d in self.efficiency},
                "sampled_over_unprobed": [round(x, 4) for x in self.scale],
                "apart_s": None if self.apart_s is None else round(self.apart_s, 1),
                "warnings": list(self.warnings),
                "index_build_phases": [{"name": n, **dl.to_json()} for n, dl in self.phases]}


METHOD_PAIRED = ("unprobed runs, A and B alternated; the mean of each pair's B - A, paired t 95% interval; "
                 "mechanisms from the sampled runs (no probe) beside them")
METHOD_UNPAIRED = ("unprobed runs of each side (not alternated); difference of the means, Welch 95% interval; "
                   "mechanisms from the sampled runs (no probe) beside them")


def explain(a: list[WallRun], b: list[WallRun]) -> Explanation | None:
    """The explanation of B - A, None with no sampled run on a side."""
    if not a or not b:
        return None
    by_a, by_b = {r.pair: r for r in a if r.pair}, {r.pair: r for r in b if r.pair}
    common = sorted(set(by_a) & set(by_b))
    paired = len(common) >= 2 and all(r.interleaved for r in a + b)

    def d(figure: Callable[[WallRun], float]) -> Delta:
        pairs = [(figure(by_a[i]), figure(by_b[i])) for i in common] if paired else None
        return delta_of([figure(r) for r in a], [figure(r) for r in b], pairs)

    wall = d(lambda r: r.unprobed_ns_per_row)
    # a finding is more than a few CPU samples' worth and more than MIN_SHARE of the row: with twenty
    # mechanisms, 95% intervals alone would name one that did not change in most comparisons
    resolution = max(max(r.resolution_ns for r in a + b), MIN_SHARE * wall.a)
    settings_a, settings_b = a[0].settings, b[0].settings
    out = []
    def part(name: str, i: int | None) -> Callable[[WallRun], float]:
        def f(r: WallRun) -> float:
            on, off = r.mechanisms.get(name, (0.0, 0.0))
            return on + off if i is None else (on, off)[i]
        return f

    for name in sorted({n for r in a + b for n in r.mechanisms} - set(UNNAMED)):
        total, on, off = d(part(name, None)), d(part(name, 0)), d(part(name, 1))
        m = M.BY_NAME.get(name)
        differ = tuple(M.differing_settings(m, settings_a, settings_b)) if m else ()
        out.append(MechanismDelta(name, total, on, off, differ,
                                  total.excludes_zero and abs(total.delta) >= resolution, m.what if m else "",
                                  _how(name, a, b)))
    out.sort(key=lambda x: -abs(x.total.delta))
    named = [m for m in out if m.finding]

    # what the named findings leave of the wall delta, pair by pair
    def rest(r: WallRun) -> float:
        return r.unprobed_ns_per_row - sum(sum(r.mechanisms.get(m.name, (0.0, 0.0))) for m in named)
    unattributed = d(rest)
    def figure(key: str) -> Callable[[WallRun], float]:
        return lambda r: r.efficiency.get(key, 0.0)
    efficiency = tuple((k, d(figure(k))) for k, _ in EFFICIENCY if all(k in r.efficiency for r in a + b))

    def phase(name: str) -> Callable[[WallRun], float]:
        return lambda r: r.phases.get(name, 0.0)
    # a phase one side's build has and the other's lacks (10.1 writes no flush) is 0 there
    built = all(r.phases for r in a + b)
    phases = tuple((n, d(phase(n))) for n in dict.fromkeys(n for r in a + b for n in r.phases)) if built else ()
    return Explanation(wall, paired, len(common) if paired else 0, (len(a), len(b)), tuple(out), unattributed,
                       efficiency, (statistics.fmean(1 / r.scale for r in a), statistics.fmean(1 / r.scale for r in b)),
                       _apart(a, b), tuple(_warnings(a, b, paired)), phases)


def _how(name: str, a: list[WallRun], b: list[WallRun], top: int = 5) -> tuple[tuple[str, float, float], ...]:
    """A mechanism's innermost functions, each side's mean ns per row, the largest change first."""
    names = {f for r in a + b for f in r.functions.get(name, {})}

    def mean(runs: list[WallRun], f: str) -> float:
        return statistics.fmean(r.functions.get(name, {}).get(f, 0.0) for r in runs)
    rows = [(f, mean(a, f), mean(b, f)) for f in names]
    return tuple(sorted(rows, key=lambda x: -abs(x[2] - x[1]))[:top])


def _apart(a: list[WallRun], b: list[WallRun]) -> float | None:
    ta = [r.started.timestamp() for r in a if r.started]
    tb = [r.started.timestamp() for r in b if r.started]
    return abs(statistics.fmean(tb) - statistics.fmean(ta)) if ta and tb else None


def _warnings(a: list[WallRun], b: list[WallRun], paired: bool) -> list[str]:
    out = []
    if not paired:
        out.append("the two sides' runs were not alternated (separate benches): the host's drift between them "
                   "is in the delta; `mysqlprobe lab bench --server A,B` alternates them")
    rows_a, rows_b = statistics.fmean(r.rows for r in a), statistics.fmean(r.rows for r in b)
    if abs(rows_a / rows_b - 1) > 0.01:
        out.append(f"the two sides wrote different numbers of rows ({rows_a:,.0f} and {rows_b:,.0f} a run): "
                   "not the same load")
    if a[0].statement and b[0].statement and a[0].statement != b[0].statement:
        out.append(f"the two sides ran different statements: A {a[0].statement}; B {b[0].statement}")
    elif a[0].ddl and b[0].ddl and a[0].ddl != b[0].ddl:
        out.append("the two sides' tables differ (DDL): the delta holds that too")
    return out


def answer(x: Explanation, server_a: str, server_b: str) -> str:
    """The delta per row in one sentence, with its interval and how it was measured."""
    w = x.wall
    way = "faster" if w.delta < 0 else "slower"
    share = abs(w.delta) / w.a if w.a else 0.0
    how = (f"paired over {x.pairs} alternated runs" if x.paired
           else f"{x.runs[0]} and {x.runs[1]} runs, not alternated")
    return (f"B ({server_b}) is {share:.0%} {way} per row than A ({server_a}) without the probes: "
            f"{ns_figure(w.a)} -> {ns_figure(w.b)}, {signed_figure(w.delta)} "
            f"(95% {signed_figure(w.low)} to {signed_figure(w.high)}; {how})")


def headline_parts(x: Explanation, top: int = 4) -> list[tuple[str, list[str]]]:
    """The findings, largest first, then the unattributed part: each its
    line (share of the delta, name, delta, interval, on and off CPU) and
    the lines under it (what ran in it, the settings that differ). None
    where the delta's interval holds zero."""
    w = x.wall
    if not w.excludes_zero:
        return []
    parts = []
    for m in [m for m in x.mechanisms if m.finding][:top]:
        pct = m.total.delta / w.delta if w.delta else 0.0
        parts.append((f"{pct:5.0%}  {m.name}: {signed_figure(m.total.delta)} (95% {signed_figure(m.total.low)} to "
                      f"{signed_figure(m.total.high)}; on CPU {signed_figure(m.on_cpu.delta)}, off CPU {signed_figure(m.off_cpu.delta)})",
                      ([m.how_text()] if m.how else []) + [f"{n}: A {va}, B {vb}" for n, va, vb in m.settings]))
    u = x.unattributed
    pct = u.delta / w.delta if w.delta else 0.0
    parts.append((f"{pct:5.0%}  unattributed: {signed_figure(u.delta)} (95% {signed_figure(u.low)} to {signed_figure(u.high)})", []))
    return parts


def headline(x: Explanation, server_a: str, server_b: str, top: int = 4) -> list[str]:
    """The answer a DBA acts on: the delta, then its mechanisms, their on/off
    split and the settings that differ, then what is left unattributed."""
    lines = textwrap.wrap(answer(x, server_a, server_b), 78, subsequent_indent="  ")
    parts = headline_parts(x, top)
    if not parts:
        return lines + ["the interval holds zero: no finding."]
    if len(parts) > 1:
        lines.append("of it, by mechanism (from the sampled runs, no probe attached):")
    for line, under in parts:
        lines.append("  " + line)
        lines += ["         " + u for u in under]
    return lines


def detail(x: Explanation) -> list[str]:
    """Every mechanism's delta, signed, with its interval; then the efficiency per row."""
    lines = ["", "by mechanism, per row (B - A; sampled runs scaled to their unprobed twins):",
             f"  {'mechanism':<40}{'A':>9}{'B':>9}{'B - A':>9}  95% interval       on CPU  off CPU"]
    for m in x.mechanisms:
        if max(abs(m.total.a), abs(m.total.b)) < 1:
            continue
        interval = f"{signed_figure(m.total.low)} to {signed_figure(m.total.high)}"
        lines.append(f"  {m.name[:40]:<40}{ns_figure(m.total.a):>9}{ns_figure(m.total.b):>9}{signed_figure(m.total.delta):>9}  "
                     f"{interval:<18}{signed_figure(m.on_cpu.delta):>8}{signed_figure(m.off_cpu.delta):>9}"
                     + ("" if m.finding else "  noise"))
    if x.phases:
        lines += ["", "the index build by phase, per row (B - A; its stacks in the sampled runs, scaled as above):"]
        for name, dl in x.phases:
            interval = f"{signed_figure(dl.low)} to {signed_figure(dl.high)}"
            lines.append(f"  {name[:40]:<40}{ns_figure(dl.a):>9}{ns_figure(dl.b):>9}{signed_figure(dl.delta):>9}  {interval:<18}"
                         + ("" if dl.excludes_zero else "  noise"))
    if x.efficiency:
        lines += ["", "efficiency per row (A -> B):"]
        names = dict(EFFICIENCY)
        for k, dl in x.efficiency:
            lines.append(f"  {names[k]:<28} {dl.a:>10.4g} -> {dl.b:<10.4g} ({dl.delta:+.4g}"
                         + ("" if dl.excludes_zero else ", noise") + ")")
    sa, sb = x.scale
    lines += ["", f"the sampled runs' row time over the unprobed runs': A {sa:.3f}, B {sb:.3f} (what sampling "
                  "cost them; the mechanisms are scaled back)"]
    if x.apart_s is not None:
        lines.append(f"the two sides' runs: {'alternated' if x.paired else 'not alternated'}, their mean start "
                     f"times {x.apart_s:.0f} s apart")
    for warning in x.warnings:
        lines.append(f"warning: {warning}")
    return lines


def ns_figure(v: float) -> str:
    return f"{v:,.0f}ns" if abs(v) < 10_000 else f"{v / 1000:,.1f}us"


def signed_figure(v: float) -> str:
    if math.isinf(v):
        return "?"
    return ("+" if v >= 0 else "-") + ns_figure(abs(v))
