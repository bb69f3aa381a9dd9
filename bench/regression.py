"""The regression this tool exists for, found by the tool: MariaDB 10.1.23
(XtraDB, the MySQL 5.6 line) against 10.2.11 (the 5.7 line's InnoDB), the
same INSERT ... SELECT into a partitioned table.

    sudo .venv/bin/python bench/regression.py [--rows 300007] [--repeats 5]
        [--cells range-100]

Runs `mysqlprobe lab bench` on each server (each repeat: the load
unprobed, then profiled) and `mysqlprobe compare` on the two, and writes
its section of bench/RESULTS.md with what compare printed, word for word:
the findings are the tool's, none is written here. compare.json, its HTML
page and flame graphs stay in --keep DIR (nothing goes to results.json)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit import HERE, MYSQLPROBE, log, machine, machine_line, publish

SERVERS = ("10.1.23", "10.2.11")


def bench(version: str, args, out: Path) -> None:
    cmd = [MYSQLPROBE, "lab", "bench", "--server", version, "--cells", args.cells, "--rows", str(args.rows),
           "--repeats", str(args.repeats), "-q", "-o", str(out)]
    log(" ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1000003)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cells", default="range-100")
    ap.add_argument("--keep", help="keep the captures and compare's files here")
    ap.add_argument("--compare-only", action="store_true",
                    help="compare the captures already kept in --keep DIR again (after a change to compare)")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    host = machine()   # before any result is written: its commit is the tree's as it ran
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="regression-"))
    if args.compare_only and not args.keep:
        ap.error("--compare-only needs --keep DIR (the captures of an earlier run)")
    try:
        for version in SERVERS if not args.compare_only else ():
            bench(version, args, work / "bench")
        cell = args.cells.split(",")[0]
        sides = [str(work / "bench" / v / cell) for v in SERVERS]
        shutil.rmtree(work / "compare", ignore_errors=True)
        done = subprocess.run([MYSQLPROBE, "compare", *sides, "-o", str(work / "compare")],
                              capture_output=True, text=True, check=True)
        command = "sudo .venv/bin/python bench/regression.py " + " ".join(
            f"--{k} {v}" for k, v in (("rows", args.rows), ("repeats", args.repeats), ("cells", args.cells)))
        if args.compare_only:
            taken = min(p.stat().st_mtime for p in (work / "bench").rglob("profile.json"))
            command += (f" --keep DIR --compare-only; the captures compared again were taken "
                        f"{datetime.fromtimestamp(taken, timezone.utc).isoformat(timespec='minutes')}")
        # compare's own text is the figures: no JSON beside it (compare.json is in --keep DIR)
        publish("regression", None, render(args, cell, command, done.stdout, host), args.out)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def render(args, cell: str, command: str, text: str, host: dict) -> str:
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return "\n".join([
        f"# Regression: MariaDB {SERVERS[0]} (5.6 line) against {SERVERS[1]} (5.7 line)", "",
        f"{machine_line(host)} {date}. Command: `{command}`.", "",
        f"Each server in its sandbox; the load: cell `{cell}` of `mysqlprobe lab bench`, {args.rows:,} rows a "
        f"run, {args.repeats} repeats a side, each the load unprobed and then profiled in the default mode. "
        "What follows is `mysqlprobe compare` on the two, as it printed it: the wall delta from the unprobed "
        "runs, the stages' and functions' shares from the profiled ones, and why, from the servers' own "
        "settings and the mechanisms' catalog (analysis/mechanisms.py). The same command with `-o DIR` "
        "writes compare.html (the headline, each side's row as a bar, the drill-down's flame graphs) and "
        "diff.svg beside compare.json.", "",
        "```", text.rstrip("\n"), "```", ""])


if __name__ == "__main__":
    main()
