"""Interactive SVG flame graphs from folded stacks, with no network and no
other program: hover for details, click to zoom, search by regular
expression (a box in the page, or `#search=REGEX` in the address).

A differential graph has the shape of the second profile and the colour of
the change per stack: red grew, blue shrank, after both are normalised (per
sample by default, or per row inserted when the caller passes the rows)."""

from __future__ import annotations

import hashlib
import html

from mysqlprobe.flamegraphs.folded import Folded
from dataclasses import dataclass, field

WIDTH = 1200
FRAME_H = 16
PAD_TOP = 52
PAD_BOTTOM = 26
MIN_FRAME_PX = 0.3   # narrower frames are left out (their samples stay in their parents)
CHAR_PX = 6.6        # monospace 11px


@dataclass
class Node:
    name: str
    value: float = 0.0
    delta: float = 0.0          # differential graphs: normalised after - before
    children: dict[str, "Node"] = field(default_factory=dict)

    def child(self, name: str) -> "Node":
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Node(name)
        return node


def build_tree(folded: Folded, scale: float = 1.0) -> Node:
    root = Node("all")
    for stack, count in folded.stacks.items():
        root.value += count * scale
        node = root
        for frame in stack.split(";"):
            node = node.child(frame)
            node.value += count * scale
    return root


def _add_deltas(root: Node, before_root: Node | None) -> None:
    todo: list[tuple[Node, Node | None]] = [(root, before_root)]   # a stack, not recursion: stacks run deep
    while todo:
        node, before = todo.pop()
        node.delta = node.value - (before.value if before else 0.0)
        todo.extend((child, before.children.get(name) if before else None) for name, child in node.children.items())


def _colour(name: str, depth: int) -> str:
    if depth == 1:                                 # the thread
        return "rgb(170,190,215)"
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
    v1, v2 = (h & 0xFF) / 255, ((h >> 8) & 0xFF) / 255
    if name.endswith("_[k]"):                      # kernel: orange
        return f"rgb({205 + int(50 * v1)},{120 + int(60 * v2)},{40})"
    if name.startswith("["):                       # unsymbolised: grey
        return f"rgb({170 + int(30 * v1)},{170 + int(30 * v1)},{170 + int(30 * v1)})"
    return f"rgb({225 + int(30 * v1)},{60 + int(140 * v2)},{40 + int(30 * v1)})"  # user: warm


def _diff_colour(delta: float, biggest: float) -> str:
    if biggest <= 0 or abs(delta) < 1e-12:
        return "rgb(250,250,250)"
    t = min(abs(delta) / biggest, 1.0) ** 0.5
    fade = int(250 - 200 * t)
    return f"rgb(250,{fade},{fade})" if delta > 0 else f"rgb({fade},{fade},250)"


def _fit(name: str, width_px: float) -> str:
    chars = int((width_px - 6) / CHAR_PX)
    if chars < 3:
        return ""
    return name if len(name) <= chars else name[:chars - 2] + ".."


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 100 or value == int(value) else f"{value:.3g} {unit}"


def render(folded: Folded, title: str = "Flame graph", subtitle: str = "", unit: str = "samples",
           before: Folded | None = None, scale_after: float = 1.0, scale_before: float = 1.0,
           element_id: str = "flamegraph") -> str:
    """The SVG text. With `before`, a differential graph: each profile is
    multiplied by its scale (1/samples for per-sample, 1/rows for per-row)."""
    root = build_tree(folded, scale_after)
    diff = before is not None
    if before is not None:
        _add_deltas(root, build_tree(before, scale_before))
    total = root.value or 1.0
    frames: list[tuple[Node, float, int]] = []   # node, x (in value units), depth

    todo = [(root, 0.0, 0)]   # depth first, children in name order, without recursion
    while todo:
        node, x, depth = todo.pop()
        frames.append((node, x, depth))
        shown = []
        for child in sorted(node.children.values(), key=lambda n: n.name):
            if child.value / total * WIDTH >= MIN_FRAME_PX:
                shown.append((child, x, depth + 1))
            x += child.value
        todo.extend(reversed(shown))
    depth_max = max(d for _, _, d in frames)
    height = PAD_TOP + (depth_max + 1) * FRAME_H + PAD_BOTTOM
    biggest = max((abs(n.delta) for n, _, _ in frames if n is not root), default=0.0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{element_id}" class="mp-flame" width="{WIDTH}" '
           f'height="{height}" viewBox="0 0 {WIDTH} {height}" data-total="{total!r}" data-unit="{html.escape(unit)}" '
           f'font-family="monospace" font-size="11">',
           "<style>.mp-flame .f:hover rect{stroke:#000;stroke-width:0.5} .mp-flame .f{cursor:pointer} "
           ".mp-flame .hit rect{fill:rgb(230,0,230)!important} .mp-flame text{pointer-events:none}</style>",
           '<rect width="100%" height="100%" fill="#f8f8f4"/>',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
           f'<text x="{WIDTH / 2}" y="34" text-anchor="middle" fill="#555">{html.escape(subtitle)}</text>',
           '<text class="reset" x="8" y="18" fill="#06c" style="cursor:pointer;display:none">Reset zoom</text>',
           f'<text class="matched" x="{WIDTH - 8}" y="18" text-anchor="end" fill="#a0a"></text>',
           f'<text class="details" x="8" y="{height - 8}" fill="#333"> </text>']
    for node, x, depth in frames:
        w_px = node.value / total * WIDTH
        x_px = x / total * WIDTH
        y = height - PAD_BOTTOM - (depth + 1) * FRAME_H
        share = node.value / total
        info = f"{node.name} ({_fmt(node.value, unit)}, {100 * share:.2f}%"
        if diff and node is not root:
            info += f", {'+' if node.delta >= 0 else ''}{_fmt(node.delta, unit)} vs before"
        info += ")"
        fill = _diff_colour(node.delta, biggest) if diff else _colour(node.name, depth)
        out.append(f'<g class="f" data-x="{x!r}" data-w="{node.value!r}">'
                   f"<title>{html.escape(info)}</title>"
                   f'<rect x="{x_px:.2f}" y="{y}" width="{w_px:.2f}" height="{FRAME_H - 1}" fill="{fill}" rx="1"/>'
                   f'<text x="{x_px + 3:.2f}" y="{y + FRAME_H - 4}">{html.escape(_fit(node.name, w_px))}</text></g>')
    out.append(f"<script><![CDATA[{_SCRIPT}]]></script></svg>")
    return "\n".join(out) + "\n"


# One function per graph on the page: zoom, search, hover details. Search is
# reachable from outside as svg.mpSearch(regex) and from #search=REGEX.
_SCRIPT = r"""
(function () {
  var svg = document.currentScript ? document.currentScript.closest('svg') : null;
  if (!svg) { var all = document.querySelectorAll('svg.mp-flame'); svg = all[all.length - 1]; }
  var W = +svg.getAttribute('width'), total = +svg.getAttribute('data-total');
  var unit = svg.getAttribute('data-unit');
  var frames = Array.prototype.slice.call(svg.querySelectorAll('g.f'));
  var details = svg.querySelector('text.details'), reset = svg.querySelector('text.reset');
  var matched = svg.querySelector('text.matched');
  var view = {x: 0, w: total};
  function label(g) { return g.querySelector('title').textContent.replace(/ \(.*$/, ''); }
  function fit(name, px) {
    var n = Math.floor((px - 6) / 6.6);
    return n < 3 ? '' : (name.length <= n ? name : name.slice(0, n - 2) + '..');
  }
  function draw() {
    frames.forEach(function (g) {
      var x = +g.getAttribute('data-x'), w = +g.getAttribute('data-w');
      var inside = x + w > view.x && x < view.x + view.w;  // the zoomed frame, its callees and its callers
      var px = (Math.max(x, view.x) - view.x) / view.w * W;
      var pw = (Math.min(x + w, view.x + view.w) - Math.max(x, view.x)) / view.w * W;
      g.style.display = inside && pw > 0.1 ? '' : 'none';
      var r = g.querySelector('rect'), t = g.querySelector('text');
      r.setAttribute('x', px.toFixed(2)); r.setAttribute('width', Math.max(pw, 0).toFixed(2));
      t.setAttribute('x', (px + 3).toFixed(2)); t.textContent = fit(label(g), pw);
    });
    reset.style.display = view.w < total ? '' : 'none';
  }
  function zoom(g) {
    view = {x: +g.getAttribute('data-x'), w: +g.getAttribute('data-w')};
    draw();
  }
  function search(re) {
    var rx, hits = [];
    try { rx = new RegExp(re); } catch (e) { matched.textContent = 'bad expression'; return 0; }
    frames.forEach(function (g) {
      var on = re !== '' && rx.test(label(g));
      g.classList.toggle('hit', on);
      if (on) hits.push([+g.getAttribute('data-x'), +g.getAttribute('data-w')]);
    });
    hits.sort(function (a, b) { return a[0] - b[0]; });
    var covered = 0, end = -1;            // nested matches count once
    hits.forEach(function (h) {
      if (h[0] >= end) { covered += h[1]; end = h[0] + h[1]; }
      else if (h[0] + h[1] > end) { covered += h[0] + h[1] - end; end = h[0] + h[1]; }
    });
    var share = total ? covered / total : 0;
    matched.textContent = re === '' ? '' : 'Matched: ' + (100 * share).toFixed(1) + '%';
    svg.setAttribute('data-matched', share.toFixed(4));
    return share;
  }
  frames.forEach(function (g) {
    g.addEventListener('click', function () { zoom(g); });
    g.addEventListener('mouseover', function () {
      details.textContent = g.querySelector('title').textContent;
    });
  });
  reset.addEventListener('click', function () { view = {x: 0, w: total}; draw(); });
  svg.mpSearch = search;
  svg.mpZoom = function (i) { zoom(frames[i]); };
  var m = /[#&]search=([^&]*)/.exec(window.location.hash || '');
  if (m) search(decodeURIComponent(m[1]));
  svg.setAttribute('data-ready', '1');
})();
"""
