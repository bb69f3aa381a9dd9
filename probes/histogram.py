"""The latency histogram of probes/histogram.h as one type, from the
kernel's slot counts to a capture's record and the reporters' percentiles.

Each power of two of nanoseconds is split into 4 linear sub-buckets, so a
bucket is at most 25% wide (log2-only histograms are 100% wide) and
percentiles read from it are within about 12% of the truth. Slots 0-3 hold
exactly 0, 1, 2 and 3 ns. A capture keeps the non-empty slots as
{low, high, count} records, low <= ns < high."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mysqlprobe.probes.abi import HIST_SUB_BITS, MAX_SLOTS, slot_bounds, slot_of

SUB = 1 << HIST_SUB_BITS
SCHEME = {"name": "log2-4sub", "unit": "ns",
          "note": "buckets are [low, high) ns; percentiles interpolate inside a bucket"}
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
_EMPTY = (0,) * MAX_SLOTS


@dataclass(frozen=True, slots=True)
class Bucket:
    low: int
    high: int
    count: int


@dataclass(frozen=True, slots=True)
class Histogram:
    """Calls per slot of the kernel's scheme."""

    counts: tuple[int, ...] = _EMPTY

    def __post_init__(self) -> None:
        if len(self.counts) != MAX_SLOTS:
            raise ValueError(f"a histogram has {MAX_SLOTS} slots, not {len(self.counts)}")

    @classmethod
    def of_slots(cls, counts: Iterable[int]) -> Histogram:
        """From the kernel's per-slot counts (a BPF map's array)."""
        return cls(tuple(int(c) for c in counts))

    @classmethod
    def of_values(cls, values: Iterable[int]) -> Histogram:
        """Each value (ns) counted once in the slot the kernel would put it in."""
        counts = [0] * MAX_SLOTS
        for v in values:
            counts[slot_of(v)] += 1
        return cls(tuple(counts))

    @classmethod
    def of_record(cls, record: Iterable[Mapping[str, int]]) -> Histogram:
        """From a capture's {low, high, count} records."""
        counts = [0] * MAX_SLOTS
        for b in record:
            counts[slot_of(b["low"])] += b["count"]
        return cls(tuple(counts))

    @classmethod
    def total(cls, histograms: Iterable[Histogram]) -> Histogram:
        out = cls()
        for h in histograms:
            out = out + h
        return out

    def __add__(self, other: Histogram) -> Histogram:
        return Histogram(tuple(a + b for a, b in zip(self.counts, other.counts)))

    @property
    def calls(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[Bucket]:
        """The non-empty slots."""
        return [Bucket(*slot_bounds(s), c) for s, c in enumerate(self.counts) if c]

    def to_record(self) -> list[dict[str, int]]:
        """As a capture keeps it."""
        return [{"low": b.low, "high": b.high, "count": b.count} for b in self.buckets()]

    def percentile(self, q: float) -> float | None:
        """Value below which a fraction q of the calls fall, interpolated
        linearly inside the bucket that holds it. None when empty."""
        total = self.calls
        if not total:
            return None
        rank, seen = q * total, 0
        for slot, c in enumerate(self.counts):
            if not c:
                continue
            if seen + c >= rank:
                low, high = slot_bounds(slot)
                if slot < SUB:
                    return float(low)
                return low + (high - low) * max(rank - seen, 0) / c
            seen += c
        return float(slot_bounds(max(i for i, c in enumerate(self.counts) if c))[1])

    def percentiles(self) -> dict[str, float | None]:
        return {name: self.percentile(q) for name, q in PERCENTILES}

    def octaves(self) -> list[tuple[int, int, int]]:
        """Folded into log2 rows (low, high_inclusive, count) from the first
        to the last non-empty one, as bcc and bpftrace print them."""
        rows: dict[int, int] = {}
        for slot, c in enumerate(self.counts):
            if c:
                k = slot_bounds(slot)[0].bit_length()  # 0 -> 0, [2^(k-1), 2^k) -> k
                rows[k] = rows.get(k, 0) + c
        if not rows:
            return []
        return [(0 if k == 0 else 1 << (k - 1), 0 if k == 0 else (1 << k) - 1, rows.get(k, 0))
                for k in range(min(rows), max(rows) + 1)]
