"""What each part of the default profile costs an OLTP load on its own:
sysbench oltp_insert (8 clients, MariaDB 10.2.11), each variant's run
between two unprobed runs, round robin, set against their mean:

  default     mysqlprobe --insert-profile (all collectors, duty cycles)
  ps_setup    the window's Performance Schema setup alone (consumers and
              instruments on, as mysqlprobe sets them; no mysqlprobe running)
  perf        perf record -a at 99 Hz with frame-pointer stacks, alone
  cold_all    mysqlprobe with every collector but probing one function the
              load never calls: the collectors and the duty cycles' switching
              without probe hits

    sudo .venv/bin/python bench/oltp_parts.py [--rounds 5] [--seconds 10]

writes bench/OLTP_PARTS.md and bench/oltp_parts.json. The reported column
is mysqlprobe's overhead.measured_slowdown where it ran."""

from __future__ import annotations

import argparse
import signal
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from oltp import SHAPES, Load
from overhead import MYSQLPROBE, Tool, derived, log, machine, machine_line, med, write_results
from mysqlprobe import sandbox, workload
from mysqlprobe.collectors.perfschema import PerfSchema

HERE = Path(__file__).parent
SHAPE = SHAPES[1]  # oltp_insert, 8 threads
PERF = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "99", "--call-graph", "fp", "-a"]
COLD_FUNCTION = "fts_savepoint_free"  # full-text search: never called by oltp_insert


def run_default(load: Load, pid: int, workdir: Path, *extra: str) -> tuple[float, float | None]:
    d = Path(tempfile.mkdtemp(dir=workdir))
    tool = Tool([MYSQLPROBE, "-p", str(pid), "-q", "-o", str(d), *extra], "Tracing PID", "stderr")
    try:
        rate = load.run()
    finally:
        tool.stop()
    return rate, derived(d)["overhead"]["measured_slowdown"]


def run_ps_setup(load: Load, sb) -> tuple[float, None]:
    ps = PerfSchema(workload.connect(sb.socket))
    ps.enable()
    try:
        return load.run(), None
    finally:
        ps.restore()
        ps.conn.close()


def run_perf(load: Load, workdir: Path) -> tuple[float, None]:
    perf = subprocess.Popen(PERF + ["-o", str(workdir / "perf.data")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return load.run(), None
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-parts-"))
    sb = sandbox.Sandbox("10.2.11")
    started = datetime.now(timezone.utc)
    with sb.serving(log) as pid:
        load = Load(sb, SHAPE, args.seconds)
        load.prepare()
        variants = {
            "default": lambda: run_default(load, pid, workdir, "--insert-profile"),
            "ps_setup": lambda: run_ps_setup(load, sb),
            "perf": lambda: run_perf(load, workdir),
            "cold_all": lambda: run_default(load, pid, workdir, "--probe", COLD_FUNCTION),
        }
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        last = load.run()
        try:
            for r in range(args.rounds):
                for name, run in variants.items():
                    rate, reported = run()
                    after = load.run()
                    felt = (last + after) / 2 / rate
                    runs[name].append({"rate": rate, "before": last, "after": after, "felt": felt,
                                       "reported": reported})
                    log(f"round {r + 1} {name}: {rate:.0f}/s against {last:.0f} and {after:.0f}: felt {felt:.3f}x"
                        + (f", reported {reported}" if reported is not None else ""))
                    last = after
        finally:
            load.close()
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "shape": SHAPE.name,
              "rounds": args.rounds, "seconds": args.seconds, "runs": runs}
    write_results(args.out, "oltp_parts", result, markdown)


def _range(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}"


def markdown(result: dict) -> str:
    lines = ["# What each part of the default profile costs an OLTP load", "",
             f"{machine_line(result['machine'])} Started {result['started']}. Command: "
             f"`sudo .venv/bin/python bench/oltp_parts.py --rounds {result['rounds']} --seconds {result['seconds']}`.",
             "", f"Load: sysbench {result['shape']}, {result['seconds']} s runs on MariaDB 10.2.11. Each variant's "
             "run sits between two unprobed runs (round robin); felt = their mean rate over its rate. "
             "Medians with min-max.", "",
             "| variant | runs | felt slowdown | reported by mysqlprobe |", "|---|---|---|---|"]
    for name, runs in result["runs"].items():
        felt = [r["felt"] for r in runs]
        rep = [r["reported"] for r in runs if r["reported"] is not None]
        lines.append(f"| {name} | {len(runs)} | {med(felt):.3f} ({_range(felt)}) | "
                     + (f"{med(rep):.3f} ({_range(rep)})" if rep else "-") + " |")
    # the machine's own noise: each unprobed run against the one before it
    noise = [r["after"] / r["before"] for runs in result["runs"].values() for r in runs]
    lines += ["", f"Noise: an unprobed run against the unprobed run before it, {len(noise)} pairs: median "
              f"{med(noise):.3f} ({_range(noise)}). A 0.03 difference needs far more runs than these.", "",
              "Variants: see the docstring of bench/oltp_parts.py.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
