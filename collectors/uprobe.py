"""Uprobe latency collector: attaches probes/uprobe_latency.bpf.c to a list of
functions of one process and reads back, per probe, calls, total time, a
latency histogram, and the same per partition and per thread."""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field

from mysqlprobe import probes
from mysqlprobe.analysis.histogram import NUM_SLOTS
from mysqlprobe.catalog import PartitionSource
from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.symbols import ResolvedSymbol
from mysqlprobe.errors import BpfError, UsageError

# mirrors probes/uprobe_latency.h
MAX_PROBES = 1024
MAX_SLOTS = NUM_SLOTS
PART_NONE, PART_ARG_VALUE, PART_ARG_OUT_PTR = 0, 1, 2
COUNTERS = ("entries", "returns", "unmatched_returns", "lost_frames", "depth_overflow",
            "no_stack", "partition_read_errors")

_u64 = ctypes.c_uint64


class _ProbeStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("nested_hits", _u64), ("hist", _u64 * MAX_SLOTS)]


class _PartKey(ctypes.Structure):
    _fields_ = [("probe", ctypes.c_uint32), ("part", ctypes.c_uint32)]


class _PartStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("hist", _u64 * MAX_SLOTS)]


class _ThreadKey(ctypes.Structure):
    _fields_ = [("tid", ctypes.c_uint32), ("probe", ctypes.c_uint32)]


class _ThreadStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("first_ns", _u64), ("last_ns", _u64)]


@dataclass(frozen=True)
class ProbeSpec:
    """One function to time; index is its slot in the BPF maps."""

    index: int
    symbol: ResolvedSymbol
    stage: str | None = None
    partition: PartitionSource | None = None
    with_return: bool = True  # False: count entries only (calibration)

    @property
    def cookie(self) -> int:
        mode, arg = PART_NONE, 0
        if self.partition:
            mode = PART_ARG_VALUE if self.partition.kind == "arg" else PART_ARG_OUT_PTR
            arg = self.partition.arg
        return self.index | (mode << 16) | (arg << 24)


@dataclass
class PartCounts:
    calls: int
    total_ns: int
    hist: list[int]


@dataclass
class ThreadCounts:
    calls: int
    total_ns: int
    first_ns: int
    last_ns: int


@dataclass
class ProbeCounts:
    calls: int = 0
    total_ns: int = 0
    nested_hits: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * MAX_SLOTS)
    partitions: dict[int, PartCounts] = field(default_factory=dict)
    threads: dict[int, ThreadCounts] = field(default_factory=dict)


@dataclass
class Snapshot:
    probes: dict[int, ProbeCounts]
    counters: dict[str, int]


class UprobeSession:
    """Loads the latency program for one process and attaches it to specs.

    Everything is detached by close() / leaving the with-block; should the
    process die instead, the kernel drops the links with its descriptors."""

    def __init__(self, pid: int, binary: str, specs: list[ProbeSpec], verbose: bool = False):
        if len(specs) > MAX_PROBES:
            raise UsageError(f"{len(specs)} functions to probe; at most {MAX_PROBES} at once")
        self.pid = pid
        self.binary = binary
        self.specs = specs
        self.verbose = verbose
        self._obj: libbpf.BpfObject | None = None

    def open(self) -> "UprobeSession":
        rodata = struct.pack("<I", self.pid)
        self._obj = libbpf.BpfObject(probes.object_path("uprobe_latency"), rodata, self.verbose)
        try:
            entry = self._obj.program("probe_entry")
            ret = self._obj.program("probe_return")
            for spec in self.specs:
                # the return probe first: an entry without its return would
                # leave frames on the thread stacks while attaching
                if spec.with_return:
                    self._obj.attach_uprobe(ret, self.pid, self.binary, spec.symbol.offset, spec.cookie, True)
                self._obj.attach_uprobe(entry, self.pid, self.binary, spec.symbol.offset, spec.cookie, False)
            self._fds = {name: self._obj.map_fd(name)
                         for name in ("stats", "part_stats", "thread_stats", "counters", ".bss")}
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> "UprobeSession":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def attached(self) -> int:
        return self._obj.attached if self._obj else 0

    def _set_enabled(self, on: bool) -> None:
        # .bss holds one variable, `enabled`
        libbpf.update(self._fds[".bss"], ctypes.c_uint32(0), ctypes.c_uint32(1 if on else 0))

    def start(self) -> None:
        """Open the window: every probe counts from now on."""
        self._set_enabled(True)

    def stop(self) -> None:
        """Close the window at once for all probes; detaching can then take its time."""
        if self._obj:
            self._set_enabled(False)

    def detach(self) -> None:
        """Stop timing and remove the probes; the maps stay readable until close()."""
        if self._obj:
            self.stop()
            self._obj.detach_all()

    def close(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None

    def total_calls(self) -> int:
        fd = self._fds["stats"]
        value = _ProbeStats()
        total = 0
        for spec in self.specs:
            if libbpf.lookup(fd, ctypes.c_uint32(spec.index), value):
                total += value.calls
        return total

    def snapshot(self) -> Snapshot:
        if not self._obj:
            raise BpfError("the probes are closed")
        out: dict[int, ProbeCounts] = {}
        value = _ProbeStats()
        for spec in self.specs:
            if libbpf.lookup(self._fds["stats"], ctypes.c_uint32(spec.index), value):
                out[spec.index] = ProbeCounts(value.calls, value.total_ns, value.nested_hits, list(value.hist))
        part = _PartStats()
        for key in libbpf.keys(self._fds["part_stats"], _PartKey):
            if key.probe in out and libbpf.lookup(self._fds["part_stats"], key, part):
                out[key.probe].partitions[key.part] = PartCounts(part.calls, part.total_ns, list(part.hist))
        th = _ThreadStats()
        for key in libbpf.keys(self._fds["thread_stats"], _ThreadKey):
            if key.probe in out and libbpf.lookup(self._fds["thread_stats"], key, th):
                out[key.probe].threads[key.tid] = ThreadCounts(th.calls, th.total_ns, th.first_ns, th.last_ns)
        counters = {}
        c = ctypes.c_uint64()
        for i, name in enumerate(COUNTERS):
            counters[name] = c.value if libbpf.lookup(self._fds["counters"], ctypes.c_uint32(i), c) else 0
        return Snapshot(out, counters)
