"""A process's code in memory against its executable's file: what a uprobe
left behind changes. The kernel writes a probe's int3 into the process's
copy of the page and must put the original byte back when the probe goes;
one it misses kills the server (SIGTRAP) at the next call. Read-only."""

from __future__ import annotations

import os
from pathlib import Path

from mysqlprobe.collectors.addresses import file_mappings
from mysqlprobe.records import record

INT3 = 0xCC
BLOCK = 1 << 20


@record(frozen=True)
class CodeChanges:
    pid: int
    bytes_checked: int
    differing: tuple[int, ...]  # file offsets whose byte in memory is not the file's
    int3: tuple[int, ...]       # of them, those holding an int3

    def as_dict(self) -> dict:
        return {"pid": self.pid, "bytes_checked": self.bytes_checked, "bytes_differing": len(self.differing),
                "int3_left": len(self.int3), "int3_at": [hex(o) for o in self.int3]}


def executable_mappings(pid: int, exe: str) -> list[tuple[int, int, int]]:
    """(start, end, file offset) of each executable mapping of exe."""
    return [(m.start, m.end, m.offset) for m in file_mappings(Path(f"/proc/{pid}/maps").read_text()) if m.path == exe]


def code_changes(pid: int) -> CodeChanges:
    """Compare every executable mapping of the process's own binary with the
    file, a block at a time; only blocks that differ are looked at byte by byte."""
    exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    checked, differing, int3 = 0, [], []
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem, open(f"/proc/{pid}/exe", "rb") as f:
        for start, end, offset in executable_mappings(pid, exe):
            for at in range(0, end - start, BLOCK):
                f.seek(offset + at)
                on_disk = f.read(min(BLOCK, end - start - at))
                mem.seek(start + at)
                in_memory = mem.read(len(on_disk))
                checked += len(on_disk)
                if in_memory == on_disk:
                    continue
                for i, (a, b) in enumerate(zip(in_memory, on_disk)):
                    if a != b:
                        differing.append(offset + at + i)
                        if a == INT3:
                            int3.append(offset + at + i)
    return CodeChanges(pid, checked, tuple(differing), tuple(int3))
