"""compare on index builds: `lab bench --pid A,B --cells index-compressed-8`
alternates the two servers' CREATE INDEX k, and compare explains the delta
per row indexed by mechanism and by phase. Held to truths this test takes
itself: the servers' slow logs (long_query_time 0) for the same unprobed
builds' times, two alternated pairs of unprobed builds under perf
(cpu-clock and sched_switch, classified by the same catalog) for the top
mechanism, the
binaries' symbols for which build method each side can run, and the
table's rows."""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import ExitStack

import pytest

from conftest import MYSQLPROBE
from helpers import assert_delta_is_the_servers, assert_top_mechanism_is_perfs, perf_pictures
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit.truth import WallRecorder, bench_timed_by_servers

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 100_003          # prime: a build of 0.2-0.8 s on these servers
CELL = "index-compressed-8"
TABLE = workload.index_table("compressed", 8)
REPEATS = 3
TOP = 0.5               # the top mechanism's delta, against perf's
VERSIONS = ("10.1.23", "10.2.11")
SIDES = ("a", "b")      # lab bench's names for two running servers, in --pid's order


@pytest.fixture(scope="module")
def servers():
    """Both servers (A 10.1.23, B 10.2.11), each with the cell's table filled."""
    with ExitStack() as stack:
        out = []
        for version in VERSIONS:
            sb = sandbox.Sandbox(version)
            pid = stack.enter_context(sb.serving(lambda m: None))
            conn = workload.connect(sb.socket)
            stack.callback(conn.close)
            stack.callback(workload.restore_file_format, conn, workload.barracuda(conn))
            workload.fill_index_table(conn, TABLE, ROWS)
            out.append((sb, pid, conn))
        yield out


@pytest.fixture(scope="module")
def compared(servers, tmp_path_factory):
    """The bench's directory, compare's answer, and each side's unprobed
    builds in ns a row indexed as its server timed them."""
    out = tmp_path_factory.mktemp("index_ab")
    running = [(pid, sb.socket, conn) for sb, pid, conn in servers]
    result, unprobed = bench_timed_by_servers(running, CELL, ROWS, REPEATS, out,
                                              f"CREATE INDEX {workload.INDEX_NAME} ON {TABLE.name}")
    return out, result, unprobed


def test_the_alternated_delta_per_row_indexed_is_the_servers(compared):
    _, result, (a_ns, b_ns) = compared
    wall = result["wall"]
    assert wall["paired"] is True and wall["pairs"] == REPEATS, wall
    assert_delta_is_the_servers(result, a_ns, b_ns)


def test_the_top_mechanism_is_the_one_perf_shows(compared, servers, tmp_path):
    _, result, _ = compared

    def one_run(pid, conn):
        workload.drop_index(conn, TABLE)
        time.sleep(0.5)
        recorder = WallRecorder(pid, tmp_path)
        time.sleep(0.5)
        workload.build_index(conn, TABLE)
        return {name: ns / ROWS for name, ns in recorder.stop().mechanisms().items()}
    assert_top_mechanism_is_perfs(result, perf_pictures([(pid, conn) for _, pid, conn in servers], one_run), TOP)



def _has(sb: sandbox.Sandbox, symbol: str) -> bool:
    nm = subprocess.run(["nm", "-C", "--defined-only", str(sandbox.install(sb.version, lambda m: None).mysqld)],
                        capture_output=True, text=True, check=True)
    return symbol in nm.stdout


def test_each_side_builds_the_way_its_binary_can_and_every_row_is_counted(compared, servers):
    out, result, _ = compared
    by = {m["name"]: m for m in result["mechanisms"]}
    (sb_a, _, conn_a), (sb_b, _, _) = servers
    bulk_a, bulk_b = _has(sb_a, "BtrBulk::insert"), _has(sb_b, "BtrBulk::insert")
    assert (bulk_a, bulk_b) == (False, True)   # 10.1: tuple by tuple; 10.2: the sorted build
    assert by["sorted index build"]["a_ns_per_row"] == 0 < by["sorted index build"]["b_ns_per_row"]
    assert by["tuple-by-tuple index insert"]["b_ns_per_row"] == 0 < by["tuple-by-tuple index insert"]["a_ns_per_row"]
    phases = {p["name"]: p for p in result["index_build_phases"]}
    flush_a, flush_b = _has(sb_a, "FlushObserver::flush"), _has(sb_b, "FlushObserver::flush")
    assert (flush_a, flush_b) == (False, True) and phases["flush"]["a"] == 0 < phases["flush"]["b"]
    assert phases["insert"]["delta"] < 0   # the insert is what the sorted build saves
    # the profiled runs counted every row of the table, on both sides
    with conn_a.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {workload.SCHEMA}.{TABLE.name}")
        (count,) = cur.fetchone()
    assert count == ROWS
    for side in SIDES:
        for r in range(1, REPEATS + 1):
            shown = subprocess.run([MYSQLPROBE, "report", str(out / side / CELL / f"r{r}"), "--json=all"],
                                   capture_output=True, text=True, check=True)
            b = json.loads(shown.stdout)["index_build"]
            assert b["rows_scanned"] == b["tuples_inserted"] == count, (side, r, b)
