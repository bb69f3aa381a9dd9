"""Breakpoints the kernel left in a process's code, and their removal.

A uprobe is removed by the task that drops its link. When that task has a
SIGKILL pending (mysqlprobe killed with -9 while it attached or detached
its probes), the kernel cannot write the original byte back and keeps the
uprobe ("failed to unregister, leaking uprobe" in its log): the int3
stays in the server's code, and every call of that function traps into
the kernel from then on, until the server restarts. Nothing is probed any
more, so nothing shows it but the server's slowness.

Registering a uprobe at the same place and dropping it again, from a task
with no signal pending, has the kernel take the byte back out (a place
another tool still probes keeps its breakpoint: the kernel removes one
only when no consumer wants it). A perf event of the uprobe PMU does both
without a BPF program.

The guard (collectors/safety/breakpoint_guard.py, started by guard_process.py)
is started before the first probe goes on, with the places on stdin; it
waits for "done" on stdin, and on end of file without it (mysqlprobe
died) waits for mysqlprobe to be gone and removes what was left."""

from __future__ import annotations

from collections.abc import Iterable

import ctypes
import os
import struct
import threading
from pathlib import Path

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.target.addresses import Mapping, file_mappings
from mysqlprobe.collectors.safety.codecheck import DiskReader
from mysqlprobe.collectors.target.elf import entry_offset
from mysqlprobe.collectors.safety.guard_process import GuardProcess
from mysqlprobe.errors import BpfError, TargetError

# typing is not imported at run time: a guard waits on two CPUs and imports no more than it needs
TYPE_CHECKING = False
if TYPE_CHECKING:
    from mysqlprobe.collectors.uprobes.session import ProbeSpec

INT3 = 0xCC
UPROBE_PMU_TYPE = Path("/sys/bus/event_source/devices/uprobe/type")
CLOSERS = 64                    # threads dropping the registrations at once


def _same_file(a: str, b: str) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _code_mappings(pid: int, binary: str) -> list[Mapping]:
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    return [m for m in file_mappings(maps) if _same_file(f"/proc/{pid}/root{m.path}", binary)]


def left_breakpoints(pid: int, binary: str, offsets: list[int]) -> list[int]:
    """The file offsets of binary where the process's code holds an int3
    that the file does not (a probe on now, or one the kernel left)."""
    mappings = _code_mappings(pid, binary)
    out = []
    # the file's byte as on disk: one the page cache holds would hide an int3 that reached it
    with DiskReader(binary) as f, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for offset in sorted(set(offsets)):
            m = next((m for m in mappings if m.offset <= offset < m.offset + m.end - m.start), None)
            if m is None:
                continue
            on_disk = f.read(offset, 1)
            mem.seek(m.start + offset - m.offset)
            try:
                in_memory = mem.read(1)
            except OSError:
                continue
            if in_memory == bytes([INT3]) and on_disk != in_memory:
                out.append(offset)
    return out


def reset_breakpoints(pid: int, binary: str, offsets: list[int]) -> None:
    """Register a uprobe of this process at each offset and drop it: the
    kernel puts back the byte of every breakpoint no one else wants. One
    uprobe_multi link of an empty program does all at once; where the
    kernel has none (before 6.6), a perf event each."""
    try:
        program = libbpf.load_empty_uprobe_program()
    except BpfError:
        return _reset_by_perf_events(pid, binary, offsets)
    try:
        os.close(libbpf.uprobe_multi_link(program, pid, binary, offsets, [0] * len(offsets)))
    except BpfError:
        return _reset_by_perf_events(pid, binary, offsets)
    finally:
        os.close(program)


def _reset_by_perf_events(pid: int, binary: str, offsets: list[int]) -> None:
    """As reset_breakpoints, by perf events of the uprobe PMU. The drops
    run side by side, though the kernel takes them one at a time (about
    90 ms each)."""
    pmu = int(UPROBE_PMU_TYPE.read_text())
    path = ctypes.create_string_buffer(binary.encode())
    fds = []
    try:
        for offset in offsets:
            attr = (ctypes.c_uint8 * 128)()
            struct.pack_into("<II", attr, 0, pmu, libbpf.PERF_ATTR_SIZE)
            struct.pack_into("<Q", attr, 40, libbpf.PERF_FLAG_DISABLED)
            struct.pack_into("<QQ", attr, 56, ctypes.addressof(path), offset)
            fds.append(libbpf.perf_event_open(attr, pid))
    finally:
        for chunk in range(0, len(fds), CLOSERS):
            closers = [threading.Thread(target=os.close, args=(fd,)) for fd in fds[chunk:chunk + CLOSERS]]
            for t in closers:
                t.start()
            for t in closers:
                t.join()


def remove_left_breakpoints(pid: int, binary: str, offsets: list[int]) -> tuple[int, int]:
    """(breakpoints found where the probes were, of them still there after
    the reset): run only where no probe of this mysqlprobe is on."""
    found = left_breakpoints(pid, binary, offsets)
    if not found:
        return 0, 0
    reset_breakpoints(pid, binary, found)
    return len(found), len(left_breakpoints(pid, binary, found))


def sentinel_offset(binary: str) -> list[int]:
    """Where the session's sentinel goes (UprobeSession._attach_sentinel):
    the entry point's offset, or none where it cannot be read."""
    try:
        return [entry_offset(binary)]
    except (TargetError, ValueError):
        return []


def probed_offsets(specs: Iterable[ProbeSpec]) -> list[int]:
    """The file offsets where the probes of these specs put their breakpoints."""
    out: set[int] = set()
    for s in specs:
        if s.usdt:
            out.update(offset for offset, _ref in (*s.usdt.starts, *s.usdt.dones))
        else:
            out.add(s.attach_offset)
    return sorted(out)


class BreakpointGuard(GuardProcess):
    """The guard process of one target's probes (see the module's text)."""

    def __init__(self, pid: int, binary: str, offsets: list[int]):
        super().__init__("mysqlprobe.collectors.safety.breakpoint_guard",
                         {"pid": pid, "binary": binary, "offsets": offsets, "holder": os.getpid()})

    def done(self) -> None:
        """The probes are off, taken off by this process: nothing for the guard to do."""
        self.finish(done=True)
