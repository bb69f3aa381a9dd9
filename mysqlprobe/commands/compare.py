"""Compare two runs (captures, or directories of repeated captures) per row inserted: what changed and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dataclasses import dataclass, field

from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis.account import wall_stacks
from mysqlprobe.analysis.compare_account import Explanation, WallRun, detail, explain, headline, wall_run
from mysqlprobe.analysis.compare_html import diff_graph, render_html, stage_graphs
from mysqlprobe.analysis.stage_trees import CPU_NS, read_capture_stacks
from mysqlprobe.capture import PROFILE_FILE, read_member_stacks, read_profile
from mysqlprobe.errors import CaptureError, OutputError
from mysqlprobe.files import make_dir, write_new
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.svg import render
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


@dataclass
class Side:
    """A side's captures: the profiled runs (counts, latencies) and the
    sampled runs without probes (the wall-time account), with the latter's
    wall stacks summed (ns of their windows) and their rows, for the diff graph."""

    profiled: list[C.Run] = field(default_factory=list)
    sampled: list[WallRun] = field(default_factory=list)
    stacks: Folded = field(default_factory=Folded)
    rows: int = 0
    server: str = ""
    subject: str = "insert"   # or "index build" (analysis/model.py Profile.subject)


def load_side(path: str) -> Side:
    side = Side()
    for d in capture_dirs(path):
        profile = checked_profile(read_profile(str(d)), str(d))
        side.server = side.server or profile.target.server
        side.subject = profile.subject
        if profile.workload.run == "wall" or (not profile.probes and profile.account is not None):
            run = wall_run(profile, str(d))
            if run is not None and profile.account is not None:
                side.sampled.append(run)
                stacks = wall_stacks(profile.account, profile.folded.get("cpu_profile"),
                                     profile.folded.get("off_cpu"))
                side.stacks.stacks.update({k: round(v * run.scale) for k, v in stacks.stacks.items()})
                side.rows += run.rows
            continue
        evidence = read_capture_stacks(d, profile, read_member_stacks)
        try:
            side.profiled.append(C.run_of(profile, str(d), evidence.get(CPU_NS), evidence))
        except ValueError as e:
            raise CaptureError(str(e)) from None
    if not side.profiled and not side.sampled:
        raise CaptureError(f"{path}: no capture it can compare (none says how many rows it inserted)")
    return side


def wall_diff_graph(a: Side, b: Side) -> str | None:
    """The load's threads' wall time per row (on CPU and off it), B against A,
    from the sampled runs: no probe frames; red where B takes more."""
    if not (a.stacks.total and b.stacks.total and a.rows and b.rows):
        return None
    return render(b.stacks, f"{a.server} -> {b.server}: wall time per row",
                  "on CPU and off it, the load's threads, sampled runs without probes; red: B takes more per "
                  "row, blue: less", unit="ns/row", before=a.stacks, scale_after=1 / b.rows, scale_before=1 / a.rows)


def run(args, parser) -> int:
    side_a, side_b = load_side(args.a), load_side(args.b)
    explanation = explain(side_a.sampled, side_b.sampled)
    if not side_a.profiled or not side_b.profiled:
        if explanation is None:
            raise CaptureError("compare needs profiled runs, or sampled runs with their unprobed twins "
                               "(mysqlprobe lab bench), on both sides")
        return _sampled_only(args, explanation, side_a, side_b)
    a, b = side_a.profiled, side_b.profiled
    result = C.compare(a, b, explanation)
    text = C.render_text(result)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    if args.output:
        out = Path(args.output)
        make_dir(args.output)
        try:
            write_new(args.output, "compare.txt", text)
            write_new(args.output, "compare.json", json.dumps(result.to_json(), indent=1) + "\n")
            svg = wall_diff_graph(side_a, side_b) or diff_graph(a, b, result)
            if svg:
                write_new(args.output, "diff.svg", svg)
            write_new(args.output, "compare.html", render_html(result, svg, stage_graphs(a, b, result)))
        except OSError as e:
            raise OutputError(f"cannot write into {out}: {e.strerror}") from None
        print(f"wrote {out}/compare.txt, compare.json, compare.html" + (", diff.svg" if svg else ""),
              file=sys.stderr)
    return 0


def _sampled_only(args, x: Explanation, a: Side, b: Side) -> int:
    """Sides of sampled runs alone: the explanation, without the probes' figures."""
    text = "\n".join([f"mysqlprobe compare, per {C.row_unit(a.subject)} (sampled runs only: no probe counts)"]
                     + headline(x, a.server, b.server) + detail(x)) + "\n"
    doc = {"a": {"server": a.server, "runs": len(a.sampled)}, "b": {"server": b.server, "runs": len(b.sampled)},
           **x.to_json()}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    if args.output:
        make_dir(args.output)
        try:
            write_new(args.output, "compare.txt", text)
            write_new(args.output, "compare.json", json.dumps(doc, indent=1) + "\n")
            svg = wall_diff_graph(a, b)
            if svg:
                write_new(args.output, "diff.svg", svg)
        except OSError as e:
            raise OutputError(f"cannot write into {args.output}: {e.strerror}") from None
    return 0
