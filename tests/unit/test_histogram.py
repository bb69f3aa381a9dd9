"""The one histogram type (probes/histogram.py): the kernel's slots,
a capture's records, percentiles and the octaves the text report draws."""

import pytest

from mysqlprobe.analysis import histogram as H
from mysqlprobe.probes.abi import MAX_SLOTS, slot_bounds, slot_of
from mysqlprobe.probes.histogram import Histogram


@pytest.mark.parametrize("value", [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 999, 1000, 1023, 1024,
                                   65535, 65536, 10**6, 10**9 + 7, 2**40 - 1])
def test_every_value_falls_inside_its_slot(value):
    low, high = slot_bounds(slot_of(value))
    assert low <= value < high


def test_slots_tile_the_line_without_gaps():
    for slot in range(MAX_SLOTS - 1):
        assert slot_bounds(slot)[1] == slot_bounds(slot + 1)[0]


def test_buckets_are_at_most_a_quarter_of_their_low_bound_wide():
    for slot in range(4, MAX_SLOTS):
        low, high = slot_bounds(slot)
        assert (high - low) / low <= 0.25


def test_huge_values_land_in_the_last_slot():
    assert slot_of(2**50) == MAX_SLOTS - 1


def test_percentiles_of_a_known_distribution():
    h = Histogram.of_values(range(1000, 2000))  # uniform 1000..1999 ns
    assert abs(h.percentile(0.5) - 1500) / 1500 < 0.06
    assert h.percentile(0.0) >= 896  # inside the first bucket
    assert Histogram().percentile(0.5) is None
    assert set(h.percentiles()) == {"p50", "p90", "p99"}


def test_exact_small_values_are_exact():
    assert Histogram.of_values([3] * 10).percentile(0.99) == 3.0


def test_records_round_trip_and_keep_only_non_empty_slots():
    h = Histogram.of_values([5] * 3 + [700] * 11 + [123456] * 2)
    record = h.to_record()
    assert [r["count"] for r in record] == [3, 11, 2]
    assert all(r["low"] <= v < r["high"] for r, v in zip(record, (5, 700, 123456)))
    assert Histogram.of_record(record) == h
    assert Histogram.of_slots(h.counts) == h and h.calls == 16


def test_histograms_add_slot_by_slot():
    a, b = Histogram.of_values([10, 2000]), Histogram.of_values([2000, 9000])
    assert a + b == Histogram.of_values([10, 2000, 2000, 9000])
    assert Histogram.total([a, b, Histogram()]) == a + b


def test_a_histogram_has_the_kernels_slots():
    with pytest.raises(ValueError):
        Histogram((1, 2, 3))


def test_octaves_fold_sub_buckets_and_fill_gaps():
    # 1024 and 1900 share an octave; two octaves up, with an empty one between
    h = Histogram.of_values([1024] * 2 + [1900] * 3 + [8000])
    assert h.octaves() == [(1024, 2047, 5), (2048, 4095, 0), (4096, 8191, 1)]
    assert H.render_ascii(Histogram()) == ["  (no calls)"]
    assert len(H.render_ascii(h)) == 1 + 3


def test_format_ns():
    assert H.format_ns(850) == "850ns"
    assert H.format_ns(12_300) == "12.3us"
    assert H.format_ns(955_000_000) == "955ms"
    assert H.format_ns(None) == "-"
    assert H.format_ns(-841_912) == "-842us"


def test_calls_corrected_below_a_nanosecond_are_not_printed_as_taking_0ns():
    """A bucket '0 -> 0 : 304' said 304 calls took no time; they are calls the
    probes' correction took below its resolution, and the picture says so."""
    from mysqlprobe.analysis.histogram import render_ascii
    from mysqlprobe.probes.histogram import MAX_SLOTS, Histogram
    counts = [0] * MAX_SLOTS
    counts[0], counts[40] = 304, 10
    lines = render_ascii(Histogram.of_slots(counts))
    assert not any("0 -> 0" in line for line in lines)
    assert any("under 1ns" in line and "304" in line for line in lines)
