"""Performance Schema on real servers: MariaDB 10.2.11 (MySQL 5.6's P_S, no
THREAD_OS_ID) and 10.11.5 (THREAD_OS_ID). The statement and its stage are
found, the attribution adds up, the setup tables read the same afterwards
(also after SIGTERM), and a server without P_S or with wrong credentials
still gives a probes-only report."""

from __future__ import annotations

import signal
import sys

import pytest

from helpers import Profiler, stage
from mysqlprobe import sandbox, workload
from mysqlprobe.collectors.perfschema import INSTRUMENTS

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 10007


def log(msg):
    print(msg, file=sys.stderr)


@pytest.fixture(scope="module", params=["10.2.11", "10.11.5"])
def server(request):
    sb = sandbox.Sandbox(request.param)
    with sb.serving(log) as pid:
        yield sb, pid


def setup_tables(sb) -> tuple:
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("SELECT NAME, ENABLED FROM performance_schema.setup_consumers ORDER BY NAME")
        consumers = cur.fetchall()
        where = " OR ".join(["NAME LIKE %s"] * len(INSTRUMENTS))
        cur.execute(f"SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments WHERE {where} "
                    "ORDER BY NAME", INSTRUMENTS)
        instruments = cur.fetchall()
    conn.close()
    return consumers, instruments


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
    assert ps["deltas"]["status"]["Handler_write"] >= ROWS
    (tree,) = [t for t in doc["attribution"] if t["statement"].startswith("INSERT INTO emp_range_5")]
    assert tree["join"] == ("thread" if sb.version == "10.11.5" else tree["join"])
    assert tree["join"] != "none"
    main = tree["stages"][0]
    assert main["stage"].startswith("stage/sql/") and main["probed"]
    roots = {r["stage"]: r for r in main["probed"]}
    assert roots["partition.write_row"]["calls"] == ROWS
    assert sum(r["inclusive_ns"] for r in main["probed"]) + main["probe_cost_ns"] + main["unexplained_ns"] \
        == main["ns"]
    assert main["ns"] <= tree["in_window_ns"]
    assert stage(doc, "partition.write_row")["calls"] == ROWS
    assert "where the time went" in out
    assert setup_tables(sb) == before


def test_setup_is_restored_after_sigterm_mid_run(server, tmp_path):
    sb, pid = server
    before = setup_tables(sb)
    consumers = dict(before[0])
    assert consumers["events_stages_history_long"] == "NO"  # so the run must change it, and put it back
    prof = Profiler(pid, tmp_path, "--insert-profile")
    during = dict(setup_tables(sb)[0])
    assert during["events_stages_history_long"] == "YES"
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
    assert stage(doc, "partition.write_row")["calls"] == ROWS and doc["attribution"] == []


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
