"""The index build's progress: the server's reports read once a second and
the InnoDB alter stages P_S kept, put together (analysis/index_build.py),
and the time left a status line shows (build_progress.eta_s)."""

import pytest

from mysqlprobe.analysis.index_build import server_progress
from mysqlprobe.collectors.perfschema.build_progress import Reading, eta_s

PS = 10**12  # the P_S timer counts picoseconds


def test_each_stage_at_the_most_it_reached_with_the_stages_p_s_kept():
    readings = [[1.0, "alter table (read PK and internal sort)", 40.0],
                [2.0, "alter table (read PK and internal sort)", 85.0],
                [3.0, "alter table (insert)", 10.0]]
    events = [  # the window opened at 100 s of the P_S timer
        {"event_name": "stage/innodb/alter table (insert)", "timer_start": 102 * PS, "timer_end": 104 * PS,
         "work_completed": 300, "work_estimated": 300},
        {"event_name": "stage/innodb/alter table (merge sort)", "timer_start": 101 * PS + PS // 2,
         "timer_end": 102 * PS, "work_completed": 9, "work_estimated": 12},
        {"event_name": "stage/sql/altering table", "timer_start": 100 * PS, "timer_end": 104 * PS},
    ]
    p = server_progress({"source": "performance_schema", "reads": 5, "readings": readings}, events,
                        (100 * PS, 105 * PS))
    assert p is not None and p.source == "performance_schema" and p.reads == 5
    by = {s.stage: s for s in p.stages}
    assert set(by) == {"alter table (read PK and internal sort)", "alter table (insert)", "alter table (merge sort)"}
    assert by["alter table (read PK and internal sort)"].max_percent == 85.0   # only read, never ended in P_S
    assert (by["alter table (insert)"].max_percent, by["alter table (insert)"].first_s,
            by["alter table (insert)"].last_s) == (100.0, 2.0, 4.0)
    assert by["alter table (merge sort)"].max_percent == 75.0


def test_no_record_no_progress():
    assert server_progress(None, [], None) is None
    p = server_progress({"source": None, "reads": 0, "readings": []}, [], None)
    assert p is not None and p.source is None and p.stages == ()


def test_time_left_at_the_pace_the_stage_kept():
    r = [Reading(1.0, "merge sort", 10.0), Reading(2.0, "insert", 20.0), Reading(4.0, "insert", 60.0)]
    assert eta_s(r) == pytest.approx(40.0 * 2.0 / 40.0)     # 40% in 2 s, 40% left
    assert eta_s(r[:2]) is None                              # one read of the stage: no pace yet
    assert eta_s([]) is None


# --- the probes' progress, where the server reports none ----------------------

def probed(counts: list[dict[str, int]], table_rows: int | None = 1000):
    """A ProbedBuildProgress over a build's counts as the probes return them, read after read."""
    from mysqlprobe.collectors.uprobes.build_progress import ProbedBuildProgress
    reads = iter(counts)
    return ProbedBuildProgress(None, lambda: next(reads), lambda: table_rows)


B, S, R, M, W, I, BULK = ("index.build", "index.scan", "index.row_build", "index.merge_sort", "index.block_write",
                          "index.insert", "index.bulk_insert")


def sorted_build(runs: int = 4, rows: int = 1000) -> list[dict[str, int]]:
    """A sorted build of `rows` rows whose scan wrote `runs` blocks, counts read nine times."""
    zero = {B: 0, S: 0, R: 0, M: 0, W: 0, I: 0, BULK: 0}
    return [zero,
            {**zero, R: rows // 2, W: runs // 2},                   # scanning
            {**zero, S: 1, R: rows, W: runs},                       # the scan returned
            {**zero, S: 1, R: rows, W: runs + runs},                # one pass of two written
            {**zero, S: 1, R: rows, M: 1, W: 3 * runs, I: 0, BULK: rows // 4},   # inserting
            {**zero, S: 1, R: rows, M: 1, W: 3 * runs, BULK: rows},              # every tuple in
            {**zero, S: 1, R: rows, M: 1, W: 3 * runs, I: 1, BULK: rows},        # the insert returned: flushing
            {**zero, S: 1, R: rows, M: 1, W: 3 * runs, I: 1, BULK: rows},        # still flushing
            {**zero, B: 1, S: 1, R: rows, M: 1, W: 3 * runs, I: 1, BULK: rows}]  # the build returned


def test_each_phase_by_the_count_it_ends_at():
    p = probed(sorted_build())
    got = [p.read(float(t)) for t in range(9)]
    assert got[0] is None                                              # no build under way
    assert (got[1].stage, got[1].percent) == ("scan", 50.0)            # rows against the table's estimate
    assert got[2].stage == "merge sort" and got[2].percent == 0.0      # 4 runs: 2 passes of 4 blocks
    assert got[3].percent == pytest.approx(50.0)
    assert (got[4].stage, got[4].percent) == ("insert", 25.0)          # leaf tuples against rows scanned
    assert (got[5].stage, got[5].percent) == ("insert", 100.0)
    assert (got[6].stage, got[6].percent) == ("insert", 100.0)         # its return, read from its counts
    assert got[7] is None and got[8] is None                           # the flush: no measure; the end said once
    assert p.record() == {"source": "probes", "reads": 9,
                          "readings": [r.to_json() for r in got if r is not None]}


def test_a_build_that_ends_between_reads_is_read_to_its_end_from_its_counts():
    build = sorted_build()
    p = probed([build[0], build[1], build[8]])
    assert p.read(0.0) is None and p.read(1.0).stage == "scan"
    end = p.read(2.0)
    assert (end.stage, end.percent) == ("insert", 100.0)
    # a tuple short: the count says so
    short = {**build[8], BULK: 999}
    p = probed([build[1], short])
    p.read(0.0)
    assert p.read(1.0).percent == pytest.approx(99.9)


def test_the_next_build_starts_from_the_last_ones_end():
    first = sorted_build()
    end = first[-1]
    second = [{k: v + end[k] for k, v in counts.items()} for counts in sorted_build(rows=2000)]
    p = probed(first + second[1:], table_rows=2000)
    got = [p.read(float(t)) for t in range(len(first) + len(second) - 1)]
    assert (got[9].stage, got[9].percent) == ("scan", 50.0)            # 1,000 rows of the second 2,000
    assert (got[13].stage, got[13].percent) == ("insert", 100.0)


def test_the_scan_stays_under_100_until_it_returns_and_needs_an_estimate():
    build = sorted_build()
    over = {**build[1], "index.row_build": 1500}                       # the table's estimate was low
    p = probed([over])
    assert p.read(1.0).percent == 99.0
    assert probed([build[1]], table_rows=None).read(1.0) is None       # no estimate: no figure


@pytest.mark.parametrize("statement,db,found", [
    ("CREATE INDEX k ON sbtest(k)", "lab", ("lab", "sbtest")),
    ("create unique index k on `my db`.`t 1` (k)", None, ("my db", "t 1")),
    ("ALTER TABLE lab.t ADD INDEX k(k)", "x", ("lab", "t")),
    ("alter online table t add key (k)", "lab", ("lab", "t")),
    ("INSERT INTO t VALUES (1)", "lab", None),
    ("CREATE INDEX k ON t(k)", None, None),                              # no schema to look it up in
])
def test_the_table_a_build_statement_names(statement, db, found):
    from mysqlprobe.collectors.perfschema.build_progress import altered_table
    assert altered_table(db, statement) == found


def test_tuple_by_tuple_the_node_pointers_of_splits_are_not_tuples():
    zero = {B: 0, S: 0, R: 0, M: 0, W: 0, I: 0, "index.tuple_insert": 0, "index.tuple_split": 0}
    inserting = {**zero, S: 1, R: 1000, M: 1, W: 1, "index.tuple_insert": 515, "index.tuple_split": 15}
    p = probed([inserting])
    assert (lambda r: (r.stage, r.percent))(p.read(1.0)) == ("insert", 50.0)
