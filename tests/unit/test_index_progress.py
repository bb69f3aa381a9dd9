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
