"""--index-profile on the real servers: CREATE INDEX k ON a sysbench-shaped
table of a prime number of rows (the row-format study's build), each
count held to a truth the server keeps: the table's rows, and the new
index's leaf pages in InnoDB's persistent statistics."""

from __future__ import annotations

import math
import sys

import pytest

from helpers import Profiler
from mysqlprobe.analysis.index_build import INLINED_SCAN, SORTED, TUPLE_BY_TUPLE
from mysqlprobe.lab import sandbox, workload

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 300007   # prime; three sort buffers of the k index: runs to merge, in two passes
# (method, the phases each version's build shows)
EXPECTED = {
    "10.1.23": (TUPLE_BY_TUPLE, ["scan", "merge sort", "insert"]),
    "10.2.11": (SORTED, ["scan", "merge sort", "insert", "flush"]),
    "10.11.5": (SORTED, ["merge sort", "insert", INLINED_SCAN]),
}

# MariaDB before 10.5 reports an online ADD INDEX's progress nowhere (PROCESSLIST's PROGRESS
# stays 0): --index-profile reads it from the probes' counts there
PROGRESS_SOURCE = {"10.1.23": "probes", "10.2.11": "probes", "10.11.5": "performance_schema"}

@pytest.fixture(scope="module", params=sandbox.VERSIONS)
def server(request):
    sb = sandbox.Sandbox(request.param)
    with sb.serving(lambda m: print(m, file=sys.stderr)) as pid:
        yield sb, pid


def _leaf_pages(conn, t: workload.IndexTable) -> int:
    """The new index's leaf pages as InnoDB's persistent statistics count them."""
    with conn.cursor() as cur:
        cur.execute(f"ANALYZE TABLE {workload.SCHEMA}.{t.name}")
        cur.fetchall()
        cur.execute("SELECT stat_value FROM mysql.innodb_index_stats WHERE database_name = %s AND table_name = %s "
                    "AND index_name = %s AND stat_name = 'n_leaf_pages'", (workload.SCHEMA, t.name, workload.INDEX_NAME))
        (pages,) = cur.fetchone()
    return int(pages)


def test_the_build_counted_against_the_table_and_the_new_index(server, tmp_path):
    sb, pid = server
    conn = workload.connect(sb.socket)
    t = workload.index_table()
    workload.fill_index_table(conn, t, ROWS)
    prof = Profiler(pid, tmp_path, "--index-profile", "--exact")
    workload.build_index(conn, t)
    code, out, err = prof.stop()
    assert code == 0, err
    b = prof.profile()["index_build"]
    method, phases = EXPECTED[sb.version]
    assert b["method"] == method and b["builds"] == 1
    # every row of the table made a tuple, and every tuple went into the new index
    assert b["rows_scanned"] == ROWS and b["tuples_inserted"] == ROWS
    # the runs: blocks the scan wrote, merged pairwise; each pass rewrites every block
    runs, passes = b["runs"], b["merge_passes"]
    assert runs is not None and runs > 1 and passes == math.ceil(math.log2(runs))
    assert passes * (runs - 1) <= b["blocks_written"]["merge sort"] <= passes * runs
    # the blocks' bytes against the I/O tracer's, a collector of its own: the writes to the
    # temporary file under row_merge_write, the system call's bytes
    traced = sum(int(line.rsplit(" ", 1)[1]) for line in (tmp_path / "io_bytes.folded").read_text().splitlines()
                 if ";row_merge_write;" in line and "pwrite" in line)
    assert b["block_bytes"] and sum(b["bytes_written"].values()) == traced, (b["bytes_written"], traced)
    # a node pointer for each leaf page of the new index (the sorted build; a split
    # build inserts them as it splits, all but the first leaf's, which the root raise moves)
    leaves = _leaf_pages(conn, t)
    assert b["node_pointers"] == (leaves if method == SORTED else leaves - 1), leaves
    assert b["pages"] is None or b["pages"] >= leaves
    names = [p["name"] for p in b["phases"]]
    assert set(phases) <= set(names), names
    shares = [p["share"] for p in b["phases"]]
    assert all(s is not None and 0 <= s <= 1 for s in shares) and sum(shares) == pytest.approx(1.0, abs=0.01), \
        (shares, b["notes"], prof.profile()["off_cpu"].get("dropped"))
    assert f"index build, {method}" in out and f"rows scanned {ROWS:,}" in out
    # the progress, read once a second: P_S's alter stages with their work on 10.11; the
    # probes' counts before (the server reports none)
    progress = b["server_progress"]
    assert progress["source"] == PROGRESS_SOURCE[sb.version] and progress["reads"] >= 1
    stages = {s["stage"]: s["max_percent"] for s in progress["stages"]}
    if progress["source"] == "performance_schema":
        assert {"alter table (read PK and internal sort)", "alter table (merge sort)", "alter table (insert)"} <= set(stages)
        # the scan and the insert end at their estimates; the merge sort's estimate is InnoDB's
        # upper bound on its passes (75% of it done at its end here, with 3 runs)
        assert stages["alter table (read PK and internal sort)"] == stages["alter table (insert)"] == 100.0, stages
        assert 0 < stages["alter table (merge sort)"] <= 100.0, stages
    else:
        # the insert's tuples against the rows scanned, counted: every row went in; the scan's
        # rows against the table's estimate stay under 100% until it returns
        assert stages.get("insert") == 100.0, stages
        assert stages.get("scan", 0.0) <= 99.0, stages
    assert all(0 <= p <= 100 for p in stages.values())
    conn.close()


COMPRESSED_ROWS = 100003   # prime


def test_a_compressed_build_counts_the_compressions_innodb_counts(server, tmp_path):
    """ROW_FORMAT=COMPRESSED, KEY_BLOCK_SIZE=8: every page_zip_compress the
    probes count in the build is one of InnoDB's own (INNODB_CMP), and the
    failures are InnoDB's compress_ops less compress_ops_ok."""
    sb, pid = server
    conn = workload.connect(sb.socket)
    saved = workload.barracuda(conn)   # 10.1 makes COMPRESSED tables only so
    try:
        t = workload.index_table("compressed", 8)
        workload.fill_index_table(conn, t, COMPRESSED_ROWS)
        prof = Profiler(pid, tmp_path, "--index-profile")
        workload.build_index(conn, t)
        code, out, err = prof.stop()
        assert code == 0, err
    finally:
        workload.restore_file_format(conn, saved)
        conn.close()
    doc = prof.profile()
    b = doc["index_build"]
    assert b["rows_scanned"] == b["tuples_inserted"] == COMPRESSED_ROWS
    assert b["server_compressions"] is not None and b["server_compressions"] > 0
    # every compression in the window (the statement also compresses the new index's
    # empty root page as it creates the index, before the build), and those in the build
    (zip_calls,) = [p["calls"] for p in doc["probes"] if p["name"] == "page_zip_compress"]
    assert zip_calls == b["server_compressions"]
    assert 0 < b["compressions"] <= zip_calls
    assert 0 <= b["compression_failures"] < b["server_compressions"]
    assert f"InnoDB's count over the window: {b['server_compressions']:,}" in out
