"""compare on two servers alternated by `lab bench --pid A,B`, against the
servers' own clocks on the same runs: their slow query logs at
long_query_time 0 give each unprobed run's time, and so the pairs' delta
per row and its interval, which a wrong answer breaks (a delta of the
wrong sign, of 0%, of twice the truth's, from the wrong runs or pairs);
and the top mechanism from an unprobed pair of runs under perf (cpu-clock
and sched_switch, classified by the same catalog). Whether alternated runs
give the delta that independent alternated runs give is the bench's:
bench/wall.py compare holds the figures to the issue's 15% and 25% over
three repeats of the whole."""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import ExitStack

import pytest

from conftest import MYSQLPROBE
from helpers import assert_delta_is_the_servers, assert_top_mechanism_is_perfs, perf_pictures
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit.loads import rows_inserted
from mysqlprobe.lab.benchkit.truth import WallRecorder, server_seconds, server_timed

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 300_007          # prime: about a second a run on these servers
CELL = "range-100"
TABLE = workload.table("range", 100)
REPEATS = 4
RUNS = 3                # a repeat's runs on a side, in order: unprobed, sampled only, profiled
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
    """lab bench on the running servers, each timing its statements in a slow
    log; compare's answer, and each side's unprobed runs in ns a row as its
    server timed them."""
    out = tmp_path_factory.mktemp("ab")
    logs = [out / f"slow-{side}.log" for side in "ab"]
    with ExitStack() as stack:
        for (_, _, conn), log in zip(servers, logs):
            stack.enter_context(server_timed(conn, log))
        done = subprocess.run([MYSQLPROBE, "lab", "bench", "--pid", ",".join(str(p) for _, p, _ in servers),
                               "--socket", ",".join(sb.socket for sb, _, _ in servers), "--cells", CELL,
                               "--rows", str(ROWS), "--repeats", str(REPEATS), "-q", "-o", str(out)],
                              capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    cmp = subprocess.run([MYSQLPROBE, "compare", str(out / "a" / CELL), str(out / "b" / CELL), "--json"],
                         capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    unprobed = []
    for log in logs:
        runs = server_seconds(log, f"INSERT INTO {TABLE.name} SELECT")
        assert len(runs) == REPEATS * RUNS, runs
        unprobed.append([s * 1e9 / ROWS for s in runs[::RUNS]])
    return json.loads(cmp.stdout), unprobed


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
