import math
import os
from types import SimpleNamespace

import pytest

from mysqlprobe.analysis.sampling import estimate_by_rows, estimate_total, t95
from mysqlprobe.analysis.views import SpanEdge
from mysqlprobe.recorder import duty, reads, window as window_module
from mysqlprobe.recorder.duty import Bursts, DutyCycles
from mysqlprobe.recorder.options import Control
from mysqlprobe.recorder.pacing import Pacer, in_situ_factor, off_seconds
from mysqlprobe.recorder.window import Window


class SimulatedClock:
    """Time for the duty cycles that only their waits move on: nothing sleeps
    and no test depends on how busy the machine is."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, seconds: float) -> bool:  # the window's stop event, never set
        self.now += seconds
        return False


@pytest.fixture
def clock(monkeypatch) -> SimulatedClock:
    simulated = SimulatedClock()
    monkeypatch.setattr(duty, "time", simulated)
    monkeypatch.setattr(reads, "time", simulated)
    monkeypatch.setattr(window_module, "time", simulated)
    return simulated


def test_steady_rate_is_scaled_to_the_window():
    # 1000 calls per 0.2 s on-phase, probes taking nothing: 5000 calls/s over 10 s
    cycles = [(0.2, 0.0, 1000)] * 5
    est = estimate_total(cycles, 10.0)
    assert est.value == pytest.approx(50_000)
    assert est.low == pytest.approx(50_000) and est.high == pytest.approx(50_000)  # no spread, no doubt


def test_time_spent_in_the_probes_does_not_count_as_load_time():
    # half of each on-phase went to the probes: the load runs twice as fast unprobed
    est = estimate_total([(0.2, 0.1, 1000)] * 4, 10.0)
    assert est.value == pytest.approx(4000 + 10_000 * (10.0 - 0.8))


def test_interval_widens_with_spread_and_never_drops_below_what_was_counted():
    tight = estimate_total([(0.2, 0.0, 990), (0.2, 0.0, 1010)] * 3, 10.0)
    loose = estimate_total([(0.2, 0.0, 500), (0.2, 0.0, 1500)] * 3, 10.0)
    assert tight.value == pytest.approx(loose.value)
    assert (loose.high - loose.low) > 10 * (tight.high - tight.low)
    assert loose.low >= 6000
    few = estimate_total([(0.2, 0.0, 10), (0.2, 0.0, 5000)], 100.0)
    assert few.low == 5010


def test_one_cycle_has_no_interval_and_no_cycle_no_calls():
    assert estimate_total([(0.2, 0.0, 7)], 1.0).low is None
    assert estimate_total([], 5.0).value == 0


def test_off_seconds_keep_a_cycle_within_the_budget():
    off = off_seconds(0.03, 0.06, 0.10)
    assert (0.06 + off) / (0.06 + off - 0.03) == pytest.approx(1.10)
    assert off_seconds(0.0, 0.06, 0.10) == 0.0
    assert off_seconds(0.001, 0.06, 0.10) == 0.0               # cheap cycles need no pause


def test_calls_scale_by_rows_not_by_time():
    # the load ran at a tenth of its speed while probed: a time basis would read 10x too few calls,
    # rows do not care (3 calls per row in every on-phase; 1,000,003 rows in the window)
    cycles = [(1000, 3000), (1200, 3600), (800, 2400)]
    est = estimate_by_rows(cycles, 1_000_003)
    assert est.value == pytest.approx(3_000_009)
    assert est.low == est.high == pytest.approx(3_000_009)    # no spread in calls per row


def test_rows_interval_reflects_spread_and_shrinks_as_coverage_grows():
    noisy = [(1000, 2500), (1000, 3500), (1000, 3000), (1000, 2800)]
    small = estimate_by_rows(noisy, 1_000_000)
    whole = estimate_by_rows(noisy, 4000)                        # every row was in an on-phase
    assert small.low < small.value < small.high
    assert small.value == pytest.approx(2_950_000)
    assert whole.low == whole.high == whole.value == pytest.approx(11_800)
    assert estimate_by_rows([(0, 5)], 100).value == 5           # no rows: what was counted
    assert estimate_by_rows([(10, 5)], 100).low is None         # one cycle: no interval


def test_idle_cycles_do_not_narrow_the_rows_interval():
    # a 20 s window, from a real capture on 10.2.11: 1,500,007 rows into emp_src
    # (1 Handler_write and 1 ha_innobase::write_row a row), then into a
    # 5-partition table (2 Handler_write, 1 ha_partition::write_row and 1
    # ha_innobase::write_row a row); only 3 of the 22 cycles caught the load,
    # one in the first statement and two in the second
    idle = [(0, 0)] * 19
    partition = [(2407, 0), (11858, 5924), (10902, 5450)]
    innodb = [(2407, 2406), (11858, 5924), (10902, 5445)]
    for cycles, truth in ((partition, 1_500_007), (innodb, 3_000_014)):
        est = estimate_by_rows(idle + cycles, 4_500_021)
        assert est.low <= truth <= est.high, (est, truth)         # as wide as 3 cycles make it
        assert est == estimate_by_rows(cycles, 4_500_021)          # the idle ones change nothing
    # a cycle with calls but no rows (background work) is evidence all the same
    background = estimate_by_rows([(0, 0), (0, 40), (1000, 10), (1000, 12)], 100_000)
    assert background.high > estimate_by_rows([(0, 0), (1000, 10), (1000, 12)], 100_000).high


class SimulatedLoad:
    """A load of `speed` rows/s that runs `slow` times slower while probed and
    loses `fixed_s` per attach-detach: what a duty cycle costs it."""

    def __init__(self, speed=300_000.0, slow=4.0, fixed_s=0.004):
        self.speed, self.slow, self.fixed_s = speed, slow, fixed_s

    def run(self, pacer, cycles=200, slowdowns=None, walls=None):
        """The load's slowdown over the whole run; `slowdowns` gets it as it
        stood at the end of every cycle (a window that ended there), `walls`
        the time from the start to the end of every cycle."""
        wall = rows = 0.0
        on = pacer.longest_on_s()
        for _ in range(cycles):
            cycle_s = on + 2 * self.fixed_s
            cycle_rows = on * self.speed / self.slow
            probe_s = on * (1 - 1 / self.slow) * 0.5               # calibration sees half the real cost
            lost = pacer.lost(cycle_s, int(cycle_rows))
            measured = 0.0
            if lost is None:                                        # as record does: learn the speed first
                measured = 0.1
                pacer.off_phase(int(measured * self.speed), measured)
                lost = pacer.lost(cycle_s, int(cycle_rows))
            next_on, off = pacer.next_phases(on, cycle_s, lost, probe_s, elapsed_s=wall + cycle_s)
            if slowdowns is not None:
                slowdowns.append((wall + cycle_s) / ((rows + cycle_rows) / self.speed))
            if walls is not None:
                walls.append(wall + cycle_s)
            off = max(off, measured)
            pacer.off_phase(int((off - measured) * self.speed), off - measured)
            wall += cycle_s + off
            rows += cycle_rows + off * self.speed
            on = next_on
        return wall / (rows / self.speed)                           # slowdown


def test_pacer_holds_the_budget_on_measured_cost_that_calibration_underrates():
    slowdown = SimulatedLoad().run(Pacer(0.10))
    aim = 1 + 0.10 * Pacer.margin                                   # paced for a share of the budget
    assert aim - 0.02 < slowdown <= aim + 0.01
    assert 1.09 < SimulatedLoad().run(Pacer(0.10, margin=1.0)) <= 1.105
    heavy = SimulatedLoad(slow=20.0, fixed_s=0.02).run(Pacer(0.10))  # past max_off: shorter on-phases
    assert heavy <= 1.105


def test_a_window_ending_after_any_cycle_but_the_first_is_within_the_budget():
    # the first cycle opens with the window; every later one waits until the
    # window could end right after it and still be within the budget
    at_cycle_ends = []
    SimulatedLoad().run(Pacer(0.10), cycles=20, slowdowns=at_cycle_ends)
    assert at_cycle_ends[0] > 1.5                                   # the first cycle alone: a 4x slower load
    aim = 1 + 0.10 * Pacer.margin
    assert max(at_cycle_ends[1:]) <= aim + 1e-6
    assert at_cycle_ends[-1] > aim - 0.02                          # not paced more than needed
    # after a first cycle at the window's start, a second as long waits about
    # twice as long as that cycle alone would need
    pacer = Pacer(0.10, opening_cycles=0)
    pacer.off_phase(30_000, 0.1)                                    # 300k rows/s unprobed
    lost = pacer.lost(0.058, 3750)
    _, off = pacer.next_phases(0.05, 0.058, lost, 0.0, elapsed_s=0.058)
    budget = 0.10 * Pacer.margin
    assert off == pytest.approx(2 * lost * (1 + budget) / budget - 2 * 0.058)
    assert off > 1.9 * off_seconds(lost, 0.058, budget)


def test_opening_cycles_are_short_so_a_two_second_load_gets_two():
    # attach and detach cost the load 24 ms a cycle, the on-phases 75% of their length
    def cycle_ends(pacer, slowdowns=None):
        walls = []
        SimulatedLoad(speed=500_000.0, slow=4.0, fixed_s=0.012).run(pacer, cycles=10, slowdowns=slowdowns,
                                                                     walls=walls)
        return walls

    at_cycle_ends = []
    opened = cycle_ends(Pacer(0.10), at_cycle_ends)
    assert opened[1] < 2.0 < cycle_ends(Pacer(0.10, opening_cycles=0))[1]
    assert max(at_cycle_ends[1:]) <= 1 + 0.10 * Pacer.margin + 1e-6


def test_pacer_without_progress_uses_the_calibrated_cost_times_the_unmeasured_factor():
    pacer = Pacer(0.10, opening_cycles=0)
    assert pacer.lost(0.06, None) is None
    on, off = pacer.next_phases(0.05, 0.06, None, 0.005, elapsed_s=60.0)   # 10% of the on-phase in the probes
    cost = 0.005 * Pacer.unmeasured_cost_factor
    assert on == 0.05 and off == pytest.approx(off_seconds(cost, 0.06, 0.10 * Pacer.margin))
    pacer = Pacer(0.10, opening_cycles=0)
    on, off = pacer.next_phases(0.05, 0.06, None, 0.04, elapsed_s=60.0)    # more: a shorter on-phase
    assert on < 0.05 and off == pytest.approx(Pacer.max_off_s, rel=0.01)
    pacer.off_phase(50, 1.0)                                      # an idle load: speed not trusted
    assert pacer.speed() is None


def test_on_phases_never_cover_more_than_their_share_however_cheap_they_measure():
    pacer = Pacer(0.10, opening_cycles=0)
    pacer.off_phase(30_000, 1.0)
    # a never-hit probe: the cycle lost nothing measurable, in it or around it
    on, off = pacer.next_phases(0.05, 0.06, 0.0, 0.0, elapsed_s=60.0, signed_lost_s=-0.004, in_phase=(-0.002, 0.04))
    assert on == 0.05 and on / (0.06 - 0.05 + on + off) == pytest.approx(Pacer.max_coverage)


def test_the_on_phase_alone_paces_when_the_cycles_rows_hide_its_loss():
    # 12,500 rows/s unprobed; in the on-phase 9,500/s (24% slower); the cycle around it
    # (attach, detach, row reads) shows no loss at all: its rows came at full speed
    pacer = Pacer(0.10, opening_cycles=0)
    pacer.off_phase(12_500, 1.0)
    cycle_rows = int(0.08 * 12_500)
    lost = pacer.lost(0.08, cycle_rows)
    assert lost == 0.0
    in_phase = (pacer.lost(0.05, 475, signed=True), 0.05)
    _, off = pacer.next_phases(0.06, 0.08, lost, 0.0, elapsed_s=60.0, signed_lost_s=0.0, in_phase=in_phase)
    per_on = in_phase[0] / 0.05
    assert pacer.lost_per_on_s == pytest.approx(per_on)
    assert off == pytest.approx(off_seconds(per_on * 0.05, 0.05 + 0.02, 0.10 * Pacer.margin))  # next: 50 ms on


def test_a_noisy_loads_cycles_are_pooled_signed():
    # losses of +10 ms and -6 ms (the load ran faster for a moment): 2 ms per 50 ms
    # pooled, not 5 ms (the -6 held at zero) nor the last cycle's 0
    pacer = Pacer(0.10, opening_cycles=0)
    pacer.off_phase(30_000, 1.0)
    pacer.next_phases(0.05, 0.06, 0.010, 0.0, elapsed_s=60.0, signed_lost_s=0.010)
    pacer.next_phases(0.05, 0.06, 0.0, 0.0, elapsed_s=61.0, signed_lost_s=-0.006)
    assert pacer.lost_per_on_s == pytest.approx(0.004 / 0.1)


def test_a_cycle_without_rows_lost_nothing_it_can_measure():
    # the load ended (or paused) before the cycle: counting the whole cycle as
    # lost would stretch the next off-phases and overstate the slowdown
    pacer = Pacer(0.10)
    pacer.off_phase(30_000, 0.1)
    assert pacer.lost(0.06, 0) is None
    assert pacer.lost(0.06, 3_000) == pytest.approx(0.05)


def test_off_phases_in_which_no_row_changed_are_not_the_loads_speed():
    """The window opened before the load: its idle off-phases say nothing of
    how fast it runs, and counted as 0 rows they made a cycle 5x slower than
    the load look free."""
    pacer = Pacer(0.10)
    for _ in range(4):
        pacer.off_phase(0, 0.1)                     # before the load began
    pacer.off_phase(2_000, 0.1)                     # 20,000 rows a second
    assert pacer.speed() == pytest.approx(20_000)
    assert pacer.lost(0.1, 400) == pytest.approx(0.08)   # 400 rows in 0.1 s: 0.08 s lost


def test_the_tightest_of_a_few_row_reads_is_kept_and_the_rows_sit_at_its_middle(clock):
    calls = iter([{0: 0}, {0: 500}, {0: 600}, {0: 610}])   # before and after each query
    query_s = iter([0.05, 0.001])                            # the first held up, the second not

    def rows():
        clock.sleep(next(query_s))
        return 7
    t0 = clock.monotonic()
    at_read, counted, when, width = reads.rows_and_calls(rows, lambda: next(calls))
    assert (at_read, counted, width) == ({0: 605}, 7, pytest.approx(0.001))
    assert when == pytest.approx(t0 + 0.05 + 0.0005)
    query_s = iter([0.05] * reads.READ_TRIES)                # every try wide: the tightest of them
    calls = iter([{0: i} for i in range(2 * reads.READ_TRIES)])
    assert reads.rows_and_calls(rows, lambda: next(calls))[:2] == ({0: 0.5}, 7)


def test_t_quantiles():
    assert t95(1) == pytest.approx(12.706)
    assert t95(1000) == 1.96


def test_doubt_on_the_probe_cost_widens_the_interval_most_when_probes_dominate():
    light = [(0.2, 0.02, 1000), (0.2, 0.02, 1000), (0.2, 0.02, 1000)]
    heavy = [(0.2, 0.15, 1000), (0.2, 0.15, 1000), (0.2, 0.15, 1000)]
    width = lambda e: (e.high - e.low) / e.value  # noqa: E731
    assert width(estimate_total(light, 10.0)) == 0
    assert 0 < width(estimate_total(light, 10.0, 0.2)) < width(estimate_total(heavy, 10.0, 0.2))


def test_rows_estimate_takes_calls_per_row_from_the_paired_counts_only():
    # 2 calls per row where rows were read; more calls counted outside those spans only raise the floor
    est = estimate_by_rows([(1000, 2000), (1000, 2000)], 100_000, counted=5000)
    assert est.value == pytest.approx(200_000)
    assert estimate_by_rows([(1000, 2000)], 1500, counted=5000).value == 5000


def test_in_situ_factor_is_the_on_phases_loss_over_the_calibrated_cost():
    # 1M rows/s unprobed; 0.05 s between the reads with 10000 rows: 0.04 s lost.
    # 20000 calls of a 1500 ns pair and 5000 of a 1000 ns one: 0.035 s calibrated
    cycle = {"rows": 10_000, "row_s": 0.05, "unprobed_rows_per_s": 1e6, "row_calls": [20_000, 5_000]}
    assert in_situ_factor([cycle, dict(cycle)], [1500.0, 1000.0]) == pytest.approx(0.04 / 0.035)
    unmeasured = {**cycle, "unprobed_rows_per_s": None}              # the speed was not known yet
    assert in_situ_factor([unmeasured], [1500.0, 1000.0]) is None
    idle = {**cycle, "row_calls": [10, 0]}                              # too little probe time to say
    assert in_situ_factor([idle], [1500.0, 1000.0]) is None
    sped_up = {**cycle, "rows": 60_000}                                 # the load changed pace: no factor
    assert in_situ_factor([sped_up], [1500.0, 1000.0]) is None
    stalled = {**cycle, "unprobed_rows_per_s": 4_000.0}                 # off-phases while the load stalled
    assert in_situ_factor([stalled, cycle, dict(cycle)], [1500.0, 1000.0]) == pytest.approx(0.04 / 0.035)


class _Rows:
    """The server's rows counter at the detach, then after the speed is measured:
    by default a load that starts just after the first on-phase."""

    def __init__(self, reads=(40, 3040)):
        self.reads = iter(reads)

    def __call__(self):
        return next(self.reads)


def test_an_on_phase_before_the_load_started_costs_no_off_phase(clock):
    window = Window(os.getpid(), 60.0, Control(stop=clock), "stopped", lambda: 0)
    cycles = DutyCycles(None, [], calibration=None, window=window, budget=0.10, rows_changed=_Rows())
    # the server's own threads hit a probe or two; no row changed
    first = {"on_s": 0.02, "probe_s": 3e-5, "calls": {0: 0, 1: 11}, "rows": 0, "row_s": 0.02, "row_calls": {0: 0}}
    t0 = clock.monotonic() - 0.1                        # attach, on-phase, detach: 0.1 s for 40 rows
    on_s, off_s, _, _ = cycles._pace(first, t0, 0, t0)
    assert first["lost_s"] is None and off_s < 0.01  # not 0.1 s lost: the load was getting under way


def test_an_on_phase_at_a_statements_start_costs_no_long_off_phase(clock):
    window = Window(os.getpid(), 60.0, Control(stop=clock), "stopped", lambda: 0)
    # a statement that opens its tables in the first on-phase (1 row in it), then writes 800,000 rows a second
    cycles = DutyCycles(None, [], calibration=None, window=window, budget=0.05, rows_changed=_Rows((300, 80_300)))
    first = {"on_s": 0.053, "probe_s": 3e-5, "calls": {0: 13}, "rows": 1, "row_s": 0.05, "row_calls": {0: 13}}
    t0 = clock.monotonic() - 0.17       # attach, on-phase, detach: 0.17 s for 300 rows
    on_s, off_s, _, _ = cycles._pace(first, t0, 0, t0)
    # 20 rows a second on, 800,000 off: no probe slows a load 40,000 times; paced on
    # that "loss" (0.17 s) the probes stayed off 0.7 s, the rest of a 1-s statement
    assert first["lost_s"] is None and off_s < 0.2
    # a cycle slowed 3x by its probes is a loss as before
    second = {"on_s": 0.05, "probe_s": 3e-3, "calls": {0: 13_000}, "rows": 13_000, "row_s": 0.05,
              "row_calls": {0: 13_000}}
    cycles.rows_changed = iter([100_000, 180_000]).__next__
    cycles._pace(second, clock.monotonic() - 0.1, 80_300, t0)
    assert second["lost_s"] is not None and second["lost_s"] > 0


def test_a_held_on_phase_is_paced_on_its_hold_not_on_the_statements_start(clock):
    window = Window(os.getpid(), 60.0, Control(stop=clock), "stopped", lambda: 0)
    # 800,000 rows a second unprobed: the statement opened its tables for 20 ms of the
    # on-phase (100 rows), then ran at 400,000 a second through the 30-ms hold
    cycles = DutyCycles(None, [], calibration=None, window=window, budget=0.05, rows_changed=_Rows((12_100, 92_100)))
    first = {"on_s": 0.053, "probe_s": 1e-3, "calls": {0: 6_000}, "rows": 12_000, "row_s": 0.03,
             "row_calls": {0: 6_000}, "held": True}
    t0 = clock.monotonic() - 0.09          # attach, on-phase, detach
    cycles._last_read = (t0, 100)          # the on-phase's reads saw the load running
    cycles._pace(first, t0, 0, t0)
    # the hold lost half its time: 0.045 s of the 0.09-s cycle; paced on the cycle's
    # rows (12,100 in 0.09 s) it would have been 0.075 s, the tables' opening counted
    assert first["lost_s"] == pytest.approx(0.045, rel=0.01)


def test_no_quiet_phase_before_half_a_second_of_ordinary_ones_saw_the_load(clock):
    window = Window(os.getpid(), 60.0, Control(stop=clock), "stopped", lambda: 0)
    cycles = DutyCycles(_Session(), [], None, window, 0.10, lambda: 0, quieted=[_Quieted()])
    cycles._ordinary_phases = 3                 # idle ones: the server changed no row in them
    assert cycles._quiet_due()                  # an idle server: quiet phases as ever
    cycles.load_span = duty.LoadSpan((0.0, 1000), (1.0, 1000 + 10))     # a few rows of the server's own: still idle
    assert cycles._quiet_due()
    cycles.load_span = duty.LoadSpan((0.0, 1000), (1.0, 1000 + 5000))   # then a statement starts
    assert not cycles._quiet_due()
    cycles.ordinary_phase_s = duty.ORDINARY_FIRST_S - 0.01
    assert not cycles._quiet_due()
    cycles.ordinary_phase_s = duty.ORDINARY_FIRST_S
    assert cycles._quiet_due()


class _Session:
    """The probes' session as the duty cycles drive it: counts that grow while attached."""

    def __init__(self):
        self.attached, self.log = True, []

    def attach_target(self):
        self.attached = True
        self.log.append("attach")

    def detach_target(self):
        self.attached = False
        self.log.append("detach")

    def start(self):
        pass

    def stop(self):
        pass

    def calls(self, indices):
        return {i: 0 for i in indices}

    def calls_and_time(self, indices):
        return {i: (0, 0) for i in indices}


class _Quieted:
    name = "cpu_profile"

    def __init__(self):
        self.quiet_now, self.switches = False, []

    def quiet(self, on):
        self.switches.append(on)
        self.quiet_now = on
        return True


def test_every_other_off_phase_is_quiet_and_its_rows_are_kept_apart(clock):
    window = Window(os.getpid(), 1.5, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731  a steady 20,000 rows/s
    quieted = _Quieted()
    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, rows, quieted=[quieted])
    cycles.run((t0, rows()))
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    assert len(offs) >= 4
    # the speed-measuring off-phase after the first cycle (ordinary), then
    # quiet and ordinary ones, half the off-time each
    assert not cycles.cycles[0]["off"][0]["quiet"]
    quiet_s = sum(o["s"] for o in offs if o["quiet"])
    assert 0.35 < quiet_s / sum(o["s"] for o in offs) < 0.65
    assert quieted.switches == [True, False] * sum(o["quiet"] for o in offs) and not quieted.quiet_now
    record = cycles.record(0.10)
    assert record["quieted"] == ["cpu_profile"] and record["quiet_rows"] > 0
    assert record["quiet_rows"] / record["quiet_s"] == pytest.approx(20_000, rel=0.1)
    assert record["off_rows"] == sum(o["rows"] for o in offs if not o["quiet"])
    assert record["quiet_share"] == 0.5
    # each quiet phase's second half, read at its middle: the load's speed once over the on-phase
    assert record["quiet_tail_rows"] / record["quiet_tail_s"] == pytest.approx(20_000, rel=0.1)
    assert 0.25 < record["quiet_tail_s"] / record["quiet_s"] <= 0.55


def test_the_quiet_half_the_load_ended_in_is_left_out():
    """Its rows over its seconds would be the load's speed and idle time
    together: the reference would come out slow, the slowdown below 1."""
    window = Window(os.getpid(), 1.0, Control(), "stopped", lambda: 0)
    cycles = DutyCycles(_Session(), [], None, window, 0.10, lambda: 0,
                        quieted=[_Quieted()])
    cycles._tails = [(10.0, 0.2, 4000), (11.0, 0.2, 4100), (12.0, 0.2, 900)]  # (end, seconds, rows)
    cycles.load_span = duty.LoadSpan((9.0, 0), (11.9, 9000))   # the last row moved inside the third
    assert cycles._tails_in_load() == (0.4, 8100)


def test_what_stays_on_costing_more_than_its_part_of_the_budget_gets_more_quiet_phases(clock):
    # 4 s: enough quiet phases paired with ordinary ones that one odd first phase cannot hide the lead
    window = Window(os.getpid(), 4.0, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    quieted = _Quieted()
    count, last = [0.0], [clock.monotonic()]

    def rows():  # 20,000 rows/s in the quiet phases, 16,000 with the always-on collectors on
        now = clock.monotonic()
        count[0] += (now - last[0]) * (20_000 if quieted.quiet_now else 16_000)
        last[0] = now
        return int(count[0])

    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, rows, quieted=[quieted])
    cycles.run((clock.monotonic(), rows()))
    record = cycles.record(0.10)
    # on in the ordinary phases they cost 25%: within the 5% left them only on a fifth of the off-time
    assert record["quiet_share"] == pytest.approx(0.8, abs=0.06)
    offs = [o for c in cycles.cycles[1:] for o in c.get("off", [])]
    quiet_s = sum(o["s"] for o in offs if o["quiet"])
    assert quiet_s / sum(o["s"] for o in offs) > 0.6


def _share_for(phases, phase_s=0.1):
    """The quiet share wanted after off-phases of these speeds, in order:
    ("q" or "o", rows/s), each phase_s long."""
    window = Window(os.getpid(), 1.0, Control(), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, lambda: 0, quieted=[_Quieted()])
    for kind, speed in phases:
        cycles._off_phase(int(speed * phase_s), phase_s, quiet=kind == "q")
    return cycles._wanted_quiet_share()


def alternate(quiet, ordinary):
    return [p for q, o in zip(quiet, ordinary) for p in (("o", o), ("q", q))] + [("o", ordinary[-1])]


def test_a_load_whose_speed_swings_keeps_half_the_off_time_quiet():
    """Statements with gaps between them: some phases see the load at full
    speed, others in a gap, whatever is on. The quiet ones 15% faster on
    average is then no cost of what stays on."""
    assert _share_for(alternate([30_000, 8_000, 29_000, 9_000], [7_000, 26_000, 6_000, 25_000])) == 0.5
    # the same lead, steady, is a cost: the quiet share grows
    assert _share_for(alternate([20_000, 20_010, 19_990, 20_000], [16_000, 16_010, 15_990, 16_000])) > 0.7
    # too few phases of a kind: as it was
    assert _share_for(alternate([20_000, 20_000], [16_000, 16_000])) == 0.5


def test_a_lead_held_through_a_change_of_speed_is_a_cost():
    """Two statements, one twice as fast as the other, each phase of the
    load 40% faster with nothing on: each quiet phase is held against its
    neighbours, so the change between statements hides nothing."""
    fast, slow = [50_000] * 4, [25_000] * 4
    quiet = [v * 1.4 for v in fast + slow]
    assert _share_for(alternate(quiet, fast + slow)) > 0.8


def test_the_time_before_the_load_starts_and_after_it_ends_is_no_load_time(clock):
    """A window opened 0.5 s before the load and left open 0.5 s after it,
    with a gap of 0.2 s in the middle: the span the load ran is what the
    window's rate is taken over; idle off-phases before and after it count
    in neither speed, the gap's do."""
    window = Window(os.getpid(), 2.2, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    t0 = clock.monotonic()

    def rows():  # 20,000 rows/s from 0.5 s to 1.7 s, but for 1.0-1.2 s
        t = clock.monotonic() - t0
        ran = max(0.0, min(t, 1.0) - 0.5) + max(0.0, min(t, 1.7) - 1.2)
        return int(ran * 20_000)

    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, rows, quieted=[_Quieted()])
    cycles.run((t0, rows()))
    record = cycles.record(0.10)
    assert 1.0 <= record["load_s"] <= 1.6                         # 1.2 s, to a phase either side
    assert record["load_rows"] == rows()                             # every row, all in the span
    assert record["quiet_s"] + record["off_s"] <= record["load_s"]  # no idle phase counted
    idle = [o for c in cycles.cycles for o in c.get("off", []) if o["rows"] == 0]
    assert sum(o["s"] for o in idle) > 0.4                          # there were some, before and after
    # the reference speed (the quiet phases', or the ordinary ones' where the load had no quiet
    # phase): near 20,000 less the gap's share
    kind = "quiet" if record["quiet_s"] else "off"
    assert record[f"{kind}_rows"] / record[f"{kind}_s"] > 12_000


class _Burst:
    name = "cpu_bursts"

    def __init__(self):
        self.on, self.switches = False, []

    def resume(self):
        self.on = True
        self.switches.append(True)

    def pause(self):
        self.on = False
        self.switches.append(False)


def bursting_cycles(rows, clock, burst_for=None, budget=0.10, seconds=1.5,
                    probes: _Session | None = None) -> tuple[DutyCycles, _Burst, _Quieted]:
    window = Window(os.getpid(), seconds, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    burst, quieted = _Burst(), _Quieted()
    cycles = DutyCycles(probes or _Session(), [], calibration, window, budget, rows, quieted=[quieted],
                        bursts=Bursts([burst], burst_for))
    return cycles, burst, quieted


def test_bursts_sample_the_ordinary_off_phases_and_never_a_quiet_one(clock):
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731
    cycles, burst, _ = bursting_cycles(rows, clock)
    cycles.run((t0, rows()))
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    assert any(o.get("burst") for o in offs) and not any(o.get("burst") and o["quiet"] for o in offs)
    # from the first paced ordinary off-phase (after the one measuring the
    # load's speed), as many rows as the others, which stay the speed the
    # cycles are paced against: under a steady load, about every other one
    ordinary = [o for o in offs[1:] if not o["quiet"]]
    flags = [bool(o.get("burst")) for o in ordinary]
    assert len(flags) >= 2 and flags[0] and not all(flags)
    burst_rows = sum(o["rows"] for o in ordinary if o.get("burst"))
    other_rows = sum(o["rows"] for o in offs if not o["quiet"] and not o.get("burst"))
    assert abs(burst_rows - other_rows) <= max(o["rows"] for o in ordinary)
    assert burst.switches == [True, False] * (len(burst.switches) // 2) and not burst.on
    record = cycles.record(0.10)
    assert record["bursts"] == ["cpu_bursts"]
    assert record["burst_rows"] == sum(o["rows"] for o in offs if o.get("burst"))
    assert record["burst_rows"] / record["burst_s"] == pytest.approx(20_000, rel=0.1)
    assert record["off_rows"] == sum(o["rows"] for o in offs if not o["quiet"] and not o.get("burst"))


def test_each_phase_is_timed_from_the_windows_opening(clock):
    """Where each on-phase and each part of the off-phases lay in the
    window, so that what was measured outside mysqlprobe (a server's
    counters, perf, bpftrace) can be cut to its quiet phases."""
    clock.now += 50.0
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731
    cycles, _, _ = bursting_cycles(rows, clock, seconds=3.0)
    cycles.run((t0, rows()))
    assert cycles.opened == t0 and cycles.cycles[0]["at_s"] == 0.0
    kinds = set()
    for cycle, following in zip(cycles.cycles, cycles.cycles[1:] + [None]):
        at = cycle["at_s"] + cycle["on_s"]                   # the simulated attach and detach take no time
        for part in cycle.get("off", []):
            assert part["at_s"] == pytest.approx(at, abs=1e-6)
            at += part["s"]
            kinds.add((part["quiet"], bool(part.get("burst"))))
        if following:
            assert following["at_s"] == pytest.approx(at, abs=1e-6)
    assert at <= clock.monotonic() - t0 + 1e-6
    assert {(True, False), (False, False), (False, True)} <= kinds   # quiet, ordinary and burst parts alike


def _costly_setup_load(clock, quieted: _Quieted, burst: _Burst):
    """20,000 rows/s in the quiet phases, 16,000 with what stays on on (a
    quarter slower), 19,000 in a quiet phase's burst (the sampler alone)."""
    count, last = [0.0], [clock.monotonic()]

    def rows():
        now = clock.monotonic()
        speed = 19_000 if quieted.quiet_now and burst.on else 20_000 if quieted.quiet_now else 16_000
        count[0] += (now - last[0]) * speed
        last[0] = now
        return int(count[0])
    return rows


def test_where_quiet_phases_take_most_of_the_off_time_some_open_with_a_burst(clock):
    """The ordinary phases alone would leave the bursts 1/10 of the off-time
    (one OLTP window: 2.4 s of 31, 16 samples of a lookup, a figure 1.7x the
    truth). Quiet phases make up the floor, in their first halves: their
    second halves stay the load's own speed, and P_S stays off throughout."""
    cycles, burst, quieted = bursting_cycles(None, clock, seconds=6.0)
    rows = _costly_setup_load(clock, quieted, burst)
    cycles.rows_changed = cycles._tracking(rows)
    cycles.run((clock.monotonic(), rows()))
    record = cycles.record(0.10)
    assert record["quiet_share"] == pytest.approx(0.8, abs=0.06)
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    opened = [o for o in offs if o["quiet"] and o.get("burst")]
    assert opened and all(o["s"] <= duty.BURST_MAX_S + 1e-9 for o in opened)
    assert all(o["quiet_share"] > 0.5 for o in opened)  # the share each was opened at
    # each one opens a quiet phase and the phase goes on quiet, unsampled
    for c in cycles.cycles:
        phase = c.get("off", [])
        for i, o in enumerate(phase):
            if o["quiet"] and o.get("burst"):
                assert i + 1 < len(phase) and phase[i + 1]["quiet"] and not phase[i + 1].get("burst")
                assert o["s"] <= phase[i + 1]["s"] + 1e-6      # within the first half
    spent = sum(o["s"] for o in offs if o["rows"])
    assert record["burst_s"] >= 0.9 * duty.BURST_FLOOR_SHARE * spent
    assert record["burst_s"] <= 1.5 * duty.BURST_FLOOR_SHARE * spent   # a floor, not more
    # the quieted collectors were off in the bursts too: their figures scale by those rows
    assert record["quiet_rows"] == sum(o["rows"] for o in offs if o["quiet"])
    # the second halves: the load's speed with nothing of ours on, sampler included
    assert record["quiet_tail_rows"] / record["quiet_tail_s"] == pytest.approx(20_000, rel=0.03)
    assert burst.switches == [True, False] * (len(burst.switches) // 2) and not burst.on
    assert not quieted.quiet_now


def test_a_quiet_phases_burst_counts_as_quiet_rows_and_never_as_a_quiet_speed():
    window = Window(os.getpid(), 1.0, Control(), "stopped", lambda: 0)
    cycles = DutyCycles(_Session(), [], None, window, 0.10, lambda: 0,
                        quieted=[_Quieted()], bursts=Bursts([_Burst()], None))
    cycles._off_phase(0, 0.2, quiet=True, burst=True)      # the load idle: like any quiet phase without rows
    assert cycles.quiet_s == 0 and cycles._idle_phases[-1][1:] == (0.2, True) and cycles.burst_s == 0.2
    cycles._off_phase(3000, 0.2, quiet=True, burst=True)
    assert (cycles.quiet_rows, cycles.quiet_s, cycles.burst_rows) == (3000, 0.2, 3000)
    cycles._off_phase(4000, 0.2, quiet=True, compared=False)  # the rest of that phase
    assert cycles.quiet_rows == 7000 and cycles._speeds == [] and cycles.quiet_phase_s == pytest.approx(0.4)


def test_at_an_even_quiet_share_no_quiet_phase_bursts(clock):
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731
    cycles, burst, _ = bursting_cycles(rows, clock, seconds=6.0)
    cycles.run((t0, rows()))
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    assert cycles.record(0.10)["quiet_share"] == 0.5
    assert any(o.get("burst") for o in offs) and not any(o.get("burst") and o["quiet"] for o in offs)


def test_a_burst_that_saw_the_load_before_it_got_going_is_made_up_by_the_next(clock):
    t0 = clock.monotonic()
    start = t0 + 0.5   # the load starts half a second into the window

    def rows():
        return int(max(clock.monotonic() - start, 0.0) * 20_000)

    cycles, burst, _ = bursting_cycles(rows, clock)
    cycles.run((t0, rows()))
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    record = cycles.record(0.10)
    # bursts went on until they had seen rows, then as many as the other ordinary phases
    assert record["burst_rows"] > 0
    other_rows = record["off_rows"]
    assert abs(record["burst_rows"] - other_rows) <= max(o["rows"] for o in offs if not o["quiet"])


def test_without_a_row_counter_bursts_keep_their_seconds(clock):
    cycles, burst, _ = bursting_cycles(lambda: None, clock)
    t0 = clock.monotonic()
    cycles.run((t0, None))
    record = cycles.record(0.10)
    assert record["burst_rows"] is None and record["burst_s"] > 0 and not burst.on
    # as many seconds as the other ordinary off-phases
    assert sum(burst.switches) >= 2


def test_while_no_short_function_was_called_the_bursts_take_the_first_half_second_only(clock):
    # a window of a second or two rests its figures per call on them; a long one pays no more
    from mysqlprobe.recorder.duty import ORDINARY_FIRST_S
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731
    cycles, burst, _ = bursting_cycles(rows, clock, burst_for={7}, seconds=6.0)   # probe 7 never called
    cycles.run((t0, rows()))
    record = cycles.record(0.10)
    assert 0 < record["burst_s"] <= ORDINARY_FIRST_S + 0.05 and not burst.on
    offs = [o for c in cycles.cycles for o in c.get("off", [])]
    assert offs[0].get("burst") or offs[1].get("burst")          # from the first off-phase on
    assert sum(o["s"] for o in offs if not o.get("burst")) > 4 * record["burst_s"]


class _SlowedLoad(_Session):
    """A load of `speed` rows a second that starts `starts_s` after the
    window opens (None: never) and runs `probed_share` as fast while the
    probes are attached; its rows counted as the simulated clock moves."""

    def __init__(self, clock, speed: float, starts_s: float | None, probed_share: float = 0.5,
                 ends_s: float = math.inf):
        super().__init__()
        self.clock, self.speed, self.probed_share = clock, speed, probed_share
        self.t0 = self.at = clock.monotonic()
        self.starts_s, self.ends_s, self.done = starts_s, ends_s, 0.0

    def _advance(self) -> None:
        now = self.clock.monotonic()
        if self.starts_s is not None:
            begun, until = max(self.at, self.t0 + self.starts_s), min(now, self.t0 + self.ends_s)
            if until > begun:
                self.done += (until - begun) * self.speed * (self.probed_share if self.attached else 1.0)
        self.at = now

    def attach_target(self):
        self._advance()
        super().attach_target()

    def detach_target(self):
        self._advance()
        super().detach_target()

    def rows(self) -> int:
        self._advance()
        return int(self.done)

    def unprobed_rows(self) -> float:
        """What the load would have done by now with nothing attached."""
        if self.starts_s is None:
            return 0.0
        return max(self.clock.monotonic() - self.t0 - self.starts_s, 0.0) * self.speed


def test_a_burst_samples_at_most_a_second_of_a_long_off_phase(clock):
    """At a 1% budget the off-phases last up to 2 s: each burst stops after
    BURST_MAX_S and the rest of its off-phase is an ordinary, unsampled one,
    whose speed the pacer then has."""
    load = _SlowedLoad(clock, 20_000, 0.0)
    cycles, burst, _ = bursting_cycles(load.rows, clock, budget=0.01, seconds=30.0, probes=load)
    cycles.run((clock.monotonic(), load.rows()))
    offs = [c.get("off", []) for c in cycles.cycles]
    bursting = [phase for phase in offs if any(o.get("burst") for o in phase)]
    assert len(bursting) >= 2
    for phase in bursting:   # (the first may open with the segment that measured the load's speed)
        (at,) = [i for i, o in enumerate(phase) if o.get("burst")]
        rest = phase[at + 1:]
        assert phase[at]["s"] <= duty.BURST_MAX_S + 1e-9
        assert rest and sum(o["s"] for o in rest) > 0.5          # the off-phase went on unsampled
    assert burst.switches == [True, False] * (len(burst.switches) // 2) and not burst.on
    record = cycles.record(0.01)
    assert record["burst_s"] <= len(bursting) * duty.BURST_MAX_S + 1e-9
    # the unsampled rest of the bursting phases counts as the load's own speed
    assert record["off_rows"] == sum(o["rows"] for phase in offs for o in phase if not o["quiet"] and not o.get("burst"))
    assert record["off_rows"] > record["burst_rows"] > 0


def test_where_the_probes_may_take_a_whole_on_phase_the_calls_high_end_is_open():
    """A function called millions of times a second, no row counter: by
    their calibration the probes took 70% of each on-phase, but a hit in
    the target may cost up to twice that (unmeasured in-situ factor), so
    the on-phases may have had no unprobed time to speak of, and as many
    calls per unprobed second as that allows. As measured on the
    known-cost fixture: 1.42x, 0.5% of the on-phase unprobed."""
    cycles = [(0.021, 0.0148, 13297), (0.0107, 0.0073, 6551), (0.0255, 0.0184, 16006)]
    narrow = estimate_total(cycles, 6.0, cost_uncertainty=0.10)
    est = estimate_total(cycles, 6.0, cost_uncertainty=0.10, in_situ_high=2.0)
    counted = sum(c for *_, c in cycles)
    truth = counted + counted / (0.005 * 0.0572) * (6.0 - 0.0572)
    assert narrow.high < truth <= est.high and est.low <= truth
    assert est.value == narrow.value and est.low == narrow.low   # the doubt is above only
    # where the probes take a few percent of an on-phase little changes
    cheap = [(0.05, 0.002, 1000 + i) for i in range(6)]
    assert estimate_total(cheap, 6.0, 0.10, 2.0).high < 1.2 * estimate_total(cheap, 6.0, 0.10).value


def test_the_first_cycles_attach_is_repaid_once_not_pooled():
    """The window's first cycle lost 60 ms around a 20-ms on-phase (its
    attach), the on-phase itself 5 ms: the next cycles are paced on the
    on-phase's rate, and the window rule still repays the 60 ms."""
    pacer = Pacer(0.10, opening_cycles=0)
    pacer.off_phase(12_500, 1.0)
    _, first_off = pacer.next_phases(0.02, 0.03, 0.060, 0.0, elapsed_s=0.03, signed_lost_s=0.060,
                                     in_phase=(0.005, 0.02))
    assert pacer.lost_per_on_s == pytest.approx(0.25) and pacer.lost_total_s == pytest.approx(0.060)
    assert first_off >= 0.060 * (1 + 0.05) / 0.05 - 0.03 - 0.05 - 0.01   # the window rule: repaid at once
    # the second cycle's loss is pooled as before
    pacer.next_phases(0.05, 0.06, 0.015, 0.0, elapsed_s=2.0, signed_lost_s=0.015, in_phase=(0.012, 0.05))
    assert pacer.lost_per_on_s == pytest.approx(max(0.015 / 0.05, 0.017 / 0.07))
    # without a measure inside its on-phase the first cycle's loss is all there is
    blind = Pacer(0.10, opening_cycles=0)
    blind.off_phase(12_500, 1.0)
    blind.next_phases(0.02, 0.03, 0.060, 0.0, elapsed_s=0.03, signed_lost_s=0.060)
    assert blind.lost_per_on_s == pytest.approx(3.0)


def _cycles_over(clock, starts_s: float | None, seconds: float = 1.5, budget: float = 0.10,
                 ends_s: float = math.inf) -> tuple[DutyCycles, _SlowedLoad]:
    """A window of `seconds` over a load of 200,000 rows a second that the
    probes slow 2x, starting starts_s after the window opened (and ending
    ends_s after it)."""
    window = Window(os.getpid(), seconds, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    load = _SlowedLoad(clock, 200_000, starts_s, ends_s=ends_s)
    cycles = DutyCycles(load, [], calibration, window, budget, load.rows)
    cycles.run((clock.monotonic(), load.rows()))
    return cycles, load


def _held_cycles(clock, starts_after_s: float | None, read_s: float = 0.0) -> list[dict]:
    """A 1.5-s window's cycles over a load of 200,000 rows/s that starts
    starts_after_s into the first on-phase (None: no load at all); each
    read of the rows takes read_s."""
    window = Window(os.getpid(), 1.5, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    t0 = clock.monotonic()

    def rows() -> int:
        clock.sleep(read_s)
        if starts_after_s is None:
            return 0
        return int(max(clock.monotonic() - t0 - starts_after_s, 0.0) * 200_000)
    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, rows)
    cycles.run((t0, rows()))
    return cycles.cycles


def test_an_on_phase_the_load_started_in_is_held_for_its_rows(clock):
    # the load starts 5 ms before the first on-phase would end: 1,000 rows in it
    cycles = _held_cycles(clock, 0.015)
    first = cycles[0]
    assert first["held"] and first["row_s"] == pytest.approx(duty.HOLD_S, abs=0.005)
    # calls per row over the hold's 30 ms of the load, not over the 5 ms before it
    assert first["rows"] == pytest.approx(200_000 * duty.HOLD_S, rel=0.1)
    assert first["on_s"] >= 0.02 + duty.HOLD_S
    # once the on-phases have counted HOLD_ROWS, none is held again
    assert not any("held" in c for c in cycles[1:])


def test_the_first_on_phase_to_see_the_load_is_held_however_many_rows_it_saw(clock):
    # the load starts 5 ms into the first on-phase (3,000 rows by its end, past
    # HOLD_ROWS) or just before it: its first read saw the load starting, its second
    # at speed, and the two do not share their offset from the calls
    for start in (0.005, -0.001):
        first = _held_cycles(clock, start)[0]
        assert first["held"] and first["row_s"] == pytest.approx(duty.HOLD_S, abs=0.005)


def test_a_hold_lasts_until_its_reads_are_narrow_against_it(clock):
    # reads 4 ms wide: 30 ms of hold would leave the rows anywhere in an eighth of it
    first = _held_cycles(clock, 0.034, read_s=0.004)[0]
    assert first["held"] and first["row_s"] >= 0.004 / duty.HOLD_READ_SHARE   # 0.1 s at least
    # and no longer than MAX_HOLD_S, however wide
    first = _held_cycles(clock, 0.07, read_s=0.012)[0]
    assert first["held"] and first["row_s"] <= duty.MAX_HOLD_S + duty.HOLD_S + 0.012 * reads.READ_TRIES


def test_a_wide_read_at_a_holds_start_gives_way_to_a_narrower_one(clock):
    # the read that opens the hold takes 13 ms (the server busy with clients
    # connecting), every later one 1 ms: the hold's span starts at a later read
    latency_reads = iter([0.001] * 2 + [0.013] * reads.READ_TRIES + [0.001] * 1000)
    window = Window(os.getpid(), 1.5, Control(stop=clock), "stopped", lambda: 0)
    calibration = SimpleNamespace(current=lambda: SimpleNamespace(classes={}, pair_of=lambda s: 0.0))
    t0 = clock.monotonic()

    def rows() -> int:
        clock.sleep(next(latency_reads))
        return int(max(clock.monotonic() - t0 - 0.01, 0.0) * 200_000)
    cycles = DutyCycles(_Session(), [], calibration, window, 0.10, rows)
    cycles.run((t0, rows()))
    first = cycles.cycles[0]
    assert first["held"] and max(first["read_s"]) <= 0.002
    assert first["row_s"] < duty.MAX_HOLD_S


def test_no_on_phase_is_held_without_a_load(clock):
    cycles = _held_cycles(clock, None)
    assert len(cycles) > 3 and not any("held" in c for c in cycles)


def test_a_window_over_a_load_that_starts_in_any_phase_keeps_the_budget(clock):
    # wherever the load starts against the cycles, the rows it lost over the window
    # stay within the budget (paced for half of it): the cost from outside
    for starts_s in (0.0, 0.005, 0.019, 0.05, 0.3, 1.0):
        cycles, load = _cycles_over(clock, starts_s, seconds=3.0, budget=0.05)
        slowdown = load.unprobed_rows() / load.rows()
        assert 1.0 < slowdown <= 1.05, (starts_s, slowdown)
        assert len(cycles.cycles) >= 2, starts_s


def test_an_idle_window_polls_with_its_probes_on_for_the_budgets_share_at_most(clock):
    # a window opened 8 s before its statement: cycled at the pacer's max coverage its probes
    # were on for a fifth of it; polling, they are on for at most the budget's share
    cycles, _ = _cycles_over(clock, None, seconds=8.0, budget=0.05)
    record = cycles.record(0.05)
    assert record["on_s"] <= 0.05 * 8.0 and record["cycles"] >= 8 * 2   # and still twice a second
    assert all(c["on_s"] <= 0.021 for c in cycles.cycles)


def test_the_off_phase_a_load_started_in_is_not_its_speed(clock):
    # the load starts 0.3 s in, inside an idle off-phase: that phase's rows (a third of
    # the load's rate) would put the probes' next losses at 0
    cycles, _ = _cycles_over(clock, 0.3, seconds=3.0, budget=0.05)
    first_loaded = next(c for c in cycles.cycles if c["rows"])
    # the probes halve the load's speed: half the on-phase lost, measured against 200,000 rows/s
    assert first_loaded["unprobed_rows_per_s"] == pytest.approx(200_000, rel=0.01)
    assert first_loaded["lost_s"] == pytest.approx(first_loaded["on_s"] / 2, rel=0.1)


def test_the_load_span_is_trimmed_to_where_its_first_and_last_rows_fell(clock):
    # a load from 1.23 s to 2.31 s of a 4-s window, both edges in off-phases: the reads
    # around each edge hold idle time, which the load's unprobed rate tells from its own
    cycles, _ = _cycles_over(clock, 1.23, seconds=4.0, budget=0.05, ends_s=2.31)
    record = cycles.record(0.05)
    start, end = (SpanEdge.of(record["load_edges"][k]) for k in ("start", "end"))
    assert not start.probed and not end.probed
    trimmed = record["load_s"] - start.idle_s(200_000) - end.idle_s(200_000)
    assert trimmed == pytest.approx(2.31 - 1.23, abs=0.005)
    assert record["load_s"] - (2.31 - 1.23) > 0.05                  # untrimmed: a phase's part off
    # an edge the probes were on in says less of where the load began: none of it is trimmed
    assert SpanEdge(0.1, 1000, probed=True).idle_s(200_000) == 0.0
    assert SpanEdge(0.1, 1000, probed=False).idle_s(200_000) == pytest.approx(0.095)
    # the window ending with the load running: no idle read after it, no end edge
    cycles, _ = _cycles_over(clock, 1.23, seconds=3.0, budget=0.05)
    assert cycles.record(0.05)["load_edges"]["end"] is None


def test_no_on_phase_measures_a_loss_without_a_load(clock):
    cycles, _ = _cycles_over(clock, None)
    assert len(cycles.cycles) > 3 and all(c.get("lost_s") is None for c in cycles.cycles)


def test_a_long_ordinary_off_phase_goes_quiet_for_its_rest(clock):
    # a short window's first off-phase, 2 s (its one cycle paid for most of it): its
    # first half second ordinary, then quiet, so the window has a quiet phase at all
    window = Window(os.getpid(), 60.0, Control(stop=clock), "stopped", lambda: 0)
    t0 = clock.monotonic()
    rows = lambda: int((clock.monotonic() - t0) * 20_000)  # noqa: E731
    quieted = _Quieted()
    cycles = DutyCycles(_Session(), [], None, window, 0.10, rows, quieted=[quieted])
    cycles._ordinary_phases, cycles.load_span = 1, duty.LoadSpan((0.0, 0), (1.0, 10_000))   # the load seen
    ended, quiet, _, tail, _ = cycles._ordinary(2.0, clock.monotonic(), (clock.monotonic(), rows()), burst=False)
    assert not ended and quiet and quieted.switches == [True] and tail is not None
    assert cycles.ordinary_phase_s == pytest.approx(duty.ORDINARY_FIRST_S)
    # a short one stays ordinary
    cycles = DutyCycles(_Session(), [], None, window, 0.10, rows, quieted=[_Quieted()])
    cycles._ordinary_phases, cycles.load_span = 1, duty.LoadSpan((0.0, 0), (1.0, 10_000))
    assert not cycles._ordinary(0.6, clock.monotonic(), (clock.monotonic(), rows()), burst=False)[1]


def test_one_cycles_count_has_the_doubt_of_where_its_rows_sit_in_their_reads():
    from mysqlprobe.analysis.profile import read_doubt_interval
    from mysqlprobe.analysis.sampling import Estimate
    from mysqlprobe.analysis.views import Cycle
    cycle = Cycle(on_s=0.02, probe_s=0.0, calls=(2000,), rows=2000, row_s=0.02, read_s=(0.001, 0.003))
    est = read_doubt_interval(Estimate(100_000.0, None, None), [cycle], 400_000.0, 2000)
    # reads 1 and 3 ms wide: 2 ms either way at 400,000 rows/s, 800 rows of the 2,000 counted
    assert (est.value, est.low, est.high) == (100_000.0, pytest.approx(60_000), pytest.approx(140_000))
    # never below what was counted
    assert read_doubt_interval(Estimate(2_100.0, None, None), [cycle], 400_000.0, 2000).low == 2000
    # two cycles have their own spread; without the load's rate there is no doubt to give
    assert read_doubt_interval(Estimate(1.0, None, None), [cycle, cycle], 4e5, 1).low is None
    assert read_doubt_interval(Estimate(1.0, None, None), [cycle], None, 1).low is None
