"""The BPF sampler's counts against two outside measures, on the seed bulk
load and on concurrent OLTP: perf record -a at the same rate over the same
seconds (its samples of the server picked out by perf script), and the
CPU time the kernel charged the server (/proc/PID/stat) times the rate.

MariaDB 10.2.11 sandbox; for each shape, ROUNDS windows of SECONDS with
both samplers on at once at 99 Hz (collectors/cpu/cpu_sampler.py with
frame-pointer stacks, as the default profile takes them).

    sudo .venv/bin/python bench/sampler_agreement.py [--rounds 3] [--seconds 8]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Load, SHAPES
from mysqlprobe.lab.benchkit import bench_parser, log, machine, med, run_line, spread, write_results
from mysqlprobe.lab import sandbox  # noqa: E402
from mysqlprobe.collectors.cpu.cpu_sampler import CpuSampleSession  # noqa: E402
from mysqlprobe.collectors.cpu.perf_record import perf_binary  # noqa: E402
from mysqlprobe.collectors.kernel.process import cpu_seconds  # noqa: E402

HZ = 99
SHAPE_NAMES = ("seed bulk load, 1 thread", "oltp_insert, 8 threads", "oltp_insert, 32 threads")


def one_window(pid: int, seconds: float, workdir: Path) -> dict:
    data = workdir / "perf.data"
    perf = subprocess.Popen([perf_binary(), "record", "-q", "-e", "cpu-clock", "-F", str(HZ), "-a",
                             "-o", str(data)], stderr=subprocess.DEVNULL)
    while not (data.exists() and data.stat().st_size > 0):
        time.sleep(0.01)
    time.sleep(0.5)  # perf's own start over
    with CpuSampleSession(pid, HZ, user_stacks=True, kernel_stacks=True) as session:
        cpu0 = cpu_seconds(pid)
        session.start()
        t0 = time.time()
        time.sleep(seconds)
        session.stop()
        t1 = time.time()
        cpu = cpu_seconds(pid) - cpu0
        bpf = sum(r.count for r in session.records())
    perf.send_signal(signal.SIGINT)
    perf.wait()
    out = subprocess.run([perf_binary(), "script", "-i", str(data), "--pid", str(pid), "-F", "time"],
                         capture_output=True, text=True, check=True).stdout
    times = [float(line.strip().rstrip(":")) for line in out.splitlines() if line.strip()]
    # perf's clock is CLOCK_MONOTONIC-like (perf_clock); the window is its middle SECONDS: count by span
    span = (max(times) - min(times)) if times else 0
    perf_in = round(len(times) * seconds / span) if span > seconds else len(times)
    return {"bpf": bpf, "perf": perf_in, "cpu_s": round(cpu, 3), "cpu_expected": round(cpu * HZ),
            "wall_s": round(t1 - t0, 3)}


def main() -> None:
    ap = bench_parser(__doc__, rounds=3, seconds=8)
    args = ap.parse_args()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-agree-"))
    sb = sandbox.Sandbox("10.2.11")
    shapes = []
    with sb.serving(log) as pid:
        for shape in [s for s in SHAPES if s.name in SHAPE_NAMES]:
            load = Load(sb, shape)
            load.prepare()
            load.start()
            time.sleep(3)
            runs = []
            try:
                for r in range(args.rounds):
                    runs.append(one_window(pid, args.seconds, workdir))
                    log(f"{shape.name} {r + 1}: {runs[-1]}")
            finally:
                load.close()
            shapes.append({"shape": shape.name, "runs": runs})
    result = {"machine": machine(), "started": started, "rounds": args.rounds, "seconds": args.seconds,
              "hz": HZ, "shapes": shapes,
              "command": "bench/sampler_agreement.py " + " ".join(sys.argv[1:])}
    write_results(args.out, "sampler_agreement", result, render)


def render(r: dict) -> str:
    lines = ["# The BPF sampler's counts against perf and the kernel's CPU time", "", run_line(r), "",
             f"MariaDB 10.2.11. Each window: {r['seconds']} s with the BPF sampler (frame-pointer stacks) and "
             f"`perf record -a` both at {r['hz']} Hz on the server under the load. perf: its samples of the server "
             "(perf script --pid) scaled to the BPF window from their span (perf ran a little longer each side). "
             "CPU: the server's CPU seconds from /proc over the BPF window, times the rate. Ratios: medians "
             "[min, max] over the windows.", "",
             "| load shape | windows | BPF samples | BPF / perf | BPF / (CPU x rate) |", "|---|---|---|---|---|"]
    for s in r["shapes"]:
        runs = s["runs"]
        vs_perf = [x["bpf"] / x["perf"] for x in runs if x["perf"]]
        vs_cpu = [x["bpf"] / x["cpu_expected"] for x in runs if x["cpu_expected"]]
        lo, hi = spread(vs_perf)
        clo, chi = spread(vs_cpu)
        lines.append(f"| {s['shape']} | {len(runs)} | {med([x['bpf'] for x in runs]):.0f} | "
                     f"{med(vs_perf):.3f} [{lo:.3f}, {hi:.3f}] | {med(vs_cpu):.3f} [{clo:.3f}, {chi:.3f}] |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
