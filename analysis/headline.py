"""The answer first: where a row's time went, in a dozen lines.

From the Profile's stage figures (the same the tables print), per row the
load wrote: each probed stage's exclusive time (its own, less the probed
stages its calls hold), and what no probe covers, so that the parts add
up to the row's time without the probes. A stage whose figure broke a
physical bound (analysis/consistency.py) is shown withheld, not counted."""

from __future__ import annotations


import textwrap
from dataclasses import dataclass

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.figures import exclusive_totals
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import StageSummary, measured_slowdown, window_ns

ROOT_STAGES = ("sql.statement",)   # the whole statement: what it holds beyond the stages is "not probed"
SKEWED = 1.5                       # partitions' rows max/min above this: skewed
SHOWN_STAGES = 6
TOP_DIGESTS = 3                    # digest blocks under the window's, when the load mixed statements
MIN_PROBED = 5                     # executions probed whole before a digest's parts are shown


@dataclass(frozen=True)
class Part:
    stage: str
    ns_per_row: float | None      # None: withheld
    share: float | None           # of the row's time without the probes


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
        parts = [Part(f.stage, f.exclusive_ns / per_row, f.exclusive_ns / own)
                 for f in sorted(d.functions, key=lambda f: -f.exclusive_ns) if f.exclusive_ns > 0]
        probed = sum(f.exclusive_ns for f in d.functions)
        # parts that come to more than the statement cannot all be true: the rest is not printed
        rest = own - probed
        not_probed = Part("not probed", rest / per_row, rest / own) if rest >= 0 else None
        out.append(DigestHeadline(" ".join(d.digest_text.split()), d.executions, d.executions_from, rows,
                                  "row" if per_row == rows else "execution", d.raw_mean_ns, own, parts,
                                  not_probed))
    return out


def rows_written(profile: Profile) -> tuple[int | None, str]:
    """Rows the load inserted (the server's Innodb_rows_inserted), else the rows it changed."""
    status = profile.perf_schema.server_status
    if status.get("Innodb_rows_inserted"):
        return int(status["Innodb_rows_inserted"]), "Innodb_rows_inserted"
    rows = profile.window.rows_changed
    return (int(rows), profile.window.rows_counter or "rows changed") if rows else (None, "")


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
    slowed = o.measured_slowdown
    sampling = profile.sampling
    if sampling.sampled:
        share = sampling.on_s / profile.window.duration_s if profile.window.duration_s else 0.0
        what = f"probes on {share:.0%} of the window ({sampling.cycles} cycles)"
    else:
        what = "every call counted (--exact)"
    measured = ("slowdown not measured" if not slowed else "no slowdown measured" if slowed < 1
                else f"the load ran {slowed:.2f}x slower, measured")
    return f"{what}; {measured}"


def headline(profile: Profile) -> Headline:
    rows, rows_from = rows_written(profile)
    load_s = profile.sampling.load_s or window_ns(profile) / 1e9
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
                    cost_line(profile))


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
                              "(the probes' cost inside it is known to its calibration's doubt; --exact "
                              "or a longer window)")
    return lines + _part_lines(shown + [d.not_probed], "    ")


def render(h: Headline, digests: list[DigestHeadline] | None = None) -> list[str]:
    lines = ["WHERE AN INSERTED ROW'S TIME WENT"] + _window_lines(h)
    if digests:
        lines.append("  per statement digest (its executions probed whole):")
        for d in digests:
            lines += render_digest(d)
    return lines


def _window_lines(h: Headline) -> list[str]:
    fmt = H.format_ns
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
