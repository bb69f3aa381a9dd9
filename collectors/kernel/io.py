"""The target's I/O system calls: per thread and user stack, each call's
count, bytes and time, with its file descriptor named (tablespace, log and
partition files by name), from the sys_enter/sys_exit tracepoints in BPF
(probes/io.bpf.c). Folded three ways: microseconds in the calls, bytes
they moved, and calls."""

from __future__ import annotations

from collections.abc import Callable

from typing import Any

import ctypes
import os
import time
from collections import defaultdict

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import CollectorUnavailable, Facts, Phases, Section
from mysqlprobe.collectors.kernel.phased import PhasedBpfCollector, PhasedPrograms
from mysqlprobe.collectors.cpu.perf import KERNEL_SUFFIX, fold_samples
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import is_connection_stack
from mysqlprobe.probes import abi
from mysqlprobe.probes.abi import InCall, IoKey, IoValue, OpenedKey, Path
from dataclasses import dataclass

IO_FILE = "io.folded"            # microseconds in the calls
IO_BYTES_FILE = "io_bytes.folded"
IO_CALLS_FILE = "io_calls.folded"

SYSCALLS = {0: "read", 1: "write", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev",
            74: "fsync", 75: "fdatasync", 208: "io_getevents",
            209: "io_submit", 277: "sync_file_range", 285: "fallocate", 295: "preadv", 296: "pwritev",
            327: "preadv2", 328: "pwritev2", 333: "io_pgetevents", 426: "io_uring_enter"}
OPENS = {2, 85, 257, 437}   # open, creat, openat, openat2: they name descriptors, not I/O
# struct iocb's aio_lio_opcode (linux/aio_abi.h)
IOCB_OPS = {0: "pread", 1: "pwrite", 2: "fsync", 3: "fdsync", 5: "poll", 6: "noop", 7: "preadv", 8: "pwritev"}
READS = {"read", "pread64", "readv", "preadv", "preadv2", "aio pread", "aio preadv"}
WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2", "aio pwrite", "aio pwritev"}
SYNCS = {"fsync", "fdatasync", "sync_file_range", "aio fsync", "aio fdsync"}
TOP_FILES = 20


def call_name(call: int) -> str:
    if call >= abi.IOCB_OP_BASE:
        op = call - abi.IOCB_OP_BASE
        return f"aio {IOCB_OPS.get(op, op)}"
    return SYSCALLS.get(call, f"syscall {call}")


def direction(name: str) -> str:
    return "read" if name in READS else "write" if name in WRITES else "sync" if name in SYNCS else "other"


@dataclass
class IoRecord:
    """I/O system calls of one thread, call and file, with one user stack."""

    tid: int
    user: list[int]       # addresses, leaf first; empty when the stack could not be taken
    call: str
    fd: int
    gen: int              # the fd's open in the window (0: opened before the phase)
    calls: int
    bytes: int
    ns: int
    errors: int


class IoSession(PhasedPrograms):
    """The sys_enter/sys_exit programs for one process."""

    object_name = "io"
    programs = ("on_enter", "on_exit")
    what = "the sys_enter and sys_exit tracepoints"
    maps = (".bss", "io", "stacks", "recovered", "dropped", "in_calls", "fd_gen", "opened")

    def start(self) -> None:
        # an open between phases was not seen: its descriptor is named from
        # /proc, not from an older open's path
        for fd in libbpf.keys(self._fds["fd_gen"], ctypes.c_int32):
            libbpf.delete(self._fds["fd_gen"], fd)
        super().start()

    def __init__(self, pid: int, verbose: bool = False):
        super().__init__(pid, verbose)
        self.cut: dict[tuple[Any, ...], list[int]] = {}   # IoKey fields -> [calls, ns] of calls open at a phase's end

    def stop(self) -> None:
        super().stop()
        self._drain_open_calls(time.monotonic_ns())   # bpf_ktime_get_ns's clock

    def _drain_open_calls(self, now_ns: int) -> None:
        """A call still open when the phase ends counts up to the end (its
        bytes unknown); its exit, in a later phase, finds nothing."""
        c = InCall()
        for tid in libbpf.keys(self._fds["in_calls"], ctypes.c_uint32):
            if libbpf.lookup(self._fds["in_calls"], tid, c) and now_ns > c.ts and c.call not in OPENS:
                first = c.iocb[0] if c.iocbs else None
                key = (tid.value, c.ustack, abi.IOCB_OP_BASE + first.op if first else c.call,
                       first.fd if first else c.fd, first.gen if first else c.gen, c.ucopied)
                acc = self.cut.setdefault(key, [0, 0])
                acc[0] += 1
                acc[1] += now_ns - c.ts
            libbpf.delete(self._fds["in_calls"], tid)

    def records(self) -> list[IoRecord]:
        totals = {k: [calls, 0, ns, 0] for k, (calls, ns) in self.cut.items()}
        value = IoValue()
        for key in libbpf.keys(self._fds["io"], IoKey):
            if libbpf.lookup(self._fds["io"], key, value) and value.calls:
                acc = totals.setdefault((key.tid, key.ustack, key.call, key.fd, key.gen, key.ucopied), [0, 0, 0, 0])
                for i, v in enumerate((value.calls, value.bytes, value.ns, value.errors)):
                    acc[i] += v
        return [IoRecord(tid, self._kept(ustack, ucopied), call_name(call), fd, gen, calls, nbytes, ns, errors)
                for (tid, ustack, call, fd, gen, ucopied), (calls, nbytes, ns, errors) in totals.items()]

    def opened(self) -> dict[tuple[int, int], str]:
        """(fd, generation) -> the path it was opened by, for opens in the phases."""
        path, out = Path(), {}
        for key in libbpf.keys(self._fds["opened"], OpenedKey):
            if libbpf.lookup(self._fds["opened"], key, path):
                out[(key.fd, key.gen)] = path.name.decode(errors="replace")
        return out


def open_files(pid: int) -> dict[int, str]:
    """The process's file descriptors and what they name, now."""
    out: dict[int, str] = {}
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        try:
            out[int(name)] = os.readlink(f"{base}/{name}")
        except (OSError, ValueError):
            pass   # closed meanwhile
    return out


def file_label(target: str | None, fd: int) -> str:
    """A short name: a table's file with its database directory
    (test/t1#P#p0.ibd), a socket, a pipe, an anonymous inode's kind."""
    if fd < 0:   # io_getevents: waits for any completion of the context
        return "(async completions)"
    if target is None:
        return f"fd {fd} (closed)"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return target[len("anon_inode:"):].strip("[]")
    if target.startswith("/"):
        parts = target.removesuffix(" (deleted)").rstrip("/").split("/")
        return "/".join(parts[-2:])
    return target


class FdNames:
    """What each descriptor named: the path of its open when the programs
    saw it, else what /proc showed at the window's start or at collection
    (a file opened in an off-phase and closed before the end shows as
    closed)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.at_start: dict[int, str] = {}
        self.at_end: dict[int, str] = {}
        self.opened: dict[tuple[int, int], str] = {}
        self.cwd = "/"

    def snapshot_start(self) -> None:
        self.at_start = open_files(self.pid)
        try:
            self.cwd = os.readlink(f"/proc/{self.pid}/cwd")
        except OSError:
            pass

    def label(self, fd: int, gen: int = 0) -> str:
        path = self.opened.get((fd, gen)) if gen else None
        if path:   # as /proc names it: relative opens are the server's directory's (AT_FDCWD)
            path = os.path.normpath(os.path.join(self.cwd, path))
        return file_label(path or self.at_end.get(fd) or self.at_start.get(fd), fd)


def fold_io(records: list[IoRecord], user_name: Callable[[int], str], labels: Callable[[int, int], str],
            comms: dict[int, str], process_comm: str,
            thread_names: dict[int, str]) -> dict[str, Folded]:
    """Three folded stacks (us, bytes, calls): the thread's name, its user
    frames, the system call (a kernel frame) and the file it touched."""
    samples: dict[str, list[Any]] = {IO_FILE: [], IO_BYTES_FILE: [], IO_CALLS_FILE: []}
    for r in records:
        frames = [user_name(a) for a in reversed(r.user)] + [r.call + KERNEL_SUFFIX, f"[{labels(r.fd, r.gen)}]"]
        comm = comms.get(r.tid, process_comm)
        for file, weight in ((IO_FILE, round(r.ns / 1000)), (IO_BYTES_FILE, r.bytes), (IO_CALLS_FILE, r.calls)):
            if weight > 0:
                samples[file].append((comm, r.tid, frames, weight))
    return {file: fold_samples(s, thread_names) for file, s in samples.items()}


def connection_records(records: list[IoRecord], user_name: Callable[[int], str], thread_names: dict[int, str], comms: dict[int, str],
                       process_comm: str) -> list[IoRecord]:
    """The client connections' calls: the load's, not the background threads' own."""
    return [r for r in records if is_connection_stack(";".join(
        [thread_names.get(r.tid) or comms.get(r.tid, process_comm)] + [user_name(a) for a in reversed(r.user)]))]


def summarize(records: list[IoRecord], labels: Callable[[int, int], str]) -> dict[str, Any]:
    """Totals, per call and per file (the top ones by time)."""
    totals = {"calls": 0, "bytes": 0, "ns": 0, "errors": 0}
    by_call: dict[str, dict[str, Any]] = defaultdict(lambda: dict[str, Any].fromkeys(("calls", "bytes", "ns", "errors"), 0))
    by_file: dict[str, dict[str, Any]] = defaultdict(lambda: dict[str, Any].fromkeys(
        ("calls", "ns", "read_bytes", "write_bytes", "syncs"), 0))
    for r in records:
        for acc in (totals, by_call[r.call]):
            acc["calls"] += r.calls
            acc["bytes"] += r.bytes
            acc["ns"] += r.ns
            acc["errors"] += r.errors
        f = by_file[labels(r.fd, r.gen)]
        f["calls"] += r.calls
        f["ns"] += r.ns
        way = direction(r.call)
        if way in ("read", "write"):
            f[f"{way}_bytes"] += r.bytes
        elif way == "sync":
            f["syncs"] += r.calls

    def seconds(d: dict[str, Any]) -> dict[str, Any]:
        ns = d.pop("ns")
        return {**d, "s": round(ns / 1e9, 6)}

    files = sorted(by_file.items(), key=lambda kv: -kv[1]["ns"])
    return {"calls": totals["calls"], "bytes": totals["bytes"], "s": round(totals["ns"] / 1e9, 6),
            "errors": totals["errors"],
            "by_call": [{"call": c, **seconds(v)} for c, v in sorted(by_call.items(), key=lambda kv: -kv[1]["ns"])],
            "by_file": [{"file": name, **seconds(v)} for name, v in files[:TOP_FILES]],
            "files_left_out": max(0, len(files) - TOP_FILES)}


class IoCollector(PhasedBpfCollector[IoSession]):
    """The target's I/O system calls in the window (in the on-phases when
    paced: each call costs the two programs' runs)."""

    name = "io"
    optional = True
    # its BPF object loads first in prepare, while a perf record starts
    phases = Phases(begin=60, prepare=10, start=55, collect=80)
    session_type = IoSession
    label, lacks = "I/O system calls", "I/O stacks"

    def __init__(self, pid: int, verbose: bool = False):
        super().__init__(pid, verbose)
        self.fds = FdNames(pid)

    def begin(self) -> None:
        if os.uname().machine == "x86_64":  # else prepare() says why not
            super().begin()

    def prepare(self) -> None:
        machine = os.uname().machine
        if machine != "x86_64":
            note = f"I/O system calls: the probes know x86-64's system calls, not {machine}'s"
            raise CollectorUnavailable(note, note)
        super().prepare()

    def start(self) -> None:
        self.fds.snapshot_start()
        super().start()

    def collect(self, facts: Facts) -> Section:
        self.fds.at_end = open_files(self.pid)
        self.fds.opened = self.live.opened()
        records = self.live.records()
        user = self._user_names((a for r in records for a in r.user), facts)
        folded = fold_io(records, user, self.fds.label, facts.comms, facts.process_comm, facts.thread_names)
        load = connection_records(records, user, facts.thread_names, facts.comms, facts.process_comm)
        record = {"status": "collected", **summarize(records, self.fds.label),
                  "load": summarize(load, self.fds.label),
                  "dropped": self.live.dropped(abi.IO_DROPPED),
                  **({"on_s": round(self.on_s, 6)} if self.paced else {})}
        fields = {IO_FILE: "stacks_file", IO_BYTES_FILE: "bytes_file", IO_CALLS_FILE: "calls_file"}
        return Section(self.name, {self.name: record}, list(self.notes), self._cost(),
                       {file: (fields[file], f) for file, f in folded.items() if f.stacks})
