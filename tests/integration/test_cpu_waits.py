"""A probed call that waits for a CPU is timed without the wait: the
known-cost target burns a known amount of its own CPU time in burn_cpu()
on a CPU it shares with a busy process, so its wall time is about twice
its CPU time, and the fixture measures both itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import Profiler

pytestmark = pytest.mark.root

BURN_MS = 53  # prime; several time slices, so each call is switched out more than once
CALLS = 7


def _burn(proc, ms: int) -> dict:
    proc.stdin.write(f"burn {ms}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


@pytest.fixture
def sharing_a_cpu(known_cost):
    """The known-cost target and a busy process on one CPU."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(known_cost.pid)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(known_cost.pid, {cpu})
        yield known_cost
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(known_cost.pid, before)


def test_waits_for_a_cpu_are_left_out_of_the_call(sharing_a_cpu, tmp_path):
    prof = Profiler(sharing_a_cpu.pid, tmp_path, "--probe", "burn_cpu", "--exact", "--no-cpu", "--no-off-cpu")
    runs = [_burn(sharing_a_cpu, BURN_MS) for _ in range(CALLS)]
    code, out, err = prof.stop()
    assert code == 0, err
    doc = json.loads((tmp_path / "profile.json").read_text())
    (probe,) = [p for p in doc["probes"] if p["name"] == "burn_cpu"]
    cpu_ns, wall_ns = sum(r["cpu_ns"] for r in runs), sum(r["wall_ns"] for r in runs)
    waited = wall_ns - cpu_ns
    assert waited > 0.5 * cpu_ns                        # it did share its CPU: there is a wait to leave out
    assert doc["engine"]["cpu_waits_left_out"] is True
    assert probe["calls"] == CALLS
    assert probe["cpu_waits"]["calls"] == CALLS          # every call waited
    # what the probes timed is its CPU time, the waits apart; together, the wall time
    assert abs(probe["raw"]["total_ns"] - cpu_ns) < 0.1 * waited
    assert abs(probe["raw"]["total_ns"] + probe["cpu_waits"]["total_ns"] - wall_ns) < 0.02 * wall_ns
    assert "waited for a CPU" in out                    # and the report says so
    # the sched_switch program's kernel run time is in the probes' measured cost
    cost = doc["collectors"]["latency"]["cost"]
    runs = re.search(r"sched_switch program .*\((\d+) runs", cost["method"])
    assert runs and int(runs.group(1)) >= 2 * CALLS and cost["target_s"] > 0, cost


def test_the_timed_and_the_waited_parts_are_within_the_wall_time(known_cost, tmp_path):
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "burn_cpu", "--exact", "--no-cpu", "--no-off-cpu")
    run = _burn(known_cost, 11)
    code, _, err = prof.stop()
    assert code == 0, err
    doc = json.loads((tmp_path / "profile.json").read_text())
    (probe,) = [p for p in doc["probes"] if p["name"] == "burn_cpu"]
    assert probe["calls"] == 1
    assert probe["raw"]["total_ns"] + probe["cpu_waits"]["total_ns"] <= run["wall_ns"]
    assert probe["raw"]["total_ns"] >= run["cpu_ns"]
