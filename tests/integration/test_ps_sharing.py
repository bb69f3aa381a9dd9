"""Several mysqlprobe on one server share its Performance Schema setup: it
is restored once, by the last to leave, to the state from before the
first; a profiler's window keeps its consumers when another one ends
(also when that one is killed with -9 and its guard leaves for it)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import Profiler, history_consumers_on, wait_until, whole_setup
from mysqlprobe.lab import sandbox, workload

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 3001  # prime
LEASES = Path("/run/mysqlprobe")


@pytest.fixture(scope="module", params=["10.2.11", "10.11.5"])
def server(request):
    sb = sandbox.Sandbox(request.param)
    with sb.serving(lambda m: print(m, file=sys.stderr)) as pid:
        yield sb, pid


def insert_rows(sb) -> None:
    """INSERT INTO emp_hash_5 SELECT ...: ROWS rows."""
    conn = workload.connect(sb.socket)
    t = workload.table("hash", 5)
    workload.prepare_source(conn, ROWS)
    workload.create_target(conn, t)
    affected, _ = workload.insert_select(conn, t)
    assert affected == ROWS
    conn.close()


def profiler(pid, out, *extra) -> Profiler:
    return Profiler(pid, out, "--insert-profile", "--exact", "--no-cpu", "--no-off-cpu", *extra)


@pytest.mark.parametrize("first_to_end", ["first started", "second started"])
def test_overlapping_profilers_restore_once_to_the_state_before_the_first(server, tmp_path, first_to_end):
    sb, pid = server
    before = whole_setup(sb)
    a = profiler(pid, tmp_path / "a")
    b = profiler(pid, tmp_path / "b", "--ps-waits", "all")   # B changes more rows than A
    ending, staying = (a, b) if first_to_end == "first started" else (b, a)
    code, _, err = ending.stop()
    assert code == 0, err
    assert history_consumers_on(sb), "the profiler still running lost its consumers"
    assert whole_setup(sb) != before
    insert_rows(sb)                               # inside the staying one's window only
    code, out, err = staying.stop()
    assert code == 0, err
    assert whole_setup(sb) == before
    doc = staying.profile()
    assert "turned off during the window" not in out
    assert any(s["sql_text"].replace("`", "").startswith("INSERT INTO emp_hash_5") for s in doc["perf_schema"]["statements"])
    left = ending.profile()["perf_schema"]
    assert left["setup_restored"] == "left to another mysqlprobe still recording this server"
    assert "setup_restored" not in doc["perf_schema"]
    assert not list(LEASES.glob(f"ps-{pid}-*.json")), "the shared record outlived its last profiler"


def test_a_profiler_killed_mid_window_leaves_through_its_guard(server, tmp_path):
    sb, pid = server
    before = whole_setup(sb)
    a = profiler(pid, tmp_path / "a")
    b = profiler(pid, tmp_path / "b", "--ps-waits", "all")
    os.kill(b.proc.pid, signal.SIGKILL)
    b.proc.wait(timeout=30)
    time.sleep(1.0)                      # the guard has left for it by now
    assert history_consumers_on(sb), "the guard of the killed one restored under a running profiler"
    code, _, err = a.stop()
    assert code == 0, err
    assert wait_until(lambda: whole_setup(sb) == before, timeout=10)


def test_consumers_turned_off_under_a_window_are_reported(server, tmp_path):
    sb, pid = server
    before = whole_setup(sb)
    a = profiler(pid, tmp_path / "a")
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:           # another tool, or a DBA, turns the history off mid-window
        cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = 'NO' "
                    "WHERE NAME = 'events_stages_history_long'")
    conn.close()
    code, out, err = a.stop()
    assert code == 0, err
    flat = " ".join(out.split())
    assert "warning: Performance Schema: events_stages_history_long turned off during the window" in flat
    assert a.profile()["perf_schema"]["turned_off_in_window"] == ["events_stages_history_long"]
    assert whole_setup(sb) == before


def poll_history_consumers(sb, seconds: float) -> list[bool]:
    """Whether the history consumers were on, read every 20 ms while a load
    inserts rows (the probes' cost sets the off-phases apart)."""
    stop = threading.Event()

    def load():
        while not stop.is_set():
            insert_rows(sb)

    loader = threading.Thread(target=load)
    loader.start()
    seen, deadline = [], time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            seen.append(history_consumers_on(sb))
            time.sleep(0.02)
    finally:
        stop.set()
        loader.join()
    return seen


def test_quiet_phases_switch_the_setup_off_only_while_no_other_profiler_records(server, tmp_path):
    sb, pid = server
    before = whole_setup(sb)
    sampled = ("--insert-profile", "--no-cpu", "--no-off-cpu")
    alone = Profiler(pid, tmp_path / "alone", *sampled)
    seen = poll_history_consumers(sb, 3.0)
    code, _, err = alone.stop()
    assert code == 0, err
    assert True in seen and False in seen, "no quiet phase switched the window's consumers off"
    assert alone.profile()["perf_schema"]["quieted"]["quiet_s"] > 0
    assert whole_setup(sb) == before
    exact = profiler(pid, tmp_path / "exact")          # another profiler's window: its consumers stay on
    shared = Profiler(pid, tmp_path / "shared", *sampled)
    seen = poll_history_consumers(sb, 3.0)
    code, _, err = shared.stop()
    assert code == 0, err
    assert all(seen), "a quiet phase took the consumers from under another profiler"
    doc = shared.profile()
    assert "quieted" not in doc["perf_schema"] and doc["sampling"]["quiet_s"] == 0
    assert exact.stop()[0] == 0
    assert whole_setup(sb) == before
