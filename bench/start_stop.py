"""mysqlprobe started and stopped 100 times on a server under load: the
server alive, its rows exact, nothing left behind, and what it cost the load.

The load: 4 clients inserting single rows (autocommit) into a partitioned
table of MariaDB 10.2.11 until told to stop, each counting the inserts the
server acknowledged. Then, in turn:

  unprobed  the load alone, SECONDS long
  stress    mysqlprobe --insert-profile (the default mode: duty cycles,
            perf, off-CPU, P_S) started and stopped RUNS times, each stopped
            at a random moment by SIGINT, SIGTERM or SIGHUP (some before
            its window opens, most in it)
  unprobed  the load alone again

and after the stress:
  rows      the table's rows against the inserts the clients counted
  left      BPF programs and links, mysqlprobe processes, uprobes on the
            server and P_S setup, against before
  slowdown  the unprobed rows/s (both runs' mean) over the stress rows/s

    sudo .venv/bin/python bench/start_stop.py [--runs 100] [--seconds 30]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS / "integration"), str(TESTS)]  # the suite's checks of the server and the kernel
from helpers import live_bpf_ids, tracefs_uprobe_events, whole_setup  # noqa: E402
from mysqlprobe.lab.benchkit import MYSQLPROBE, log, machine, machine_line, write_results  # noqa: E402
from mysqlprobe.lab.benchkit.loads import RowInserts  # noqa: E402
from mysqlprobe.lab import sandbox, workload  # noqa: E402

HERE = Path(__file__).parent
CLIENTS = 4
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def rate(load: RowInserts, seconds: float) -> float:
    """Rows per second the load made over the next `seconds`."""
    n0, t0 = load.inserted(), time.monotonic()
    time.sleep(seconds)
    return (load.inserted() - n0) / (time.monotonic() - t0)


def mysqlprobe_processes() -> list[str]:
    """Processes of mysqlprobe's (the tool, its helpers, perf into its directory), this one aside."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if ("bin/mysqlprobe" in cmd or "mysqlprobe.collectors" in cmd or "mysqlprobe-perf-" in cmd):
                out.append(f"{d.name} {cmd[:120]}")
    return out


def one_start_stop(pid: int, outdir: Path, rng: random.Random) -> dict:
    """mysqlprobe started, then stopped by a random signal after a random time."""
    sig = rng.choice(SIGNALS)
    after = rng.uniform(0.2, 6.0)  # symbols and calibration take about 2 s: some stops come before the window
    p = subprocess.Popen([MYSQLPROBE, "-p", str(pid), "--insert-profile", "-q", "-o", str(outdir)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    if p.poll() is None:
        p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    phase = ("window" if "Tracing PID" in err else
             last.split(" while ", 1)[1].split(";")[0] if " while " in last else "before the window")
    return {"signal": signal.Signals(sig).name, "after_s": round(after, 2), "exit": p.returncode, "phase": phase,
            "capture": (outdir / "profile.json").exists(), "traceback": "Traceback" in err,
            "last_line": last}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0, help="each unprobed phase")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sb = sandbox.Sandbox("10.2.11", instance="stress")
    with sb.serving(log) as pid:
        conn = workload.connect(sb.socket)
        table = workload.table("range", 5)
        workload.prepare_source(conn, 1)
        workload.create_target(conn, table)
        conn.close()
        setup0, progs0, links0 = whole_setup(sb), live_bpf_ids("prog"), live_bpf_ids("link")
        load = RowInserts(sb.socket, table)
        load.start()
        time.sleep(3)  # warm
        before = rate(load, args.seconds)
        log(f"unprobed: {before:.0f} rows/s")
        runs, t0, n0 = [], time.monotonic(), load.inserted()
        work = Path(os.environ.get("TMPDIR", "/tmp")) / "mysqlprobe-start-stop"
        for i in range(args.runs):
            runs.append(one_start_stop(pid, work / f"run{i}", rng))
            log(f"run {i + 1}/{args.runs}: {runs[-1]}")
        stress = (load.inserted() - n0) / (time.monotonic() - t0)
        after = rate(load, args.seconds)
        log(f"stress: {stress:.0f} rows/s; unprobed again: {after:.0f} rows/s")
        load.finish()
        conn = workload.connect(sb.socket)
        rows = workload.row_count(conn, table)
        conn.close()
        left = {"bpf_programs": sorted(live_bpf_ids("prog") - progs0), "bpf_links": sorted(live_bpf_ids("link") - links0),
                "processes": mysqlprobe_processes(), "uprobes_on_server": f"/proc/{pid}/" in tracefs_uprobe_events(),
                "ps_setup_changed": whole_setup(sb) != setup0}
        subprocess.run(["rm", "-rf", str(work)])
    result = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": " ".join(["bench/start_stop.py"] + sys.argv[1:]), "runs": runs,
              "rows_in_table": rows, "rows_acknowledged": load.inserted(), "left": left,
              "unprobed_rows_per_s": [round(before, 1), round(after, 1)], "stress_rows_per_s": round(stress, 1),
              "slowdown": round((before + after) / 2 / stress, 3) if stress else None}
    write_results(args.out, "start_stop", result, render)
    clean = (rows == load.inserted() and not any(left.values())
             and not any(r["traceback"] for r in runs) and all(r["exit"] in (0, 129, 130, 143) for r in runs))
    return 0 if clean else 1


def render(r: dict) -> str:
    runs, left = r["runs"], r["left"]
    by = Counter((x["phase"], x["exit"]) for x in runs)
    lines = [f"# Start and stop, {len(runs)} times, under load", "",
             f"{machine_line(r['machine'])} {r['date']}, `sudo .venv/bin/python {r['command']}`.", "",
             f"{len(runs)} runs of `mysqlprobe --insert-profile` (the default mode) on MariaDB 10.2.11 while "
             f"{CLIENTS} clients insert single rows; each run stopped after 0.2-6 s by SIGINT, SIGTERM or SIGHUP.",
             "", "| stopped while | exit | runs | capture written |", "|---|---|---|---|"]
    for (phase, code), n in sorted(by.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        written = sum(1 for x in runs if x["phase"] == phase and x["exit"] == code and x["capture"])
        lines.append(f"| {phase} | {code} | {n} | {written} |")
    tracebacks = sum(1 for x in runs if x["traceback"])
    lines += ["", "| check | result |", "|---|---|",
              f"| rows in the table against inserts acknowledged | {r['rows_in_table']:,} / "
              f"{r['rows_acknowledged']:,} ({'exact' if r['rows_in_table'] == r['rows_acknowledged'] else 'DIFFER'}) |",
              f"| BPF programs / links left | {len(left['bpf_programs'])} / {len(left['bpf_links'])} |",
              f"| mysqlprobe processes left | {len(left['processes'])} |",
              f"| uprobes left on the server | {'yes' if left['uprobes_on_server'] else 'none'} |",
              f"| P_S setup changed | {'yes' if left['ps_setup_changed'] else 'no'} |",
              f"| tracebacks | {tracebacks} |",
              f"| load, unprobed before / after (rows/s) | {r['unprobed_rows_per_s'][0]:,.0f} / "
              f"{r['unprobed_rows_per_s'][1]:,.0f} |",
              f"| load during the 100 start/stops (rows/s) | {r['stress_rows_per_s']:,.0f} |",
              f"| slowdown (unprobed mean / stress) | {r['slowdown']}x |", ""]
    lines += ["The slowdown covers everything a start and a stop do to the server: reading /proc, calibration, "
              "attaching and detaching the probes, P_S setup and restore, the duty cycles of each window. "
              "One pair of unprobed phases on a shared 2-CPU machine: read it with the noise of "
              "bench/RESULTS.md's OLTP parts section (unprobed runs against each other: 0.81-1.21).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
