"""Flame graph (SVG) of a capture or of any folded-stacks file; with two, the differential graph."""

from __future__ import annotations

import sys
from pathlib import Path

from mysqlprobe.analysis.model import Profile
from mysqlprobe.capture import OFFCPU_FILE, PROFILE_FILE, STACKS_FILE, read_stacks
from mysqlprobe.errors import OutputError, UsageError
from mysqlprobe.files import write_output_file
from mysqlprobe.flamegraphs.svg import render
from mysqlprobe.reports import flamegraph_title, load_profile, pprof_of

EXAMPLES = """examples:
  mysqlprobe flamegraph /tmp/run1 -o run1.svg          # a capture's stacks.folded
  mysqlprobe flamegraph stacks.folded > fg.svg          # any folded file (FlameGraph format)
  mysqlprobe flamegraph /tmp/run56 /tmp/run57 -o diff.svg --per row
                                                        # red: grew from the first to the second
  mysqlprobe flamegraph /tmp/run1 --pprof -o cpu.pb.gz  # for go tool pprof, Pyroscope, Parca
  mysqlprobe flamegraph /tmp/run1 --pprof --off-cpu -o offcpu.pb.gz
"""


def add_arguments(p) -> None:
    p.add_argument("stacks", nargs="+", metavar="CAPTURE_OR_FOLDED",
                   help="one capture directory or folded file; two for a differential graph (before, after)")
    p.add_argument("-o", "--output", metavar="SVG", help="write here (default: standard output)")
    p.add_argument("--title", help="the graph's title")
    p.add_argument("--per", choices=("sample", "row"), default="sample",
                   help="differential graphs: compare shares of samples (default) or samples per row the "
                        "server changed (both must be captures)")
    p.add_argument("--pprof", action="store_true",
                   help="write a capture's stacks as a gzipped pprof profile instead of an SVG")
    p.add_argument("--off-cpu", action="store_true", help="with --pprof: the off-CPU stacks (offcpu.folded)")


def _rows(path: str, profile: Profile | None) -> int:
    """The rows of a capture (profile: its Profile, None where path is no capture directory)."""
    if profile is None:
        raise UsageError(f"--per row needs capture directories; {path} is not one")
    rows = profile.window.rows_changed
    if not rows:
        raise UsageError(f"--per row: {path} has no row count (recorded without a server connection)")
    return rows


def _profile_or_none(path: str) -> Profile | None:
    return load_profile(path) if (Path(path) / PROFILE_FILE).exists() else None


def write_pprof(args) -> int:
    if len(args.stacks) != 1 or not (Path(args.stacks[0]) / PROFILE_FILE).exists():
        raise UsageError("--pprof takes one capture directory")
    capture = Path(args.stacks[0])
    profile = load_profile(str(capture))
    stacks = read_stacks(str(capture / (OFFCPU_FILE if args.off_cpu else STACKS_FILE)), follow=False)
    data = pprof_of(profile, stacks, args.off_cpu,
                    comments=(f"mysqlprobe capture {capture.resolve()}", f"PID {profile.target.pid}"))
    if not args.output:
        sys.stdout.buffer.write(data)
        return 0
    try:
        write_output_file(args.output, data)
    except OSError as e:
        raise OutputError(f"cannot write {args.output}: {e.strerror}") from None
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def run(args, parser) -> int:
    if args.off_cpu and not args.pprof:
        parser.error("--off-cpu goes with --pprof")
    if args.pprof:
        return write_pprof(args)
    if len(args.stacks) > 2:
        parser.error("give one input, or two for a differential graph")
    after_path = args.stacks[-1]
    profile = _profile_or_none(after_path)   # a capture that cannot be read is refused before its stacks are read
    after = read_stacks(after_path)
    title, sub = flamegraph_title(profile) if profile else ("Flame graph", after_path)
    if len(args.stacks) == 1:
        svg = render(after, args.title or title, sub)
    else:
        before_path = args.stacks[0]
        before_profile = _profile_or_none(before_path)
        before = read_stacks(before_path)
        if args.per == "row":
            scale_before = 1 / _rows(before_path, before_profile)
            scale_after, unit = 1 / _rows(after_path, profile), "samples/row"
        else:
            scale_before, scale_after, unit = 1 / before.total, 1 / after.total, "of samples"
        svg = render(after, args.title or "Differential flame graph",
                     f"{before_path} -> {after_path}: red grew, blue shrank ({unit})", unit=unit,
                     before=before, scale_after=scale_after, scale_before=scale_before)
    if args.output:
        try:
            write_output_file(args.output, svg)
        except OSError as e:
            raise OutputError(f"cannot write {args.output}: {e.strerror}") from None
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(svg)
    return 0
