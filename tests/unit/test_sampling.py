import pytest

from mysqlprobe.analysis.sampling import duty_for_budget, estimate_total, t95


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


def test_duty_for_budget():
    assert duty_for_budget(0, 0.2, 0.1) == 1.0                  # nothing probed was called
    assert duty_for_budget(0.1e9, 0.2, 0.1) == pytest.approx(0.2)  # probes take half the on-time
    assert duty_for_budget(0.01e9, 0.2, 0.1) == 1.0             # 5% while on: within the budget all along


def test_t_quantiles():
    assert t95(1) == pytest.approx(12.706)
    assert t95(1000) == 1.96


def test_doubt_on_the_probe_cost_widens_the_interval_most_when_probes_dominate():
    light = [(0.2, 0.02, 1000), (0.2, 0.02, 1000), (0.2, 0.02, 1000)]
    heavy = [(0.2, 0.15, 1000), (0.2, 0.15, 1000), (0.2, 0.15, 1000)]
    width = lambda e: (e.high - e.low) / e.value  # noqa: E731
    assert width(estimate_total(light, 10.0)) == 0
    assert 0 < width(estimate_total(light, 10.0, 0.2)) < width(estimate_total(heavy, 10.0, 0.2))
