"""The insert profile on a concurrent OLTP load (sysbench oltp_insert, 4
clients, short transactions) on MariaDB 10.2.11: exact counts equal the
server's own row counter and sysbench's count of writes; the default mode
says what it cost (the slowdown it measured, each collector's own figure)
and its estimate stays near the server's count. No timing decides."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from helpers import Profiler, stage
from mysqlprobe import sandbox, workload

pytestmark = [pytest.mark.root, pytest.mark.server]
SYSBENCH = shutil.which("sysbench") or "sysbench"


@pytest.fixture(scope="module")
def server():
    sb = sandbox.Sandbox("10.2.11", instance="oltp")
    pid = sb.start(lambda m: print(m, file=sys.stderr))
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS sbtest")
        cur.execute("CREATE DATABASE sbtest")
    conn.close()
    sysbench(sb, "prepare")
    try:
        yield sb, pid
    finally:
        sb.stop()


def sysbench(sb, command: str, seconds: int = 0) -> str:
    cmd = [SYSBENCH, "oltp_insert", "--db-driver=mysql", f"--mysql-socket={sb.socket}", "--mysql-user=root",
           "--mysql-db=sbtest", "--tables=2", "--table-size=1009", "--threads=4"]
    done = subprocess.run(cmd + ([f"--time={seconds}"] if seconds else []) + [command],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def writes(out: str) -> int:
    return int(re.search(r"write:\s+(\d+)", out).group(1))


def rows_inserted(doc: dict) -> int:
    return doc["perf_schema"]["deltas"]["status"]["Innodb_rows_inserted"]


def test_exact_counts_are_the_servers_and_sysbenchs(server, tmp_path):
    sb, pid = server
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact", "--no-perf")
    out = sysbench(sb, "run", seconds=3)
    code, text, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    assert writes(out) > 1000
    assert stage(doc, "innodb.row_insert")["calls"] == rows_inserted(doc) == writes(out)
    assert doc["overhead"]["measured_slowdown"] is None
    assert "overhead slowdown not measured: every call counted (--exact)" in text


def test_default_mode_says_what_it_cost(server, tmp_path):
    sb, pid = server
    prof = Profiler(pid, tmp_path, "--insert-profile")
    out = sysbench(sb, "run", seconds=4)
    code, text, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    truth = rows_inserted(doc)
    assert truth == writes(out)
    slowdown = doc["overhead"]["measured_slowdown"]
    assert slowdown is not None and 0.7 < slowdown < 3.0, slowdown  # below 1: the load's own variation
    costs = doc["overhead"]["by_collector"]
    assert set(costs) == {"perf", "off_cpu", "calibration", "uprobe", "perf_schema", "process"}
    assert all(c["method"] for c in costs.values())
    assert costs["uprobe"]["target_s"] > 0 and costs["perf"]["cpu_s"] is not None
    # off-CPU ran with the probes, in the on-phases only; perf samples CPU-wide, all window
    assert 0 < doc["off_cpu"]["on_s"] < doc["window"]["duration_s"]
    assert "on_s" not in doc["perf"] and doc["perf"]["samples"] > 0
    estimate = stage(doc, "innodb.row_insert")["estimated_calls"]["value"]
    assert abs(estimate - truth) / truth < 0.10, (estimate, truth)
    said = f"load slowed {slowdown:.2f}x" if slowdown >= 1 else f"load not measurably slowed ({slowdown:.2f}x)"
    assert f"overhead {said}" in " ".join(text.split())
    sampling = doc["sampling"]                     # the unprobed rate it was measured against
    assert sampling["off_rows"] > 0 and 0 < sampling["off_s"] < doc["window"]["duration_s"]
