"""Pacing the duty cycles: how long the probes stay off after each cycle
so the load slows down by at most the budget, measured from the server's
own progress; and what the on-phases show the probes cost the target."""

from __future__ import annotations

from collections.abc import Iterable

from typing import Any

import math
import os
from collections import deque

from dataclasses import dataclass, field

POOLED_CYCLES = 8  # cycles whose losses are pooled into the loss per second of on-phase

def off_seconds(lost_s: float, cycle_s: float, budget: float) -> float:
    """How long the probes must stay off after a cycle that took cycle_s
    seconds (on-phase, attaching and detaching) of which lost_s were lost to
    the load, so that the whole cycle slows the load down by at most budget:
    (cycle + off) / (cycle + off - lost) <= 1 + budget."""
    if lost_s <= 0:
        return 0.0
    return max(lost_s * (1 + budget) / budget - cycle_s, 0.0)


@dataclass
class Pacer:
    """Chooses each duty cycle's on- and off-phase from what the cycles before
    cost the load, measured by the server's progress (rows changed): the
    load's speed in the off-phases is its unprobed speed, and a cycle (attach,
    on-phase, detach) lost the time it took beyond what its rows would have
    taken at that speed. Attaching, detaching and anything else the probes
    cost is in that measure, not only what calibration knows of. Without a
    progress measure (no server connection, an idle load) the calibrated
    probe cost stands in.

    Two rules set the off-phase; the longer wins. Each cycle pays for itself
    (its loss over its own cycle and off-phase is within the budget), and the
    window as a whole stays within it should it end right after the next
    cycle: a short load is not slowed more because the first cycle opened at
    its start."""

    budget: float
    # pace for half the budget: the measure lags and is noisy, and what costs the same
    # with the probes on and off (perf, off-CPU stacks, P_S instruments, this process;
    # 1-2% in the bench) escapes it. At 0.7, runs were 1.09-1.10x slower than unprobed ones
    margin: float = 0.5
    on_s: float = 0.05       # the longest on-phase
    # the first cycles' on-phase: attaching and detaching cost about what 30 ms of
    # on-phase do, so these are dearer per call counted, but they lose less time,
    # and a load of two seconds gets two cycles (and an interval) instead of one
    opening_on_s: float = 0.02
    opening_cycles: int = 2
    min_on_s: float = 0.01
    max_off_s: float = 2.0
    min_rows: int = 200      # rows in recent off-phases before their speed is trusted
    # the on-phases' share of the time at most, however cheap they measure: what each
    # cycle costs beyond its probes (row reads, attach, detach, off-CPU stacks) hides
    # in a noisy load's own variation, and a never-hit probe measured free. Probes on
    # all along (one never hit), 8 clients: 1.15x; the estimates need far less than this
    max_coverage: float = 0.25
    # where no loss is measured, a probe hit is taken to cost the load this many
    # times its calibrated cost, the top of the in-situ factors measured on one
    # thread (1.0-1.9x). Under sysbench oltp_insert, 8 clients on 2 CPUs, the
    # cycles lost 9x (hits that hold a mutex hold up its waiters), and paced on
    # 1x the load ran 1.3-1.7x slower: the budget holds there only with a row counter
    unmeasured_cost_factor: float = 3.0
    # the least a probed second is taken to lose, over the calibrated cost of its hits:
    # their thread time spread over every CPU. A cycle's own loss, a few ms in a noisy
    # load, often measures 0: paced on that, the probes stayed on for seconds
    least_cost_factor: float = field(default_factory=lambda: 1.0 / (os.cpu_count() or 1))
    lost_per_on_s: float | None = None  # pooled: seconds lost per second of on-phase
    lost_total_s: float = 0.0           # lost by every cycle so far (calibrated where unmeasured)
    cycles: int = 0                     # cycles paced so far
    _off: deque[Any] = field(default_factory=lambda: deque(maxlen=5))
    _losses: deque[Any] = field(default_factory=lambda: deque(maxlen=POOLED_CYCLES))  # (signed lost, on-phase)
    _in_phase: deque[Any] = field(default_factory=lambda: deque(maxlen=POOLED_CYCLES))  # (signed lost, seconds)

    def off_phase(self, rows: int | None, seconds: float) -> None:
        """A clean off-phase: no probe attached, nothing attaching. One in
        which no row changed says the load was not running (not begun yet,
        or paused), not how fast it runs: kept, the idle second before a
        1-s sysbench run put its speed at 3,816 rows a second against
        19,000, and its 5x slower on-phases measured as losing nothing."""
        if rows and seconds > 0:
            self._off.append((rows, seconds))

    def speed(self) -> float | None:
        """Rows per second of the recent off-phases; None until enough rows."""
        rows = sum(r for r, _ in self._off)
        seconds = sum(s for _, s in self._off)
        return rows / seconds if rows >= self.min_rows and seconds > 0 else None

    def lost(self, cycle_s: float, cycle_rows: int | None, signed: bool = False) -> float | None:
        """Seconds a cycle cost the load, or None when it cannot be measured:
        no speed yet, or no row changed in the cycle. Probes slow a load,
        they do not stop it: the load had ended or paused. signed: below
        zero where the load ran faster than its recent unprobed speed (its
        own variation), as pooling over cycles needs."""
        speed = self.speed()
        if speed is None or not cycle_rows:
            return None
        lost = cycle_s - cycle_rows / speed
        return lost if signed else max(lost, 0.0)

    def longest_on_s(self) -> float:
        """The next on-phase at most: short for the opening cycles."""
        return self.opening_on_s if self.cycles < self.opening_cycles else self.on_s

    def next_phases(self, on_s: float, cycle_s: float, lost_s: float | None, probe_s: float,
                    elapsed_s: float | None = None, signed_lost_s: float | None = None,
                    in_phase: tuple[float, float] | None = None) -> tuple[float, float]:
        """(next on-phase, off-phase before it) after a cycle whose on-phase
        took on_s of its cycle_s seconds and lost lost_s (None: unmeasured,
        then probe_s, the calibrated cost of the hits counted, is used).
        signed_lost_s: the loss before it was held at zero (default lost_s).
        in_phase: (signed loss, seconds) between the two row reads inside
        the on-phase, where the probes were surely on.
        elapsed_s: the window's length so far (default: this cycle's)."""
        self.cycles += 1
        longest = self.longest_on_s()
        if on_s <= 0:
            return longest, 0.0
        cost = lost_s if lost_s is not None else probe_s * self.unmeasured_cost_factor
        self.lost_total_s += cost
        elapsed = cycle_s if elapsed_s is None else elapsed_s
        per_on = cost / on_s
        if lost_s is not None:
            measured_inside = bool(in_phase and in_phase[1] > 0)
            if measured_inside:
                # the on-phase alone: rows read a few ms apart, without the attach and
                # detach around it, whose rows blur the cycle's measure in a noisy load
                self._in_phase.append(in_phase)
            if self.cycles > 1 or not measured_inside:
                # the recent cycles' losses pooled, signed: one cycle's is mostly the load's
                # own noise. Not the first's where its on-phase was measured: the window's
                # first attach (0.066 s lost around a 0.022-s on-phase in one capture, the
                # next cycles about their on-phase) is repaid once by the window rule
                # (lost_total_s), and pooled it paced 8 cycles as if each had paid it
                self._losses.append((lost_s if signed_lost_s is None else signed_lost_s, on_s))
            pooled = [_per_second(p) for p in (self._losses, self._in_phase) if p]
            self.lost_per_on_s = max(*pooled, probe_s / on_s * self.least_cost_factor)
            per_on = self.lost_per_on_s
        transition = max(cycle_s - on_s, 0.0)
        budget = self.budget * self.margin
        paid = (1 + budget) / budget  # seconds of window that pay for one lost

        def off_for(on: float) -> float:
            own = off_seconds(per_on * on, on + transition, budget)
            window = (self.lost_total_s + per_on * on) * paid - (elapsed + on + transition)
            return max(own, window, 0.0)

        on = longest
        off = off_for(on)
        if off > self.max_off_s and per_on * paid > 1:
            # the on-phase that, off for max_off_s, keeps to both rules
            own = (self.max_off_s + transition) / (per_on * paid - 1)
            window = (self.max_off_s + elapsed + transition - self.lost_total_s * paid) / (per_on * paid - 1)
            on = min(max(min(own, window), self.min_on_s), longest)
            off = off_for(on)  # past max_off_s at min_on_s
        return on, max(off, on / self.max_coverage - on - transition)


def _per_second(losses: Iterable[tuple[float, float]]) -> float:
    """Seconds lost per second, over (lost, seconds) pairs."""
    pairs = list(losses)
    return float(sum(x for x, _ in pairs) / sum(t for _, t in pairs))


IN_SITU_MIN_COST_S = 0.005    # calibrated probe time in the reads before the factor is trusted
IN_SITU_RANGE = (0.5, 3.0)


def in_situ_factor(cycles: list[dict[str, Any]], pair_ns: list[float]) -> float | None:
    """What the probes cost inside the target over their calibrated cost,
    from the on-phases of duty cycles: the time the load lost between each
    on-phase's two row reads (the seconds between them less what their rows
    take at the unprobed speed) over the calibrated cost of the calls counted
    between them. A ratio of sums over the cycles whose own ratio is
    plausible: in the others the load changed pace between the off-phases
    that gave the speed and the on-phase (a load starting, stalling on I/O).
    None until there is enough of it."""
    low, high = IN_SITU_RANGE
    lost = cost = 0.0
    for c in cycles:
        speed, rows, row_s = c.get("unprobed_rows_per_s"), c.get("rows"), c.get("row_s")
        if not speed or rows is None or row_s is None:
            continue
        cycle_lost = row_s - rows / speed
        cycle_cost = sum(n * p for n, p in zip(c["row_calls"], pair_ns)) / 1e9
        if cycle_cost > 0 and low <= cycle_lost / cycle_cost <= high:
            lost += cycle_lost
            cost += cycle_cost
    return lost / cost if cost >= IN_SITU_MIN_COST_S else None


MIN_SPEED_PHASES = 3  # quiet phases paired with ordinary ones, for the spread of their lead


def paired_lead(speeds: list[tuple[bool, float]]) -> tuple[float, float, int] | None:
    """How much faster the quiet phases ran than the ordinary ones around
    them: each quiet phase against the mean of its nearest ordinary
    neighbours (so a load that changes speed between statements does not
    count), as the mean log ratio, its standard error and the number of
    pairs; None with fewer than MIN_SPEED_PHASES pairs."""
    logs = []
    for i, (quiet, speed) in enumerate(speeds):
        if not quiet:
            continue
        before = next((v for q, v in reversed(speeds[:i]) if not q), None)
        after = next((v for q, v in speeds[i + 1:] if not q), None)
        around = [v for v in (before, after) if v]
        if around and speed > 0:
            logs.append(math.log(speed / (sum(around) / len(around))))
    if len(logs) < MIN_SPEED_PHASES:
        return None
    mean = sum(logs) / len(logs)
    var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)
    return mean, math.sqrt(var / len(logs)), len(logs)
