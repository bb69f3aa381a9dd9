"""Estimates from duty-cycled probing: the probes are on for short phases
only, so what was counted in them stands for the whole window.

A cycle is (seconds the probes were on, seconds of that the probes
themselves took, calls counted). While the probes are on, a busy thread
spends part of its time in them and makes fewer calls; so the rate of a
function is calls per second of unprobed time, and the window's calls are
those counted plus that rate times the time the probes were off. The 95%
interval comes from how much the per-cycle rates vary."""

from __future__ import annotations

from typing import Any

import math

from dataclasses import dataclass


def rounded(value: float | None, digits: int = 1) -> float | None:
    """A figure as a capture or report keeps it: rounded, None kept."""
    return None if value is None else round(value, digits)


# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float | None   # 95% interval; None with fewer than 2 cycles
    high: float | None

    def to_json(self) -> dict[str, Any]:
        return {"value": rounded(self.value), "ci95": None if self.low is None else [rounded(self.low), rounded(self.high)]}


# the least unprobed share of an on-phase an estimate takes; for the interval's
# high end, where the probes' cost at the top of its doubt may take nearly all
# of an on-phase (a function called millions of times a second), far less: its
# calls could then be many times those the point estimate says
FREE_FLOOR, FREE_FLOOR_HIGH = 0.05, 0.001


def _point(cycles: list[tuple[float, float, float]], window_s: float, cost_scale: float,
           floor: float = FREE_FLOOR) -> tuple[float, list[tuple[float, float]], float]:
    """(estimate, per-cycle (free seconds, calls), unprobed seconds) with probe_s scaled."""
    counted = sum(c for _, _, c in cycles)
    on = sum(s for s, _, _ in cycles)
    free = [(max(s - p * cost_scale, floor * s), c) for s, p, c in cycles if s > 0]  # unprobed s, calls
    seconds = sum(f for f, _ in free)
    rate = counted / seconds if seconds > 0 else 0.0
    return counted + rate * max(window_s - on, 0.0), free, rate


def estimate_total(cycles: list[tuple[float, float, float]], window_s: float,
                   cost_uncertainty: float = 0.0, in_situ_high: float = 1.0) -> Estimate:
    """Calls in the whole window from (on_s, probe_s, calls) per cycle.

    The interval joins two doubts: how much the per-cycle rates vary, and how
    well the probes' cost (probe_s) is known, +-cost_uncertainty relative,
    and above it up to in_situ_high times (what a hit may cost in the
    target over its calibration, where that was not measured). The fewer
    unprobed seconds an on-phase has left, the more the second weighs."""
    counted = sum(c for _, _, c in cycles)
    on = sum(s for s, _, _ in cycles)
    value, free, rate = _point(cycles, window_s, 1.0)
    if not free or sum(f for f, _ in free) <= 0:
        return Estimate(float(counted), None, None)
    k = len(free)
    if k < 2:
        return Estimate(value, None, None)
    seconds = sum(f for f, _ in free)
    var = sum(f * (c / f - rate) ** 2 for f, c in free) / seconds * k / (k - 1)
    half = t95(k - 1) * math.sqrt(var / k) * max(window_s - on, 0.0)
    low_cost, _, _ = _point(cycles, window_s, 1.0 - cost_uncertainty)
    high_cost, _, _ = _point(cycles, window_s, in_situ_high + cost_uncertainty, FREE_FLOOR_HIGH)
    low = min(value, low_cost) - half
    high = max(value, high_cost) + half
    return Estimate(value, max(low, float(counted)), high)


# a cycle whose rows could sit this share of its row span away from its calls
# (half of each read's width, against the time between the two reads) says
# too little of calls per row: the reads are about 1 ms wide in a 20-60 ms
# span (32 clients on two CPUs, 398 cycles: widest 15 ms, at most 0.22)
MAX_READ_SHARE = 0.25


def estimate_by_rows(cycles: list[tuple[int, float]], rows_window: int, counted: float | None = None,
                     apart: bool = False) -> Estimate:
    """Calls in the whole window from (rows the server changed, calls counted)
    per on-phase and the rows changed in the whole window.

    A ratio estimator: calls per row in the on-phases times the window's rows.
    Unlike a rate per second it does not care how much the probes slowed the
    load down, nor how the load's speed changed between phases. The interval
    comes from how much calls per row vary between cycles, with the finite
    population correction (rows counted are a share of the window's). A
    cycle that saw neither rows nor calls (an idle server) says nothing of
    calls per row and is left out: an interval from the three cycles that
    caught a load is as wide as three cycles make it, however many idle
    ones came around them.
    counted: every call counted (default those in `cycles`), the floor.
    apart: rows_window does not hold the cycles' rows (other phases), so no
    finite population correction."""
    in_rows = sum(c for _, c in cycles)
    counted = in_rows if counted is None else counted
    rows_on = sum(r for r, _ in cycles)
    if rows_on <= 0 or rows_window <= 0:
        return Estimate(float(counted), None, None)
    ratio = in_rows / rows_on
    value = max(ratio * rows_window, float(counted))
    seen = [(r, c) for r, c in cycles if r or c]
    k = len(seen)
    if k < 2:
        return Estimate(value, None, None)
    mean_rows = rows_on / k
    var_ratio = sum((c - ratio * r) ** 2 for r, c in seen) / (k * (k - 1) * mean_rows ** 2)
    fpc = 1.0 if apart else max(1.0 - rows_on / rows_window, 0.0)
    half = t95(k - 1) * math.sqrt(var_ratio * fpc) * rows_window
    return Estimate(value, max(value - half, float(counted)), value + half)
