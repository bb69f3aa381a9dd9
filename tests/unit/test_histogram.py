import pytest

from mysqlprobe.analysis import histogram as H

@pytest.mark.parametrize("value", [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 999, 1000, 1023, 1024,
                                   65535, 65536, 10**6, 10**9 + 7, 2**40 - 1])
def test_every_value_falls_inside_its_slot(value):
    low, high = H.slot_bounds(H.slot_of(value))
    assert low <= value < high


def test_slots_tile_the_line_without_gaps():
    for slot in range(H.NUM_SLOTS - 1):
        assert H.slot_bounds(slot)[1] == H.slot_bounds(slot + 1)[0]


def test_buckets_are_at_most_a_quarter_of_their_low_bound_wide():
    for slot in range(4, H.NUM_SLOTS):
        low, high = H.slot_bounds(slot)
        assert (high - low) / low <= 0.25


def test_huge_values_land_in_the_last_slot():
    assert H.slot_of(2**50) == H.NUM_SLOTS - 1


def test_percentiles_of_a_known_distribution():
    counts = [0] * H.NUM_SLOTS
    for v in range(1000, 2000):  # uniform 1000..1999 ns
        counts[H.slot_of(v)] += 1
    p50 = H.percentile(counts, 0.5)
    assert abs(p50 - 1500) / 1500 < 0.06
    assert H.percentile(counts, 0.0) >= 896  # inside the first bucket
    assert H.percentile([0] * H.NUM_SLOTS, 0.5) is None


def test_exact_small_values_are_exact():
    counts = [0] * H.NUM_SLOTS
    counts[H.slot_of(3)] = 10
    assert H.percentile(counts, 0.99) == 3.0


def test_buckets_round_trip_through_json_form():
    counts = [0] * H.NUM_SLOTS
    for v, n in ((5, 3), (700, 11), (123456, 2)):
        counts[H.slot_of(v)] += n
    rows = [{"low": b.low, "high": b.high, "count": b.count} for b in H.nonzero_buckets(counts)]
    assert H.counts_from_buckets(rows) == counts


def test_octaves_fold_sub_buckets_and_fill_gaps():
    counts = [0] * H.NUM_SLOTS
    counts[H.slot_of(1024)] += 2
    counts[H.slot_of(1900)] += 3   # same octave [1024, 2047]
    counts[H.slot_of(8000)] += 1   # two octaves up, with an empty one between
    assert H.octaves(counts) == [(1024, 2047, 5), (2048, 4095, 0), (4096, 8191, 1)]


def test_format_ns():
    assert H.format_ns(850) == "850ns"
    assert H.format_ns(12_300) == "12.3us"
    assert H.format_ns(955_000_000) == "955ms"
    assert H.format_ns(None) == "-"
    assert H.format_ns(-841_912) == "-842us"
