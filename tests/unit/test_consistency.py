"""The Profile checks the figures it will print against physical bounds:
captures that break each bound are fed in, and the figure must be
withheld, the bound named, and the violation kept in the JSON."""

from __future__ import annotations

import json

import pytest

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
    assert "withheld ('?')" not in render_text(profile)


def test_a_stage_longer_than_its_one_thread_times_the_window_is_withheld():
    d = doc()
    d["window"]["duration_s"] = 0.010          # write_row alone took 40 ms on one thread
    profile = Profile(d)
    assert ("partition.write_row", consistency.TOTAL) in kinds(profile)
    text = render_text(profile)
    row = next(line for line in text.splitlines() if line.startswith("partition.write_row"))
    assert row.split()[3:5] == ["?", "?"], row
    text = " ".join(text.split())
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
    text = " ".join(render_text(profile).split())
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


def one_loaded_cycle(with_bursts: bool) -> dict:
    """A statement of about a second: of three cycles only the last saw it
    (6,000 rows), and its calls took 9 us each there (the statement's start);
    the bursts sampled 200,000 of its rows afterwards at 2 us a write_row."""
    from test_report import sampled_with_off_phases, with_cpu_bursts
    d = sampled_with_off_phases()
    cycles = d["sampling"]["calls_per_cycle"]
    for c in cycles[:2]:
        c.update(calls=[0, 0, 0, 0], row_calls=[0, 0, 0, 0], rows=0)
    cycles[2].update(calls=[6000, 6000, 6000, 0], row_calls=[6000, 6000, 6000, 0], rows=6000)
    d["window"]["rows_changed"] = 300_000
    probe = d["probes"][0]
    probe.update(calls=6000, total_ns=6000 * 9000, histogram=[{"low": 8192, "high": 10240, "count": 6000}],
                 callers=[{"tid": 4242, "parent": None, "calls": 6000, "total_ns": 6000 * 9000,
                           "raw_total_ns": 6000 * 11000}])
    probe["raw"] = {"total_ns": 6000 * 11000, "histogram": [{"low": 10240, "high": 12288, "count": 6000}]}
    if with_bursts:
        d = with_cpu_bursts(d, {"partition.write_row": 10}, rows=200_000)
        d["cpu_bursts"].update(stacks="frame pointers", samples=2000, stages={
            "partition.write_row": {"samples": 2000, "ns": 2000 * 200_000}})
    return d


def test_a_mean_from_one_cycle_is_withheld_without_bursts():
    profile = Profile(one_loaded_cycle(with_bursts=False))
    found = {(v.stage, v.figure): v for v in profile.consistency}
    v = found[("partition.write_row", consistency.MEAN)]
    assert v.bound.startswith("its calls come from 1 duty cycle, a moment of the window")
    assert ("partition.write_row", consistency.TOTAL) in found
    assert ("partition.write_row", consistency.PERCENTILES) in found
    text = " ".join(render_text(profile).split())
    assert "mean ? (withheld, see above)" in text
    assert "partition.write_row mean, percentiles: its calls come from 1 duty cycle" in text


def test_a_mean_from_one_cycle_is_the_bursts_where_they_resolve_it():
    profile = Profile(one_loaded_cycle(with_bursts=True))
    write = {s["stage"]: s for s in profile.to_json()["stages"]}["partition.write_row"]
    # 2000 samples x 200 us over 200,000 rows x 1 call a row: 2 us, not the 9 us of the statement's start
    assert write["mean_method"].startswith("CPU samples with the function on the stack")
    assert write["mean_ns"] == pytest.approx(2000 * 200_000 / 200_000, rel=1e-6)
    low, high = write["mean_ns_ci95"]
    assert low < 2000 < high
    assert not [v for v in profile.consistency if v.stage == "partition.write_row"]


def test_one_cycles_calls_per_row_gets_the_counted_calls_doubt():
    from mysqlprobe.analysis.profile import single_cycle_interval
    from mysqlprobe.analysis.sampling import Estimate
    e = single_cycle_interval(Estimate(300_000.0, None, None), 6000)
    assert e.low == pytest.approx(300_000 * (1 - 1.96 / 6000 ** 0.5))
    assert e.high == pytest.approx(300_000 * (1 + 1.96 / 6000 ** 0.5))
    assert single_cycle_interval(Estimate(5.0, 4.0, 6.0), 6000) == Estimate(5.0, 4.0, 6.0)


def test_cycles_that_saw_a_handful_of_rows_give_no_calls_per_row():
    from mysqlprobe.analysis.profile import MIN_CYCLE_ROWS, estimate_basis
    d = one_loaded_cycle(with_bursts=False)
    d["sampling"]["calls_per_cycle"][2].update(rows=MIN_CYCLE_ROWS - 1)
    assert estimate_basis(Profile(d)) == "time"
    d["sampling"]["calls_per_cycle"][2].update(rows=MIN_CYCLE_ROWS)
    assert estimate_basis(Profile(d)) == "rows"


def test_a_callee_is_held_to_every_caller_up_the_chain():
    """page_compress inside row_insert inside write_row: within row_insert's
    (itself impossible) figure, but not within write_row's."""
    d = doc()
    for probe, parent, ns in ((d["probes"][2], 0, 6000), (d["probes"][3], 2, 5000)):
        probe.update(calls=ROWS, total_ns=ROWS * ns, histogram=[{"low": 4096, "high": 8192, "count": ROWS}],
                     callers=[{"tid": 4242, "parent": parent, "calls": ROWS, "total_ns": ROWS * ns,
                               "raw_total_ns": ROWS * (ns + 2000)}])
        probe["raw"] = {"total_ns": ROWS * (ns + 2000), "histogram": [{"low": 4096, "high": 8192, "count": ROWS}]}
    found = {(v.stage, v.figure): v for v in Profile(d).consistency}
    assert "more than its caller partition.write_row" in found[("innodb.row_insert", consistency.MEAN)].bound
    assert "more than its caller partition.write_row" in found[("innodb.page_compress", consistency.MEAN)].bound
    assert consistency.nestings(Profile(d).probes) == [("innodb.row_insert", "partition.write_row", 1.0),
                                       ("innodb.page_compress", "innodb.row_insert", 1.0),
                                       ("innodb.page_compress", "partition.write_row", 1.0)]


def test_the_suites_property_check_finds_what_is_not_withheld(tmp_path, monkeypatch):
    """conftest's impossible_figures, run on every capture the integration tests
    leave, reads the printed figures afresh: a breaking capture passes it only
    because the Profile withheld the figure."""
    from conftest import impossible_figures
    from mysqlprobe.capture import Capture
    from mysqlprobe.output import save_capture
    d = doc()
    d["window"]["duration_s"] = 0.010
    assert save_capture(Capture(d), str(tmp_path)) is None
    assert impossible_figures(tmp_path) == []
    monkeypatch.setattr(Profile, "consistency", property(lambda self: []))
    (broken,) = impossible_figures(tmp_path)
    assert broken.startswith("partition.write_row: total")
