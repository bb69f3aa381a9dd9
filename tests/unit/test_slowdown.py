"""The slowdown a report prints, over simulated windows: the load's
unprobed rate drawn per quiet phase around a known truth, the window's rate
set by a known slowdown. What is printed is never below 1.0, its interval
covers the truth about as often as it says, and where the measure falls
below 1.0 it is 'not measurable' with its doubt."""

from __future__ import annotations

import random

import pytest

from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import t95
from mysqlprobe.analysis.report import render_text
from test_report import sampled_with_off_phases

UNPROBED = 40_000.0   # rows/s with nothing of mysqlprobe on


def simulated(slowdown: float, phases: list[float], noise: float, rng: random.Random, quiet: bool = True) -> dict:
    """A window whose load ran `slowdown` times slower than UNPROBED, with
    off-phases of those lengths, each's rate off the truth by N(0, noise)."""
    doc = sampled_with_off_phases()
    cycles = doc["sampling"]["calls_per_cycle"]
    rows = [round(UNPROBED * s * (1 + rng.gauss(0, noise))) for s in phases]
    for i, c in enumerate(cycles):
        c["at_s"] = i * 1.0
        c["off"] = [{"at_s": i * 1.0 + 0.1 + k * 0.01, "s": s, "rows": r, "quiet": quiet}
                    for k, (s, r) in enumerate(zip(phases, rows)) if k % len(cycles) == i]
    kind = "quiet" if quiet else "off"
    doc["sampling"].update({f"{kind}_s": sum(phases), f"{kind}_rows": sum(rows)})
    if quiet:
        doc["sampling"]["quieted"] = ["cpu_profile"]
    duration = doc["window"]["duration_s"]
    doc["window"]["rows_changed"] = round(UNPROBED / slowdown * duration)
    return doc


def test_what_is_printed_is_never_below_one_and_its_interval_covers_the_truth():
    rng = random.Random(20261129)
    covered = runs = 0
    for _ in range(200):
        truth = rng.uniform(1.0, 1.12)
        phases = [rng.uniform(0.2, 1.0) for _ in range(rng.randint(3, 12))]
        o = Profile(simulated(truth, phases, rng.choice((0.02, 0.05, 0.1)), rng)).overhead
        assert o.slowdown_estimate is not None and o.slowdown_doubt is not None
        assert o.measured_slowdown is None or o.measured_slowdown >= 1.0
        low, high = o.slowdown_interval or (None, None)
        assert low is not None and high is not None and 1.0 <= low <= high
        if o.measured_slowdown is not None:
            assert low <= o.measured_slowdown <= high
        else:   # not measurable: the measure fell below 1.0, and its doubt reaches back to 1.0 at least
            assert o.slowdown_estimate < 1.0 and o.slowdown_estimate + o.slowdown_doubt >= 1.0 - 1e-9
        runs += 1
        covered += low - 1e-9 <= truth <= high + 1e-9
    # a 95% interval: about 95 in 100, whichever the phases' count and spread
    assert covered / runs >= 0.9, covered / runs


def test_a_measure_below_one_is_printed_as_not_measurable_with_its_doubt():
    rng = random.Random(7)
    doc = simulated(1.0, [0.5, 0.5, 0.5, 0.5], 0.0, rng)
    doc["window"]["rows_changed"] = round(UNPROBED * 1.05 * doc["window"]["duration_s"])   # ran faster
    profile = Profile(doc)
    o = profile.overhead
    assert o.measured_slowdown is None and o.slowdown_estimate == pytest.approx(1 / 1.05, abs=1e-3)
    text = " ".join(render_text(profile).split())
    assert f"slowdown not measurable (±{1 - o.slowdown_estimate:.2f})" in text
    assert f"{o.slowdown_estimate:.2f}x" not in text
    assert profile.to_json()["overhead"]["measured_slowdown"] is None


def test_the_interval_follows_the_phases_spread_and_count():
    rates = [36_000, 44_000, 38_000, 42_000]          # four quiet phases of 0.5 s: mean 40,000
    doc = simulated(1.0, [0.5] * 4, 0.0, random.Random(1))
    for c in doc["sampling"]["calls_per_cycle"]:
        for part in c["off"]:
            part["rows"] = rates.pop() // 2
    doc["window"]["rows_changed"] = round(UNPROBED / 1.1 * doc["window"]["duration_s"])
    o = Profile(doc).overhead
    sd = (sum((r - 40_000) ** 2 for r in (36_000, 44_000, 38_000, 42_000)) / 3) ** 0.5
    doubt = t95(3) * sd / 2 / 40_000                   # the mean of four equal phases: sd / sqrt(4)
    assert o.slowdown_estimate == pytest.approx(1.1, abs=1e-3)
    assert 1.1 * (1 - doubt) < 1.0            # its low end is 1.0: a load is not sped up by being probed
    assert o.slowdown_interval == pytest.approx((1.0, 1.1 * (1 + doubt)), abs=1e-3)
    text = " ".join(render_text(Profile(doc)).split())
    assert f"load ran 1.10x slower (95%: 1.00-{1.1 * (1 + doubt):.2f})" in text


def test_one_reference_phase_gives_no_interval_and_the_ordinary_ones_serve_without_quiet_ones():
    doc = simulated(1.1, [0.8], 0.0, random.Random(3))
    o = Profile(doc).overhead
    assert o.measured_slowdown == pytest.approx(1.1, abs=1e-3) and o.slowdown_interval is None
    ordinary = Profile(simulated(1.1, [0.4, 0.6, 0.5], 0.03, random.Random(5), quiet=False)).overhead
    assert ordinary.measured_against == "off" and ordinary.slowdown_interval is not None
