"""compare on two servers alternated by `lab bench --server A,B`, against a
truth this test takes itself: the wall delta per row from its own
alternated unprobed runs, within a tolerance that a wrong answer breaks
(a delta of the wrong sign, or of 0%, or twice the truth's); and the top
mechanism from an unprobed pair of runs under perf (cpu-clock and
sched_switch, classified by the same catalog). bench/wall.py compare holds
the figures to the issue's 15% and 25% over three repeats of the whole."""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import ExitStack

import pytest

from conftest import MYSQLPROBE
from helpers import assert_delta_is_the_truths, assert_top_mechanism_is_perfs
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit.loads import rows_inserted, unprobed_ns_per_row
from mysqlprobe.lab.benchkit.truth import WallRecorder

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 300_007          # prime: about a second a run on these servers
CELL = "range-100"
REPEATS = 4
DELTA = 0.5             # of the truth's delta: both sides' few runs carry this host's noise (bench/RESULTS.md
                        # section 6: the tool's delta -37% to +33% of the truth's over 3 repeats of 5 pairs); a
                        # delta of the wrong sign, of 0% or of twice the truth's fails it
TOP = 0.5               # the top mechanism's delta, against the truth's


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab")
    done = subprocess.run([MYSQLPROBE, "lab", "bench", "--server", "10.1.23,10.2.11", "--cells", CELL,
                           "--rows", str(ROWS), "--repeats", str(REPEATS), "-q", "-o", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    cmp = subprocess.run([MYSQLPROBE, "compare", str(out / "10.1.23" / CELL), str(out / "10.2.11" / CELL), "--json"],
                         capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    return out, json.loads(cmp.stdout)


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
            out.append((pid, conn))
        yield out


def test_the_alternated_delta_is_the_truths(compared, servers):
    _, result = compared
    wall = result["wall"]
    assert wall["paired"] is True and wall["pairs"] == REPEATS, wall
    table = workload.table("range", 100)
    pairs = []
    for _ in range(REPEATS):
        a, b = (unprobed_ns_per_row(conn, table) for _, conn in servers)
        pairs.append(b - a)
    assert_delta_is_the_truths(result, pairs, DELTA)


def test_the_top_mechanism_is_the_one_perf_shows(compared, servers, tmp_path):
    _, result = compared
    table = workload.table("range", 100)
    per_side = []
    for pid, conn in servers:
        workload.create_target(conn, table)
        time.sleep(0.5)
        recorder = WallRecorder(pid, tmp_path)
        time.sleep(0.5)
        rows0 = rows_inserted(conn)
        workload.insert_select(conn, table)
        rows = rows_inserted(conn) - rows0
        per_side.append({name: ns / rows for name, ns in recorder.stop().mechanisms().items()})
    assert_top_mechanism_is_perfs(result, per_side, TOP)
