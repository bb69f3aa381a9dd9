"""A figure over one side's repeats, and a change between two sides:
the terms compare and its drill-down share."""

from __future__ import annotations

from typing import Any, Callable

from statistics import median

from mysqlprobe.analysis.histogram import format_ns
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """A figure over a side's repeats: median and half the min-max range."""
    median: float
    spread: float
    runs: int

    @classmethod
    def of(cls, values: list[float]) -> "Figure":
        return cls(median(values), (max(values) - min(values)) / 2 if len(values) > 1 else 0.0, len(values))

    def to_json(self) -> dict[str, Any]:
        return {"median": round(self.median, 3), "spread": round(self.spread, 3), "runs": self.runs}


def figure_of(runs: list[Any], get: Callable[[Any], float]) -> Figure:
    return Figure.of([get(r) for r in runs])


@dataclass
class Change:
    name: str
    kind: str          # "total", "stage", "function", "ps_stage", "ps_wait"
    a: Figure
    b: Figure

    @property
    def delta(self) -> float:
        return self.b.median - self.a.median

    @property
    def noise(self) -> float:
        """What the runs' own spread allows; unknown (nan) with one run a side."""
        if self.a.runs < 2 or self.b.runs < 2:
            return float("nan")
        return self.a.spread + self.b.spread

    @property
    def verdict(self) -> str:
        n = self.noise
        if n != n:  # nan
            return "single run"
        return "noise" if abs(self.delta) <= n else "finding"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "a": self.a.to_json(), "b": self.b.to_json(),
                "delta": round(self.delta, 3), "verdict": self.verdict}


def ns_text(v: float) -> str:
    return ("-" if v < 0 else "") + format_ns(abs(v)) if v == v else "?"


def signed_ns(v: float) -> str:
    return ("+" if v >= 0 else "") + ns_text(v)
