"""A process's code in memory against its executable's file: what a uprobe
left behind changes. The kernel writes a probe's int3 into the process's
copy of the page and must put the original byte back when the probe goes;
one it misses kills the server (SIGTRAP) at the next call. Read-only.

The file is read as it is on disk, past the page cache, where the
filesystem allows (O_DIRECT): an int3 that reached the cached page itself
would be in memory and in a cached read alike, and a comparison of the two
would pass. The cached copy is checked against the disk too: every process
that maps the file from then on would run the breakpoint."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from mysqlprobe.collectors.target.addresses import file_mappings
from dataclasses import dataclass

# typing is not imported at run time: a guard waits on two CPUs and imports no more than it needs
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INT3 = 0xCC
BLOCK = 1 << 20
DIRECT_ALIGN = 4096  # O_DIRECT offsets, lengths and buffers: a page covers any block size


class DiskReader:
    """Reads a file as stored on disk, bypassing the page cache where the
    filesystem allows O_DIRECT (ext4, xfs), else through it (tmpfs, some
    overlays): `uncached` says which. Clean pages, as an executable's are,
    are read from the device."""

    def __init__(self, path: str):
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            self.uncached = True
        except OSError:
            self._fd = os.open(path, os.O_RDONLY)
            self.uncached = False
        self._buffer: mmap.mmap | None = None

    def read(self, offset: int, length: int) -> bytes:
        if not self.uncached:
            return os.pread(self._fd, length, offset)
        start = offset - offset % DIRECT_ALIGN
        size = -(-(offset + length - start) // DIRECT_ALIGN) * DIRECT_ALIGN
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
        got = os.preadv(self._fd, [memoryview(self._buffer)[:size]], start)
        return bytes(self._buffer[offset - start:min(offset - start + length, got)])

    def close(self) -> None:
        os.close(self._fd)
        if self._buffer is not None:
            self._buffer.close()

    def __enter__(self) -> "DiskReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class CodeChanges:
    pid: int
    bytes_checked: int
    differing: tuple[int, ...]  # file offsets whose byte in memory is not the file's
    int3: tuple[int, ...]       # of them, those holding an int3
    # file offsets whose byte in the page cache is not the disk's (an int3
    # there is in every process that maps the file)
    cache_differing: tuple[int, ...] = ()
    uncached: bool = False      # the file was read past the page cache

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "bytes_checked": self.bytes_checked, "bytes_differing": len(self.differing),
                "int3_left": len(self.int3), "int3_at": [hex(o) for o in self.int3],
                "compared_with": "disk" if self.uncached else "page cache",
                "page_cache_differing": len(self.cache_differing),
                "page_cache_differing_at": [hex(o) for o in self.cache_differing]}


def executable_mappings(pid: int, exe: str) -> list[tuple[int, int, int]]:
    """(start, end, file offset) of each executable mapping of exe."""
    return [(m.start, m.end, m.offset) for m in file_mappings(Path(f"/proc/{pid}/maps").read_text()) if m.path == exe]


def _differences(a: bytes, b: bytes, base: int) -> list[int]:
    return [] if a == b else [base + i for i, (x, y) in enumerate(zip(a, b)) if x != y]


def code_changes(pid: int) -> CodeChanges:
    """Compare every executable mapping of the process's own binary with the
    file on disk, and the file's cached pages with the disk, a block at a
    time; only blocks that differ are looked at byte by byte."""
    exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    checked, differing, int3, cache_differing = 0, [], [], []
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem, open(f"/proc/{pid}/exe", "rb") as cached, \
            DiskReader(f"/proc/{pid}/exe") as disk:
        for start, end, offset in executable_mappings(pid, exe):
            for at in range(0, end - start, BLOCK):
                on_disk = disk.read(offset + at, min(BLOCK, end - start - at))
                mem.seek(start + at)
                in_memory = mem.read(len(on_disk))
                checked += len(on_disk)
                changed = _differences(in_memory, on_disk, offset + at)
                differing += changed
                int3 += [o for o in changed if in_memory[o - offset - at] == INT3]
                if disk.uncached:
                    cached.seek(offset + at)
                    cache_differing += _differences(cached.read(len(on_disk)), on_disk, offset + at)
    return CodeChanges(pid, checked, tuple(differing), tuple(int3), tuple(cache_differing), disk.uncached)
