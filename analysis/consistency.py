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
  the probes' correction taking the calls below their resolution)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.profile import StageSummary, window_ns

TOLERANCE = 0.02          # rounding, and a call begun just before the window opened
NESTED_SHARE = 0.9        # a callee is checked against the caller that holds this share of its calls
MEAN_WITH_ZERO_P50_NS = 1000
TOTAL, MEAN, PERCENTILES = "total", "mean", "percentiles"


@dataclass(frozen=True)
class Violation:
    """A figure that broke a bound: not printed as a figure."""

    stage: str
    figure: str           # total, mean or percentiles
    bound: str            # the bound, in words, with the figures
    value: float
    limit: float
    needs: str            # what the run would need for the figure

    def to_json(self) -> dict:
        return asdict(self)


def stage_threads(doc: dict) -> dict[str, set[int]]:
    """The threads that ran each stage, from its probes' caller edges."""
    out: dict[str, set[int]] = {}
    for p in doc.get("probes", []):
        name = p.get("stage") or f"probe:{p['name']}"
        out.setdefault(name, set()).update(c["tid"] for c in p.get("callers", []) if c.get("tid") is not None)
    return out


def callers_of(doc: dict) -> dict[str, tuple[str, float]]:
    """stage -> (the stage whose calls hold at least NESTED_SHARE of its calls, that share)."""
    stage_of = {p["id"]: p.get("stage") or f"probe:{p['name']}" for p in doc.get("probes", [])}
    calls: dict[str, int] = {}
    inside: dict[tuple[str, str], int] = {}
    for p in doc.get("probes", []):
        stage = stage_of[p["id"]]
        for c in p.get("callers", []):
            calls[stage] = calls.get(stage, 0) + c["calls"]
            parent = stage_of.get(c["parent"]) if c.get("parent") is not None else None
            if parent and parent != stage:
                inside[(stage, parent)] = inside.get((stage, parent), 0) + c["calls"]
    return {stage: (parent, n / calls[stage]) for (stage, parent), n in inside.items()
            if calls[stage] and n >= NESTED_SHARE * calls[stage]}


def _needs(doc: dict) -> str:
    if (doc.get("sampling") or {}).get("mode") == "sampled":
        return "a window of more duty cycles (a longer -d, or the tool started well before the load), or --exact"
    return "a longer window"


def check(stages: list[StageSummary], figures: list[dict], doc: dict) -> list[Violation]:
    """The bounds the printed figures break, none where all hold."""
    window = window_ns(doc)
    needs = _needs(doc)
    by_stage = {f["stage"]: f for f in figures}
    threads = stage_threads(doc)
    out: list[Violation] = []
    for s in stages:
        f = by_stage.get(s.stage)
        if not f or not s.calls:
            continue
        # the threads its calls ran on; without caller edges, every thread of the process
        n = len(threads.get(s.stage) or ()) or (doc.get("process") or {}).get("threads") or 0
        if n and window and f["total_ns"] and f["total_ns"] > n * window * (1 + TOLERANCE):
            out.append(Violation(s.stage, TOTAL, f"{H.format_ns(f['total_ns'])} in the stage, more than {n} "
                                 f"thread{'s' if n > 1 else ''} x the {H.format_ns(window)} window",
                                 f["total_ns"], n * window, needs))
        out += _percentile_violations(s, f, needs)
    for child, (parent, share) in callers_of(doc).items():
        c, p = by_stage.get(child), by_stage.get(parent)
        if not c or not p or c["mean_ns"] is None or p["mean_ns"] is None or not c["calls"] or not p["calls"]:
            continue
        # the callee's time inside the caller's calls is at most theirs: per call, with a
        # call of it in each of the caller's, at most the caller's time per call
        limit = p["mean_ns"] * p["calls"] / (c["calls"] * share)
        if c["mean_ns"] > limit * (1 + TOLERANCE) + 1:
            out.append(Violation(child, MEAN, f"{c['mean_ns']:.0f}ns per call, more than its caller {parent} "
                                 f"allows ({limit:.0f}ns: {p['mean_ns']:.0f}ns per call of the caller)",
                                 c["mean_ns"], limit, needs))
    return out


def _percentile_violations(s: StageSummary, f: dict, needs: str) -> list[Violation]:
    values = s.percentiles()
    shown = [(k, v) for k, v in values.items() if v is not None]
    for k, v in shown:
        if v < 0:
            return [Violation(s.stage, PERCENTILES, f"{k} is {v:.0f}ns, below 0", v, 0.0, needs)]
    for (k1, v1), (k2, v2) in zip(shown, shown[1:]):
        if v1 > v2:
            return [Violation(s.stage, PERCENTILES, f"{k1} {v1:.0f}ns is above {k2} {v2:.0f}ns", v1, v2, needs)]
    p50, mean = values.get("p50"), f.get("mean_ns")
    if p50 == 0 and mean is not None and mean >= MEAN_WITH_ZERO_P50_NS:
        return [Violation(s.stage, PERCENTILES, f"p50 0ns under a mean of {mean:.0f}ns: half the calls fell below "
                          "the probes' resolution once their cost was taken off", 0.0, mean,
                          "--raw for the uncorrected latencies, or --exact")]
    return []


def withheld(violations: list[Violation], stage: str, figure: str) -> bool:
    return any(v.stage == stage and v.figure == figure for v in violations)


def report_lines(violations: list[Violation]) -> list[str]:
    """What the text report says in place of the withheld figures."""
    if not violations:
        return []
    lines = ["withheld: figures that broke a physical bound (shown '?'):"]
    for v in violations:
        lines.append(f"  {v.stage} {v.figure}: {v.bound}; needs {v.needs}")
    return lines
