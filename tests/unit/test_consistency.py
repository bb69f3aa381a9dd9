"""The Profile checks the figures it will print against physical bounds:
captures that break each bound are fed in, and the figure must be
withheld, the bound named, and the violation kept in the JSON."""

from __future__ import annotations

import json

from mysqlprobe.analysis import consistency
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.report import render_text
from test_report import ROWS, synthetic_run


def doc() -> dict:
    return json.loads(json.dumps(synthetic_run()))


def kinds(profile: Profile) -> set[tuple[str, str]]:
    return {(v.stage, v.figure) for v in profile.consistency}


def test_the_synthetic_capture_breaks_no_bound():
    profile = Profile(doc())
    assert profile.consistency == []
    assert "withheld" not in render_text(profile)


def test_a_stage_longer_than_its_one_thread_times_the_window_is_withheld():
    d = doc()
    d["window"]["duration_s"] = 0.010          # write_row alone took 40 ms on one thread
    profile = Profile(d)
    assert ("partition.write_row", consistency.TOTAL) in kinds(profile)
    text = render_text(profile)
    row = next(line for line in text.splitlines() if line.startswith("partition.write_row"))
    assert row.split()[3:5] == ["?", "?"], row
    assert "partition.write_row total: 45.9ms in the stage, more than 1 thread x the 10ms window" in text
    assert profile.to_json()["consistency"][0]["bound"].startswith("45.9ms in the stage")
    # row_insert has no caller edges: bounded by the process's 3 threads (19 ms < 30 ms)
    assert ("innodb.row_insert", consistency.TOTAL) not in kinds(profile)
    d["window"]["duration_s"] = 0.005
    assert ("innodb.row_insert", consistency.TOTAL) in kinds(Profile(d))


def test_two_threads_double_the_bound():
    d = doc()
    d["window"]["duration_s"] = 0.030
    callers = d["probes"][0]["callers"]
    callers.append({**callers[0], "tid": 4243})
    assert ("partition.write_row", consistency.TOTAL) not in kinds(Profile(d))   # 40 ms < 2 x 30 ms


def test_a_callee_slower_per_call_than_its_caller_is_withheld():
    d = doc()
    inner = d["probes"][2]                     # row_insert, every call inside write_row's
    inner["total_ns"] = ROWS * 9000            # 9 us a call inside a 4 us caller
    inner["histogram"] = [{"low": 8192, "high": 10240, "count": ROWS}]
    inner["callers"] = [{"tid": 4242, "parent": 0, "calls": ROWS, "total_ns": inner["total_ns"],
                         "raw_total_ns": inner["raw"]["total_ns"]}]
    profile = Profile(d)
    assert ("innodb.row_insert", consistency.MEAN) in kinds(profile)
    text = render_text(profile)
    assert "innodb.row_insert mean: 9000ns per call, more than its caller partition.write_row allows (4000ns" in text
    assert "mean ? (withheld, see above)" in text
    inner["total_ns"] = ROWS * 3900            # within its caller: kept
    inner["histogram"] = [{"low": 3584, "high": 4096, "count": ROWS}]
    assert ("innodb.row_insert", consistency.MEAN) not in kinds(Profile(d))


def test_a_zero_median_under_a_microsecond_mean_is_withheld():
    d = doc()
    probe = d["probes"][1]
    probe["histogram"] = [{"low": 0, "high": 1, "count": ROWS - 100}, {"low": 1 << 20, "high": 5 << 18, "count": 100}]
    probe["total_ns"] = ROWS * 2000
    profile = Profile(d)
    assert ("partition.get_partition_id", consistency.PERCENTILES) in kinds(profile)
    row = next(line for line in render_text(profile).splitlines() if line.startswith("partition.get_partition_id"))
    assert row.split()[-3:] == ["?", "?", "?"], row


def test_negative_or_disordered_percentiles_are_withheld():
    profile = Profile(doc())
    stage = profile.stages[0]
    figure = profile.figures[0]
    for bad, expect in (({"p50": -5.0, "p90": 10.0, "p99": 20.0}, "p50 is -5ns, below 0"),
                        ({"p50": 30.0, "p90": 10.0, "p99": 20.0}, "p50 30ns is above p90 10ns")):
        stage.percentiles = lambda bad=bad: bad   # type: ignore[method-assign]
        (v,) = consistency._percentile_violations(stage, figure, "a longer window")
        assert v.figure == consistency.PERCENTILES and v.bound == expect


def test_the_violations_are_kept_in_the_saved_capture(tmp_path):
    from mysqlprobe.capture import Capture, read_profile
    from mysqlprobe.output import save_capture
    d = doc()
    d["window"]["duration_s"] = 0.010
    assert save_capture(Capture(d), str(tmp_path)) is None
    saved = read_profile(str(tmp_path))
    assert [v["figure"] for v in saved["consistency"]] == ["total"]
    assert Profile(saved).consistency[0].stage == "partition.write_row"   # derived again, the same
