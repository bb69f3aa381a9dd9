"""compare on two servers alternated by `lab bench --pid A,B`, against the
servers' own clocks on the same runs: their slow query logs at
long_query_time 0 give each unprobed run's time, and so the pairs' delta
per row and its interval, which a wrong answer breaks (a delta of the
wrong sign, of 0%, of twice the truth's, from the wrong runs or pairs);
and the top mechanism from two alternated pairs of unprobed runs under
perf (cpu-clock and sched_switch, classified by the same catalog). Whether alternated runs
give the delta that independent alternated runs give is the bench's:
bench/wall.py compare holds the figures to the issue's 15% and 25% over
three repeats of the whole."""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from helpers import assert_delta_is_the_servers, assert_top_mechanism_is_perfs, perf_pictures
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit.loads import rows_inserted
from mysqlprobe.lab.benchkit.truth import WallRecorder, bench_timed_by_servers

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 300_007          # prime: about a second a run on these servers
CELL = "range-100"
TABLE = workload.table("range", 100)
REPEATS = 4
TOP = 0.5               # the top mechanism's delta, against the truth's


@pytest.fixture(scope="module")
def servers():
    with ExitStack() as stack:
        out = []
        for version in ("10.1.23", "10.2.11"):
            sb = sandbox.Sandbox(version)
            pid = stack.enter_context(sb.serving(lambda m: None))
            conn = workload.connect(sb.socket)
            stack.callback(conn.close)
            workload.prepare_source(conn, ROWS)
            out.append((sb, pid, conn))
        yield out


@pytest.fixture(scope="module")
def compared(servers, tmp_path_factory):
    """compare's answer on lab bench's runs, and each side's unprobed runs as its server timed them."""
    running = [(pid, sb.socket, conn) for sb, pid, conn in servers]
    return bench_timed_by_servers(running, CELL, ROWS, REPEATS, tmp_path_factory.mktemp("ab"),
                                  f"INSERT INTO {TABLE.name} SELECT")


def test_the_alternated_delta_is_the_servers(compared):
    result, (a_ns, b_ns) = compared
    wall = result["wall"]
    assert wall["paired"] is True and wall["pairs"] == REPEATS, wall
    assert_delta_is_the_servers(result, a_ns, b_ns)


def test_the_top_mechanism_is_the_one_perf_shows(compared, servers, tmp_path):
    result, _ = compared

    def one_run(pid, conn):
        workload.create_target(conn, TABLE)
        time.sleep(0.5)
        recorder = WallRecorder(pid, tmp_path)
        time.sleep(0.5)
        rows0 = rows_inserted(conn)
        workload.insert_select(conn, TABLE)
        rows = rows_inserted(conn) - rows0
        return {name: ns / rows for name, ns in recorder.stop().mechanisms().items()}
    assert_top_mechanism_is_perfs(result, perf_pictures([(pid, conn) for _, pid, conn in servers], one_run), TOP)
