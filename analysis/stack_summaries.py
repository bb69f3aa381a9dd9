"""Typed views of what the three stack collectors summarise in the
capture (its cpu_profile, off_cpu and io sections): the figures the
reports print beside the flame graphs. Read once from the document
(`of`), so no reporter reaches into it; what part of the window a
collector saw, and at what rate, is its StackSection's (views.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mysqlprobe.analysis.views import StackSection


def _dropped(section: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    return tuple((str(k), int(v)) for k, v in (section.get("dropped") or {}).items())


@dataclass(frozen=True, slots=True)
class SelfShare:
    """A function by how often it was on CPU itself (share) and on the stack (total_share)."""

    function: str
    share: float
    total_share: float | None = None


@dataclass(frozen=True, slots=True)
class CollectorSummary:
    """A collector's section: its status as recorded (None: no such
    section), and the section as the Profile's stacks view holds it."""

    status: str | None
    section: StackSection

    @property
    def collected(self) -> bool:
        return self.status == "collected"


@dataclass(frozen=True, slots=True)
class CpuSummary(CollectorSummary):
    """The CPU samples: how many, how taken, per thread and by function."""

    samples: int = 0
    event: str = "?"
    unwinding: str = "?"                        # how the stacks were walked, in words
    sampler: str | None = None                  # "bpf", else perf
    cpu_share: float | None = None              # of a CPU, the sampler's own
    command: str | None = None
    reason: str | None = None                   # why it did not collect
    threads: tuple[tuple[str, int], ...] = ()   # (thread, samples), most first
    top_self: tuple[SelfShare, ...] = ()
    stacks_file: str | None = None
    dropped: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, section: dict[str, Any] | None, view: StackSection) -> CpuSummary:
        s = section or {}
        return cls(s.get("status"), view, s.get("samples") or 0, s.get("event") or "?",
                   (s.get("unwinding") or {}).get("describe") or "?", s.get("sampler"), s.get("perf_cpu_share"),
                   s.get("command"), s.get("reason"),
                   tuple((t["thread"], t["samples"]) for t in s.get("threads") or ()),
                   tuple(SelfShare(r["function"], r["share"], r.get("total_share")) for r in s.get("top_self") or ()),
                   s.get("stacks_file"), _dropped(s))


@dataclass(frozen=True, slots=True)
class OffCpuSummary(CollectorSummary):
    """The traced switches: blocked and runnable time, per thread and by the function waited in."""

    blocked_s: float = 0.0
    waiting_for_cpu_s: float = 0.0
    switches: int = 0
    load_us: float | None = None                 # the load's threads' (None: a capture from before it)
    threads: tuple[tuple[str, float], ...] = ()  # (thread, us), most first
    top_self: tuple[tuple[str, float], ...] = ()  # (function, us)
    stacks_file: str | None = None
    dropped: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, section: dict[str, Any] | None, view: StackSection) -> OffCpuSummary:
        s = section or {}
        return cls(s.get("status"), view, s.get("blocked_s") or 0.0, s.get("waiting_for_cpu_s") or 0.0,
                   s.get("switches") or 0, s.get("load_us"), tuple((t["thread"], t["us"]) for t in s.get("threads") or ()),
                   tuple((r["function"], r["us"]) for r in s.get("top_self") or ()), s.get("stacks_file"),
                   _dropped(s))


@dataclass(frozen=True, slots=True)
class IoCall:
    call: str
    calls: int
    bytes: int
    s: float


@dataclass(frozen=True, slots=True)
class IoFile:
    file: str
    calls: int
    s: float
    read_bytes: int
    write_bytes: int
    syncs: int


@dataclass(frozen=True, slots=True)
class IoTotals:
    """I/O system calls of some threads: totals, by call and by file."""

    calls: int = 0
    bytes: int = 0
    s: float = 0.0
    errors: int = 0
    by_call: tuple[IoCall, ...] = ()
    by_file: tuple[IoFile, ...] = ()

    @classmethod
    def of(cls, t: dict[str, Any]) -> IoTotals:
        return cls(t.get("calls") or 0, t.get("bytes") or 0, t.get("s") or 0.0, t.get("errors") or 0,
                   tuple(IoCall(c["call"], c["calls"], c["bytes"], c["s"]) for c in t.get("by_call") or ()),
                   tuple(IoFile(f["file"], f["calls"], f["s"], f["read_bytes"], f["write_bytes"], f["syncs"])
                         for f in t.get("by_file") or ()))


@dataclass(frozen=True, slots=True)
class IoSummary(CollectorSummary):
    """The I/O system calls: all threads', and the load's threads' apart where the capture holds them."""

    every: IoTotals = IoTotals()
    load: IoTotals | None = None
    stacks_file: str | None = None
    bytes_file: str | None = None
    calls_file: str | None = None
    dropped: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, section: dict[str, Any] | None, view: StackSection) -> IoSummary:
        s = section or {}
        load = s.get("load")
        return cls(s.get("status"), view, IoTotals.of(s), IoTotals.of(load) if load else None,
                   s.get("stacks_file"), s.get("bytes_file"), s.get("calls_file"), _dropped(s))
