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

from helpers import Profiler, stage, whole_setup
from mysqlprobe.analysis.model import Profile
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.recorder.duty import ORDINARY_FIRST_S

pytestmark = [pytest.mark.root, pytest.mark.server]
SYSBENCH = shutil.which("sysbench") or "sysbench"
COUNTS = 0.02      # estimated calls against the server's rows: the bound (bench section 2 holds 1%)


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


def sysbench(sb, command: str, seconds: int = 0, test: str = "oltp_insert", *options: str,
             threads: int = 4) -> str:
    cmd = [SYSBENCH, test, "--db-driver=mysql", f"--mysql-socket={sb.socket}", "--mysql-user=root",
           "--mysql-db=sbtest", "--tables=2", "--table-size=1009", f"--threads={threads}", *options]
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
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact", "--no-cpu")
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
    before = whole_setup(sb)
    prof = Profiler(pid, tmp_path, "--insert-profile")
    out = sysbench(sb, "run", seconds=4)
    code, text, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    truth = rows_inserted(doc)
    assert truth == writes(out)
    slowdown = doc["overhead"]["slowdown_estimate"]   # the measure; printed from 1.0 up
    # timings live in bench/ (section 2); a duty cycler that left the probes on all along would
    # slow 8 clients' inserts by 2x and more: that, this bound catches
    assert slowdown is not None and slowdown < 1.5, slowdown
    costs = doc["overhead"]["by_collector"]
    assert set(costs) == {"cpu_profile", "off_cpu", "io", "calibration", "latency", "perf_schema", "process", "cpu_bursts"}
    # sysbench's tables are not partitioned: no short function ran, so the bursts took the first
    # half second of ordinary off-time (what a short window's means rest on) and no more
    assert 0 < doc["sampling"]["burst_s"] <= ORDINARY_FIRST_S + 0.05, doc["sampling"]
    assert 0 < doc["cpu_bursts"]["on_s"] <= ORDINARY_FIRST_S + 0.05
    assert all(c["method"] for c in costs.values())
    assert costs["latency"]["target_s"] > 0
    # the CPU samples in BPF (the binary keeps frame pointers): the kernel timed their program's runs
    assert doc["cpu_profile"]["sampler"] == "bpf" and costs["cpu_profile"]["target_s"] > 0
    assert "timer interrupts" in costs["cpu_profile"]["method"]
    # I/O ran with the probes, in the on-phases only; CPU samples and off-CPU switches (the wall-time
    # account's) are taken all window but in the quiet phases
    assert 0 < doc["io"]["on_s"] < doc["window"]["duration_s"] and costs["io"]["target_s"] > 0
    for section in ("cpu_profile", "off_cpu"):
        assert "on_s" not in doc[section] and 0 <= doc[section]["quiet_s"] < doc["window"]["duration_s"]
    assert doc["cpu_profile"]["samples"] > 0 and doc["off_cpu"]["switches"] > 0
    estimate = stage(doc, "innodb.row_insert")["estimated_calls"]["value"]
    assert abs(estimate - truth) / truth < COUNTS, (estimate, truth)   # bench section 2: within 1%
    # printed only from 1.0 up (a probed load cannot run faster), with its interval where the phases give one
    o = doc["overhead"]
    said = (f"load ran {slowdown:.2f}x slower" if slowdown >= 1
            else f"slowdown not measurable (±{o['slowdown_doubt']:.2f})")
    assert f"overhead {said}" in " ".join(text.split())
    assert (o["measured_slowdown"] is None) == (slowdown < 1)
    sampling = doc["sampling"]                     # the unprobed rate it was measured against
    assert sampling["off_rows"] > 0 and 0 < sampling["off_s"] < doc["window"]["duration_s"]
    # what runs in every phase: this process, its helper, the server's threads for its connections, the
    # sched_switch program (the kernel timed its runs)
    o, window = doc["overhead"], doc["window"]
    switches = doc["engine"]["switch_program"]
    assert switches["runs"] > 0 and 0 < switches["s"] < window["duration_s"]
    assert 0 < window["own_cpu_s"] + switches["s"] <= o["standing_cpu_s"] < window["duration_s"]
    assert doc["perf_schema"]["own_connections_cpu_s"] > 0           # the progress reads took server CPU
    assert costs["perf_schema"]["target_s"] == pytest.approx(doc["perf_schema"]["own_connections_cpu_s"], abs=1e-4)
    assert 1.0 < o["standing_slowdown"] < 1.5
    assert o["slowdown_estimate"] == pytest.approx(o["phase_slowdown"] * o["standing_slowdown"], abs=2e-4)
    quiet_phases_leave_nothing_on(doc, before, whole_setup(sb))


def quiet_phases_leave_nothing_on(doc: dict, before: tuple, after: tuple) -> None:
    """The P_S setup mysqlprobe turned on was off again in the quiet phases;
    the summaries scaled back to the window agree with the server's own
    counters, and its setup updates are not counted as the load's rows."""
    ps, sampling = doc["perf_schema"], doc["sampling"]
    assert set(sampling["quieted"]) == {"calibration", "cpu_profile", "off_cpu", "perf_schema"} \
        and 0.5 <= sampling["quiet_share"] <= 0.9
    quieted = ps["quieted"]
    assert "events_stages_history_long" in quieted["consumers"]
    assert "stage/sql/closing tables" in quieted["instruments"]
    assert 0 < quieted["quiet_s"] < doc["window"]["duration_s"]
    status = ps["deltas"]["status"]
    # oltp_insert updates no row: every Handler_update of the window was a setup row of mysqlprobe's
    assert ps["own_rows_changed"] == status["Handler_update"] > 0
    raw = {r["name"]: r["count"] for r in ps["deltas"]["stages"]}["stage/sql/closing tables"]
    scaled = {r["name"]: r["count"] for r in Profile(doc).ps_summaries["stages"]}["stage/sql/closing tables"]
    assert raw < 0.9 * status["Com_insert"], (raw, status)           # not counted in the quiet phases
    assert abs(scaled - status["Com_insert"]) / status["Com_insert"] < 0.05, (scaled, status)
    assert after == before


def digests_add_up(doc: dict) -> None:
    """Per digest: no function takes longer than its statement, no share is
    negative or above 100%, and the figures add up to the latency."""
    for d in doc["attribution"]["by_digest"]:
        assert d["unattributed_ns"] >= 0 and d["probe_cost_ns"] >= 0 and d["mean_ns"] >= 0
        for f in d["functions"]:
            assert 0 <= f["exclusive_ns"] <= f["inclusive_ns"] <= d["raw_mean_ns"], (d["text"], f)
        probed = sum(n["inclusive_ns"] for n in d["tree"])
        if not d["notes"]:
            assert abs(probed + d["probe_cost_ns"] + d["unattributed_ns"] - d["raw_mean_ns"]) <= 2, d


def test_insert_digests_count_every_execution(server, tmp_path):
    # the load: 8 clients, each thread running thousands of statements
    sb, pid = server
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact", "--no-cpu", "--no-off-cpu")
    out = sysbench(sb, "run", 3, threads=8)
    code, text, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    inserts = [d for d in doc["attribution"]["by_digest"] if d["digest_text"].startswith("INSERT INTO")]
    assert len(inserts) == 2  # one per table, joined to P_S's digests
    assert all(d["joined"] == "P_S digest summary" for d in inserts)
    assert abs(sum(d["executions"] for d in inserts) - writes(out)) <= 0.02 * writes(out)
    assert sum(d["executions_probed"] for d in inserts) == writes(out)  # exact: every one began and ended inside
    (row_insert,) = [p["id"] for p in doc["probes"] if p["stage"] == "innodb.row_insert"]
    assert sum(c["calls"] for s in doc["statements"]["shapes"] for c in s["calls"]
               if c["probe"] == row_insert) == writes(out)
    digests_add_up(doc)
    # connections are not background threads: only threads P_S calls BACKGROUND are
    assert all(t["background_from"] == "P_S threads.TYPE" for t in doc["attribution"]["by_thread"])
    assert "per statement digest" in text


def test_write_only_digests_update_delete_and_insert(server, tmp_path):
    sb, pid = server
    prof = Profiler(pid, tmp_path, "--insert-profile", "--stage", "sql.ha_write_row", "--no-cpu", "--no-off-cpu")
    sysbench(sb, "run", 3, "oltp_write_only", "--db-ps-mode=disable")
    code, text, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    kinds = {d["digest_text"].split()[0].upper() for d in doc["attribution"]["by_digest"] if d["joined"]}
    assert {"UPDATE", "DELETE", "INSERT"} <= kinds, kinds
    digests_add_up(doc)
    status = doc["perf_schema"]["deltas"]["status"]
    inserts = [d for d in doc["attribution"]["by_digest"] if d["digest_text"].startswith("INSERT INTO")]
    assert abs(sum(d["executions"] for d in inserts) - status["Com_insert"]) <= 0.02 * status["Com_insert"]
