"""DIR/report.html: one self-contained page (no network) made from a capture:
the run's summary, where the time went, each stage's latency histogram as
a chart, the partitions, the flame graph and the run's metadata."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from typing import Any

import html
import json
import math
import re

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis import report as text
from mysqlprobe.analysis.figures import histogram_withheld, total_text, unresolved_note
from mysqlprobe.analysis.index_build import SUBJECT as INDEX_BUILD_SUBJECT
from mysqlprobe.analysis.stack_summaries import CpuSummary
from mysqlprobe.analysis.stacks_report import Block, io_calls, off_cpu, samples
from mysqlprobe.flamegraphs.stacks import fold_probe_frames
from mysqlprobe.analysis.textfit import pct
from mysqlprobe.analysis.views import WITHHELD, StageFigure
from mysqlprobe.analysis.where_report import attribution_block, digest_block
from mysqlprobe.analysis.consistency import CALLS, MEAN, PERCENTILES, TOTAL, report_lines, withheld
from mysqlprobe.analysis.headline import DigestHeadline, digest_headlines, headline, partition_calls, skewed
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import StageSummary
from mysqlprobe.analysis.timeline import ON, QUIET, Timeline, timeline
from mysqlprobe.analysis.time_slices import SLICES_FULL, TimeSlices
from mysqlprobe.flamegraphs.folded import Folded

CHART_W, CHART_H = 560, 150
fmt = H.format_ns

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1240px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:6px 0} td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eee}
th{background:#f4f4f0} td:first-child,th:first-child{text-align:left}
.tree td{border:0;padding:1px 10px;font-variant-numeric:tabular-nums}
.meta td{text-align:left} .block td:last-child,.block th:last-child{text-align:left}
.block td,.block th{font-variant-numeric:tabular-nums} .stage{display:inline-block;vertical-align:top;margin:0 18px 18px 0}
.warn{color:#a40} .muted{color:#666} .est{color:#555;font-style:italic}
#search{font:13px monospace;padding:3px 6px;width:260px} tr.linked{cursor:pointer} tr.linked:hover{background:#f3f0e6}
.card{border:1px solid #ddd;border-radius:6px;padding:12px 16px;background:#fcfcfa;max-width:900px}
.card.digest{margin-top:10px} .card code{font-size:12px;word-break:break-all}
.card .big{font-size:20px;font-weight:600} .bar{display:flex;height:26px;margin:10px 0 6px;border:1px solid #bbb}
.sw{position:relative;border:1px solid #eee;margin:4px 0 14px;overflow:hidden}
.sw-frame{position:absolute;height:17px;background:#f4b183;border:1px solid #fff;box-sizing:border-box;
font-size:11px;line-height:16px;overflow:hidden;white-space:nowrap;padding-left:2px}
#sandwich{font:13px monospace;padding:3px 6px;width:360px}
svg.brushable{cursor:crosshair;user-select:none} #span-note{min-height:1.4em}
.seg{height:100%} .key{display:inline-block;margin:2px 14px 2px 0} .key i{display:inline-block;width:11px;
height:11px;margin-right:5px;vertical-align:-1px}
"""

PAGE_SCRIPT = """
window.mpErrors = [];
window.addEventListener('error', function (e) {
  window.mpErrors.push(String(e.message));
  document.documentElement.setAttribute('data-errors', window.mpErrors.join(' | '));
});
function mpFlameSearch(value) {
  var svg = document.getElementById('flamegraph');
  if (svg && svg.mpSearch) svg.mpSearch(value);
}
document.addEventListener('DOMContentLoaded', function () {
  var box = document.getElementById('search');
  var m = /[#&]search=([^&]*)/.exec(window.location.hash || '');
  if (box && m) box.value = decodeURIComponent(m[1]);
  if (box) box.addEventListener('input', function () { mpFlameSearch(box.value); });
  document.querySelectorAll('tr.linked').forEach(function (row) {
    row.addEventListener('click', function () {
      var q = row.getAttribute('data-search');
      if (box) box.value = q;
      mpFlameSearch(q);
      var graph = document.getElementById('flamegraph');
      if (graph && graph.scrollIntoView) graph.scrollIntoView();
    });
  });
  var wanted = /[#&]stage=([^&]*)/.exec(window.location.hash || '');
  if (wanted) {
    document.querySelectorAll('tr.linked').forEach(function (row) {
      if (row.cells[0].textContent.replace(/[*?]$/, '') === decodeURIComponent(wanted[1])) row.click();
    });
  }
  var sandwich = document.getElementById('sandwich');
  if (sandwich) {
    var asked = /[#&]sandwich=([^&]*)/.exec(window.location.hash || '');
    if (asked) sandwich.value = decodeURIComponent(asked[1]);
    sandwich.addEventListener('change', function () { mpSandwich(sandwich.value); });
    mpSandwich(sandwich.value);
  }
  if (document.getElementById('cpu-slices')) {
    document.querySelectorAll('svg.brushable').forEach(mpBrushable);
    var clear = document.getElementById('span-clear');
    if (clear) clear.addEventListener('click', mpWholeWindow);
    mpSpanFromHash();
    window.addEventListener('hashchange', mpSpanFromHash);
  }
  document.documentElement.setAttribute('data-loaded', '1');
});
/* A sandwich view (as speedscope and Pyroscope draw one): of the CPU
   samples whose stacks hold a function, its callers above it (read down:
   the function, its caller, that one's caller) and its callees below it,
   each frame as wide as its samples. */
function mpTree(paths) {
  var root = {w: 0, c: {}};
  paths.forEach(function (p) {
    var node = root;
    root.w += p[1];
    p[0].forEach(function (f) {
      var next = node.c[f] || (node.c[f] = {n: f, w: 0, c: {}});
      next.w += p[1];
      node = next;
    });
  });
  return root;
}
function mpDrawTree(el, root) {
  el.innerHTML = '';
  var deepest = 0;
  function draw(node, left, depth) {
    Object.keys(node.c).sort().forEach(function (k) {
      var c = node.c[k], width = 100 * c.w / root.w;
      if (width >= 0.05) {
        var div = document.createElement('div');
        div.className = 'sw-frame';
        div.style.left = left + '%';
        div.style.width = width + '%';
        div.style.top = (depth * 18) + 'px';
        div.textContent = c.n;
        div.title = c.n + ': ' + c.w + ' samples, ' + width.toFixed(1) + '%';
        div.setAttribute('data-weight', c.w);
        div.setAttribute('data-depth', depth);
        el.appendChild(div);
        deepest = Math.max(deepest, depth + 1);
        draw(c, left, depth + 1);
      }
      left += width;
    });
  }
  draw(root, 0, 0);
  el.style.height = (deepest * 18 + 2) + 'px';
}
function mpSandwich(name) {
  var data = JSON.parse(document.getElementById('cpu-stacks').textContent);
  var callers = [], callees = [], total = 0, self = 0, all = 0;
  Object.keys(data).forEach(function (stack) {
    var frames = stack.split(';'), i = frames.indexOf(name), w = data[stack];
    all += w;
    if (i < 0) return;
    total += w;
    if (i === frames.length - 1) self += w;
    callers.push([frames.slice(0, i + 1).reverse(), w]);
    callees.push([frames.slice(i), w]);
  });
  var summary = document.getElementById('sw-summary');
  summary.setAttribute('data-total', total);
  summary.setAttribute('data-self', self);
  summary.textContent = total ? name + ': on ' + total + ' of ' + all + ' CPU samples (' +
    (100 * total / all).toFixed(1) + '%), itself on CPU in ' + self : 'no CPU sample holds ' + name;
  mpDrawTree(document.getElementById('sw-callers'), mpTree(callers));
  mpDrawTree(document.getElementById('sw-callees'), mpTree(callees));
}
/* The timeline's brush: a drag across a chart of the window (or
   #span=FROM-TO, seconds from the window's opening) draws the flame graph
   of the CPU samples taken in that span, from the samples' slices of
   time: every slice that overlaps the span counts whole. */
function mpSlices() {
  return window.mpSliceData || (window.mpSliceData = JSON.parse(document.getElementById('cpu-slices').textContent));
}
function mpSpanFromHash() {
  var m = /[#&]span=([0-9.]+)-([0-9.]+)/.exec(window.location.hash || '');
  if (m) mpSpan(parseFloat(m[1]), parseFloat(m[2]));
}
function mpBrushable(svg) {
  var left = +svg.getAttribute('data-left'), right = +svg.getAttribute('data-right');
  var span = +svg.getAttribute('data-window'), width = +svg.getAttribute('width');
  var from = null;
  function at(ev) {
    var box = svg.getBoundingClientRect(), x = (ev.clientX - box.left) * width / box.width;
    return Math.min(Math.max((x - left) / (right - left), 0), 1) * span;
  }
  svg.addEventListener('mousedown', function (ev) { from = at(ev); mpShowBrush(from, from); ev.preventDefault(); });
  window.addEventListener('mousemove', function (ev) { if (from !== null) mpShowBrush(from, at(ev)); });
  window.addEventListener('mouseup', function (ev) {
    if (from === null) return;
    var to = at(ev), a = Math.min(from, to), b = Math.max(from, to);
    from = null;
    if (b - a > span / 500) mpSpan(a, b); else mpWholeWindow();
  });
}
function mpShowBrush(a, b) {
  document.querySelectorAll('svg.brushable').forEach(function (svg) {
    var left = +svg.getAttribute('data-left'), right = +svg.getAttribute('data-right');
    var span = +svg.getAttribute('data-window'), rect = svg.querySelector('rect.brush');
    function x(t) { return left + (right - left) * Math.min(Math.max(t / span, 0), 1); }
    var x0 = x(Math.min(a, b)), x1 = x(Math.max(a, b));
    rect.setAttribute('x', x0.toFixed(1));
    rect.setAttribute('width', Math.max(x1 - x0, 1).toFixed(1));
    rect.setAttribute('visibility', 'visible');
  });
}
function mpSpan(a, b) {
  var data = mpSlices(), counts = {}, samples = 0, first = null, last = null;
  data.slices.forEach(function (s) {
    if (s[0] >= b || s[0] + s[1] <= a) return;
    first = first === null ? s[0] : first;
    last = s[0] + s[1];
    for (var i = 0; i < s[2].length; i += 2) {
      counts[s[2][i]] = (counts[s[2][i]] || 0) + s[2][i + 1];
      samples += s[2][i + 1];
    }
  });
  var paths = Object.keys(counts).map(function (k) { return [data.stacks[k].split(';'), counts[k]]; });
  var shown = first === null ? 'no CPU sample was taken from ' + a.toFixed(2) + ' s to ' + b.toFixed(2) + ' s' :
    samples + ' of the ' + data.total + ' CPU samples of the window, taken from ' + first.toFixed(2) + ' s to ' +
    last.toFixed(2) + ' s (whole slices of ' + data.slice_s + ' s)' +
    (data.untimed ? '; ' + data.untimed + ' samples of the window have no time, and are in no span' : '');
  mpShowBrush(a, b);
  ['span-note', 'span-summary'].forEach(function (id) {
    var el = document.getElementById(id);
    if (!el) return;
    el.textContent = shown;
    el.setAttribute('data-samples', samples);
    el.setAttribute('data-from', first === null ? '' : first);
    el.setAttribute('data-to', last === null ? '' : last);
  });
  document.getElementById('span-panel').hidden = false;
  var whole = document.getElementById('flamegraph');
  if (whole) whole.style.display = 'none';
  mpDrawTree(document.getElementById('span-graph'), mpTree(paths));
  if (history.replaceState) history.replaceState(null, '', '#span=' + a.toFixed(3) + '-' + b.toFixed(3));
}
function mpWholeWindow() {
  document.querySelectorAll('svg.brushable rect.brush').forEach(function (r) { r.setAttribute('visibility', 'hidden'); });
  var note = document.getElementById('span-note');
  if (note) { note.textContent = note.getAttribute('data-hint'); note.removeAttribute('data-samples'); }
  document.getElementById('span-panel').hidden = true;
  var whole = document.getElementById('flamegraph');
  if (whole) whole.style.display = '';
  if (history.replaceState) history.replaceState(null, '', '#');
}
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}">' + (f"<tr>{head}</tr>" if header else "") + f"{body}</table>"


def histogram_chart(s: StageSummary) -> str:
    """Calls per latency bucket, log-spaced buckets left to right, p50 and
    p99 marked; an inline SVG."""
    buckets = s.histogram.buckets()
    if not buckets:
        return ""
    pct = s.percentiles()
    top = max(b.count for b in buckets)
    n = len(buckets)
    bar_w = max(min((CHART_W - 60) / n, 40), 2)
    out = [f'<svg class="hist" width="{CHART_W}" height="{CHART_H + 40}" viewBox="0 0 {CHART_W} {CHART_H + 40}" '
           f'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="sans-serif">',
           f'<line x1="40" y1="{CHART_H}" x2="{CHART_W}" y2="{CHART_H}" stroke="#999"/>',
           f'<text x="36" y="12" text-anchor="end">{top}</text><text x="36" y="{CHART_H}" text-anchor="end">0</text>']
    for i, b in enumerate(buckets):
        h = max(b.count / top * (CHART_H - 10), 1)
        x = 44 + i * bar_w
        marks = [k for k in ("p50", "p99") if (v := pct.get(k)) is not None and b.low <= v < max(b.high, b.low + 1)]
        fill = "#c0392b" if "p99" in marks else "#e67e22" if "p50" in marks else "#4a78b0"
        out.append(f'<rect x="{x:.1f}" y="{CHART_H - h:.1f}" width="{bar_w - 1:.1f}" height="{h:.1f}" fill="{fill}">'
                   f"<title>{_e(fmt(b.low))} - {_e(fmt(b.high))}: {b.count} calls</title></rect>")
        if i % max(n // 8, 1) == 0:
            out.append(f'<text x="{x:.1f}" y="{CHART_H + 14}">{_e(fmt(b.low))}</text>')
    legend = ", ".join(f"{k} {fmt(pct[k])}" for k in ("p50", "p90", "p99") if pct.get(k) is not None)
    out.append(f'<text x="44" y="{CHART_H + 32}">{_e(legend)} (orange: p50 bucket, red: p99)</text></svg>')
    return "".join(out)


TL_W, TL_H, TL_LEFT, TL_RIGHT = 900, 170, 64, 64
PHASE_FILL = {ON: "#f9c48f", QUIET: "#f1f1f1"}


def axis_ticks(top: float) -> list[float]:
    """Round gridline values from 0 up to top: 1, 2 or 5 times a power of ten apart, four to eight of them."""
    step = 10 ** math.floor(math.log10(top / 5)) if top > 0 else 1.0
    for k in (1, 2, 5, 10):
        if top / (step * k) <= 8:
            step *= k
            break
    return [round(i * step, 12) for i in range(int(top / step + 1e-9) + 1)]


def _seconds(s: float) -> str:
    return f"{s:g}s"


BRUSH = '<rect class=brush y="4" height="{h}" fill="#4a78b0" fill-opacity="0.18" stroke="#2f5e9e" visibility="hidden"/>'


def _brushable(window_s: float, height: int) -> tuple[str, str]:
    """A chart's attributes for the brush (the page script maps a drag to
    seconds with them), and its brush rectangle, hidden until a drag."""
    return (f' class=brushable data-left="{TL_LEFT}" data-right="{TL_W - TL_RIGHT}" data-window="{window_s:g}"',
            BRUSH.format(h=height))


def timeline_chart(t: Timeline, brushable: bool = False) -> str:
    """Rows per second in each phase (a blue step), the on-phases shaded,
    and the main stage's mean per call in each on-phase (red, right axis).
    brushable: a drag across it picks a span (the CPU samples' slices)."""
    rates = [p.rows_per_s for p in t.phases if p.rows_per_s is not None]
    if not rates or t.window_s <= 0:
        return ""
    ticks = axis_ticks(max(rates) * 1.05)
    top = max(ticks[-1], max(rates)) or 1.0   # no row in any phase: the axis still stands
    lat_top = max((ns for _, _, ns in t.latency), default=0.0) * 1.1 or 1.0
    plot_w = TL_W - TL_LEFT - TL_RIGHT
    def x(s: float) -> float:
        return TL_LEFT + plot_w * min(max(s / t.window_s, 0.0), 1.0)

    def y(v: float, m: float) -> float:
        return 10 + (TL_H - 10) * (1 - v / m)
    brush_attrs, brush = _brushable(t.window_s, TL_H - 4) if brushable else ("", "")
    out = [f'<svg id=timeline width="{TL_W}" height="{TL_H + 34}" viewBox="0 0 {TL_W} {TL_H + 34}"{brush_attrs} '
           'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="sans-serif">']
    # the quiet phases first, light; the on-phases over them, at least 2 px wide, with a darker edge
    for kind in (QUIET, ON):
        for p in t.phases:
            if p.kind != kind:
                continue
            rate = f"{p.rows_per_s:,.0f} rows/s" if p.rows_per_s is not None else "rows not read"
            out.append(f'<rect class="phase {p.kind}" x="{x(p.start_s):.1f}" y="10" '
                       f'width="{max(x(p.start_s + p.seconds) - x(p.start_s), 2 if kind == ON else 0.5):.1f}" '
                       f'height="{TL_H - 10}" fill="{PHASE_FILL[p.kind]}"'
                       + (' stroke="#e08a3c" stroke-width="0.6"' if kind == ON else "")
                       + f'><title>{"probes on" if kind == ON else "collectors quiet"} at {p.start_s:.3f}s for '
                       f'{p.seconds * 1000:.1f}ms: {_e(rate)}</title></rect>')
    for v in ticks:                                   # rows/s gridlines, left axis
        out.append(f'<line class=grid x1="{TL_LEFT}" x2="{TL_W - TL_RIGHT}" y1="{y(v, top):.1f}" '
                   f'y2="{y(v, top):.1f}" stroke="#e6e6e6"/><text x="{TL_LEFT - 4}" y="{y(v, top) + 3:.1f}" '
                   f'text-anchor="end" fill="#2f5e9e">{v:,.0f}</text>')
    for v in axis_ticks(t.window_s):                   # seconds, the time axis
        out.append(f'<line class=grid x1="{x(v):.1f}" x2="{x(v):.1f}" y1="10" y2="{TL_H + 3}" stroke="#e6e6e6"/>'
                   f'<text x="{x(v):.1f}" y="{TL_H + 14}" text-anchor="middle">{_seconds(v)}</text>')
    for p in t.phases:
        if p.rows_per_s is not None:
            out.append(f'<line class=rate x1="{x(p.start_s):.1f}" x2="{x(p.start_s + p.seconds):.1f}" '
                       f'y1="{y(p.rows_per_s, top):.1f}" y2="{y(p.rows_per_s, top):.1f}" stroke="#2f5e9e" '
                       f'stroke-width="2"><title>{p.rows_per_s:,.0f} rows/s ({_e(p.kind)})</title></line>')
    for start, seconds, ns in t.latency:
        cx = (x(start) + x(start + seconds)) / 2
        out.append(f'<circle class=latency cx="{cx:.1f}" cy="{y(ns, lat_top):.1f}" r="3" fill="#c0392b">'
                   f'<title>{_e(t.stage)}: {_e(fmt(ns))} per call in the on-phase at {start:.3f}s</title></circle>')
    out += [f'<line x1="{TL_LEFT}" y1="{TL_H}" x2="{TL_W - TL_RIGHT}" y2="{TL_H}" stroke="#999"/>',
            f'<line x1="{TL_LEFT}" y1="10" x2="{TL_LEFT}" y2="{TL_H}" stroke="#999"/>',
            f'<text x="{TL_LEFT - 4}" y="{TL_H + 26}" text-anchor="end" fill="#2f5e9e">rows/s</text>']
    if t.latency:
        for v in axis_ticks(lat_top)[1:]:
            out.append(f'<text x="{TL_W - TL_RIGHT + 4}" y="{y(v, lat_top) + 3:.1f}" fill="#c0392b">'
                       f'{_e(fmt(v))}</text>')
    legend = ("blue: rows/s in each phase; orange: the probes on; grey: off, with the other collectors quiet"
              + (f"; red: {t.stage}'s mean per call while the probes were on" if t.latency else ""))
    out.append(f'<text x="{TL_LEFT}" y="{TL_H + 28}">{_e(legend)}</text>{brush}</svg>')
    return "".join(out)


STRIP_H = 70


def cpu_strip(slices: TimeSlices, window_s: float, frequency_hz: float, t: Timeline | None) -> str:
    """The load's CPU over the window from the samples' slices: in each
    slice, the server's threads on CPU on average (samples over the slice's
    length times the sampling rate), on the timeline's time axis; grey where
    the sampler was off (the quiet phases). A drag across it picks a span."""
    busy = [(s, s.samples / (s.seconds * frequency_hz)) for s in slices.slices]
    top = max(axis_ticks(max((b for _, b in busy), default=1.0) * 1.05)[-1], 0.5)
    plot_w = TL_W - TL_LEFT - TL_RIGHT

    def x(sec: float) -> float:
        return TL_LEFT + plot_w * min(max(sec / window_s, 0.0), 1.0)
    attrs, brush = _brushable(window_s, STRIP_H - 4)
    out = [f'<svg id=cpu-strip width="{TL_W}" height="{STRIP_H + 30}" viewBox="0 0 {TL_W} {STRIP_H + 30}"{attrs} '
           'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="sans-serif">']
    for p in t.phases if t else ():
        if p.kind == QUIET:
            out.append(f'<rect class="phase quiet" x="{x(p.start_s):.1f}" y="4" width="{x(p.start_s + p.seconds) - x(p.start_s):.1f}" '
                       f'height="{STRIP_H - 4}" fill="{PHASE_FILL[QUIET]}"><title>sampler off (collectors quiet)</title></rect>')
    for v in axis_ticks(window_s):
        out.append(f'<line class=grid x1="{x(v):.1f}" x2="{x(v):.1f}" y1="4" y2="{STRIP_H + 3}" stroke="#e6e6e6"/>'
                   f'<text x="{x(v):.1f}" y="{STRIP_H + 14}" text-anchor="middle">{_seconds(v)}</text>')
    for s, b in busy:
        h = (STRIP_H - 8) * b / top
        out.append(f'<rect class=slice x="{x(s.start_s):.1f}" y="{STRIP_H - h:.1f}" '
                   f'width="{max(x(s.start_s + s.seconds) - x(s.start_s) - 0.5, 0.5):.1f}" height="{h:.1f}" '
                   f'fill="#6a9f58" data-samples="{s.samples}"><title>{s.start_s:.2f}s to {s.start_s + s.seconds:.2f}s: '
                   f'{s.samples} CPU samples, {b:.2f} threads on CPU</title></rect>')
    out += [f'<line x1="{TL_LEFT}" y1="{STRIP_H}" x2="{TL_W - TL_RIGHT}" y2="{STRIP_H}" stroke="#999"/>',
            f'<text x="{TL_LEFT - 4}" y="12" text-anchor="end" fill="#3d7a2c">{top:g}</text>',
            f'<text x="{TL_LEFT - 4}" y="{STRIP_H}" text-anchor="end" fill="#3d7a2c">0</text>',
            f'<text x="{TL_LEFT}" y="{STRIP_H + 27}">green: the server&#x27;s threads on CPU, on average in each '
            f'{slices.slice_s:g}-s slice (CPU samples); drag across it, or the chart above, for the flame graph '
            f'of a span</text>{brush}</svg>']
    return "".join(out)


def slices_data(slices: TimeSlices, window_s: float, total: int, untimed: int = 0) -> str:
    """The page's data for the brush: the stacks (probe frames folded, as
    the flame graph's) and, per slice, [start_s, seconds, [stack, samples, ...]];
    untimed: the window's samples in no slice (the slices' map was full)."""
    index: dict[str, int] = {}
    rows = []
    shown = slices.merged()
    for s in shown.slices:
        pairs: list[int] = []
        for stack, n in sorted(fold_probe_frames(Folded(Counter(s.stacks)))[0].stacks.items()):
            pairs += [index.setdefault(stack, len(index)), n]
        rows.append([round(s.start_s, 6), round(s.seconds, 6), pairs])
    data = {"window_s": window_s, "slice_s": round(shown.slice_s, 6), "total": total,
            "untimed": slices.untimed + untimed, "stacks": list(index), "slices": rows}
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


SKEW_W = 560


def skew_chart(s: StageSummary) -> str:
    """Rows per partition as bars, drawn only where they are uneven
    (max/min above headline.SKEWED)."""
    counts = partition_calls(s)
    if len(counts) < 2 or not skewed(counts):
        return ""
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:40]
    top, total = ranked[0][1] or 1, sum(counts.values())
    row_h = 14
    out = [f'<svg id=skew width="{SKEW_W}" height="{row_h * len(ranked) + 10}" xmlns="http://www.w3.org/2000/svg" '
           'font-size="10" font-family="sans-serif">']
    for i, (pid, n) in enumerate(ranked):
        w = (SKEW_W - 120) * n / top
        out.append(f'<text x="4" y="{i * row_h + 11}">p{pid}</text><rect x="40" y="{i * row_h + 2}" width="{w:.1f}" '
                   f'height="{row_h - 3}" fill="#8e44ad"><title>p{pid}: {n:,} calls, {n / total:.1%}</title></rect>'
                   f'<text x="{44 + w:.1f}" y="{i * row_h + 11}">{n / total:.1%}</text>')
    more = f" (the top 40 of {len(counts)})" if len(counts) > 40 else ""
    return f"<p class=muted>{_e(s.stage)}: calls per partition, uneven{more}</p>" + "".join(out) + "</svg>"


STAGE_COLUMNS = ["stage", "calls", "counted", "mean", "p50", "p90", "p99", "total", "share"]


def _interval(f: StageFigure) -> str:
    return "-" if f.calls_low is None else f"{f.calls_low:,.0f} to {f.calls_high:,.0f}"


def _stage_rows(profile: Profile) -> list[list[Any]]:
    sampled = profile.sampled
    mark = "~" if sampled else ""
    rows = []
    for f in profile.figures:
        if not f.calls and not f.counted:
            continue  # on one line under the table
        def shown(figure: str, *values: str) -> list[str]:
            return [WITHHELD] * len(values) if withheld(profile.consistency, f.stage, figure) else list(values)
        calls = [*shown(CALLS, f"{mark}{f.calls:,.0f}")] + ([*shown(CALLS, _interval(f))] if sampled else [])
        rows.append([f.stage + f.mark, *calls]
                    + [f.counted, *shown(MEAN, f.mean), *shown(PERCENTILES, f.p50, f.p90, f.p99),
                       *shown(TOTAL, *total_text(f.total_ns, f.share, f.total_bound))])
    return rows


def _stage_searches(profile: Profile) -> list[str]:
    """Per row of the stage table, a regular expression of its functions' names for the flame graph's search."""
    symbols = {s.stage: s.symbols for s in profile.stages}
    out = []
    for f in profile.figures:
        if not f.calls and not f.counted:
            continue
        names = sorted({re.escape(sym.split("(")[0]) for sym in symbols.get(f.stage, [])})
        out.append("|".join(names))
    return out


def _linked_table(header: list[str], rows: list[list[Any]], searches: list[str]) -> str:
    """The stage table, each row finding its functions in the flame graph when clicked."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(f'<tr class=linked data-search="{_e(q)}">' + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                   for row, q in zip(rows, searches))
    return f'<table id=stages><tr>{head}</tr>{body}</table>'


def _partitions(s: StageSummary, profile: Profile) -> str:
    if not s.partitions:
        return ""
    rows = [[f"{f['id']}{f['mark']}", f["calls"], pct(f["share"]), total_text(f["total_ns"], f["share"], f["total_bound"])[0],
             f["mean"], f["p50"], f["p99"]]
            for f in text.partition_figures(s, profile)]
    return "<p class=muted>per partition</p>" + _table(["partition", "calls", "share", "total", "mean", "p50", "p99"],
                                                       rows)


def _block(b: Block | None) -> str:
    """A report block as the page shows it: sentences, a table, notes."""
    if b is None:
        return ""
    head = "".join(f"<th>{_e(h)}</th>" for h in b.header)
    body = "".join("<tr>" + "".join(f"<td class=num>{_e(c)}</td>" for c in row[:-1]) + f"<td>{_e(row[-1])}</td></tr>"
                   for row in b.rows)
    return ("".join(f"<p>{_e(s)}</p>" for s in b.lead)
            + "".join(f"<p class=muted>{_e(d)}</p>" for d in b.details)
            + (f"<table class=block><tr>{head}</tr>{body}</table>" if b.header else "")
            + "".join(f"<p class=muted>{_e(n)}</p>" for n in b.notes))


def _labelled(lines: list[str], width: int = 9) -> str:
    """Lines of 'label    figures' (the text's label column `width` wide,
    a line with none going on from the one before) as a two-column table."""
    rows: list[list[str]] = []
    for line in lines:
        label, value = line[:width].strip(), line[width:].strip()
        if line[:width].endswith(" ") and label and " " not in label:
            rows.append([label, value])
        elif rows and not label:
            rows[-1][1] += " " + value
        elif line.strip():
            rows.append(["", line.strip()])
    return _table([], rows, "meta")


def _tree(lines: list[str]) -> str:
    """An indented text block (a tree, or a list with wrapped items) as a
    table: each line a row, its first cell indented as the text indents it,
    its figures (two or more spaces apart in the text) in cells of their own."""
    rows = []
    width = 1
    for line in lines:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        cells = re.split(r"\s{2,}", line.strip())
        width = max(width, len(cells))
        rows.append((depth, cells))
    body = "".join(f'<tr><td style="padding-left:{6 + 14 * depth}px">{_e(cells[0])}</td>'
                   + "".join(f"<td>{_e(c)}</td>" for c in cells[1:]) + "</tr>" for depth, cells in rows)
    return f"<table class=tree>{body}</table>" if rows else ""


def _metadata(profile: Profile) -> str:
    doc, w, sampling = profile.doc, profile.window, profile.sampling
    target, eng, host, cal = profile.target, profile.engine, profile.host, profile.calibration
    perf = profile.cpu_summary
    tool = doc.get("tool") or {}
    rows = [["command", " ".join(str(a) for a in tool.get("command", [])) or "-"],
            ["mysqlprobe", tool.get("version", "?")],
            ["host", f"{host.hostname}: Linux {host.kernel}, {host.machine}, "
                     f"{'?' if host.cpus is None else host.cpus} CPUs"],
            ["server", f"{target.server} ({target.line or '?'}), PID {target.pid}"],
            ["binary", target.binary], ["build-id", target.build_id or "-"], ["symbols", target.symbols],
            ["window", f"{w.start}, {w.duration_s:.2f}s, ended by {w.ended_by}"],
            ["probes", f"{eng.probes_attached} attached through {eng.links} links"],
            ["mode", "every call counted (--exact)" if not sampling.sampled else
             f"duty cycles: {sampling.cycles} cycles, probes on {sampling.on_s:.3f}s, budget "
             f"{(sampling.overhead_budget or 0):.0%}"],
            ["CPU sampling", perf.command or perf.reason or perf.status or "-"],
            ["probe cost per hit", ", ".join(f"{name} entry {c.entry_ns:.0f}ns, return "
                                             f"{c.return_ns:.0f}ns" for name, c in cal.classes.items()) or "-"],
            ["in-situ factor", cal.in_situ_factor if cal.in_situ_factor is not None else "not measured"]]
    return _table(["", ""], rows, "meta")


BAR_COLOURS = ("#4a78b0", "#e67e22", "#2e8b57", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d")


def _per_row_bar(parts: list[Any], per: str = "row", bar_id: str = "") -> str:
    """A stacked bar of a row's parts (headline.Part) and its legend."""
    segments, legend = [], []
    for i, p in enumerate(parts):
        colour = "#ccc" if p.stage.startswith("not probed") else BAR_COLOURS[i % len(BAR_COLOURS)]
        label = f"{p.stage}: {fmt(p.ns_per_row)} a {per}" + (f", {p.share:.1%}" if p.share is not None else "")
        if p.share:
            segments.append(f'<div class=seg data-stage="{_e(p.stage)}" style="width:{100 * p.share:.2f}%;'
                            f'background:{colour}" title="{_e(label)}"></div>')
        legend.append(f'<span class=key><i style="background:{colour}"></i>{_e(label)}</span>')
    return (f"<div class=bar{f' id={bar_id}' if bar_id else ''}>{''.join(segments)}</div>"
            f"<div>{''.join(legend)}</div>")


def digest_card(d: DigestHeadline) -> str:
    each = f", {d.rows_each:g} row{'' if d.rows_each == 1 else 's'} each" if d.rows_each else ""
    body = (_per_row_bar(d.parts + [d.not_probed], d.per) if d.not_probed is not None else
            "<div class=warn>its probed functions' time came to more than the statement's: not shown</div>")
    return (f"<div class='card digest'><code>{_e(d.text)}</code>"
            f"<div class=muted>{d.executions:,} executions ({_e(d.executions_from)}){_e(each)}; "
            f"{_e(fmt(d.unprobed_ns))} each without the probes ({_e(fmt(d.measured_ns))} with them); "
            f"per {d.per}:</div>{body}</div>")


def summary_card(profile: Profile) -> str:
    """The headline as a card: rows and time, a per-row stacked bar of the
    stages' own time and what no probe covers, skew and cost; then a card
    per statement digest where the load mixed them."""
    h = headline(profile)
    digests = "".join(digest_card(d) for d in digest_headlines(profile))
    if not h.rows:
        return ("<div class=card><b>No rows written in the window</b>: the stage table below has the calls.</div>"
                + digests)
    parts = [p for p in h.parts if p.ns_per_row] + ([h.not_probed] if h.not_probed else [])
    unprobed = (f"{h.unprobed_s:.3g} s without the probes, {fmt(h.unprobed_s * 1e9 / h.rows)} a row"
                if h.unprobed_s else "time without the probes not measured")
    withheld_parts = [p.stage for p in h.parts if p.ns_per_row is None]
    return ("<div class=card id=summary>"
            f"<div class=big>{h.rows:,} rows in {h.load_s:.3g} s</div>"
            f"<div class=muted>{_e(h.rows_from)}; {_e(unprobed)}</div>"
            + _per_row_bar(parts, bar_id="per-row")
            + (f"<div class=warn>withheld: {_e(', '.join(withheld_parts))} (see Stages)</div>" if withheld_parts
               else "")
            + (f"<div>partitions: {_e(h.skew)}</div>" if h.skew else "")
            + f"<div class=muted>cost: {_e(h.cost)}</div></div>"
            + digests)


SPAN_HINT = "drag across a chart above to see the flame graph of the CPU samples taken in that span"


def _timeline_section(profile: Profile, slices: TimeSlices | None) -> list[str]:
    """The timeline, and the load's CPU over the window under it where the
    samples are sliced in time (both brushable)."""
    t = timeline(profile)
    chart = timeline_chart(t, brushable=bool(slices)) if t else ""
    cpu = profile.stacks["cpu_profile"]
    strip = cpu_strip(slices, profile.window.duration_s, cpu.frequency_hz or 1.0, t) \
        if slices and slices.slices and profile.window.duration_s > 0 else ""
    if not chart and not strip:
        return []
    summary = profile.cpu_summary
    untimed = dict(summary.dropped).get(SLICES_FULL, 0)
    cpu_samples = summary.samples
    out = ["<h2>The window as it went</h2>", chart, strip]
    if strip:
        out += [f'<p class=muted id=span-note data-hint="{_e(SPAN_HINT)}">{_e(SPAN_HINT)}</p>',
                "<script type=application/json id=cpu-slices>"
                f"{slices_data(slices, profile.window.duration_s, cpu_samples, untimed) if slices else ''}</script>"]
    return out


def _span_panel(slices: TimeSlices | None) -> str:
    """Where the flame graph of a span is drawn (the whole window's hidden meanwhile)."""
    if not slices or not slices.slices:
        return ""
    return ("<div id=span-panel hidden><p><b id=span-summary></b> <button id=span-clear>whole window</button></p>"
            "<div id=span-graph class=sw></div><p class=muted>root at the top: each frame as wide as its samples "
            "in the span; its callees below it</p></div>")


SANDWICH_CHOICES = 2000   # functions offered by name, most samples first


def _sandwich(profile: Profile, perf: CpuSummary) -> str:
    """The sandwich view of a function: its callers and callees over the CPU
    samples whose stacks hold it, drawn in the page from the folded stacks
    it carries (the probes' machinery folded, as in the flame graph)."""
    cpu = profile.folded.get("cpu_profile")
    if cpu is None or not cpu.total:
        return ""
    stacks = fold_probe_frames(cpu)[0].stacks
    totals: dict[str, int] = {}
    for stack, weight in stacks.items():
        for frame in set(stack.split(";")[1:]):
            totals[frame] = totals.get(frame, 0) + weight
    names = sorted(totals, key=lambda f: -totals[f])[:SANDWICH_CHOICES]
    top = [r.function for r in perf.top_self if r.function in totals]
    first = top[0] if top else (names[0] if names else "")
    data = json.dumps(dict(stacks), separators=(",", ":")).replace("</", "<\\/")
    return ("<h2>Sandwich: a function's callers and callees (CPU samples)</h2>"
            f'<p><input id=sandwich list=sw-functions value="{_e(first)}"> <span id=sw-summary class=muted></span></p>'
            "<datalist id=sw-functions>" + "".join(f'<option value="{_e(n)}">' for n in names) + "</datalist>"
            f"<script type=application/json id=cpu-stacks>{data}</script>"
            "<p class=muted>its callers, read down from it: who called it, and who called them</p>"
            "<div id=sw-callers class=sw></div>"
            "<p class=muted>its callees: what it ran, itself on CPU where nothing is below</p>"
            "<div id=sw-callees class=sw></div>")


def render_html(profile: Profile, flamegraph_svg: str | None = None, offcpu_svg: str | None = None,
                io_svg: str | None = None, stage_svgs: Sequence[tuple[str, str]] = (), all_threads: bool = False,
                cpu_slices: TimeSlices | None = None) -> str:
    stages = profile.stages
    title = f"mysqlprobe: {profile.target.server}, PID {profile.target.pid}"
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
             f"<style>{_CSS}</style><script>{PAGE_SCRIPT}</script></head><body>",
             f"<h1>{_e(title)}</h1>",
             "<h2>Where a row's time went in the index build</h2>" if profile.subject == INDEX_BUILD_SUBJECT
             else "<h2>Where an inserted row's time went</h2>", summary_card(profile),
             *[skew_chart(s) for s in stages if s.stage == "partition.write_row" and s.partitions],
             *_timeline_section(profile, cpu_slices if flamegraph_svg else None),
             "<details><summary>the run</summary>", _labelled(text.header(profile)[1:]), "</details>"]
    parts += ["<h2>Stages</h2>",
              _linked_table(STAGE_COLUMNS[:2] + (["95% interval"] if profile.sampled else []) + STAGE_COLUMNS[2:],
                            _stage_rows(profile), _stage_searches(profile)),
              "<p class=muted>click a stage to find its functions in the flame graph</p>",
              "".join(f"<p class=muted>{_e(line)}</p>" for line in [" ".join(text.idle_line(profile))] if line),
              "<p class=muted>share: time in the stage / window length (above 100% with several threads)"
              + ("; ~ estimated for the whole window from the part of the time the probes were on"
                 if profile.sampled else "")
              + "; mean &lt;X: at most X (the probes' own cost per call is as large as the call)"
              + "".join(f"; {_e(line)}" for line in unresolved_note(f.mark for f in profile.figures))
              + "</p>"]
    withheld_lines = report_lines(profile.consistency)
    if withheld_lines:
        parts.append(_tree(withheld_lines))
    build = text.index_block(profile)
    if build:
        parts += ["<h2>Index build</h2>", _tree(build[1:])]
    tree = attribution_block(profile)
    if tree:
        parts += ["<h2>Where the time went</h2>", _tree(tree)]
    digests = digest_block(profile)
    if digests:
        parts += ["<h2>Per statement digest</h2>", _tree(digests[1:])]
    context = text.process_facts(profile.process) + text.perf_schema_facts(profile)
    if context:
        parts += ["<h2>Server and host</h2>", _table([], [list(f) for f in context], "meta")]
    parts.append("<h2>Latency per stage</h2>")
    for s in stages:
        if not s.calls:
            continue
        waits = " ".join(line.strip() for line in text.cpu_wait_line(s))
        parts.append(f'<div class=stage><b>{_e(s.stage)}</b> <span class=muted>{_e(s.title)}</span><br>'
                     f'<span class=muted>{_e(", ".join(s.symbols))}</span><br>'
                     + (f'<span class=muted>{_e(waits)}</span><br>' if waits else "")
                     + (f"<p class=muted>histogram {_e(why)}</p>" if (why := histogram_withheld(s, profile))
                        else histogram_chart(s))
                     + f"{_partitions(s, profile)}</div>")
    parts.append("<h2>Flame graph (CPU samples)</h2>")
    perf, window_s = profile.cpu_summary, profile.window.duration_s
    if flamegraph_svg:
        parts += ['<p><input id=search placeholder="search functions (regular expression)"> '
                  '<span class=muted>click a frame to zoom</span></p>', _span_panel(cpu_slices), flamegraph_svg,
                  _block(samples(perf, window_s))]
    else:
        why = "perf took none: the server used no CPU in the window" if perf.collected \
            else perf.reason or perf.status
        parts.append(f"<p class=muted>no CPU samples: {_e(why)}</p>")
    sandwich = _sandwich(profile, perf) if flamegraph_svg else ""
    if sandwich:
        parts.append(sandwich)
    if offcpu_svg:
        parts += [f"<h2>Off-CPU flame graph (where {'threads waited' if all_threads else 'the load&#x27;s threads'}"
                  f"{'' if all_threads else ' waited inside their statements'})</h2>",
                  '<p class=muted>widths: microseconds off CPU; the leaf is the kernel function a thread '
                  'blocked in, or [waiting for a CPU]; click a frame to zoom</p>', offcpu_svg,
                  _block(off_cpu(profile.off_cpu_summary, window_s))]
    if io_svg:
        parts += [f"<h2>I/O flame graph (system calls{'' if all_threads else ' of the load&#x27;s threads'})</h2>",
                  '<p class=muted>widths: microseconds in the calls; below the user frames, the system call '
                  'and the file it touched; click a frame to zoom</p>', io_svg, _block(io_calls(profile.io_summary, window_s))]
    if stage_svgs:
        parts += ["<h2>Below each stage</h2>",
                  '<p class=muted>the CPU samples and off-CPU time whose stacks pass through the stage\'s '
                  'function, folded from it down; open one to see it</p>']
        parts += [f"<details><summary>{_e(stage)}</summary>{svg}</details>" for stage, svg in stage_svgs]
    warnings = profile.warnings
    if warnings:
        parts += ["<h2>Warnings</h2>"] + [f"<p class=warn>{_e(w)}</p>" for w in warnings]
    parts += ["<h2>Run</h2>", _metadata(profile), "</body></html>"]
    return "\n".join(parts) + "\n"
