"""The mean cost of a call, with the interval the probes' own cost allows:
never negative or zero, an upper bound where the doubt outweighs the call."""

import pytest

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.per_call import CORRECTED, RAW, UNMEASURED_IN_SITU, per_call

CAL = {"classes": {"emulated": {"entry_ns": 1000.0, "return_ns": 500.0, "spread_ns": 75.0}}}


def counts(ns: float, calls: int) -> list[int]:
    c = [0] * H.NUM_SLOTS
    c[H.slot_of(int(ns))] = calls
    return c


def sampled(in_situ: float) -> dict:
    return {"latencies": "corrected", "sampling": {"mode": "sampled"},
            "calibration": {**CAL, "in_situ_factor": in_situ}}


def test_a_short_function_under_a_large_correction_is_a_bound_not_a_negative():
    calls, raw = 100_003, 1510.0                 # a 10 ns function, 1.5 us of probes in its timestamps
    pc = per_call(calls, -20 * calls, raw * calls, counts(raw, calls), sampled(1.3), {"emulated"})
    assert pc.mean_ns >= 0 and pc.low_ns == 0 and not pc.resolved
    assert pc.text().startswith("<") and pc.high_ns > 0
    assert pc.high_ns == pytest.approx(-20 + 1530 * 0.10, rel=0.05)   # the calibration's doubt above


def test_a_long_function_is_measured_with_an_interval_around_it():
    calls, raw, corrected = 50_021, 41_500.0, 40_000.0
    pc = per_call(calls, corrected * calls, raw * calls, counts(raw, calls), sampled(1.4), {"emulated"})
    assert pc.resolved and pc.low_ns < corrected < pc.high_ns and pc.mean_ns == pytest.approx(corrected)
    # below: the extra 0.4x the server costs a hit, plus the doubt; above: the doubt
    assert corrected - pc.low_ns == pytest.approx(1500 * 0.5, rel=0.3)
    assert pc.high_ns - corrected == pytest.approx(1500 * 0.1, rel=0.3)
    assert pc.text() == H.format_ns(corrected) and pc.method == CORRECTED
    assert pc.to_json()["mean_ns_ci95"] == [round(pc.low_ns, 1), round(pc.high_ns, 1)]


def test_without_a_measured_in_situ_factor_the_interval_allows_for_one():
    calls, raw, corrected = 10_007, 6000.0, 4500.0
    exact = {"latencies": "corrected", "calibration": {**CAL, "in_situ_factor": 1.0}}
    pc = per_call(calls, corrected * calls, raw * calls, counts(raw, calls), exact, {"emulated"})
    assert corrected - pc.low_ns >= 1500 * (UNMEASURED_IN_SITU - 1)


def test_raw_latencies_say_so():
    pc = per_call(7, 7000, 7000, counts(1000, 7), {"latencies": "raw"}, {"emulated"})
    assert pc.method == RAW and pc.mean_ns == 1000


def test_percentiles_are_resolved_only_above_the_probes_doubt():
    calls, raw = 1009, 3000.0
    pc = per_call(calls, 1500 * calls, raw * calls, counts(raw, calls), sampled(1.0), {"emulated"})
    assert pc.probe_noise_ns == pytest.approx(150)
    assert pc.percentile_resolved(2000) and not pc.percentile_resolved(500)


def test_no_calls_no_mean():
    pc = per_call(0, 0, 0, [0] * H.NUM_SLOTS, sampled(1.0), set())
    assert pc.mean_ns is None and pc.text() == "-"
