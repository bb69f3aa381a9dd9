"""compare's HTML page and differential flame graphs, from a comparison
(analysis/compare.py's result): the headline, a waterfall from A's row to
B's by mechanism, the mechanisms' table, each side's row as a bar on one
scale, the drill-down, the stages per row, the efficiency per row, and the
flame graphs of the load's threads and below each stage the drill-down
went into. Tables and charts only: the text report is compare's stdout."""

from __future__ import annotations

from operator import attrgetter

import html

from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis.compare_account import (EFFICIENCY, Explanation, answer, headline_parts, ns_figure,
                                                    signed_figure)
from mysqlprobe.analysis.compare_figures import ns_text, signed_ns
from mysqlprobe.analysis.html_report import PAGE_SCRIPT, axis_ticks
from mysqlprobe.analysis.stage_trees import CPU_NS, OFFCPU_NS
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.svg import render


def stage_bars(result: C.Comparison) -> str:
    """A bar per stage: A's and B's time per row outside nested stages."""
    changes = [c for c in result.ranked if max(c.a.median, c.b.median) > 0]
    if not changes:
        return ""
    top = max(max(c.a.median, c.b.median) for c in changes)
    rows = []
    for c in changes:
        bars = "".join(f'<div class="bar {side}" style="width:{100 * v / top:.1f}%" title="{side.upper()} '
                       f'{ns_text(v)}"><span>{side.upper()} {ns_text(v)}</span></div>'
                       for side, v in (("a", c.a.median), ("b", c.b.median)))
        rows.append(f"<tr><td>{html.escape(c.name)}</td><td class=bars>{bars}</td>"
                    f"<td>{html.escape(signed_ns(c.delta))}</td></tr>")
    return "<table class=stages><tr><th>stage</th><th>per row</th><th>B - A</th></tr>" + "".join(rows) + "</table>"


SEGMENT_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
REST_COLOUR = "#d9d9d9"


def row_bars(result: C.Comparison) -> str:
    """A's and B's row, one bar each on one scale: the row's wall time
    (unprobed where measured) split into the stages' exclusive times and
    what no stage holds."""
    w = result.wall_unprobed
    walls = (w.a.mean, w.b.mean) if w is not None else (result.wall.a.median, result.wall.b.median)
    source = "unprobed runs" if w is not None else "profiled runs, less the probes' cost"
    stages = [c for c in result.ranked if max(c.a.median, c.b.median) > 0]
    colour = {c.name: SEGMENT_COLOURS[i % len(SEGMENT_COLOURS)] for i, c in enumerate(stages)}
    sums = [sum(c.a.median for c in stages), sum(c.b.median for c in stages)]
    top = max(*walls, *sums) or 1.0
    bars, notes = [], []
    for label, side, wall, total, pick in (("A", result.a, walls[0], sums[0], attrgetter("a.median")),
                                           ("B", result.b, walls[1], sums[1], attrgetter("b.median"))):
        parts = [(c.name, pick(c), colour[c.name]) for c in stages if pick(c) > 0]
        if wall > total:
            parts.append(("not attributed to a stage", wall - total, REST_COLOUR))
        else:
            notes.append(f"{label}'s stages add up to {ns_text(total)}, {ns_text(total - wall)} more than "
                         f"its wall time per row ({source}): they were timed in the profiled runs")
        segs = "".join(f'<div class=seg style="width:{100 * v / top:.2f}%;background:{c}" '
                       f'title="{html.escape(name)}: {ns_text(v)} per row ({v / wall:.0%})"></div>'
                       for name, v, c in parts if wall)
        bars.append(f"<tr><td>{label} {html.escape(side.server)}</td>"
                    f"<td><div class=rowbar>{segs}</div></td><td>{html.escape(ns_text(wall))}</td></tr>")
    legend = "".join(f'<span class=key><i style="background:{c}"></i>{html.escape(n)}</span>'
                     for n, c in [*colour.items(), ("not attributed to a stage", REST_COLOUR)])
    return (f"<h2>A row, A against B</h2><p class=muted>wall time per row from the {source}; the stages' "
            "exclusive times from the profiled runs</p><table class=rows>" + "".join(bars) + "</table>"
            f"<div class=legend>{legend}</div>"
            + "".join(f"<p class=muted>{html.escape(n)}</p>" for n in notes))


def drilldown_html(result: C.Comparison) -> str:
    entries = result.drilldown
    if not entries:
        return ""
    items = []
    for e in entries:
        path = " &gt; ".join(f"<code>{html.escape(f)}</code>" for f in e.path)
        items.append(f"<li><b>{html.escape(signed_ns(e.delta_ns_per_row))}</b> per row "
                     f"({100 * e.share:.0f}% of the difference) {path}<br><span class=muted>"
                     f"{html.escape(e.a.line('A'))} | {html.escape(e.b.line('B'))}</span></li>")
    return "<h2>Drill-down</h2><ol>" + "".join(items) + "</ol>"


def stage_graphs(a: list[C.Run], b: list[C.Run], result: C.Comparison) -> list[tuple[str, str]]:
    """Differential flame graphs rooted at each stage the drill-down went
    into: CPU and off-CPU time per row (ns), summed over each side's repeats
    and divided by their number."""
    out: list[tuple[str, str]] = []
    for stage in dict.fromkeys(e.stage for e in result.drilldown):
        def side(runs: list[C.Run]) -> Folded:
            merged = Folded()
            for r in runs:
                if stage in r.trees:
                    merged.stacks.update(r.trees[stage].folded((CPU_NS, OFFCPU_NS), stage, 1 / len(runs)).stacks)
            return merged
        before, after = side(a), side(b)
        if before.total and after.total:
            out.append((stage, render(after, f"{stage}: {result.a.server} -> {result.b.server}",
                                      "CPU and off-CPU ns per row; red grew, blue shrank", unit="ns/row",
                                      before=before, element_id=f"stage-{len(out)}")))
    return out


def headline_html(result: C.Comparison) -> str:
    """The text report's headline, from the same source, as a sentence and
    a list: the mechanisms' where the sampled runs gave them."""
    x = result.explanation
    if x is None:
        return "<div id=headline>" + "".join(f"<p>{html.escape(line.strip())}</p>"
                                             for line in C._headline(result)) + "</div>"
    return explanation_headline_html(x, result.a.server, result.b.server)


def explanation_headline_html(x: Explanation, a_server: str, b_server: str) -> str:
    """The answer from the sampled runs: the wall delta, then its findings by mechanism."""
    parts = headline_parts(x)
    items = "".join(f"<li>{html.escape(line.strip())}"
                    + "".join(f"<br><span class=muted>{html.escape(u)}</span>" for u in under) + "</li>"
                    for line, under in parts)
    return (f"<div id=headline><p class=answer>{html.escape(answer(x, a_server, b_server))}"
            "</p>" + (f"<p>of it, by mechanism (from the sampled runs, no probe attached):</p><ul>{items}</ul>"
                      if parts else "<p>the interval holds zero: no finding.</p>") + "</div>")


WATERFALL_ROW, WATERFALL_LABEL, WATERFALL_PLOT = 26, 330, 620


def waterfall_svg(x: Explanation, server_a: str, server_b: str) -> str:
    """From A's row time to B's: each finding's delta a bar from where the
    ones before it left the row, with its 95% interval as a whisker; then
    the unattributed part (the mechanisms within noise, and what no
    mechanism names). The findings and the unattributed part add up to B's
    row."""
    steps = [(m.name, m.total.delta, (m.total.low, m.total.high)) for m in x.mechanisms if m.finding]
    u = x.unattributed
    steps.append(("unattributed", u.delta, (u.low, u.high)))
    rows, at, ends = [], x.wall.a, [x.wall.a, x.wall.b]
    for name, delta, interval in steps:
        rows.append((name, at, at + delta, interval))
        ends += [at + delta, at + interval[0], at + interval[1]]
        at += delta
    ticks = axis_ticks(max(ends) * 1.05)
    top = ticks[-1] if ticks[-1] >= max(ends) else max(ends)

    def px(v: float) -> float:
        return WATERFALL_LABEL + WATERFALL_PLOT * max(v, 0.0) / top

    height = WATERFALL_ROW * (len(rows) + 3)
    out = [f'<svg class=waterfall xmlns="http://www.w3.org/2000/svg" width="{WATERFALL_LABEL + WATERFALL_PLOT + 120}" '
           f'height="{height}" font-size="12" font-family="system-ui,sans-serif">']
    for t in ticks:
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="0" y2="{height - 18}" stroke="#e4e4e4"/>'
                   f'<text x="{px(t):.1f}" y="{height - 4}" text-anchor="middle" fill="#666">{ns_figure(t)}</text>')

    def bar(i: int, label: str, x0: float, x1: float, colour: str, value: str, title: str,
            beyond: float = 0.0) -> str:
        """A bar from x0 to x1 in row i, its value written past it (and past `beyond`, a whisker's end)."""
        y = i * WATERFALL_ROW + 4
        left, right = sorted((px(x0), px(x1)))
        return (f'<g class=step><title>{html.escape(title)}</title>'
                f'<text x="{WATERFALL_LABEL - 8}" y="{y + 14}" text-anchor="end">{html.escape(label[:48])}</text>'
                f'<rect x="{left:.1f}" y="{y}" width="{max(right - left, 1):.1f}" height="18" fill="{colour}"/>'
                f'<text x="{max(right, px(beyond)) + 6:.1f}" y="{y + 14}" fill="#333">{html.escape(value)}</text></g>')

    out.append(bar(0, f"A {server_a}", 0, x.wall.a, "#8c8c8c", ns_figure(x.wall.a), f"A's row: {ns_figure(x.wall.a)}"))
    for i, (name, x0, x1, interval) in enumerate(rows, start=1):
        colour = "#c8c8c8" if name == "unattributed" else "#d6604d" if x1 > x0 else "#4393c3"
        title = (f"{name}: {signed_figure(x1 - x0)} per row (95% {signed_figure(interval[0])} to "
                 f"{signed_figure(interval[1])})")
        out.append(bar(i, name, x0, x1, colour, signed_figure(x1 - x0), title, x0 + interval[1]))
        y = i * WATERFALL_ROW + 13
        lo, hi = px(x0 + interval[0]), px(x0 + interval[1])
        out.append(f'<path class=whisker d="M{lo:.1f},{y - 5}v10M{lo:.1f},{y}H{hi:.1f}M{hi:.1f},{y - 5}v10" '
                   'stroke="#222" fill="none"/>')
        if i < len(rows):
            y = (i + 1) * WATERFALL_ROW + 4
            out.append(f'<line x1="{px(x1):.1f}" x2="{px(x1):.1f}" y1="{y - 8}" y2="{y}" stroke="#999" '
                       'stroke-dasharray="2,2"/>')
    out.append(bar(len(rows) + 1, f"B {server_b}", 0, x.wall.b, "#555555", ns_figure(x.wall.b), f"B's row: {ns_figure(x.wall.b)}"))
    out.append("</svg>")
    return ("<h2>From A's row to B's</h2><p class=muted>wall time per row without the probes; each mechanism's "
            "B - A from the sampled runs, its 95% interval as a whisker; red grew, blue shrank</p>" + "".join(out))


def details_html(x: Explanation) -> str:
    """The efficiency per row, how the sampled runs relate to the unprobed ones, and the warnings."""
    names = dict(EFFICIENCY)
    rows = "".join(f"<tr class={'finding' if d.excludes_zero else 'noise'}><td>{html.escape(names[k])}</td>"
                   f"<td>{d.a:.4g}</td><td>{d.b:.4g}</td><td>{d.delta:+.4g}</td>"
                   f"<td>{d.low:+.4g} to {d.high:+.4g}</td></tr>" for k, d in x.efficiency)
    sa, sb = x.scale
    notes = [f"the sampled runs' row time over the unprobed runs': A {sa:.3f}, B {sb:.3f} (what sampling cost "
             "them; the mechanisms are scaled back)"]
    if x.apart_s is not None:
        notes.append(f"the two sides' runs: {'alternated' if x.paired else 'not alternated'}, their mean start "
                     f"times {x.apart_s:.0f} s apart")
    return ((("<h2>Efficiency per row</h2><table class=mechanisms><tr><th>per row</th><th>A</th><th>B</th>"
              f"<th>B - A</th><th>95% interval</th></tr>{rows}</table>") if rows else "")
            + "".join(f"<p class=muted>{html.escape(n)}</p>" for n in notes)
            + ("<ul class=warnings>" + "".join(f"<li>warning: {html.escape(w)}</li>" for w in x.warnings) + "</ul>"
               if x.warnings else ""))


def mechanisms_html(x: Explanation | None) -> str:
    """The delta by mechanism as a table, A's row time to B's: each part's
    signed ns per row, its interval, on and off CPU, finding or noise."""
    if x is None:
        return ""
    rows = []
    for m in x.mechanisms:
        if max(abs(m.total.a), abs(m.total.b)) < 1:
            continue
        rows.append(f"<tr class={'finding' if m.finding else 'noise'}><td>{html.escape(m.name)}</td>"
                    f"<td>{m.total.a:,.0f}</td><td>{m.total.b:,.0f}</td><td>{m.total.delta:+,.0f}</td>"
                    f"<td>{m.total.low:+,.0f} to {m.total.high:+,.0f}</td><td>{m.on_cpu.delta:+,.0f}</td>"
                    f"<td>{m.off_cpu.delta:+,.0f}</td><td>{'finding' if m.finding else 'noise'}</td></tr>")
    u = x.unattributed
    rows.append(f"<tr class=rest><td>unattributed</td><td></td><td></td><td>{u.delta:+,.0f}</td>"
                f"<td>{u.low:+,.0f} to {u.high:+,.0f}</td><td></td><td></td><td></td></tr>")
    return ("<h2>The delta per row by mechanism (ns, B - A)</h2><table class=mechanisms><tr><th>mechanism</th>"
            "<th>A</th><th>B</th><th>B - A</th><th>95% interval</th><th>on CPU</th><th>off CPU</th><th></th></tr>"
            + "".join(rows) + f"<tr class=wall><td>wall time per row</td><td>{x.wall.a:,.0f}</td>"
            f"<td>{x.wall.b:,.0f}</td><td>{x.wall.delta:+,.0f}</td><td>{x.wall.low:+,.0f} to {x.wall.high:+,.0f}</td>"
            "<td></td><td></td><td></td></tr></table>")


def phases_html(x: Explanation | None) -> str:
    """An index build's delta per row by phase (the sampled runs' stacks)."""
    if x is None or not x.phases:
        return ""
    rows = [f"<tr class={'finding' if d.excludes_zero else 'noise'}><td>{html.escape(name)}</td>"
            f"<td>{d.a:,.0f}</td><td>{d.b:,.0f}</td><td>{d.delta:+,.0f}</td>"
            f"<td>{d.low:+,.0f} to {d.high:+,.0f}</td></tr>" for name, d in x.phases]
    return ("<h2>The index build by phase (ns per row, B - A)</h2><table class=mechanisms><tr><th>phase</th>"
            "<th>A</th><th>B</th><th>B - A</th><th>95% interval</th></tr>" + "".join(rows) + "</table>")


def render_html(result: C.Comparison, svg: str | None,
                stage_svgs: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> str:
    x = result.explanation
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>mysqlprobe compare</title>"
            f"<script>{PAGE_SCRIPT}</script>"
            "<style>body{font:14px system-ui,sans-serif;margin:24px auto;max-width:1240px}"
            ".muted{color:#666}.answer{font-size:16px;font-weight:600}#headline li{margin:4px 0}"
            ".warnings{color:#8a4b00}"
            ".stages td,.mechanisms td{padding:2px 8px}.mechanisms td:not(:first-child){text-align:right}"
            ".mechanisms .noise{color:#888}.mechanisms .wall{font-weight:bold}"
            ".bars{width:640px}.bar{height:14px;margin:1px 0;font-size:11px;"
            "white-space:nowrap}.bar.a{background:#8fb3d9}.bar.b{background:#e39b7b}"
            ".rows td{padding:2px 8px;white-space:nowrap}.rowbar{width:900px;display:flex}.seg{height:22px}"
            ".key{margin-right:14px;font-size:12px}.key i{display:inline-block;width:10px;height:10px;"
            "margin-right:4px}</style></head><body>"
            f"<h1>{html.escape(result.a.server)} vs {html.escape(result.b.server)}</h1>"
            + headline_html(result)
            + (waterfall_svg(x, result.a.server, result.b.server) if x is not None else "")
            + mechanisms_html(x)
            + phases_html(x)
            + row_bars(result)
            + drilldown_html(result)
            + "<h2>Stages, per row</h2>" + stage_bars(result)
            + "".join(f"<h2>Below {html.escape(stage)}</h2>{g}" for stage, g in stage_svgs)
            + (details_html(x) if x is not None else "")
            + (f"<h2>Differential flame graph of the load's threads, "
               f"{'wall time' if result.explanation else 'samples'} per row</h2>{svg}" if svg else "")
            + "</body></html>\n")


def diff_graph(a: list[C.Run], b: list[C.Run], result: C.Comparison) -> str | None:
    """The load's threads' CPU samples per row inserted, B against A; None
    where a side has none."""
    before, after = C.merged_stacks(a), C.merged_stacks(b)
    if not (before.total and after.total):
        return None
    rows_a, rows_b = sum(r.rows for r in a), sum(r.rows for r in b)
    return render(after, f"{result.a.server} -> {result.b.server}",
                  "red grew, blue shrank (CPU samples per row inserted)", unit="samples/row",
                  before=before, scale_after=1 / rows_b, scale_before=1 / rows_a)
