"""From start to probes attached, and the memory mysqlprobe holds, on the
largest binary we have (MariaDB 10.11.5's mariadbd, 297 MB with symbols).

The server takes a light load (4 clients inserting single rows) all along,
or none with --idle.
Each run is `mysqlprobe --pid PID --insert-profile -d SECONDS` (the default
mode: duty cycles, perf, off-CPU, I/O, P_S); measured from outside it:

  ready   seconds from spawning it to the line it prints once the probes
          are attached ("Tracing PID ...")
  rss     its peak resident memory (the kernel's ru_maxrss, from wait4)

The first run starts cold (mysqlprobe's caches removed), the others warm.
The capture's own timings (symbols, calibration, attach) are shown beside.

    sudo .venv/bin/python bench/startup.py [--runs 7] [--seconds 3] [--idle] [--versus OTHER]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit import MYSQLPROBE, bench_parser, log, machine, machine_line, med, spread, write_results
from mysqlprobe.lab.benchkit.loads import RowInserts
from mysqlprobe.lab import sandbox, workload  # noqa: E402
from mysqlprobe.caches import cache_dirs  # noqa: E402

VERSION = "10.11.5"
READY = "Tracing PID"


def one_run(pid: int, seconds: int, outdir: Path, exe: str = MYSQLPROBE, options: tuple = ()) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen([exe, "-p", str(pid), "--insert-profile", "-d", str(seconds), "-o", str(outdir),
                             *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready, err = None, []
    for line in proc.stderr:
        err.append(line)
        if ready is None and READY in line:
            ready = time.monotonic() - t0
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or ready is None:
        raise RuntimeError(f"mysqlprobe exited {proc.returncode}: {''.join(err)[-2000:]}")
    doc = json.loads((outdir / "profile.json").read_text())
    return {"ready_s": round(ready, 3), "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "timings": doc["engine"].get("timings", {}),
            "calibration_reused": doc.get("calibration", {}).get("reused")}


def main() -> None:
    ap = bench_parser(__doc__, runs=7, seconds=3)
    ap.add_argument("--versus", metavar="MYSQLPROBE",
                    help="another build's mysqlprobe: its warm runs alternate with this one's, one each")
    ap.add_argument("--versus-options", default="", metavar="OPTIONS",
                    help="more options for the other's runs, e.g. '--no-perf-schema' with --versus naming "
                         "this build: what a collector costs the start")
    ap.add_argument("--idle", action="store_true", help="no load on the server")
    args = ap.parse_args()
    sb = sandbox.Sandbox(VERSION, instance="startup")
    pid = sb.start(log)
    conn = workload.connect(sb.socket)
    table = workload.table("range", 5)
    workload.prepare_source(conn, 11)
    workload.create_target(conn, table)
    conn.close()
    load = None if args.idle else RowInserts(sb.socket, table)
    if load:
        load.start()
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                if i == 0:
                    for d in cache_dirs():
                        shutil.rmtree(d, ignore_errors=True)
                run = one_run(pid, args.seconds, Path(tmp) / f"r{i}")
                run["start"] = "cold" if i == 0 else "warm"
                runs.append(run)
                log(f"run {i + 1}: {run}")
                if args.versus and i > 0:
                    other = one_run(pid, args.seconds, Path(tmp) / f"v{i}", args.versus,
                                    tuple(args.versus_options.split()))
                    # its plan is cached under its own code's digest: its first run plans afresh
                    other["start"] = "versus" if other["timings"].get("plan_cached") else "versus cold"
                    runs.append(other)
                    log(f"versus {i + 1}: {other}")
    finally:
        if load:
            load.finish()
        sb.stop()
    warm = [r for r in runs if r["start"] == "warm"]
    versus = [r for r in runs if r["start"] == "versus"]
    result = {"machine": machine(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "sudo .venv/bin/python bench/startup.py " + " ".join(sys.argv[1:]),
              "server": f"MariaDB {VERSION}", "load": "none" if args.idle else "4 clients inserting single rows",
              "runs": runs,
              "warm": {"ready_s": med([r["ready_s"] for r in warm]),
                       "ready_range": spread([r["ready_s"] for r in warm]),
                       "max_rss_mb": max(r["max_rss_mb"] for r in runs if r["start"] != "versus")},
              **({"versus": {"mysqlprobe": args.versus, "options": args.versus_options,
                             "ready_s": med([r["ready_s"] for r in versus]),
                             "ready_range": spread([r["ready_s"] for r in versus]),
                             "max_rss_mb": max(r["max_rss_mb"] for r in versus)}} if versus else {})}
    write_results(args.out, "startup", result, render)


def render(r: dict) -> str:
    def t(run, key):
        v = run["timings"].get(key)
        return "-" if v is None else f"{v:.3f}"

    lines = ["# From start to probes attached, and peak memory", "",
             f"{machine_line(r['machine'])} {r['date']}. Command: `{r['command']}`.", "",
             f"{r['server']} (mariadbd with full symbols), load: {r.get('load', '4 clients inserting single rows')}. "
             "Each run: "
             "`mysqlprobe -p PID --insert-profile -d SECONDS -o DIR` (the default mode, every collector). "
             "ready: from spawning it to its line `Tracing PID ...` (probes attached), timed by this script; "
             "peak RSS: the kernel's ru_maxrss for the process (wait4). The first run starts with mysqlprobe's "
             "caches removed. symbols, calibration, attach: the capture's own timings (symbols: reading the "
             "symbol table and planning, or taking the plan from the cache).", "",
             "| run | start | ready (s) | peak RSS (MB) | symbols (s) | plan cached | calibration (s) | attach (s) "
             "| calibration reused |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(r["runs"], 1):
        cached = {True: "yes", False: "no"}.get(run["timings"].get("plan_cached"), "-")
        lines.append(f"| {i} | {run['start']} | {run['ready_s']:.3f} | {run['max_rss_mb']:.1f} | "
                     f"{t(run, 'symbols_s')} | {cached} | {t(run, 'calibration_s')} | {t(run, 'attach_s')} | "
                     f"{'yes' if run.get('calibration_reused') else 'no'} |")
    w = r["warm"]
    lo, hi = w["ready_range"]
    lines += ["", f"- warm start to attached: median {w['ready_s']:.3f} s ({lo:.3f}-{hi:.3f})",
              f"- peak resident memory, any run: {w['max_rss_mb']:.1f} MB", ""]
    v = r.get("versus")
    if v:
        lo, hi = v["ready_range"]
        options = f" with `{v['options']}`" if v.get("options") else ""
        lines[-1:-1] = [f"- the other build (`{v['mysqlprobe']}`{options}, its runs alternating with these): "
                        "warm start "
                        f"median {v['ready_s']:.3f} s ({lo:.3f}-{hi:.3f}), peak RSS {v['max_rss_mb']:.1f} MB"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
