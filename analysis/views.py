"""Typed views of a capture's parts, as the Profile gives them to the
reporters (analysis/model.py): the target, the window and what the
collectors cost. A reporter reads these, not the document's dicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from mysqlprobe.analysis.per_call import PerCall
from mysqlprobe.catalog import family_name


@dataclass(frozen=True, slots=True)
class Target:
    """The server the capture was taken of."""

    pid: int
    binary: str
    symbols: str
    family: str | None
    version: str | None
    build_id: str | None = None

    @classmethod
    def of(cls, target: dict[str, Any]) -> Target:
        server = target.get("server") or {}
        return cls(target["pid"], target["binary"], target.get("symbols") or "?", server.get("family"),
                   server.get("version"), target.get("build_id"))

    @property
    def server(self) -> str:
        """'MariaDB 10.2.11', as the reports name it."""
        return f"{family_name(self.family)} {self.version or '?'}"


@dataclass(frozen=True, slots=True)
class Window:
    """When the probes were on the target, and what the server did meanwhile."""

    start: str
    duration_s: float
    ended_by: str
    requested_s: float | None = None
    rows_changed: int | None = None     # the server's rows written, updated or deleted
    rows_counter: str | None = None     # what rows_changed sums (or memory:VARIABLE)
    own_cpu_s: float | None = None      # mysqlprobe's own process over the window

    @classmethod
    def of(cls, window: dict[str, Any]) -> Window:
        return cls(window.get("start") or "?", window["duration_s"], window.get("ended_by") or "?",
                   window.get("requested_s"), window.get("rows_changed"), window.get("rows_counter"),
                   window.get("own_cpu_s"))

    @property
    def duration_ns(self) -> float:
        return self.duration_s * 1e9

    @property
    def start_ns(self) -> int:
        """The window's opening, ns since the epoch (0: not known)."""
        try:
            return int(datetime.fromisoformat(self.start.replace("Z", "+00:00")).timestamp() * 1e9)
        except ValueError:
            return 0


@dataclass(frozen=True, slots=True)
class Sampling:
    """How the probes ran: every call counted ("exact"), or duty cycles
    ("sampled": the cycles, their on-time, the budget they kept to, the
    span the load ran in and the collectors quieted in the quiet phases)."""

    mode: str
    cycles: int = 0
    on_s: float = 0.0
    overhead_budget: float | None = None
    load_s: float | None = None         # from the row counter's first move to its last
    load_rows: int | None = None
    quieted: tuple[str, ...] = ()

    @classmethod
    def of(cls, sampling: dict[str, Any] | None) -> Sampling:
        s = sampling or {}
        if s.get("mode") != "sampled":
            return cls("exact")
        return cls("sampled", s.get("cycles") or 0, s.get("on_s") or 0.0, s.get("overhead_budget"),
                   s.get("load_s"), s.get("load_rows"), tuple(s.get("quieted") or ()))

    @property
    def sampled(self) -> bool:
        return self.mode == "sampled"


@dataclass(frozen=True, slots=True)
class Overhead:
    """What the collectors cost the load: the probes' calibrated cost, the
    slowdown the duty cycles measured (None: not measured) and what each
    collector measured itself to cost."""

    estimated_ns: float
    share_of_window: float | None
    measured_slowdown: float | None
    measured_against: str | None       # "quiet", "quiet_tail", "off" or None
    phase_slowdown: float | None
    standing_slowdown: float | None
    standing_cpu_s: float | None
    always_on_slowdown: float | None
    estimated_slowdown: float | None
    by_collector: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = "probe hits x calibrated cost per hit: thread time the probes added"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StageFigure:
    """What every reporter prints of a stage (analysis/figures.py): calls
    (estimated in sampled mode, with their interval), those the probes
    counted, the window's total and share, the mean per call as its
    interval allows ("<X": a bound) and the percentiles of the calls timed
    ("-": none), mark "*" where they are within the probes' doubt."""

    stage: str
    calls: float
    calls_low: float | None
    calls_high: float | None
    counted: int
    total_ns: float
    total_bound: bool
    share: float | None
    mean_ns: float | None
    mean: str
    per_call: PerCall
    mark: str
    p50: str
    p90: str
    p99: str
