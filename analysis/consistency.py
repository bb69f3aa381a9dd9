"""Physical bounds every printed figure must keep. The Profile checks the
figures the reporters print (analysis/figures.py) before any reporter sees
them; a figure that breaks a bound is withheld, and the report says which
bound and what the run would need instead.

- a stage's total is at most (threads that ran it) x the window;
- a probed callee takes at most its caller's time: per call where each
  caller's call holds one of its calls, in total always;
- the stages of a row take at most the row's wall time x the threads
  that ran them: with the stage's own threads as its concurrency this is
  the first bound, so it is checked as that one;
- percentiles are not negative and are in order;
- a mean of a microsecond or more has no 0 ns median (such a median is
  the probes' correction taking the calls below their resolution);
- a mean per call from the probes rests on at least MIN_PROBED_CYCLES
  duty cycles that saw the stage (fewer are a moment of the window, often
  its start), unless the CPU bursts' figure stands in for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dataclasses import asdict, dataclass

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.per_call import SAMPLED_METHODS
from mysqlprobe.analysis.views import UNRESOLVED, Probe, StageFigure

if TYPE_CHECKING:   # the Profile is made of these figures
    from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import (MIN_CYCLE_ROWS, MIN_PROBED_CYCLES, StageSummary, cycles_with_calls,
                                         estimate_basis, sampled_cycles, stage_of, window_ns)

TOLERANCE = 0.02          # rounding, and a call begun just before the window opened
NESTED_SHARE = 0.9        # a callee is checked against the caller that holds this share of its calls
MEAN_WITH_ZERO_P50_NS = 1000
TOTAL, MEAN, PERCENTILES, CALLS = "total", "mean", "percentiles", "calls"
UNREPRESENTATIVE = 0.5    # on-phases' row rate below this share of the window's: scaled by time, they mislead


@dataclass(frozen=True)
class Violation:
    """A figure that broke a bound: not printed as a figure."""

    stage: str
    figure: str           # total, mean or percentiles
    bound: str            # the bound, in words, with the figures
    value: float
    limit: float
    needs: str            # what the run would need for the figure

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stage_threads(probes: Sequence[Probe]) -> dict[str, set[int]]:
    """The threads that ran each stage, from its probes' caller edges."""
    out: dict[str, set[int]] = {}
    for p in probes:
        out.setdefault(p.stage, set()).update(c.tid for c in p.callers if c.tid is not None)
    return out


def callers_of(probes: Sequence[Probe]) -> dict[str, tuple[str, float]]:
    """stage -> (the stage whose calls hold at least NESTED_SHARE of its calls, that share)."""
    stages = stage_of(probes)
    calls: dict[str, int] = {}
    inside: dict[tuple[str, str], int] = {}
    for p in probes:
        for c in p.callers:
            calls[p.stage] = calls.get(p.stage, 0) + c.calls
            parent = stages.get(c.parent) if c.parent is not None else None
            if parent and parent != p.stage:
                inside[(p.stage, parent)] = inside.get((p.stage, parent), 0) + c.calls
    return {stage: (parent, n / calls[stage]) for (stage, parent), n in inside.items()
            if calls[stage] and n >= NESTED_SHARE * calls[stage]}


def _needs(profile: Profile) -> str:
    if profile.sampled:
        return "a window of more duty cycles (a longer -d, or the tool started well before the load), or --exact"
    return "a longer window"


def check(profile: Profile) -> list[Violation]:
    """The bounds the printed figures break, none where all hold."""
    stages, probes, window = profile.stages, profile.probes, window_ns(profile)
    needs = _needs(profile)
    by_stage = {f.stage: f for f in profile.figures}
    threads = stage_threads(probes)
    out: list[Violation] = []
    for s in stages:
        f = by_stage.get(s.stage)
        if not f or not s.calls:
            continue
        # the threads its calls ran on; without caller edges, every thread of the process
        n = len(threads.get(s.stage) or ()) or profile.process.threads or 0
        if n and window and f.total_ns and f.total_ns > n * window * (1 + TOLERANCE):
            out.append(Violation(s.stage, TOTAL, f"{H.format_ns(f.total_ns)} in the stage, more than {n} "
                                 f"thread{'s' if n > 1 else ''} x the {H.format_ns(window)} window",
                                 f.total_ns, n * window, needs))
        out += _percentile_violations(s, f, needs)
        few = cycles_with_calls(s)
        if few is not None and few < MIN_PROBED_CYCLES and f.per_call.method not in SAMPLED_METHODS \
                and f.mean_ns is not None:
            bound = (f"its calls come from {few} duty cycle{'s' if few != 1 else ''}, a moment of the window "
                     f"(at least {MIN_PROBED_CYCLES} stand for it), and no CPU burst resolved it")
            out += [Violation(s.stage, figure, bound, f.mean_ns, float(MIN_PROBED_CYCLES), needs)
                    for figure in (MEAN, TOTAL, PERCENTILES) if not withheld(out, s.stage, figure)]
    skew = unrepresentative_phases(profile)
    if skew:
        for s in stages:
            f = by_stage.get(s.stage)
            if f and s.cycle_calls is not None and f.calls != f.counted:
                out += [Violation(s.stage, figure, skew, f.calls, f.counted, "--exact (every call counted), "
                                  "or a window the load fills") for figure in (CALLS, TOTAL)
                        if not withheld(out, s.stage, figure)]
    for child, parent, share in nestings(probes):
        c, p = by_stage.get(child), by_stage.get(parent)
        if not c or not p or c.mean_ns is None or p.mean_ns is None or not c.calls or not p.calls:
            continue
        # the callee's time inside the caller's calls is at most theirs: per call, with a
        # call of it in each of the caller's, at most the caller's time per call
        limit = p.mean_ns * p.calls / (c.calls * share)
        if c.mean_ns > limit * (1 + TOLERANCE) + 1 and not withheld(out, child, MEAN):
            out.append(Violation(child, MEAN, f"{c.mean_ns:.0f}ns per call, more than its caller {parent} "
                                 f"allows ({limit:.0f}ns: {p.mean_ns:.0f}ns per call of the caller)",
                                 c.mean_ns, limit, needs))
    return out


def unrepresentative_phases(profile: Profile) -> str | None:
    """Why the window's calls cannot be scaled from the on-phases, or None:
    scaled by time (the on-phases' rows too few to scale by), while the
    server's counter shows the load ran at another rate in them than over
    the window (a short load, most of it while the probes were off)."""
    cycles = sampled_cycles(profile)
    rows = profile.window.rows_changed
    if not cycles or not rows or rows < MIN_CYCLE_ROWS or estimate_basis(profile) != "time":
        return None
    seen = [(c.rows, c.row_s or c.on_s) for c in cycles if c.rows is not None]
    on_s, window_s = sum(t for _, t in seen), profile.window.duration_s
    if not seen or on_s <= 0 or window_s <= 0:
        return None
    on_rate, window_rate = sum(r for r, _ in seen) / on_s, rows / window_s
    if on_rate >= UNREPRESENTATIVE * window_rate:
        return None
    return (f"the on-phases saw {on_rate:,.0f} rows/s, the window {window_rate:,.0f}: the load ran mostly while "
            "the probes were off, so calls scaled by time from the on-phases miss it")


def nestings(probes: Sequence[Probe]) -> list[tuple[str, str, float]]:
    """(callee, caller, share of the callee's calls inside it) for every caller up
    the chain: a call inside write_row's innodb.write_row is inside write_row too."""
    direct = callers_of(probes)
    out = []
    for child in direct:
        parent, share, seen = direct[child][0], direct[child][1], {child}
        while parent not in seen:
            out.append((child, parent, share))
            seen.add(parent)
            if parent not in direct:
                break
            parent, share = direct[parent][0], share * direct[parent][1]
    return out


def _percentile_violations(s: StageSummary, f: StageFigure, needs: str) -> list[Violation]:
    values = s.percentiles()
    shown = [(k, v) for k, v in values.items() if v is not None]
    for k, v in shown:
        if v < 0:
            return [Violation(s.stage, PERCENTILES, f"{k} is {v:.0f}ns, below 0", v, 0.0, needs)]
    for (k1, v1), (k2, v2) in zip(shown, shown[1:]):
        if v1 > v2:
            return [Violation(s.stage, PERCENTILES, f"{k1} {v1:.0f}ns is above {k2} {v2:.0f}ns", v1, v2, needs)]
    p50, mean = values.get("p50"), f.mean_ns
    if p50 == 0 and mean is not None and mean >= MEAN_WITH_ZERO_P50_NS:
        return [Violation(s.stage, PERCENTILES, f"p50 0ns under a mean of {mean:.0f}ns: half the calls fell below "
                          "the probes' resolution once their cost was taken off", 0.0, mean,
                          "--raw for the uncorrected latencies, or --exact")]
    # (percentiles within the probes' doubt per call are withheld where they are made: figures.py, mark '*')
    if p50 and mean is not None and f.mark != UNRESOLVED and f.per_call.resolved and mean < p50 / 2:
        # half the calls took at least p50, so the mean of calls that take no less than 0 is at least p50 / 2
        return [Violation(s.stage, PERCENTILES, f"p50 {H.format_ns(p50)} is more than twice the mean "
                          f"{H.format_ns(mean)}: half the calls cannot take more than twice the mean", p50, 2 * mean,
                          SHORT_CALL_NEEDS)]
    return []


# what a call too short for a probe's per-call timing needs instead
SHORT_CALL_NEEDS = ("no per-call probe resolves a call this short; its mean per call (from the calls counted and "
                    "the CPU samples) stands")


def withheld(violations: list[Violation], stage: str, figure: str) -> bool:
    return any(v.stage == stage and v.figure == figure for v in violations)


def report_lines(violations: list[Violation]) -> list[str]:
    """What the text report says in place of the withheld figures: each
    stage's figures that broke one bound on one line, what the run would
    need once per need, under 80 columns."""
    if not violations:
        return []
    import textwrap
    grouped: dict[tuple[str, str], list[str]] = {}
    for v in violations:
        grouped.setdefault((v.stage, v.bound), []).append(v.figure)
    lines = ["withheld ('?'): figures that could not be true, and why:"]
    for (stage, bound), figures in grouped.items():
        lines += textwrap.wrap(f"{stage} {', '.join(figures)}: {bound}", 80, initial_indent="  ",
                               subsequent_indent="    ")
    for need in dict.fromkeys(v.needs for v in violations):
        lines += textwrap.wrap(f"they need {need}", 80, initial_indent="  ", subsequent_indent="    ")
    return lines
