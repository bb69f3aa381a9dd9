"""The figures every reporter prints for a stage, made once from the
Profile's stages: calls (estimated in sampled mode), the window's total
and share, the mean per call and the percentiles. The consistency checks
(analysis/consistency.py) read the same figures the reports print."""

from __future__ import annotations

from typing import Any, Iterable, TYPE_CHECKING

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.consistency import callers_of
from mysqlprobe.analysis.per_call import PerCall, window_total
from mysqlprobe.analysis.profile import StageSummary, estimated_calls, stage_per_call, window_ns, window_scale
from mysqlprobe.analysis.textfit import pct
from mysqlprobe.analysis.views import UNRESOLVED, WITHHELD, StageFigure

if TYPE_CHECKING:
    from mysqlprobe.analysis.model import Profile

fmt = H.format_ns


def stage_figures(stages: list[StageSummary], profile: Profile) -> list[StageFigure]:
    """Per stage, what the text and HTML reports show: calls, total and share
    stand for the whole window (in sampled mode, estimates from the duty
    cycles); percentiles are of the calls timed."""
    window = window_ns(profile)
    scale = window_scale(profile)
    out = []
    for s in stages:
        est = estimated_calls(s, profile)
        pc = stage_per_call(s, profile)
        total, bound = window_total(s.total_ns * scale, pc, est.value)
        out.append(StageFigure(stage=s.stage, calls=est.value, calls_low=est.low, calls_high=est.high,
                               counted=s.calls, total_ns=total, total_bound=bound,
                               share=total / window if window else None, **_latencies(pc, s.percentiles())))
    return out


def exclusive_totals(profile: Profile) -> dict[str, float | None]:
    """Per stage, its window total less its probed callees' totals (None: withheld)."""
    figures = {f.stage: f for f in profile.figures if f.calls and f.total_ns}
    parents = {child: parent for child, (parent, _) in callers_of(profile.probes).items()}
    out: dict[str, float | None] = {}
    for stage, f in figures.items():
        if profile.printed_totals[stage][1] == "?":
            out[stage] = None
            continue
        inner = sum(figures[c].total_ns for c, p in parents.items() if p == stage and c in figures)
        out[stage] = max(f.total_ns - inner, 0.0)
    return out


def total_text(total_ns: float, share: float | None, bound: bool = False) -> tuple[str, str]:
    """A figure's total and share as printed; a bound as '<' and two
    significant digits, rounded up."""
    if not bound:
        return fmt(total_ns), pct(share)
    return "<" + H.upper_ns(total_ns), "<" + pct(share)


def _latencies(pc: PerCall, percentiles: dict[str, Any]) -> dict[str, Any]:
    """The mean as its interval allows ("<X" where it is a bound), and the
    percentiles, starred where the probes' doubt per call outweighs the
    histogram's resolution."""
    shown = [v for v in percentiles.values() if v is not None]
    resolved = all(pc.percentile_resolved(v) for v in shown)
    # percentiles within the probes' doubt are the probes' cost, not the call's: not printed
    return {"mean_ns": pc.mean_ns, "mean": pc.text(), "per_call": pc,
            "mark": "" if resolved else UNRESOLVED,
            **{k: fmt(v) if resolved else WITHHELD for k, v in percentiles.items()}}



def unresolved_note(marks: Iterable[str], indent: str = "") -> list[str]:
    """The line that says what a '*' on percentiles means, where one is."""
    if not any(marks):
        return []
    return [f"{indent}{UNRESOLVED} percentiles withheld: the probes' cost per call is too uncertain"]


def histogram_withheld(s: StageSummary, profile: Profile) -> str | None:
    """Why a stage's latency histogram is not drawn, None where it is: it
    goes with the percentiles, withheld where they broke a bound or are
    within the probes' doubt per call."""
    from mysqlprobe.analysis.consistency import PERCENTILES, withheld
    if withheld(profile.consistency, s.stage, PERCENTILES):
        return "withheld with the percentiles, see above"
    if any(f.stage == s.stage and f.mark == UNRESOLVED for f in profile.figures):   # the figures already made
        return "withheld with the percentiles: probes' cost too uncertain"
    return None
