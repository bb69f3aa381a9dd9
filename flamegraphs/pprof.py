"""Folded stacks as a pprof profile (profile.proto, gzipped): what `go tool
pprof`, Pyroscope and Parca read.

The stacks' root frame is the thread's name: it becomes the sample's
`thread` label, not a frame. Frames marked `_[k]` are the kernel's and go
to a `[kernel.kallsyms]` mapping; the rest to the server binary's, with
its build-id, so a profile store can tell builds apart. The frames are
already symbolized: each function gets one location, and the mappings say
so (has_functions), so no reader tries to symbolize them again."""

from __future__ import annotations


import gzip

from mysqlprobe.flamegraphs.folded import Folded
from dataclasses import dataclass

KERNEL_SUFFIX = "_[k]"
KERNEL_MAPPING = "[kernel.kallsyms]"


@dataclass(frozen=True)
class SampleKind:
    """What one folded count stands for: `samples` of `period` ns of CPU
    (perf), or `unit_ns` nanoseconds of off-CPU time (the off-CPU stacks)."""
    name: str           # the value's type: cpu, off_cpu
    count_ns: int       # nanoseconds per folded count
    counted: bool       # also give the count itself (CPU samples), as pprof's CPU profiles do


def cpu_kind(frequency_hz: float) -> SampleKind:
    """CPU samples at a rate: each worth its period in ns, and counted too."""
    return SampleKind("cpu", round(1e9 / frequency_hz), True)


OFF_CPU_US = SampleKind("off_cpu", 1000, False)
DEFAULT_HZ = 99  # perf's rate where a capture does not say (mysqlprobe's default)


def capture_kind(frequency_hz: float | None, off_cpu: bool) -> SampleKind:
    """What a capture's folded counts stand for: off-CPU microseconds, or CPU
    samples at its rate (frequency_hz: the capture's CPU samples', if known)."""
    return OFF_CPU_US if off_cpu else cpu_kind(frequency_hz or DEFAULT_HZ)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Message:
    """A protobuf message being written: varint and length-delimited fields."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def number(self, field: int, value: int) -> "_Message":
        if value:
            self.buf += _varint(field << 3) + _varint(value)
        return self

    def data(self, field: int, data: bytes) -> "_Message":
        self.buf += _varint(field << 3 | 2) + _varint(len(data)) + data
        return self

    def packed(self, field: int, values: list[int]) -> "_Message":
        return self.data(field, b"".join(_varint(v) for v in values)) if values else self

    def message(self, field: int, m: "_Message") -> "_Message":
        return self.data(field, bytes(m.buf))


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        return self.index.setdefault(s, len(self.index))


def encode(folded: Folded, kind: SampleKind, binary: str, build_id: str | None = None,
           time_ns: int = 0, duration_ns: int = 0, comments: tuple[str, ...] = ()) -> bytes:
    """The gzipped profile of the folded stacks."""
    s = _Strings()
    prof = _Message()
    value_types = ([("samples", "count")] if kind.counted else []) + [(kind.name, "nanoseconds")]
    for name, unit in value_types:
        prof.message(1, _Message().number(1, s(name)).number(2, s(unit)))
    mappings = {binary: 1, KERNEL_MAPPING: 2}
    functions: dict[tuple[str, int], int] = {}   # (name, mapping) -> function and location id
    for stack, count in sorted(folded.stacks.items()):
        frames = stack.split(";")
        thread, frames = (frames[0], frames[1:]) if len(frames) > 1 else ("", frames)
        ids = []
        for frame in reversed(frames):             # pprof: leaf first
            kernel = frame.endswith(KERNEL_SUFFIX)
            key = (frame.removesuffix(KERNEL_SUFFIX), mappings[KERNEL_MAPPING if kernel else binary])
            ids.append(functions.setdefault(key, len(functions) + 1))
        values = ([count] if kind.counted else []) + [count * kind.count_ns]
        sample = _Message().packed(1, ids).packed(2, values)
        if thread:
            sample.message(3, _Message().number(1, s("thread")).number(2, s(thread)))
        prof.message(2, sample)
    for filename, mapping_id in mappings.items():
        m = _Message().number(1, mapping_id).number(5, s(filename)).number(7, 1)   # 7: has_functions
        if mapping_id == 1 and build_id:
            m.number(6, s(build_id))
        prof.message(3, m)
    for (_name, mapping_id), fid in functions.items():
        prof.message(4, _Message().number(1, fid).number(2, mapping_id).message(4, _Message().number(1, fid)))
    for (name, _), fid in functions.items():
        prof.message(5, _Message().number(1, fid).number(2, s(name)).number(3, s(name)))
    prof.number(9, time_ns).number(10, duration_ns)
    prof.message(11, _Message().number(1, s(kind.name)).number(2, s("nanoseconds")))
    prof.number(12, kind.count_ns)
    prof.packed(13, [s(c) for c in comments])
    prof.number(14, s(kind.name))
    for text in s.index:                           # last: every string is in it by now
        prof.data(6, text.encode())
    return gzip.compress(bytes(prof.buf), mtime=0)
