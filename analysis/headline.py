"""The answer first: where a row's time went, in a dozen lines.

From the Profile's stage figures (the same the tables print), per row the
load wrote: each probed stage's exclusive time (its own, less the probed
stages its calls hold), and what no probe covers, so that the parts add
up to the row's time without the probes. A stage whose figure broke a
physical bound (analysis/consistency.py) is shown withheld, not counted."""

from __future__ import annotations


import textwrap
from dataclasses import dataclass, field

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.account import MAX_UNATTRIBUTED, NOT_TRACED, Account
from mysqlprobe.analysis.mechanisms import IDLE, OTHER, PROBES_MECHANISM
from mysqlprobe.analysis.consistency import MEAN, PERCENTILES, withheld
from mysqlprobe.analysis.figures import exclusive_totals
from mysqlprobe.analysis.index_build import SUBJECT as INDEX_BUILD_SUBJECT
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import StageSummary, load_span_seconds, measured_slowdown, rows_inserted
from mysqlprobe.analysis.views import WITHHELD, Overhead, StageFigure

UNATTRIBUTED = (OTHER, NOT_TRACED)      # the account's parts that name no mechanism
ROOT_STAGES = ("sql.statement",)   # the whole statement: what it holds beyond the stages is "not probed"
SKEWED = 1.5                       # partitions' rows max/min above this: skewed
SHOWN_STAGES = 6
SHOWN_MECHANISMS = 10
MIN_SHARE = 0.01                   # a mechanism under this share of the row is summed with the others
TOP_DIGESTS = 3                    # digest blocks under the window's, when the load mixed statements
MIN_PROBED = 5                     # executions probed whole before a digest's parts are shown


@dataclass(frozen=True)
class Part:
    stage: str
    ns_per_row: float | None      # None: withheld
    share: float | None           # of the row's time without the probes
    on_cpu_ns: float | None = None    # per row, where the wall-time account split it
    off_cpu_ns: float | None = None


@dataclass(frozen=True)
class Probed:
    """A probed stage beside the account: the probes' counts and per-call latencies."""

    stage: str
    calls: float
    estimated: bool
    mean: str
    p50: str
    p99: str


@dataclass(frozen=True)
class Headline:
    rows: int | None
    rows_from: str
    load_s: float
    unprobed_s: float | None
    parts: list[Part]
    not_probed: Part | None
    skew: str | None
    cost: str
    account: Account | None = None        # the parts are its mechanisms where there is one
    probed: list[Probed] = field(default_factory=list)
    subject: str = "insert"               # or "index build": its rows are those the build indexed


@dataclass(frozen=True)
class DigestHeadline:
    """One statement digest's executions, per row it wrote (per execution
    where it wrote none): the probed functions' own time and the rest, out
    of the statement's time less the probes' cost."""
    text: str
    executions: int
    executions_from: str
    rows_each: float | None
    per: str                      # "row" or "execution"
    measured_ns: float            # per execution, as timed with the probes
    unprobed_ns: float            # per execution, the probes' calibrated cost taken off
    parts: list[Part]
    not_probed: Part | None       # None: the probed parts came to more than the statement (withheld)


def digest_headlines(profile: Profile) -> list[DigestHeadline]:
    """The digests that ran probed functions, most time first; none when
    only one did (the window's block above is then its block)."""
    shown = [d for d in profile.by_digest if d.functions and d.executions_probed >= MIN_PROBED and d.mean_ns > 0]
    if len(shown) < 2:
        return []
    out = []
    for d in shown[:TOP_DIGESTS]:
        rows = d.rows_per_execution
        per_row = rows if rows and rows >= 1 else 1.0
        own = d.mean_ns
        # each function's own time, its probed callees' left out: a caller's part says so, so that it is
        # not read as the whole call the table above gives
        parts = [Part(f.stage + (" (self)" if f.inclusive_ns > f.exclusive_ns else ""), f.exclusive_ns / per_row,
                      f.exclusive_ns / own)
                 for f in sorted(d.functions, key=lambda f: -f.exclusive_ns) if f.exclusive_ns > 0]
        probed = sum(f.exclusive_ns for f in d.functions)
        # parts that come to more than the statement cannot all be true: the rest is not printed
        rest = own - probed
        not_probed = Part("not probed", rest / per_row, rest / own) if rest >= 0 else None
        out.append(DigestHeadline(" ".join(d.digest_text.split()), d.executions, d.executions_from, rows,
                                  "row" if per_row == rows else "execution", d.raw_mean_ns, own, parts,
                                  not_probed))
    return out


def partition_calls(s: StageSummary) -> dict[int, int]:
    """A stage's calls per partition id."""
    return {pid: p.calls for pid, p in s.partitions.items()}


def skewed(counts: dict[int, int]) -> bool:
    """Calls per partition uneven: max/min above SKEWED (or a partition with none)."""
    low, high = min(counts.values()), max(counts.values())
    return not low or high / low > SKEWED


def partition_skew(profile: Profile) -> str | None:
    s = next((s for s in profile.stages if s.stage == "partition.write_row" and s.partitions), None)
    if s is None:
        return None
    counts = partition_calls(s)
    total = sum(counts.values())
    if not total or len(counts) < 2:
        return None
    if not skewed(counts):
        return f"balanced over {len(counts)} partitions: max/min {max(counts.values()) / min(counts.values()):.2f}"
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return "skewed: " + ", ".join(f"p{pid} {n / total:.0%}" for pid, n in top) + f" of the rows ({len(counts)} partitions)"


def cost_line(profile: Profile) -> str:
    o = profile.overhead
    sampling = profile.sampling
    if sampling.sampled:
        share = sampling.on_s / profile.window.duration_s if profile.window.duration_s else 0.0
        what = f"probes on {share:.0%} of the time, in {sampling.cycles} spells"
        budget = sampling.overhead_budget
        if budget and round(share, 2) > budget:
            # the pacing keeps the load's slowdown within the budget; cheap probes may be on longer
            what += f" (more than the {budget:.0%} budget, which bounds the slowdown, not the time on)"
    else:
        what = "every call counted (--exact)"
    return f"{what}; {slowdown_words(o)}"


def slowdown_words(o: Overhead) -> str:
    """What the run cost the load, as every report says it: the measured
    slowdown with its 95% interval; 'not measurable' with its doubt where
    the measure fell below 1.0 (the load's own variation outweighed it)."""
    if o.measured_slowdown is not None:
        interval = o.slowdown_interval
        return (f"the load ran {o.measured_slowdown:.2f}x slower"
                + (f" (95%: {interval[0]:.2f}-{interval[1]:.2f})" if interval else ""))
    if o.slowdown_estimate is not None:
        return f"slowdown not measurable (±{o.slowdown_doubt or 0:.2f})"
    return "slowdown not measured"


def probed_stages(profile: Profile) -> list[Probed]:
    """The probed stages as the stage table prints them: calls and latencies per call."""
    def shown(f: StageFigure, figure: str, *texts: str) -> tuple[str, ...]:
        # a figure the stage table withholds is withheld here too: one value per figure
        return (WITHHELD,) * len(texts) if withheld(profile.consistency, f.stage, figure) else texts
    return [Probed(f.stage, f.calls, profile.sampled, *shown(f, MEAN, f.mean), *shown(f, PERCENTILES, f.p50, f.p99))
            for f in profile.figures
            if f.stage not in ROOT_STAGES and not f.stage.startswith("sql.stage") and f.counted]


def account_headline(profile: Profile, a: Account, rows: int, rows_from: str, load_s: float) -> Headline:
    """The wall-time account per row: its mechanisms, on and off CPU, and
    what it could not attribute; the probed stages' counts beside it."""
    row_ns = a.row_time_ns
    shown = [p for p in a.mechanisms if p.name not in UNATTRIBUTED]
    parts = [Part(p.name, p.ns / rows, p.ns / row_ns, p.on_cpu_ns / rows, p.off_cpu_ns / rows) for p in shown]
    rest = [p for p in a.mechanisms if p.name in UNATTRIBUTED]
    unattributed = Part("unattributed", sum(p.ns for p in rest) / rows, sum(p.ns for p in rest) / row_ns,
                        sum(p.on_cpu_ns for p in rest) / rows, sum(p.off_cpu_ns for p in rest) / rows)
    return Headline(rows, rows_from, load_s, None, parts, unattributed, partition_skew(profile), cost_line(profile),
                    a, probed_stages(profile), profile.subject)


def headline(profile: Profile) -> Headline:
    load_s = load_span_seconds(profile)
    a = profile.account
    if a is not None and a.rows and a.row_time_ns > 0:
        return account_headline(profile, a, a.rows, a.rows_from, load_s)
    rows, rows_from = rows_inserted(profile)
    slowdown = measured_slowdown(profile)
    # a load that measured faster with the probes than without ran as fast: noise, not a gain
    unprobed_s = load_s / max(slowdown, 1.0) if slowdown else None
    exclusive = exclusive_totals(profile)
    row_ns = unprobed_s * 1e9 / rows if rows and unprobed_s else None
    parts = []
    for stage, ns in sorted(exclusive.items(), key=lambda kv: -(kv[1] or 0)):
        if stage in ROOT_STAGES or stage.startswith("sql.stage"):
            continue
        per_row = ns / rows if ns is not None and rows else None
        parts.append(Part(stage, per_row, per_row / row_ns if per_row is not None and row_ns else None))
    not_probed = None
    if row_ns is not None and any(p.ns_per_row is not None for p in parts):
        # what no probe covers; a withheld stage's part is in it, and the label says so
        rest = max(row_ns - sum(p.ns_per_row or 0 for p in parts), 0.0)
        label = "not probed" if all(p.ns_per_row is not None for p in parts) else "not probed, or withheld"
        not_probed = Part(label, rest, rest / row_ns)
    return Headline(rows, rows_from, load_s, unprobed_s, parts, not_probed, partition_skew(profile),
                    cost_line(profile), subject=profile.subject)


def _prose(text: str) -> list[str]:
    return textwrap.wrap(text, 80, initial_indent="  ", subsequent_indent="    ")


def _part_lines(parts: list[Part], indent: str = "  ") -> list[str]:
    fmt = H.format_ns
    lines = []
    for p in parts:
        if p.ns_per_row is None:
            lines.append(f"{indent}{p.stage:<28} {'?':>8}  withheld (see 'withheld' below)")
            continue
        share = f"{p.share:6.1%}" if p.share is not None else "     -"
        bar = "#" * round((p.share or 0) * 30)
        lines.append(f"{indent}{p.stage:<28} {fmt(p.ns_per_row):>8} {share}  {bar}")
    return lines


def render_digest(d: DigestHeadline) -> list[str]:
    fmt = H.format_ns
    each = f", {d.rows_each:g} row{'' if d.rows_each == 1 else 's'} each" if d.rows_each else ""
    lines = [f"  {d.text[:78]}"]
    lines += _prose(f"  {d.executions:,} executions ({d.executions_from}){each}; {fmt(d.unprobed_ns)} each "
                    f"without the probes ({fmt(d.measured_ns)} with them); per {d.per}:")
    shown = d.parts[:SHOWN_STAGES]
    if d.not_probed is None:
        return lines + _prose("  its probed functions' time came to more than the statement's: not shown "
                              "(the probes' own cost inside it is not known closely enough; --exact "
                              "or a longer window)")
    return lines + _part_lines(shown + [d.not_probed], "    ")


def render(h: Headline, digests: list[DigestHeadline] | None = None) -> list[str]:
    title = "WHERE A ROW'S TIME WENT IN THE INDEX BUILD" if h.subject == INDEX_BUILD_SUBJECT else \
        "WHERE AN INSERTED ROW'S TIME WENT"
    lines = [title] + _window_lines(h)
    if digests:
        lines.append("  per statement digest (its executions probed whole):")
        for d in digests:
            lines += render_digest(d)
    return lines


def _account_lines(h: Headline) -> list[str]:
    """The account per row: each mechanism on and off CPU, the unattributed
    rest named by its functions, the threads' totals and the efficiency."""
    fmt = H.format_ns
    a = h.account
    assert a is not None and h.rows
    row_ns = a.row_time_ns / h.rows
    on = sum(p.on_cpu_ns for p in a.mechanisms) / h.rows
    lines = _prose(f"{h.rows:,} rows ({h.rows_from}) in {h.load_s:.3g}s; {fmt(row_ns)} of the load's thread "
                   f"time a row ({a.threads} thread{'' if a.threads == 1 else 's'}): {fmt(on)} on CPU, "
                   f"{fmt(row_ns - on)} off it")
    lines.append(f"  {'':<38} {'a row':>8} {'share':>6} {'on CPU':>8} {'off CPU':>8}")
    shown = [p for p in h.parts if (p.share or 0) >= MIN_SHARE][:SHOWN_MECHANISMS]
    hidden = [p for p in h.parts if p not in shown]
    for p in shown + ([Part(f"{len(hidden)} more mechanisms", sum(p.ns_per_row or 0 for p in hidden),
                            sum(p.share or 0 for p in hidden), sum(p.on_cpu_ns or 0 for p in hidden),
                            sum(p.off_cpu_ns or 0 for p in hidden))] if hidden else []) + [h.not_probed]:
        if p is None:
            continue
        lines.append(f"  {p.stage[:38]:<38} {fmt(p.ns_per_row or 0):>8} {p.share or 0:6.1%} "
                     f"{fmt(p.on_cpu_ns or 0):>8} {fmt(p.off_cpu_ns or 0):>8}")
    other = a.part(OTHER)
    if other and other.functions:
        lines += _prose("unattributed: no catalog mechanism on the stack; innermost functions "
                        + ", ".join(f"{f} {fmt(ns / h.rows)}" for f, ns in other.functions[:3]))
    if a.unattributed_share is not None and a.unattributed_share > MAX_UNATTRIBUTED:
        lines += _prose(f"more than {MAX_UNATTRIBUTED:.0%} unattributed: the stacks above name the functions a "
                        "mechanism is missing for (docs/wall-time.md)")
    idle, probes = (a.part(name) for name in (IDLE, PROBES_MECHANISM))
    lines += _prose(f"the kernel's per-thread times, split by the threads' stacks (CPU samples, traced switches); "
                    f"{fmt(idle.ns / h.rows if idle else 0)} a row of waiting for the client and "
                    f"{fmt(probes.ns / h.rows if probes else 0)} of the probes' own machinery are not in it")
    e = a.efficiency
    if e:
        bits = [f"CPU {e.cpu_us_foreground:.3g}us in the load's threads, {e.cpu_us_background:.3g}us in the "
                "background"] if e.cpu_us_foreground is not None and e.cpu_us_background is not None else []
        bits += [f"{e.context_switches:.3g} context switches" if e.context_switches is not None else "",
                 f"{e.kb_written:.3g} KB written" if e.kb_written is not None else "",
                 f"{e.fsyncs:.3g} fsyncs" if e.fsyncs is not None else "",
                 f"{e.redo_bytes:.3g} redo bytes" if e.redo_bytes is not None else ""]
        lines += _prose("per row: " + ", ".join(b for b in bits if b))
    if h.probed:
        counted = "~ estimated from the part of the time the probes were on" if any(s.estimated for s in h.probed) else "every call counted"
        lines += _prose(f"probed functions (calls: {counted}; latency per call; the stage tables below):")
        for s in h.probed[:SHOWN_STAGES]:
            calls = f"~{s.calls:,.0f}" if s.estimated else f"{s.calls:,.0f}"
            spread = f"  p50 {s.p50:>8}  p99 {s.p99:>8}" if (s.p50, s.p99) != (WITHHELD, WITHHELD) else ""
            lines.append(f"    {s.stage:<28} {calls:>12} calls  mean {s.mean:>8}{spread}")
    if h.skew:
        lines += _prose(f"partitions: {h.skew}")
    return lines + _prose(f"cost: {h.cost}")


def _window_lines(h: Headline) -> list[str]:
    fmt = H.format_ns
    if h.account is not None and h.rows:
        return _account_lines(h)
    if not h.rows:
        return _prose("no rows written in the window (or no server connection to count them): the "
                      "stage tables below have the calls")
    unprobed = (f"{h.unprobed_s:.3g}s without the probes, {fmt(h.unprobed_s * 1e9 / h.rows)} a row"
                if h.unprobed_s else "its time without the probes not measured")
    lines = _prose(f"{h.rows:,} rows ({h.rows_from}) in {h.load_s:.3g}s; {unprobed}")
    shown = [p for p in h.parts if p.ns_per_row is None or p.ns_per_row > 0][:SHOWN_STAGES]
    lines += _part_lines(shown + ([h.not_probed] if h.not_probed else []))
    lines += _prose("per row, each stage's own time (less its probed callees')"
                    + ("; shares of the row's time without the probes" if h.unprobed_s else ""))
    if h.skew:
        lines += _prose(f"partitions: {h.skew}")
    return lines + _prose(f"cost: {h.cost}")
