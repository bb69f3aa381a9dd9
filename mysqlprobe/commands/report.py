"""Print the report of a saved capture again (no root, no server needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


from mysqlprobe.analysis.prometheus import exposition
from mysqlprobe.analysis.report import render_text

from mysqlprobe.errors import UsageError
from mysqlprobe.reports import load_profile, write_visuals

EXAMPLES = """examples:
  mysqlprobe report /tmp/run1              # text report of /tmp/run1/profile.json
  mysqlprobe report /tmp/run1 --json       # the stage summaries as JSON
  mysqlprobe report /tmp/run1 --json=all   # the whole capture with everything derived from it
  mysqlprobe report /tmp/run1 --html       # write report.html and flamegraph.svg again
  mysqlprobe report /tmp/run1 --prometheus # the figures in Prometheus's text format
"""


def add_arguments(p) -> None:
    p.add_argument("capture", help="a capture directory or its profile.json")
    p.add_argument("--json", nargs="?", const="stages", choices=("stages", "all"),
                   help="print the stage summaries (or, with =all, the whole derived profile) as JSON")
    p.add_argument("--prometheus", action="store_true",
                   help="print the figures in the Prometheus text exposition format")
    p.add_argument("--html", action="store_true",
                   help="write CAPTURE/report.html (and flamegraph.svg from its stacks) again")
    p.add_argument("--all-threads", action="store_true",
                   help="with --html: the off-CPU and I/O flame graphs of every thread (default: the load's, "
                        "its client connections)")


def run(args, parser) -> int:
    profile = load_profile(args.capture)
    if args.html:
        if not Path(args.capture).is_dir():
            raise UsageError("--html needs the capture directory, not its profile.json")
        print(f"wrote {', '.join(write_visuals(args.capture, profile, args.all_threads))}", file=sys.stderr)
    elif args.prometheus:
        sys.stdout.write(exposition(profile))
    elif args.json:
        json.dump(profile.stage_records if args.json == "stages" else profile.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(profile))
    return 0
