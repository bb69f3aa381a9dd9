"""Compare two runs (captures, or directories of repeated captures) per row inserted: what changed and why."""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis.model import Profile
from mysqlprobe.capture import PROFILE_FILE, STACKS_FILE, read_profile, read_stacks
from mysqlprobe.errors import CaptureError
from mysqlprobe.flamegraphs.svg import render

EXAMPLES = """examples:
  mysqlprobe compare /tmp/run-10.1 /tmp/run-10.2          # two captures
  mysqlprobe compare bench/10.1.23/range-100 bench/10.2.11/range-100 -o /tmp/cmp
                                                         # repeats of a bench cell on each side
  mysqlprobe compare A B --json
"""


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A", help="the first run: a capture directory, or a directory of them (repeats)")
    p.add_argument("b", metavar="B", help="the second run, the same way")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="also write DIR/compare.txt, compare.json, compare.html and diff.svg (per row)")


def capture_dirs(path: str) -> list[Path]:
    """A capture directory, or the capture directories inside one (sorted)."""
    p = Path(path)
    if (p / PROFILE_FILE).exists():
        return [p]
    if p.is_file() and p.name == PROFILE_FILE:
        return [p.parent]
    found = sorted(d.parent for d in p.glob(f"*/{PROFILE_FILE}")) if p.is_dir() else []
    if not found:
        raise CaptureError(f"{path}: no capture in it (no {PROFILE_FILE}, nor any in its subdirectories)")
    return found


def load_side(path: str) -> list[C.Run]:
    runs = []
    for d in capture_dirs(path):
        doc = read_profile(str(d))
        stacks = read_stacks(str(d)) if (d / STACKS_FILE).exists() else None
        try:
            runs.append(C.run_of(Profile(doc), str(d), stacks))
        except ValueError as e:
            raise CaptureError(str(e)) from None
    return runs


def render_html(result: dict, text: str, svg: str | None) -> str:
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>mysqlprobe compare</title>"
            "<style>body{font:14px system-ui,sans-serif;margin:24px auto;max-width:1240px}"
            "pre{background:#f8f8f4;padding:10px;font-size:12.5px}</style></head><body>"
            f"<h1>{html.escape(result['a']['server'])} vs {html.escape(result['b']['server'])}</h1>"
            f"<pre>{html.escape(text)}</pre>"
            + (f"<h2>Differential flame graph, samples per row</h2>{svg}" if svg else "") + "</body></html>\n")


def run(args, parser) -> int:
    a, b = load_side(args.a), load_side(args.b)
    result = C.compare(a, b)
    text = C.render_text(result)
    if args.json:
        json.dump(C.to_json(result), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    if args.output:
        out = Path(args.output)
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "compare.txt").write_text(text)
            (out / "compare.json").write_text(json.dumps(C.to_json(result), indent=1) + "\n")
            before, after = C.merged_stacks(a), C.merged_stacks(b)
            svg = None
            if before.total and after.total:
                rows_a, rows_b = sum(r.rows for r in a), sum(r.rows for r in b)
                svg = render(after, f"{result['a']['server']} -> {result['b']['server']}",
                             "red grew, blue shrank (CPU samples per row inserted)", unit="samples/row",
                             before=before, scale_after=1 / rows_b, scale_before=1 / rows_a)
                (out / "diff.svg").write_text(svg)
            (out / "compare.html").write_text(render_html(result, text, svg))
        except OSError as e:
            raise CaptureError(f"cannot write into {out}: {e.strerror}") from None
        print(f"wrote {out}/compare.txt, compare.json, compare.html" + (", diff.svg" if svg else ""),
              file=sys.stderr)
    return 0
