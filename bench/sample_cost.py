"""What a CPU sample costs the code it interrupts, taken in BPF
(collectors/cpu/cpu_sampler.py, frame-pointer stacks) and by perf record -a -g,
at the bursts' rates and above.

The known-cost fixture (tests/fixtures/known_cost.cc, frame pointers) runs
cost_10us in a loop for LOOP_MS and reports its own ns per call; each
round runs every variant once, in the same order, on the same process:
none, BPF at 1999/4999/9999 Hz, perf at 1999/4999 Hz. The slowdown is a
variant's median ns per call over the unsampled median; per sample, that
loss over the samples a second.

    sudo .venv/bin/python bench/sample_cost.py [--rounds 7]

writes its section of bench/RESULTS.md (and results.json)."""

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

from mysqlprobe.lab.benchkit import ROOT, bench_parser, log, machine, med, run_line, spread, write_results
from mysqlprobe.collectors.cpu.cpu_sampler import CpuSampleSession  # noqa: E402
from mysqlprobe.collectors.cpu.perf_record import perf_binary  # noqa: E402

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


def main() -> None:
    args = bench_parser(__doc__, rounds=7).parse_args()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-sample-cost-"))
    exe = workdir / "known_cost"
    subprocess.run(["g++", "-O2", "-fno-omit-frame-pointer", "-o", str(exe),
                    str(ROOT / "tests" / "fixtures" / "known_cost.cc")], check=True)
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
              "command": "bench/sample_cost.py " + " ".join(sys.argv[1:])}
    write_results(args.out, "sample_cost", result, render)
    os.unlink(exe)


def render(r: dict) -> str:
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


if __name__ == "__main__":
    main()
