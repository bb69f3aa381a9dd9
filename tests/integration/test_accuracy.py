"""Corrected latencies on functions of known cost (tests/fixtures/known_cost.cc).

Pass/fail here rests on counts, on the correction's arithmetic (every call
counted, and each call's calibrated probe cost, its own plus the full cost
of each probed call nested in it, taken off its latency), and on the truth
the fixture times on unprobed twins in the same run: each corrected mean
from a microsecond up within 10% of it and cost_100ns within max(10 ns, 35%),
the bench's targets (bench/RESULTS.md section 1), widened by the drift of the
probes' cost from their calibration that the fixture measured in the run.

"""

from __future__ import annotations

import json
import statistics

import pytest

from helpers import Profiler

pytestmark = pytest.mark.root

CALLS = {"cost_100ns": 4000, "cost_1us": 1000, "cost_10us": 200, "outer_10us": 100}
ROUNDS = 9
WITHIN = 0.10   # the bench's target for a corrected mean from a microsecond up
LONG = ("cost_1us", "cost_10us", "outer_10us")   # ... those functions
SHORT_WITHIN = (10.0, 0.35)  # below a microsecond: within max(10 ns, 35%)
RUNS = 3                     # runs whose median is held to them


def _command(proc, line):
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _profile(known_cost, tmp_path, *extra):
    prof = Profiler(known_cost.pid, tmp_path, "--exact", *extra, *[a for k in CALLS for a in ("--probe", k)])
    truth = {k: _command(known_cost, f"compare {k} {n} {ROUNDS}") for k, n in CALLS.items()}
    code, _, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    return truth, {p["name"]: p for p in doc["probes"]}, doc


ATTEMPTS = 3  # the sampled estimate is statistical: a run may be repeated, the bound is not loosened
NESTED_PER_OUTER = 8  # outer_10us calls cost_1us 8 times


def _taken_off(p) -> float:
    """Mean nanoseconds the correction took off a call."""
    return p["raw"]["mean_ns"] - p["mean_ns"]


def test_corrected_latencies_take_off_the_calibrated_cost(known_cost, tmp_path):
    truth, probes, doc = _profile(known_cost, tmp_path)
    assert doc["latencies"] == "corrected"
    assert doc["calibration"]["classes"]["emulated"]["entry_ns"] > 0
    for name, p in probes.items():
        assert p["entry"]["class"] == "emulated"
        nested = NESTED_PER_OUTER * CALLS["outer_10us"] * ROUNDS if name == "cost_1us" else 0
        assert p["calls"] == CALLS[name] * ROUNDS + nested
    applied = doc["calibration"]["classes"]["emulated"]["applied_ns"]  # costs follow the calibration
    own_lo, own_hi = applied["own"]
    pair_lo, pair_hi = applied["pair"]
    assert 0 < own_lo <= own_hi and 0 < pair_lo <= pair_hi
    # exactly their own share comes off each call, also off calls shorter than it
    # (the sums are not clamped at 0, so means stay unbiased; histograms are)
    for name in ("cost_100ns", "cost_1us", "cost_10us"):
        assert own_lo - 0.01 <= _taken_off(probes[name]) <= own_hi + 0.01, (name, applied, probes[name])
        assert all(b["low"] >= 0 for b in probes[name]["histogram"])
    # the caller also loses the full cost of its nested probed calls
    outer = probes["outer_10us"]
    assert outer["nested_probe_hits"] == 2 * NESTED_PER_OUTER * outer["calls"]  # entry and return each
    low, high = own_lo + NESTED_PER_OUTER * pair_lo, own_hi + NESTED_PER_OUTER * pair_hi
    assert low - 0.01 <= _taken_off(outer) <= high + 0.01, (applied, outer)
    # and against the truth the fixture timed on its unprobed twins in each of three runs: within
    # the bench's targets (bench/RESULTS.md section 1: +-10% from a microsecond up, max(10 ns,
    # 35%) below), widened by how far the probes' cost in the run's own calls was from the
    # calibration the kernel corrected them with, as the fixture measured it (below). A hit's
    # cost drifts on a busy host: here it flipped between about 1,150 and 1,550 ns within
    # seconds, a calibration at the start then off by 25% of it for the calls that followed.
    # A correction wrong in itself (the cost not taken off, or taken twice) is off by a
    # whole hit, many times the drift. The twins run interleaved with the probed calls, so a
    # busy host slows both alike.
    # The median over the runs of each error beyond its drift is held to the target, as the
    # bench holds its median of twelve.
    beyond: dict[str, list[tuple[float, float, float]]] = {name: [] for name in (*LONG, "cost_100ns")}
    for attempt in range(RUNS):
        if attempt:
            truth, probes, doc = _profile(known_cost, tmp_path / f"again{attempt}")
        for name, runs in beyond.items():
            error = probes[name]["mean_ns"] - truth[name]["truth_ns"]
            assert abs(error) < abs(probes[name]["raw"]["mean_ns"] - truth[name]["truth_ns"]), (name, truth[name],
                                                                                               probes[name])
            drift = _drift_ns(truth[name], doc, NESTED_PER_OUTER if name == "outer_10us" else 0)
            runs.append((abs(error) - drift, error, drift))
    for name, runs in beyond.items():
        target = WITHIN * truth[name]["truth_ns"] if name in LONG else \
            max(SHORT_WITHIN[0], SHORT_WITHIN[1] * truth[name]["truth_ns"])
        assert statistics.median(r[0] for r in runs) <= target, (name, truth[name], target, runs)


def _drift_ns(compared: dict, doc: dict, nested: int) -> float:
    """How far a call's probes cost, in this run, from what the kernel took
    off for them: the fixture's probed twin against its unprobed one (the
    wall time its hits added: its own entry and return and those of the
    calls nested in it) against the calibrated pairs, scaled to the part of
    them its latency encloses (its own inside share, the nested pairs whole)."""
    applied = doc["calibration"]["classes"]["emulated"]["applied_ns"]
    own, pair = (statistics.fmean(applied[k]) for k in ("own", "pair"))
    calibrated = (1 + nested) * pair
    measured = compared["probed_wall_ns"] - compared["truth_ns"]
    return abs(measured - calibrated) * (own + nested * pair) / calibrated


def test_raw_mode_reports_uncorrected_latencies(known_cost, tmp_path):
    truth, probes, doc = _profile(known_cost, tmp_path, "--raw")
    assert doc["latencies"] == "raw" and doc["calibration"]  # still calibrated: the overhead estimate
    for name, p in probes.items():
        assert p["mean_ns"] == p["raw"]["mean_ns"] > 0
        assert p["overhead_ns"] > 0
        # uncorrected, a call keeps its probes' cost: above what its unprobed twin took
        assert p["mean_ns"] > truth[name]["truth_ns"], (name, p["mean_ns"], truth[name])


def test_sampled_mode_estimates_the_calls_of_the_whole_window(known_cost, tmp_path):
    # about 4.5 s of cost_10us: the window must hold 3 duty cycles of about 0.95 s
    # each (300,000 calls ran 2.6-2.9 s here and held 2 in half the runs)
    calls = 450_000
    estimates = []
    for attempt in range(ATTEMPTS):
        prof = Profiler(known_cost.pid, tmp_path / str(attempt), "--probe", "cost_10us", "--budget", "5")
        _command(known_cost, f"run cost_10us {calls}")
        code, out, err = prof.stop()
        assert code == 0, err
        doc = prof.profile()
        sampling = doc["sampling"]
        assert sampling["mode"] == "sampled" and sampling["cycles"] >= 3
        (p,) = doc["probes"]
        assert 0 < p["calls"] < calls                       # only the on-phases were counted
        est = p["estimated_calls"]
        low, high = est["ci95"]
        assert low <= est["value"] <= high
        assert "~" in out and "sampling probes on" in out
        if abs(est["value"] - calls) <= 0.15 * calls:
            return
        estimates.append(est)
    pytest.fail(f"sampled estimates of {calls} calls missed by more than 15% in {ATTEMPTS} runs: {estimates}")


def test_without_a_server_the_bursts_calls_come_from_the_time(known_cost, tmp_path):
    """A 40 ns countdown with no callee, without a row counter: the bursts'
    calls are the window's estimate (calls per unprobed second) over their
    share of it. For a function hit millions of times a second the probes
    fill the on-phases and that estimate is loose: the samples' mean stands
    only where its interval makes it the better figure."""
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "cost_40ns", "--no-ps")
    _command(known_cost, "loop cost_40ns 3000")
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    bursts, sampling = doc["cpu_bursts"], doc["sampling"]
    assert bursts["status"] == "collected" and bursts["switch_failures"] == 0
    assert sampling["burst_s"] > 0 and sampling["burst_rows"] is None   # no server: no row counter
    (s,) = [s for s in doc["stages"] if s["stage"] == "probe:cost_40ns"]
    figures = s["off_phase_cpu"]
    assert figures["samples"] > 0                                      # the countdown is its own code
    share = sampling["burst_s"] / doc["window"]["duration_s"]
    assert figures["calls"]["value"] == pytest.approx(s["estimated_calls"]["value"] * share, rel=1e-3)
    assert figures["used"] == s["mean_method"].startswith("CPU samples")
    assert s["mean_ns"] >= 0 and (s["mean_resolved"] or s["mean_ns_ci95"][1] > s["mean_ns"])


def test_a_counter_in_memory_stands_for_the_rows(known_cost, tmp_path):
    """--progress-counter: the loop's own count of its calls, read from the
    fixture's memory, is the window's progress. It counts every call, so
    the calls per unit counted in the on-phases are one, and the estimate
    of the whole window is the loop's own count; the bursts' calls come
    from the counter, not from the time."""
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "cost_40ns", "--no-ps",
                    "--progress-counter", "loop_calls")
    calls = _command(known_cost, "loop cost_40ns 3000")["calls"]
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    window, sampling = doc["window"], doc["sampling"]
    assert window["rows_counter"] == "memory:loop_calls" and window["rows_changed"] == calls
    assert "estimate scaled by the counter loop_calls in its memory" in " ".join(out.split())
    (s,) = [s for s in doc["stages"] if s["stage"] == "probe:cost_40ns"]
    assert s["estimated_calls"]["value"] == pytest.approx(calls, rel=0.01)
    assert 0 < sampling["burst_rows"] < calls
    figures = s["off_phase_cpu"]
    assert figures["calls"]["value"] == pytest.approx(sampling["burst_rows"], rel=0.01)
