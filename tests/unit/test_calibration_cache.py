"""The calibration kept between runs: written whole or not at all, refused
when old, malformed or from another helper, and reused only when a fresh
burst agrees with it; and the window's bursts, kept out of quiet phases."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from mysqlprobe.caches import CALIBRATION_MAX_AGE_S, CalibrationCache, host_key
from mysqlprobe.collectors.uprobes.calibration import (EMULATED, FIRST_BURSTS, REUSE_CHECK_S, REUSE_CHECKS, ROLLING,
                                               SINGLE_STEP, CalibrationCollector, Calibrator, median)

SAMPLES = {EMULATED: {"entry": [700.0] * 6, "both": [1400.0, 1390.0, 1410.0, 1405.0, 1395.0, 1400.0],
                      "inside": [300.0] * 6},
           SINGLE_STEP: {"entry": [1500.0] * 6, "both": [2600.0, 2610.0, 2590.0, 2600.0, 2605.0, 2595.0],
                         "inside": [500.0] * 6}}


@pytest.fixture
def helper(tmp_path):
    path = tmp_path / "calibrate"
    path.write_bytes(b"\x7fELF helper")
    return str(path)


def test_kept_bursts_come_back(helper, tmp_path):
    cache = CalibrationCache(helper, tmp_path / "root")
    assert cache.load() is None
    assert cache.save(SAMPLES)
    loaded = cache.load()
    assert loaded["samples"] == SAMPLES and time.time() - loaded["taken"] < 60
    assert [p.name for p in cache.path.parent.iterdir()] == [cache.path.name]  # no temporary file left


def test_the_key_is_the_one_platform_made():
    """Read from os.uname() now, not platform's: a calibration kept before stays found."""
    import platform

    assert [getattr(os.uname(), f) for f in ("release", "version", "machine")] == \
        [getattr(platform.uname(), f) for f in ("release", "version", "machine")]


@pytest.mark.parametrize("values", [[3.0], [2.0, 9.0], [5.0, 1.0, 4.0], [7.0, 1.0, 1.0, 3.0, 2.0, 8.0]])
def test_the_median_is_the_statistics_module_s(values):
    import statistics

    assert median(values) == statistics.median(values)


def test_another_helper_build_is_another_key(helper):
    key = host_key(helper)
    os.utime(helper, ns=(1, 1))
    assert host_key(helper) != key


@pytest.mark.parametrize("damage", ["not json", "old", "no samples", "a string sample", "a kind missing"])
def test_a_file_that_cannot_be_trusted_is_not_used(helper, tmp_path, damage):
    cache = CalibrationCache(helper, tmp_path)
    cache.save(SAMPLES)
    doc = json.loads(cache.path.read_text())
    if damage == "not json":
        cache.path.write_text("{")
        assert cache.load() is None
        return
    if damage == "old":
        doc["taken"] = time.time() - CALIBRATION_MAX_AGE_S - 1
    elif damage == "no samples":
        del doc["samples"]
    elif damage == "a string sample":
        doc["samples"][EMULATED]["both"][0] = "1400"
    else:
        del doc["samples"][EMULATED]["inside"]
    cache.path.write_text(json.dumps(doc))
    assert cache.load() is None


def test_an_unwritable_cache_is_refused_without_a_trace(helper, tmp_path):
    root = tmp_path / "ro"
    (root / "calibration").mkdir(parents=True)
    os.chmod(root / "calibration", 0o500)
    try:
        cache = CalibrationCache(helper, root)
        if os.geteuid() == 0:  # root writes anywhere: make the target a directory instead
            cache.path.mkdir()
        assert not cache.save(SAMPLES)
        assert [p.name for p in (root / "calibration").iterdir()] == ([cache.path.name] if os.geteuid() == 0 else [])
    finally:
        os.chmod(root / "calibration", 0o700)


class _Bursts(Calibrator):
    """A Calibrator whose bursts measure a given entry + return cost (no helper, no BPF)."""

    def __init__(self, both: dict[str, float], *then: dict[str, float]):
        self.both, self.then, self.bursts, self.in_window, self.reused = both, list(then), 0, 0, None
        self.budgets = []
        self._stop, self._thread, self.gate = threading.Event(), None, threading.Lock()
        self.samples = {k: {"entry": [], "both": [], "inside": []} for k in (EMULATED, SINGLE_STEP)}

    def burst(self, session, budget_s, in_window=False):
        self.budgets.append(budget_s)
        for klass, runs in self.samples.items():
            runs["entry"].append(self.both[klass] / 2)
            runs["both"].append(self.both[klass])
            runs["inside"].append(self.both[klass] / 4)
        self.bursts += 1
        if self.then:  # the next burst measures the next cost given
            self.both = self.then.pop(0)

    def apply(self, session):
        return None


def test_one_burst_that_agrees_starts_from_the_earlier_ones():
    cal = _Bursts({EMULATED: 1420.0, SINGLE_STEP: 2580.0})
    cal.calibrate(None, {"taken": 1.7e9, "samples": SAMPLES})
    assert cal.bursts == 1 and cal.reused == {"bursts": 6, "taken": 1700000000}
    assert cal.budgets == [REUSE_CHECK_S]  # a short check, on the way to the probes
    assert cal.samples[EMULATED]["both"] == SAMPLES[EMULATED]["both"] + [1420.0]
    kept = cal.kept()
    assert kept[SINGLE_STEP]["both"][-1] == 2580.0 and len(kept[SINGLE_STEP]["both"]) <= ROLLING


def test_a_burst_that_disagrees_calibrates_afresh():
    # the single-step class now costs twice as much: a new kernel setting, another VM host
    cal = _Bursts({EMULATED: 1400.0, SINGLE_STEP: 5200.0})
    cal.calibrate(None, {"taken": 1.7e9, "samples": SAMPLES})
    assert cal.bursts == FIRST_BURSTS and cal.reused is None
    assert cal.samples[SINGLE_STEP]["both"] == [5200.0] * FIRST_BURSTS
    assert cal.budgets == [REUSE_CHECK_S] * REUSE_CHECKS + [0.01] * (FIRST_BURSTS - REUSE_CHECKS)


def test_a_second_check_that_agrees_keeps_the_earlier_ones_and_both_checks():
    # one burst slowed by a busy moment, the next as before
    cal = _Bursts({EMULATED: 1420.0, SINGLE_STEP: 5200.0}, {EMULATED: 1410.0, SINGLE_STEP: 2590.0})
    cal.calibrate(None, {"taken": 1.7e9, "samples": SAMPLES})
    assert cal.bursts == 2 and cal.reused == {"bursts": 6, "taken": 1700000000}
    assert cal.budgets == [REUSE_CHECK_S, REUSE_CHECK_S]
    assert cal.samples[SINGLE_STEP]["both"] == SAMPLES[SINGLE_STEP]["both"][-(ROLLING - 2):] + [5200.0, 2590.0]
    assert median(cal.samples[SINGLE_STEP]["both"]) == 2600.0  # the slowed one does not move the median


def test_without_an_earlier_run_five_bursts():
    cal = _Bursts({EMULATED: 1400.0, SINGLE_STEP: 2600.0})
    cal.calibrate(None, None)
    assert cal.bursts == FIRST_BURSTS and cal.reused is None
    assert cal.budgets == [0.01] * FIRST_BURSTS


def test_no_burst_follows_in_a_quiet_phase():
    cal = _Bursts({EMULATED: 1400.0, SINGLE_STEP: 2600.0})
    collector = CalibrationCollector(0)
    collector.calibrator = cal
    assert collector.quiet(True) and cal.gate.locked()
    cal.follow(None, interval_s=0.001)
    time.sleep(0.1)                         # a hundred intervals, all quiet
    in_quiet = cal.bursts
    assert collector.quiet(False) and not cal.gate.locked()
    deadline = time.monotonic() + 30
    while not cal.bursts and time.monotonic() < deadline:
        time.sleep(0.01)
    cal._stop.set()
    cal._thread.join()
    assert in_quiet == 0 and cal.bursts > 0
