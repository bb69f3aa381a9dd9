"""Typed views of a capture's parts, as the Profile gives them to the
reporters (analysis/model.py): the target, the window, the probed
functions, how the probes ran and what the collectors cost. A reporter
reads these, not the document's dicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from mysqlprobe.analysis.per_call import PerCall
from mysqlprobe.catalog import family_name
from mysqlprobe.probes.histogram import Histogram


@dataclass(frozen=True, slots=True)
class Target:
    """The server the capture was taken of."""

    pid: int
    binary: str
    symbols: str
    family: str | None
    version: str | None
    build_id: str | None = None
    line: str | None = None       # the catalog's server line

    @classmethod
    def of(cls, target: dict[str, Any]) -> Target:
        server = target.get("server") or {}
        return cls(target["pid"], target["binary"], target.get("symbols") or "?", server.get("family"),
                   server.get("version"), target.get("build_id"), server.get("line"))

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
class Latency:
    """Calls' summed time and their histogram (ns)."""

    total_ns: int
    histogram: Histogram

    @classmethod
    def of(cls, record: dict[str, Any]) -> Latency:
        return cls(record["total_ns"], Histogram.of_record(record.get("histogram") or []))

    def figures(self, calls: int) -> dict[str, Any]:
        """The mean and percentiles `report --json` gives beside a record."""
        return {"mean_ns": self.total_ns / calls if calls else None, "percentiles_ns": self.histogram.percentiles()}


@dataclass(frozen=True, slots=True)
class PartitionLatency:
    """A probe's calls into one partition, corrected and raw."""

    id: int
    calls: int
    latency: Latency
    raw: Latency

    @classmethod
    def of(cls, record: dict[str, Any]) -> PartitionLatency:
        return cls(record["id"], record["calls"], Latency.of(record), Latency.of(record.get("raw", record)))


@dataclass(frozen=True, slots=True)
class CallerEdge:
    """A probe's calls on one thread under one probed caller (None: no
    probed function was running on the thread)."""

    tid: int
    parent: int | None
    calls: int
    total_ns: int        # corrected
    raw_total_ns: int

    @classmethod
    def of(cls, record: dict[str, Any]) -> CallerEdge:
        return cls(record["tid"], record.get("parent"), record["calls"], record["total_ns"],
                   record.get("raw_total_ns", record["total_ns"]))


# what schema 1 captures stored of a probe's derived figures: derived again
DERIVED_PROBE_FIELDS = ("estimated_calls", "mean_ns", "percentiles_ns", "overhead_ns", "threads")


@dataclass(frozen=True, slots=True)
class Probe:
    """One probed function and what the kernel counted of it: its calls,
    their latency (corrected for the probes' own cost, and raw), per
    partition and per (thread, probed caller); the calibrated cost of its
    probes; its calls' waits for a CPU (out of their latency)."""

    id: int
    stage: str                # its catalog stage, or probe:NAME for a --probe function
    name: str
    symbol: str
    mangled: str
    calls: int
    latency: Latency
    raw: Latency
    overhead_ns: float        # calls x the calibrated cost of a call's probes
    entry_class: str | None   # how its first instruction is taken (calibration's class)
    own_cost_ns: float
    pair_cost_ns: float
    partition_source: str | None
    partitions: tuple[PartitionLatency, ...]
    callers: tuple[CallerEdge, ...]
    cpu_wait_calls: int
    cpu_wait_ns: int
    nested_probe_hits: int    # other probes' hits inside its calls: it has probed callees
    recorded: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def of(cls, p: dict[str, Any]) -> Probe:
        recorded = {k: v for k, v in p.items() if k not in DERIVED_PROBE_FIELDS}
        entry = p.get("entry") or {}
        calls = p["calls"]
        overhead = p.get("overhead_ns")  # schema 1 kept it unrounded
        if overhead is None:
            overhead = round(calls * entry.get("pair_cost_ns", 0))
        waits = p.get("cpu_waits") or {}
        return cls(p["id"], p.get("stage") or f"probe:{p['name']}", p["name"], p["symbol"],
                   p.get("mangled") or p["symbol"], calls, Latency.of(p), Latency.of(p.get("raw", p)), overhead,
                   entry.get("class"), entry.get("own_cost_ns", 0.0), entry.get("pair_cost_ns", 0.0),
                   p.get("partition_source"), tuple(PartitionLatency.of(part) for part in p.get("partitions", [])),
                   tuple(CallerEdge.of(c) for c in p.get("callers", [])), waits.get("calls") or 0,
                   waits.get("total_ns") or 0, p.get("nested_probe_hits") or 0, recorded)

    @property
    def total_ns(self) -> int:
        return self.latency.total_ns

    @property
    def top_level(self) -> bool:
        """Called, and never under another probed function."""
        return bool(self.calls and self.callers) and all(c.parent is None for c in self.callers)

    def threads(self) -> list[dict[str, Any]]:
        """Per thread: the caller edges summed over the callers, largest first."""
        per: dict[int, list[int]] = {}
        for c in self.callers:
            t = per.setdefault(c.tid, [0, 0, 0])
            t[0] += c.calls
            t[1] += c.raw_total_ns
            t[2] += c.total_ns
        return [{"tid": tid, "calls": n, "total_ns": total, "raw_total_ns": raw}
                for tid, (n, raw, total) in sorted(per.items(), key=lambda kv: -kv[1][2])]

    def to_json(self) -> dict[str, Any]:
        """The recorded probe with its derived figures, as `report --json` gives it."""
        recorded = self.recorded
        return {**recorded, **self.latency.figures(self.calls),
                "raw": {**recorded["raw"], **self.raw.figures(self.calls)}, "overhead_ns": self.overhead_ns,
                "partitions": [{**rec, **part.latency.figures(part.calls), "raw": {**rec["raw"],
                                                                                  **part.raw.figures(part.calls)}}
                               for rec, part in zip(recorded.get("partitions", []), self.partitions)],
                "threads": self.threads()}


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
