"""The load's progress read from the target's memory: an integer variable
the program counts its work in (MariaDB's and MySQL's global_query_id
goes up by one a statement), read through /proc/PID/mem. It costs the
target nothing, and stands for a server's rows changed where there is no
connection to ask them from, or no server at all: the duty cycles then
measure calls per unit of it, the load's speed with the probes off, and
what a probe hit costs in situ, as they do against the rows."""

from __future__ import annotations

import os

from mysqlprobe.collectors.target.addresses import file_mappings
from mysqlprobe.collectors.target.elf import Segment, data_symbol
from mysqlprobe.errors import TargetError, UsageError

PREFIX = "memory:"  # window.rows_counter of a counter read from memory


def load_bias(pid: int, exe: str, segments: list[Segment]) -> int:
    """What the process added to the file's addresses: where the mapping of
    its first page lies against the address the file gives that page."""
    first = min(s.vaddr for s in segments if s.offset == 0) & ~0xFFF
    with open(f"/proc/{pid}/maps") as f:
        maps_text = f.read()
    for m in file_mappings(maps_text, executable=False):
        if m.offset == 0 and m.path == exe:
            return m.start - first
    raise TargetError(f"PID {pid}: {exe} is not mapped")


def counter_symbol(symbols: str, exe: str, name: str) -> tuple[int, int]:
    """(address in the file, size) of the integer variable `name`; a usage
    error where the binary has no such variable of 4 or 8 bytes."""
    found = data_symbol(symbols, name)
    if found is None:
        raise UsageError(f"--progress-counter {name}: no such variable in {exe}'s symbols")
    if found[1] not in (4, 8):
        raise UsageError(f"--progress-counter {name}: {found[1]} bytes, not a 4- or 8-byte integer")
    return found


class MemoryCounter:
    """One 4- or 8-byte unsigned variable of the target, read when asked."""

    def __init__(self, pid: int, exe: str, segments: list[Segment], name: str, symbol: tuple[int, int]):
        # symbol: the variable's (address in the file, size), as counter_symbol() found it
        address, self.size = symbol
        self.name, self.address = name, address + load_bias(pid, exe, segments)
        self._fd: int | None = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    @property
    def label(self) -> str:
        return PREFIX + self.name

    def read(self) -> int | None:
        """Its value now; None once the process is gone."""
        if self._fd is None:  # closed
            return None
        try:
            raw = os.pread(self._fd, self.size, self.address)
        except OSError:
            return None
        return int.from_bytes(raw, "little") if len(raw) == self.size else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
