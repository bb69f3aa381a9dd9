"""The wall time per row a comparison explains, measured without the probes.

A probed run is slower than the load by the probes' own cost, and that
cost differs between server versions: a wall delta taken from probed runs
was 2.2-2.8x the real one between 10.1.23 and 10.2.11. So the delta comes
from runs of the same load with nothing attached (`mysqlprobe lab bench`
runs one before each profiled run and keeps its time in the capture's
workload.unprobed), as the difference of the two sides' means with a Welch
95% interval. Its verdict is a finding where that interval leaves out zero
or the two sides' own 95% intervals do not overlap; noise only where they
overlap and the delta's interval holds zero."""

from __future__ import annotations

from typing import Any

import math
import statistics
from dataclasses import dataclass

from mysqlprobe.analysis.sampling import t95

METHOD = ("unprobed runs: each side's load timed with nothing attached, interleaved with its profiled runs; "
          "difference of the means, Welch 95% interval")


@dataclass(frozen=True)
class Side:
    mean: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: list[float]) -> "Side":
        m = statistics.fmean(values)
        half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
        return cls(m, m - half, m + half, len(values))

    def to_json(self) -> dict[str, Any]:
        return {"mean": round(self.mean, 3), "ci95": [round(self.low, 3), round(self.high, 3)], "runs": self.runs}


@dataclass(frozen=True)
class Wall:
    a: Side
    b: Side
    delta: float           # ns per row, B - A
    low: float
    high: float

    @property
    def verdict(self) -> str:
        apart = self.a.high < self.b.low or self.b.high < self.a.low
        return "finding" if apart or self.low > 0 or self.high < 0 else "noise"

    @property
    def share(self) -> float:
        """The delta over A's time per row."""
        return self.delta / self.a.mean if self.a.mean else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"delta": round(self.delta, 3), "ci95": [round(self.low, 3), round(self.high, 3)],
                "verdict": self.verdict, "method": METHOD, "a": self.a.to_json(), "b": self.b.to_json()}


def unprobed_wall(a: list[float], b: list[float]) -> Wall | None:
    """From each side's unprobed ns per row (at least two runs a side), else None."""
    if len(a) < 2 or len(b) < 2:
        return None
    sa, sb = Side.of(a), Side.of(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    # Welch-Satterthwaite degrees of freedom
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0)) \
        if va + vb else len(a) + len(b) - 2
    half = t95(max(int(dof), 1)) * se
    delta = sb.mean - sa.mean
    return Wall(sa, sb, delta, delta - half, delta + half)
