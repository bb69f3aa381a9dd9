"""Print the report of a saved capture again (no root, no server needed)."""

from __future__ import annotations

import sys
from pathlib import Path

from mysqlprobe.analysis.reporters import STREAM_REPORTERS
from mysqlprobe.errors import UsageError
from mysqlprobe.files import make_dir
from mysqlprobe.reports import load_profile, write_visuals

EXAMPLES = """examples:
  mysqlprobe report /tmp/run1              # text report of /tmp/run1/profile.json
  mysqlprobe report /tmp/run1 --json       # the whole capture with everything derived from it (as record --json)
  mysqlprobe report /tmp/run1 --json=stages   # the stage summaries only
  mysqlprobe report /tmp/run1 --html       # write report.html and flamegraph.svg again, into /tmp/run1
  mysqlprobe report /tmp/run1 --html -o /tmp/pages   # ... into /tmp/pages, the capture untouched
  mysqlprobe report /tmp/run1 --prometheus # the figures in Prometheus's text format
"""


def add_arguments(p) -> None:
    p.add_argument("capture", help="a capture directory or its profile.json")
    p.add_argument("--json", nargs="?", const="all", choices=("all", "stages"),
                   help="print the derived profile as JSON on stdout instead of the text report, as record "
                        "and compare do (=stages: the stage summaries only; =all, the default, is the whole)")
    p.add_argument("--prometheus", action="store_true",
                   help="print the figures in the Prometheus text exposition format")
    p.add_argument("--html", action="store_true",
                   help="write report.html (and flamegraph.svg from its stacks) again: into the capture "
                        "directory, or into -o DIR")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="with --html: write the pages into DIR (made if missing) and leave the capture as it is")
    p.add_argument("--all-threads", action="store_true",
                   help="with --html: the off-CPU and I/O flame graphs of every thread (default: the load's, "
                        "its client connections)")


def run(args, parser) -> int:
    profile = load_profile(args.capture)
    if args.html:
        if not Path(args.capture).is_dir():
            raise UsageError("--html needs the capture directory, not its profile.json")
        out_dir = args.output or args.capture
        if args.output:
            make_dir(args.output)
        written = write_visuals(out_dir, profile, args.all_threads, capture_dir=args.capture)
        print(f"wrote {', '.join(written)}", file=sys.stderr)
    elif args.output:
        raise UsageError("-o goes with --html; the text, --json and --prometheus go to standard output")
    else:
        STREAM_REPORTERS[stream_format(args)](profile, sys.stdout)
    return 0


def stream_format(args) -> str:
    """The STREAM_REPORTERS entry the options ask for."""
    if args.prometheus:
        return "prometheus"
    if args.json:
        return "json-stages" if args.json == "stages" else "json"
    return "text"
