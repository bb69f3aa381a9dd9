"""Latency histograms as data: the bucket scheme of probes/uprobe_latency.h.

Each power of two of nanoseconds is split into 4 linear sub-buckets, so a
bucket is at most 25% wide (log2-only histograms are 100% wide) and
percentiles read from it are within about 12% of the truth. Slots 0-3 hold
exactly 0, 1, 2 and 3 ns. The text report folds sub-buckets back into
octaves for the familiar log2 picture."""

from __future__ import annotations

import math

from typing import Any, Iterable, Sequence

from mysqlprobe.probes.abi import HIST_SUB_BITS as SUB_BITS
from mysqlprobe.probes.abi import MAX_SLOTS as NUM_SLOTS
from mysqlprobe.probes.abi import slot_bounds, slot_of  # noqa: F401  (the kernel's slots, one source)
from dataclasses import dataclass

SUB = 1 << SUB_BITS
SCHEME = "log2-4sub"


@dataclass(frozen=True)
class Bucket:
    low: int
    high: int
    count: int


def nonzero_buckets(counts: Sequence[int]) -> list[Bucket]:
    return [Bucket(*slot_bounds(s), c) for s, c in enumerate(counts) if c]


def counts_from_buckets(buckets: Iterable[dict[str, Any] | Bucket]) -> list[int]:
    counts = [0] * NUM_SLOTS
    for b in buckets:
        low, count = (b["low"], b["count"]) if isinstance(b, dict) else (b.low, b.count)
        counts[slot_of(low)] += count
    return counts


def merge(*histograms: Sequence[int]) -> list[int]:
    out = [0] * NUM_SLOTS
    for h in histograms:
        for i, c in enumerate(h):
            out[i] += c
    return out


def percentile(counts: Sequence[int], q: float) -> float | None:
    """Value below which a fraction q of the calls fall, interpolated linearly
    inside the bucket that holds it. None for an empty histogram."""
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    seen = 0
    for slot, c in enumerate(counts):
        if not c:
            continue
        if seen + c >= rank:
            low, high = slot_bounds(slot)
            if slot < SUB:
                return float(low)
            return low + (high - low) * max(rank - seen, 0) / c
        seen += c
    low, high = slot_bounds(max(i for i, c in enumerate(counts) if c))
    return float(high)


PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def percentiles(counts: Sequence[int]) -> dict[str, float | None]:
    return {name: percentile(counts, q) for name, q in PERCENTILES}


def octaves(counts: Sequence[int]) -> list[tuple[int, int, int]]:
    """Fold into log2 rows (low, high_inclusive, count) from the first to the
    last non-empty one, as bcc and bpftrace print them."""
    rows: dict[int, int] = {}
    for slot, c in enumerate(counts):
        if c:
            low, _ = slot_bounds(slot)
            k = low.bit_length()  # 0 -> 0, [2^(k-1), 2^k) -> k
            rows[k] = rows.get(k, 0) + c
    if not rows:
        return []
    out = []
    for k in range(min(rows), max(rows) + 1):
        low = 0 if k == 0 else 1 << (k - 1)
        high = 0 if k == 0 else (1 << k) - 1
        out.append((low, high, rows.get(k, 0)))
    return out


def _in_unit(ns: float) -> tuple[float, str]:
    """A duration in the largest unit it reaches one of: (value, unit)."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return ns / scale, unit
    return ns, "ns"


def format_ns(ns: float | None) -> str:
    """Short human duration: 850ns, 12.3us, 4.56ms, 7.89s."""
    if ns is None:
        return "-"
    if ns < 0:  # e.g. a corrected exclusive time within the calibration's noise
        return "-" + format_ns(-ns)
    v, unit = _in_unit(ns)
    return f"{v:.3g}{unit}" if unit != "ns" and v < 100 else f"{v:.0f}{unit}"


def upper_ns(ns: float) -> str:
    """A bound's duration: two significant digits, rounded up (45.9ms -> 46ms)."""
    v, unit = _in_unit(ns)
    step = 10 ** (math.floor(math.log10(v)) - 1) if v >= 1 else 0.1
    step = max(step, 1.0) if unit == "ns" else step   # no fraction of a ns
    v = math.ceil(v / step - 1e-9) * step
    return f"{v:.0f}{unit}" if v >= 10 or unit == "ns" else f"{v:.1f}{unit}"


def render_ascii(counts: Sequence[int], width: int = 30, indent: str = "  ") -> list[str]:
    rows = octaves(counts)
    if not rows:
        return [f"{indent}(no calls)"]
    peak = max(c for _, _, c in rows) or 1
    lines = [f"{indent}{'ns':>21} : {'count':<9} distribution"]
    for low, high, c in rows:
        bar = "*" * round(width * c / peak)
        lines.append(f"{indent}{low:>10} -> {high:<10}: {c:<9} |{bar:<{width}}|")
    return lines
