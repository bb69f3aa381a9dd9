"""The CPU samples by slice of time: placed in the window, merged for the
page, and drawn as the brushable strip and the span's data in report.html
(the demo's capture, its stacks dealt into slices here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mysqlprobe.analysis.html_report import render_html, slices_data
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.time_slices import TimeSlices, time_slices
from mysqlprobe.capture import read_profile
from mysqlprobe.collectors.cpu.perf import fold_samples, thread_roots
from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.folded import OVERFLOW_STACK, Folded
from mysqlprobe.recorder.recorder import SHORTEST_SLICE_S, slice_seconds

DEMO = Path(__file__).parents[2] / "docs" / "demo"
SLICE_S = 0.05


def _demo(origin_after_s: float | None = -0.3) -> tuple[Profile, Folded, Folded]:
    """The demo's profile with its CPU samples sliced: slice 0 opens
    origin_after_s from the window's opening; the stacks dealt round-robin,
    a stack's samples all in one slice. And the stacks themselves."""
    doc = copy.deepcopy(read_profile(str(DEMO / "profile.json")))
    stacks = folded.parse((DEMO / "stacks.folded").read_text().splitlines())
    cpu = doc["cpu_profile"]
    cpu.update(slice_s=SLICE_S, slices_file="stacks-by-time.folded")
    cpu.pop("slices_origin_s", None)   # the demo's own capture has its slices' clock
    if origin_after_s is not None:
        cpu["slices_origin_s"] = doc["window"]["start_monotonic_s"] + origin_after_s
    by_time = Folded()
    for i, (stack, n) in enumerate(sorted(stacks.stacks.items())):
        by_time.add([str(3 * i)] + stack.split(";"), n)
    return Profile(doc, {"cpu_profile": stacks}), by_time, stacks


def test_slices_are_placed_from_the_origin_less_the_windows_opening():
    profile, by_time, stacks = _demo(origin_after_s=-0.3)
    slices = time_slices(profile, by_time)
    assert slices is not None and slices.samples == stacks.total == profile.doc["cpu_profile"]["samples"]
    starts = [s.start_s for s in slices.slices]
    assert starts == sorted(starts) and starts[0] == pytest.approx(-0.3)
    assert starts[1] == pytest.approx(-0.3 + 3 * SLICE_S)
    # the slice's stacks are the file's, less the slice's number
    assert set().union(*(s.stacks for s in slices.slices)) == set(stacks.stacks)


def test_samples_under_no_slice_are_counted_as_untimed_not_placed():
    profile, by_time, stacks = _demo()
    by_time.add([OVERFLOW_STACK], 7)
    by_time.add(["12"], 2)          # a number with no stack under it
    slices = time_slices(profile, by_time)
    assert slices and slices.untimed == 9 and slices.samples == stacks.total


def test_a_capture_without_the_clock_of_its_slices_has_none():
    profile, by_time, _ = _demo(origin_after_s=None)
    assert time_slices(profile, by_time) is None


def test_merging_keeps_every_sample_and_the_span_they_cover():
    profile, by_time, stacks = _demo()
    slices = time_slices(profile, by_time)
    assert slices
    for most in (1, 3, 10, 400):
        merged = slices.merged(most)
        assert len(merged.slices) <= most and merged.samples == slices.samples
        assert merged.slices[0].start_s == slices.slices[0].start_s
        end = merged.slices[-1].start_s + merged.slice_s
        assert end >= slices.slices[-1].start_s + slices.slice_s - 1e-9
    assert slices.between(-1e9, 1e9) == sum((s.stacks for s in slices.slices), start=type(slices.slices[0].stacks)())
    second = slices.slices[1]
    assert slices.between(second.start_s + 0.01, second.start_s + 0.02) == second.stacks


def test_the_page_carries_the_slices_and_both_charts_are_brushable():
    profile, by_time, stacks = _demo()
    slices = time_slices(profile, by_time)
    assert slices
    page = render_html(profile, "<svg id=flamegraph></svg>", cpu_slices=slices)
    assert page.count("class=brushable") == 2   # the timeline and the CPU strip
    data = json.loads(page.split("<script type=application/json id=cpu-slices>")[1].split("</script>")[0])
    assert data["total"] == stacks.total and data["untimed"] == 0
    assert sum(pair for row in data["slices"] for pair in row[2][1::2]) == stacks.total
    assert all(0 <= i < len(data["stacks"]) for row in data["slices"] for i in row[2][0::2])
    bars = [int(v) for v in page.split('id=cpu-strip')[1].split("</svg>")[0].split('data-samples="')[1:]
            for v in [v.split('"')[0]]]
    assert sum(bars) == stacks.total
    assert "id=span-panel hidden" in page
    # without slices, nothing of the brush
    plain = render_html(profile, "<svg id=flamegraph></svg>")
    assert "class=brushable" not in plain and "id=cpu-slices" not in plain and "id=span-panel" not in plain


def test_the_pages_data_is_bounded_however_many_slices():
    profile, by_time, _ = _demo()
    many = Folded()
    for i in range(5000):
        many.add([str(i), "sql/one_connection", "do_command", f"f{i % 7}"], 1)
    slices = time_slices(profile, many)
    assert slices and len(slices.slices) == 5000
    data = json.loads(slices_data(slices, 300.0, slices.samples))
    assert len(data["slices"]) <= 400 and len(data["stacks"]) == 7
    assert sum(pair for row in data["slices"] for pair in row[2][1::2]) == 5000


def test_a_leading_frame_keeps_each_samples_thread_root():
    samples = [("mysqld", 11, ["do_command", "write_row"], 3), ("mysqld", 12, ["buf_flush"], 2)]
    whole = fold_samples(samples, {11: "sql/one_connection"})
    root = thread_roots(samples, {11: "sql/one_connection"})   # as the sampler's collector folds its slices
    by_time = Folded()
    for (comm, tid, frames, n), number in zip(samples, ["4", "9"]):
        by_time.add([number, root(comm, tid)] + frames, n)
    assert {s.partition(";")[2]: n for s, n in by_time.stacks.items()} == dict(whole.stacks)
    assert "4;sql/one_connection;do_command;write_row" in by_time.stacks
    assert [s.split(";")[0] for s in sorted(by_time.stacks)] == ["4", "9"]


def test_slices_follow_the_window_asked_for():
    assert slice_seconds(None) == 0.1
    assert slice_seconds(100.0) == 0.5
    assert slice_seconds(1.0) == pytest.approx(SHORTEST_SLICE_S)
    assert slice_seconds(20.0) == pytest.approx(0.1)
    assert isinstance(TimeSlices(0.1, ()).merged(), TimeSlices)


def test_the_reader_names_the_drop_as_the_sampler_counts_it():
    from mysqlprobe.analysis.time_slices import SLICES_FULL
    from mysqlprobe.probes import abi
    assert abi.SAMPLE_DROPS["SAMPLE_SLICES_FULL"] == SLICES_FULL
