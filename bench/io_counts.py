#!/usr/bin/env python3
"""The I/O collector's counts against the server's own counters, over the
same window, on the seed bulk load and on OLTP (oltp_insert at 8 threads,
with and without an fsync per commit): MariaDB 10.2.11 sandbox.

mysqlprobe records `--exact` (the I/O programs on all window) while the
load runs; its capture holds the server's status counters read at the
window's edges (perf_schema.deltas.status, read before the I/O programs
attach and after they detach). Compared:
  - bytes the server's threads wrote to the redo log files (ib_logfile*)
    against Innodb_os_log_written;
  - fsync/fdatasync calls on InnoDB's files (log, system and table
    tablespaces) against Innodb_data_fsyncs (every fsync InnoDB makes);
  - the same on the log files against Innodb_os_log_fsyncs.
Writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Load, SHAPES
from mysqlprobe.lab.benchkit import MYSQLPROBE, Tool, bench_parser, derived, log, machine, med, write_results
from mysqlprobe.lab import sandbox

SHAPE_NAMES = ("seed bulk load, 1 thread", "oltp_insert, 8 threads", "oltp_insert, 8 threads, fsync per commit")
SYNCS = ("fsync", "fdatasync")
LOG_FILE = re.compile(r"(^|/)ib_logfile\d+$")
INNODB_FILE = re.compile(r"(\.ibd|(^|/)ibdata\d+|(^|/)ib_logfile\d+)$")


def io_figures(doc: dict) -> dict:
    """From the capture: the collector's figures, and the server's counters."""
    io, status = doc["io"], doc["perf_schema"]["deltas"]["status"]
    files = io["by_file"]
    log_bytes = sum(f["write_bytes"] for f in files if LOG_FILE.search(f["file"]))
    log_syncs = sum(f["syncs"] for f in files if LOG_FILE.search(f["file"]))
    innodb_syncs = sum(f["syncs"] for f in files if INNODB_FILE.search(f["file"]))
    return {"io_log_bytes": log_bytes, "server_log_bytes": status.get("Innodb_os_log_written"),
            "io_log_syncs": log_syncs, "server_log_syncs": status.get("Innodb_os_log_fsyncs"),
            "io_innodb_syncs": innodb_syncs, "server_innodb_syncs": status.get("Innodb_data_fsyncs"),
            "files_left_out": io["files_left_out"], "window_s": doc["window"]["duration_s"]}


def ratio(a, b) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def main() -> int:
    ap = bench_parser(__doc__, repeats=3, seconds=6)
    args = ap.parse_args()
    sb = sandbox.Sandbox("10.2.11")
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-io-counts-"))
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
               "command": f"bench/io_counts.py --repeats {args.repeats} --seconds {args.seconds}", "shapes": []}
    with sb.serving(log) as pid:
        for shape in [s for s in SHAPES if s.name in SHAPE_NAMES]:
            load = Load(sb, shape)
            load.prepare()
            load.start()
            runs = []
            try:
                time.sleep(2)   # the load under way
                for r in range(args.repeats):
                    d = Path(tempfile.mkdtemp(dir=workdir))
                    tool = Tool([MYSQLPROBE, "-p", str(pid), "--insert-profile", "--exact", "-q", "--no-cpu",
                                 "-o", str(d)], "Tracing PID", "stderr")
                    time.sleep(args.seconds)
                    load.check()
                    tool.stop()
                    fig = io_figures(derived(d))
                    runs.append(fig)
                    log(f"{shape.name} {r + 1}/{args.repeats}: {fig}")
            finally:
                load.close()
            results["shapes"].append({"shape": shape.name, "runs": runs})
    write_results(args.out, "io_counts", results, render)
    return 0


def machine_text(m: dict) -> str:
    return f"{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, kernel {m['kernel']}"


def render(results: dict) -> str:
    lines = ["# The I/O collector's counts against the server's counters", "",
             f"- date: {results['date']}", f"- command: `{results['command']}`", f"- machine: {machine_text(results['machine'])}",
             "- server: MariaDB 10.2.11 sandbox; mysqlprobe `--insert-profile --exact --no-perf` while the load runs",
             "", "Each figure is the I/O collector's over the server's own counter for the same window "
             "(perf_schema.deltas.status, read at the window's edges); medians [min, max] over the repeats. "
             "redo bytes: bytes written to ib_logfile* / Innodb_os_log_written. log syncs: fsync and fdatasync "
             "calls on ib_logfile* / Innodb_os_log_fsyncs. InnoDB syncs: fsync and fdatasync calls on InnoDB's "
             "files (.ibd, ibdata, ib_logfile) / Innodb_data_fsyncs.", "",
             "| load shape | redo bytes | log syncs | InnoDB syncs | server's redo bytes/s | server's syncs/s |",
             "|---|---|---|---|---|---|"]
    for s in results["shapes"]:
        runs = s["runs"]

        def cell(io_key, server_key):
            values = [ratio(r[io_key], r[server_key]) for r in runs]
            values = [v for v in values if v is not None]
            return f"{med(values):.4f} [{min(values):.4f}, {max(values):.4f}]" if values else "-"

        rate = lambda key: med([r[key] / r["window_s"] for r in runs if r[key] is not None])  # noqa: E731
        lines.append(f"| {s['shape']} | {cell('io_log_bytes', 'server_log_bytes')} | "
                     f"{cell('io_log_syncs', 'server_log_syncs')} | {cell('io_innodb_syncs', 'server_innodb_syncs')} "
                     f"| {rate('server_log_bytes'):.0f} | {rate('server_innodb_syncs'):.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
