"""Compare two runs (captures, or directories of repeated captures) per row inserted: what changed and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis.compare_html import diff_graph, render_html, stage_graphs
from mysqlprobe.analysis.stage_trees import CPU_NS, read_capture_stacks
from mysqlprobe.capture import PROFILE_FILE, read_profile, read_stacks
from mysqlprobe.errors import CaptureError
from mysqlprobe.files import make_dir, write_new
from mysqlprobe.reports import checked_profile

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
        profile = checked_profile(read_profile(str(d)), str(d))
        evidence = read_capture_stacks(d, profile, read_stacks)
        try:
            runs.append(C.run_of(profile, str(d), evidence.get(CPU_NS), evidence))
        except ValueError as e:
            raise CaptureError(str(e)) from None
    return runs


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
        make_dir(args.output)
        try:
            write_new(args.output, "compare.txt", text)
            write_new(args.output, "compare.json", json.dumps(C.to_json(result), indent=1) + "\n")
            svg = diff_graph(a, b, result)
            if svg:
                write_new(args.output, "diff.svg", svg)
            write_new(args.output, "compare.html", render_html(result, text, svg, stage_graphs(a, b, result)))
        except OSError as e:
            raise CaptureError(f"cannot write into {out}: {e.strerror}") from None
        print(f"wrote {out}/compare.txt, compare.json, compare.html" + (", diff.svg" if svg else ""),
              file=sys.stderr)
    return 0
