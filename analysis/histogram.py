"""Latency histograms and durations as the text reports print them: the
log2 picture bcc and bpftrace draw (sub-buckets folded into octaves) and
short human durations. The histogram itself is probes/histogram.py's."""

from __future__ import annotations

import math

from mysqlprobe.probes.histogram import Histogram


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


def render_ascii(histogram: Histogram, width: int = 30, indent: str = "  ") -> list[str]:
    rows = histogram.octaves()
    if not rows:
        return [f"{indent}(no calls)"]
    peak = max(c for _, _, c in rows) or 1
    lines = [f"{indent}{'ns':>21} : {'count':<9} distribution"]
    for low, high, c in rows:
        bar = "*" * round(width * c / peak)
        if high == 0:   # calls the probes' correction took below a nanosecond: not a time a call took
            lines.append(f"{indent}{'under 1ns':>21}: {c:<9} |{bar:<{width}}| (corrected below the probes' resolution)")
            continue
        lines.append(f"{indent}{low:>10} -> {high:<10}: {c:<9} |{bar:<{width}}|")
    return lines
