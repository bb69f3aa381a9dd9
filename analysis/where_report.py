"""The text report's "where the time went" blocks: per statement and
thread (statement -> P_S stage -> probed functions), and per statement
digest (per execution: probed functions, the probes, the rest)."""

from __future__ import annotations

from collections.abc import Sequence

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.attribution import Node
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.textfit import fit as _fit, pct
from mysqlprobe.analysis.views import WITHHELD  # as the stage table: a figure that broke a bound

fmt = H.format_ns
BELOW_ZERO = "?"
BELOW_ZERO_NOTE = ("? below 0 once the probes' calibrated cost was taken off: their cost outweighs these calls "
                   "here (a busy host, or calls shorter than a probe); --raw gives the times as measured")


class Figures:
    """Times and shares as printed: a time below 0 (the probes' calibrated
    cost taken off more than the calls took) is not a figure, shown '?'."""

    def __init__(self) -> None:
        self.below_zero = False

    def time(self, ns: float | None, mark: str = "") -> str:
        if mark == "?":
            return WITHHELD
        if ns is None or ns < 0:
            self.below_zero = self.below_zero or ns is not None
            return BELOW_ZERO
        return mark + (H.upper_ns(ns) if mark == "<" else fmt(ns))

    def share(self, ns: float | None, total: float, mark: str = "") -> str:
        if mark == "?" or ns is None or ns < 0:
            return BELOW_ZERO
        return mark + pct(ns / total)

    def note(self) -> list[str]:
        return [BELOW_ZERO_NOTE] if self.below_zero else []


def _tree_lines(nodes: Sequence[Node], total_ns: int, depth: int, f: Figures) -> list[str]:
    lines = []
    for n in nodes:
        label = "  " * depth + n.stage
        excess, mark = n.callees_exceed_ns, n.mark
        excl = (" (self n/a)" if excess else f" (self {f.time(n.exclusive_ns, n.exclusive_mark or '')})"
                if n.children else "")
        lines.append(f"{label[:44]:<44} {f.time(n.inclusive_ns, mark):>7} "
                     f"{f.share(n.inclusive_ns, total_ns, mark):>6}{excl}")
        if excess and not mark:
            lines.append("  " * (depth + 1) + f"(its probed callees come to {fmt(excess)} more "
                         "than it: each time is corrected for the probes on its own)")
        if n.partitions:
            parts = " ".join(f"p{p.id} {pct(p.share)}" for p in n.partitions[:8])
            more = f" +{len(n.partitions) - 8}" if len(n.partitions) > 8 else ""
            lines.append("  " * (depth + 1) + f"by partition: {parts}{more}")
        lines += _tree_lines(n.children, total_ns, depth + 1, f)
    return lines

def attribution_block(profile: Profile) -> list[str]:
    trees = profile.attribution
    if not trees:
        if profile.perf_schema.collected:
            return ["", "Performance Schema: no statement of another session ran in the window"]
        return []
    lines = ["", "where the time went: statement -> P_S stage -> probed functions"]
    f = Figures()
    for t in trees:
        total = max(t.in_window_ns, 1)
        text = " ".join(t.statement.split())
        lines.append(f"{text[:60]:<60} {fmt(t.in_window_ns):>7}")
        others = t.statements - 1
        if others:
            lines.append(f"  (and {others} other statement{'s' if others > 1 else ''} of its thread in the window: "
                         "the probes count per thread)")
        lines.append(f"  (probe time joined by {t.join})")
        if t.history_short:
            lines.append("  (its thread ran more statements than P_S's history kept: their probe time "
                         "is shown per digest, not here)")
        if t.stages_from == "thread summary":
            lines.append("  (stages from the thread's P_S summary: the stage history was overrun)")
        elif t.stages_from == "none":
            lines.append("  (P_S kept none of its stages: the stage history was overrun and the "
                         "thread had ended)")
        shown = [st for st in t.stages if st.probed or st.ns >= 0.005 * total]
        for st in shown:
            lines.append(f"  {st.stage[:42]:<42} {fmt(st.ns):>7} {pct(st.ns / total):>6}")
            lines += _tree_lines(st.probed, total, 2, f)
            if st.probed:
                lines.append(f"    {'the probes themselves (calibrated)':<40} {f.time(st.probe_cost_ns):>7} "
                             f"{f.share(st.probe_cost_ns, total):>6}")
                rest, rest_mark = st.unexplained_ns, st.unexplained_mark
                if rest_mark == ">" and rest <= 0:
                    rest_mark = "?"   # at least nothing: no figure
                lines.append(f"    {'not in probed functions':<40} {f.time(rest, rest_mark):>7} "
                             f"{f.share(rest, total, rest_mark):>6}")
        rest_stages = [st for st in t.stages if st not in shown]
        if rest_stages:
            ns = sum(st.ns for st in rest_stages)
            lines.append(f"  {f'{len(rest_stages)} other stages':<42} {fmt(ns):>7} {pct(ns / total):>6}")
        if t.background:
            lines.append("  background threads' work in the window:" if t.background_from == "P_S threads.TYPE"
                         else "  other threads' work in the window:")
            lines += _tree_lines(t.background, total, 2, f)
    return _fit(lines + f.note())

TOP_DIGESTS = 8

def digest_block(profile: Profile) -> list[str]:
    digests = profile.by_digest
    if not digests:
        return []
    lines = ["", "per statement digest, per execution: probed functions, the probes, the rest"]
    f = Figures()
    for d in digests[:TOP_DIGESTS]:
        latency = d.raw_mean_ns
        probed = sum(n.inclusive_ns for n in d.tree)
        total = max(latency, probed + d.probe_cost_ns + d.unattributed_ns, 1)
        lines.append(" ".join(d.digest_text.split())[:200])
        n = d.rows_per_execution
        rows = f", {n:g} row{'' if n == 1 else 's'} changed each" if n is not None else ""
        p99 = f", p99 {fmt(d.p99_ns)}" if d.p99_ns is not None else ""
        ps = f"; P_S's timer over all of them: {fmt(d.ps_mean_ns)}" if d.ps_mean_ns is not None else ""
        # a 0 mean of calls that took time: the probes' cost took it all off
        mean = f.time(-1 if d.mean_ns <= 0 < latency else d.mean_ns)
        lines.append(f"  {d.executions} executions ({d.executions_from}){rows}; {mean} each "
                     f"without the probes ({fmt(latency)}{p99} as measured, "
                     f"{d.executions_probed} executions probed{ps})")
        for st in [s for s in d.stages if s.probed]:
            beside = f" (P_S: {fmt(st.ps_ns)})" if st.ps_ns is not None else ""
            lines.append(f"  {st.stage + beside}")
            lines += _tree_lines(st.probed, total, 2, f)
        # probes that cost more than the statement took: their calibration does not hold here
        cost, rest = (-1, -1) if d.probe_cost_ns > latency else (d.probe_cost_ns, d.unattributed_ns)
        lines.append(f"  {'the probes themselves (calibrated)':<42} {f.time(cost):>7} {f.share(cost, total):>6}")
        lines.append(f"  {'not in probed functions':<42} {f.time(rest):>7} {f.share(rest, total):>6}")
        lines += [f"  ({note})" for note in d.notes]
        others = [s for s in d.stages if not s.probed and s.ps_ns]
        if others:
            top = ", ".join(f"{s.stage.split('/')[-1]} {fmt(s.ps_ns)}" for s in others[:4])
            lines.append(f"  other P_S stages per execution ({d.ps_stage_executions} in its history): {top}")
    if len(digests) > TOP_DIGESTS:
        lines.append(f"and {len(digests) - TOP_DIGESTS} more digests (report --json: attribution.by_digest)")
    return _fit(lines + f.note())
