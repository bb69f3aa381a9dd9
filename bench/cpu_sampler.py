"""The BPF CPU sampler against outside measures: its counts, and what a sample costs.

    sudo .venv/bin/python bench/cpu_sampler.py agreement [--help]
    sudo .venv/bin/python bench/cpu_sampler.py cost [--help]

agreement: The BPF sampler's counts against two outside measures, on the seed bulk
load and on concurrent OLTP: perf record -a at the same rate over the same
seconds (its samples of the server picked out by perf script), and the
CPU time the kernel charged the server (/proc/PID/stat) times the rate.

cost: What a CPU sample costs the code it interrupts, taken in BPF
(collectors/cpu/cpu_sampler.py, frame-pointer stacks) and by perf record -a -g,
at the bursts' rates and above."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.collectors.cpu.cpu_sampler import CpuSampleSession
from mysqlprobe.collectors.cpu.perf_record import perf_binary
from mysqlprobe.collectors.kernel.process import cpu_seconds

from mysqlprobe.lab.known_cost import build_known_cost
from mysqlprobe.lab import sandbox
from mysqlprobe.lab.benchkit import ROOT, bench_parser, log, machine, med, run_line, run_subcommand, spread, write_results
from mysqlprobe.lab.benchkit.loads import SHAPES, Load

# --------------------------------------------------------------------------- agreement

DOC_AGREEMENT = """The BPF sampler's counts against two outside measures, on the seed bulk
load and on concurrent OLTP: perf record -a at the same rate over the same
seconds (its samples of the server picked out by perf script), and the
CPU time the kernel charged the server (/proc/PID/stat) times the rate.

MariaDB 10.2.11 sandbox; for each shape, ROUNDS windows of SECONDS with
both samplers on at once at 99 Hz (collectors/cpu/cpu_sampler.py with
frame-pointer stacks, as the default profile takes them).

    sudo .venv/bin/python bench/cpu_sampler.py agreement [--rounds 3] [--seconds 8]

writes its section of bench/RESULTS.md (and results.json)."""

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


def main_agreement() -> None:
    ap = bench_parser(DOC_AGREEMENT, rounds=3, seconds=8)
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
              "command": "bench/cpu_sampler.py agreement " + " ".join(sys.argv[1:])}
    write_results(args.out, "sampler_agreement", result, render_agreement)


def render_agreement(r: dict) -> str:
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



# --------------------------------------------------------------------------- cost

DOC_COST = """What a CPU sample costs the code it interrupts, taken in BPF
(collectors/cpu/cpu_sampler.py, frame-pointer stacks) and by perf record -a -g,
at the bursts' rates and above.

The known-cost fixture (tests/fixtures/known_cost.cc, frame pointers) runs
cost_10us in a loop for LOOP_MS and reports its own ns per call; each
round runs every variant once, in the same order, on the same process:
none, BPF at 1999/4999/9999 Hz, perf at 1999/4999 Hz. The slowdown is a
variant's median ns per call over the unsampled median; per sample, that
loss over the samples a second.

    sudo .venv/bin/python bench/cpu_sampler.py cost [--rounds 7]

writes its section of bench/RESULTS.md (and results.json)."""

LOOP_MS = 701
BPF_RATES = (1999, 4999, 9999)
PERF_RATES = (1999, 4999)


class Fixture:
    def __init__(self, exe: Path):
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline())["ready"]

    def loop(self) -> float:
        self.proc.stdin.write(f"loop cost_10us {LOOP_MS}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["ns_per_call"]

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=10)


def with_bpf(fx: Fixture, hz: int) -> float:
    with CpuSampleSession(fx.proc.pid, hz, user_stacks=True, kernel_stacks=True) as session:
        session.start()
        ns = fx.loop()
        session.stop()
    return ns


def with_perf(fx: Fixture, hz: int, workdir: Path) -> float:
    data = workdir / "perf.data"
    perf = subprocess.Popen([perf_binary(), "record", "-q", "-e", "cpu-clock", "-F", str(hz), "-g", "-a",
                             "-o", str(data)], stderr=subprocess.DEVNULL)
    while not (data.exists() and data.stat().st_size > 0):
        time.sleep(0.01)
    time.sleep(0.3)  # its start's CPU over
    ns = fx.loop()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    return ns


def main_cost() -> None:
    args = bench_parser(DOC_COST, rounds=7).parse_args()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-sample-cost-"))
    exe = build_known_cost(ROOT / "tests" / "fixtures", workdir)
    fx = Fixture(exe)
    variants = {"none": fx.loop, **{f"bpf {hz}": (lambda hz=hz: with_bpf(fx, hz)) for hz in BPF_RATES},
                **{f"perf {hz}": (lambda hz=hz: with_perf(fx, hz, workdir)) for hz in PERF_RATES}}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for r in range(args.rounds):
            for name, run in variants.items():
                runs[name].append(run())
            log(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in runs.items()))
    finally:
        fx.close()
    base = med(runs["none"])
    rows = []
    for name, values in runs.items():
        ratios = [v / base for v in values]
        hz = int(name.split()[1]) if name != "none" else None
        rows.append({"variant": name, "ns_per_call": round(med(values), 1), "slowdown": round(med(ratios), 4),
                     "range": [round(x, 4) for x in spread(ratios)],
                     "us_per_sample": round((med(ratios) - 1) / hz * 1e6, 1) if hz else None})
    result = {"machine": machine(), "started": started, "rounds": args.rounds, "loop_ms": LOOP_MS, "rows": rows,
              "command": "bench/cpu_sampler.py cost " + " ".join(sys.argv[1:])}
    write_results(args.out, "sample_cost", result, render_cost)
    os.unlink(exe)


def render_cost(r: dict) -> str:
    lines = ["# What a CPU sample costs the code it interrupts", "", run_line(r), "",
             f"The known-cost fixture's cost_10us in a loop of {r['loop_ms']} ms, its own ns per call; {r['rounds']} "
             "rounds, each variant once per round on the same process. Slowdown: the variant's ns per call over "
             "the unsampled median (median, min-max over the rounds); per sample: that loss over the samples a "
             "second (one CPU busy).", "",
             "| variant | ns per call | slowdown | min-max | us per sample |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        lo, hi = row["range"]
        per = "-" if row["us_per_sample"] is None else f"{row['us_per_sample']:.1f}"
        lines.append(f"| {row['variant']} | {row['ns_per_call']:.0f} | {row['slowdown']:.4f} | {lo:.4f}-{hi:.4f} "
                     f"| {per} |")
    return "\n".join(lines) + "\n"


SUBCOMMANDS = {"agreement": (main_agreement, DOC_AGREEMENT), "cost": (main_cost, DOC_COST)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
