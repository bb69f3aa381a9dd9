"""Performance Schema on real servers: MariaDB 10.2.11 (MySQL 5.6's P_S, no
THREAD_OS_ID, but PROCESSLIST.TID) and 10.11.5 (THREAD_OS_ID, a thread pool
that floods the stage history). The statement and its stages are found and
joined by thread, also for a connection gone before the window ends, the
attribution adds up, the setup reads the same afterwards (also after
SIGTERM), and a server without P_S or with wrong credentials still gives a
probes-only report."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from helpers import Profiler, stage
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.perfschema.settings import INSTRUMENTS

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 10007


def log(msg):
    print(msg, file=sys.stderr)


@pytest.fixture(scope="module", params=["10.2.11", "10.11.5"])
def server(request):
    sb = sandbox.Sandbox(request.param)
    with sb.serving(log) as pid:
        yield sb, pid


def has_thread_history(sb) -> bool:
    """threads.HISTORY, from MySQL 5.7's P_S: MariaDB 10.5 and later."""
    return tuple(int(x) for x in sb.version.split(".")[:2]) >= (10, 5)


def setup_tables(sb) -> tuple:
    """What mysqlprobe changes for its window: consumers, instruments, and
    (10.5+) the background threads whose history is off, none on a fresh
    server (the thread pool's threads come and go: their ids are not compared)."""
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("SELECT NAME, ENABLED FROM performance_schema.setup_consumers ORDER BY NAME")
        consumers = cur.fetchall()
        where = " OR ".join(["NAME LIKE %s"] * len(INSTRUMENTS))
        cur.execute(f"SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments WHERE {where} "
                    "ORDER BY NAME", INSTRUMENTS)
        instruments = cur.fetchall()
        history_off = None
        if has_thread_history(sb):
            cur.execute("SELECT COUNT(*) FROM performance_schema.threads WHERE TYPE = 'BACKGROUND' "
                        "AND HISTORY = 'NO'")
            history_off = cur.fetchone()[0]
    conn.close()
    return consumers, instruments, history_off


def _profile_insert(sb, pid, tmp_path, *args):
    conn = workload.connect(sb.socket)
    t = workload.table("range", 5)
    workload.prepare_source(conn, ROWS)
    workload.create_target(conn, t)
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact", *args)
    affected, _ = workload.insert_select(conn, t)
    code, out, err = prof.stop()
    conn.close()
    assert code == 0, err
    assert affected == ROWS
    return prof.profile(), out


def test_statement_stage_and_attribution_add_up(server, tmp_path):
    sb, pid = server
    before = setup_tables(sb)
    doc, out = _profile_insert(sb, pid, tmp_path)
    ps = doc["perf_schema"]
    assert ps["status"] == "collected" and ps["thread_os_id"] == (sb.version == "10.11.5")
    assert ps["os_tid_source"] == ("performance_schema.threads.THREAD_OS_ID" if sb.version == "10.11.5"
                                   else "information_schema.PROCESSLIST.TID")
    assert ps["deltas"]["status"]["Handler_write"] >= ROWS
    (tree,) = [t for t in doc["attribution"]["by_thread"]
               if t["statement"].replace("`", "").startswith("INSERT INTO emp_range_5")]
    assert tree["join"] == "thread"
    main = tree["stages"][0]
    assert main["stage"].startswith("stage/sql/") and main["probed"]
    roots = {r["stage"]: r for r in main["probed"]}
    assert roots["partition.write_row"]["calls"] == ROWS
    assert sum(r["inclusive_ns"] for r in main["probed"]) + main["probe_cost_ns"] + main["unexplained_ns"] \
        == main["ns"]
    assert main["ns"] <= tree["in_window_ns"]
    assert stage(doc, "partition.write_row")["calls"] == ROWS
    assert "where the time went" in out
    # per digest: the kernel put every row's write in the stage P_S's own
    # history says the statement spent its time in (the stage keys, named by
    # setup_instruments' order, agree with P_S)
    (insert,) = [d for d in doc["attribution"]["by_digest"] if d["text"].startswith("INSERT INTO emp_range_5")]
    assert insert["executions_probed"] == 1
    # (a page read or flush may fall in another stage: those are InnoDB's, not the rows')
    (in_stage,) = [s for s in insert["stages"] if any(n["stage"] == "partition.write_row" for n in s["probed"])]
    assert in_stage["stage"] == main["stage"]
    assert {n["stage"]: n["calls"] for n in in_stage["probed"]}["partition.write_row"] == ROWS
    assert setup_tables(sb) == before


def test_a_connection_gone_before_the_window_ends_is_joined_by_its_thread(server, tmp_path):
    # a sampled window: mysqlprobe reads the server's row counters between duty
    # cycles on a connection P_S does not record, so the load's stages stay
    # in the shared history after its connection has gone
    sb, pid = server
    conn = workload.connect(sb.socket)
    t = workload.table("range", 5)
    workload.prepare_source(conn, ROWS)
    workload.create_target(conn, t)
    conn.close()
    # the setup on all along: a quiet phase would leave so short a load out of the history
    prof = Profiler(pid, tmp_path, "--insert-profile", "--ps-whole-window")
    load = workload.connect(sb.socket, workload.SCHEMA)               # comes and goes inside the window
    time.sleep(1.5)                                                   # seen by mysqlprobe's thread watch
    workload.insert_select(load, t)
    load.close()
    time.sleep(5)                                                     # many cycles after the load
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    ps = doc["perf_schema"]
    assert ps["progress_reads"] == "not recorded"
    assert doc["sampling"]["cycles"] >= 2
    assert "quieted" not in ps and doc["sampling"]["quieted"] == ["calibration", "cpu_profile", "off_cpu"]
    (tree,) = [t for t in doc["attribution"]["by_thread"]
               if t["statement"].replace("`", "").startswith("INSERT INTO emp_range_5")]
    assert tree["join"] == "thread" and tree["stages_from"] == "history", tree
    (thread,) = [th for th in ps["threads"] if th["thread_id"] == tree["thread_id"]]
    assert tree["os_tid"] == thread["os_tid"] is not None
    # the duty cycles may have missed so short a load: its stages, not its probes, are the point
    assert tree["stages"][0]["stage"] in ("stage/sql/Sending data", "stage/sql/Executing")


def test_setup_is_restored_after_sigterm_mid_run(server, tmp_path):
    sb, pid = server
    before = setup_tables(sb)
    consumers = dict(before[0])
    assert consumers["events_stages_history_long"] == "NO"  # so the run must change it, and put it back
    prof = Profiler(pid, tmp_path, "--insert-profile")
    during = setup_tables(sb)
    assert dict(during[0])["events_stages_history_long"] == "YES"
    if has_thread_history(sb):                                        # background threads out of the history
        assert before[2] == 0 and during[2] > 0
    code, _, err = prof.stop(signal.SIGTERM)
    assert code == 0, err
    assert prof.profile()["window"]["ended_by"] == "sigterm"
    assert setup_tables(sb) == before


def test_wrong_credentials_give_a_probes_only_report(server, tmp_path):
    sb, pid = server
    password = tmp_path / "password"
    password.write_text("not-the-password\n")  # root has none on the sandbox
    doc, out = _profile_insert(sb, pid, tmp_path, "--user", "root", "--password-file", str(password))
    ps = doc["perf_schema"]
    assert ps["status"] == "unavailable" and "cannot connect as root@" in ps["reason"]
    assert "Access denied" in ps["reason"] and "not-the-password" not in out + str(doc)
    assert "warning: Performance Schema: cannot connect as root@" in " ".join(out.split())  # wrapped at 80
    assert stage(doc, "partition.write_row")["calls"] == ROWS and doc["attribution"]["by_thread"] == []


def test_server_without_performance_schema(tmp_path):
    sb = sandbox.Sandbox("10.2.11", instance="psoff")
    pid = sb.start(log, extra_args=["--performance-schema=OFF"])
    try:
        doc, out = _profile_insert(sb, pid, tmp_path)
    finally:
        sb.stop()
    assert doc["perf_schema"]["status"] == "off"
    assert "warning: Performance Schema: the server runs with performance_schema=OFF" in " ".join(out.split())
    assert stage(doc, "innodb.row_insert")["calls"] == ROWS


def test_root_by_unix_socket_authentication(tmp_path):
    # root@localhost identified by the socket's peer user, as Debian sets it up: no password anywhere
    sb = sandbox.Sandbox("10.11.5", instance="unixauth")
    pid = sb.start(log)
    try:
        conn = workload.connect(sb.socket)
        with conn.cursor() as cur:
            cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket")
            cur.execute("SELECT plugin FROM mysql.user WHERE user = 'root' AND host = 'localhost'")
            assert cur.fetchone()[0] == "unix_socket"
        conn.close()
        doc, _ = _profile_insert(sb, pid, tmp_path)
    finally:
        sb.stop()
    ps = doc["perf_schema"]
    assert ps["status"] == "collected", ps
    assert ps["connection"].startswith("root@")


def test_a_server_that_dies_mid_window_gives_one_line_and_the_capture(tmp_path):
    sb = sandbox.Sandbox("10.2.11", instance="dies")
    pid = sb.start(log)
    try:
        prof = Profiler(pid, tmp_path, "--insert-profile", "--exact", "--no-cpu")
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        code, out, err = prof.proc.wait(timeout=60), prof.proc.stdout.read(), prof.proc.stderr.read()
    finally:
        sb.stop()
    assert code == 0, err
    doc = prof.profile()
    assert doc["window"]["ended_by"] == "target exited"
    flat = " ".join(out.split())
    assert flat.count("Performance Schema: the server went away") == 1, out
    assert "could not restore" not in flat and "Traceback" not in err
