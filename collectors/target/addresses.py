"""Names for the addresses in BPF stacks: user addresses through the
process's mappings and each mapped file's ELF symbols, kernel addresses
through /proc/kallsyms.

Names are looked up in one batch per collection, for the addresses the
stacks hold: a file's symbol table (mariadbd's has 35,000 functions) and
the kernel's (over 100,000) are read into flat arrays, the few names
wanted are picked out, and the rest is let go. Keeping whole tables as
Python objects cost mysqlprobe 45 MB at its peak."""

from __future__ import annotations

from collections.abc import Callable

from typing import Any

import bisect
import functools
import os
from array import array
from itertools import islice
from collections.abc import Iterable


from mysqlprobe.collectors.target.cxxnames import demangle, qualified_name
from mysqlprobe.collectors.target.elf import defined_function, elf_file
from mysqlprobe.errors import TargetError
from dataclasses import dataclass

UNKNOWN = "[unknown]"
UPROBES = "[uprobes]"   # the kernel's page of uretprobe trampolines in every probed process
_BINDING_RANK = {0: 2, 1: 0, 2: 1}  # STB_LOCAL, STB_GLOBAL, STB_WEAK: global first, as perf chooses


def alias_rank(binding_rank: int, name: str) -> tuple[int, int, int]:
    """Among names of one address, the lowest is the one perf shows (libc's
    __libc_pwrite, pwrite, pwrite64 share one): global before weak before
    local, then fewer leading underscores, then the longer."""
    return binding_rank, len(name) - len(name.lstrip("_")), -len(name)


class FileFunctions:
    """One ELF file's function symbols (.symtab and .dynsym) as sorted flat
    arrays. Names stay in the file, read for the functions asked about
    (names_at): a window names a few hundred of mariadbd's 62,000, and its
    string tables held whole took 2-4 MB at the collection's peak."""

    def __init__(self, path: str):
        self.path = path
        with elf_file(path) as elf:
            self.segments = elf.segments
            starts, sizes, names, ranks, tables = array("Q"), array("Q"), array("I"), array("B"), array("B")
            self._strtabs: list[int] = []  # the string tables' file offsets
            for _table, strtab, symbols in elf.symbol_tables():
                table = len(self._strtabs)
                self._strtabs.append(strtab.offset)
                for st_name, st_info, _other, shndx, value, size in symbols:
                    if defined_function(st_info, shndx, value):
                        starts.append(value)
                        sizes.append(size)
                        names.append(st_name)
                        ranks.append(_BINDING_RANK.get(st_info >> 4, 3))
                        tables.append(table)
        order = _sorted_order(starts)
        self.starts = array("Q", (starts[i] for i in order))
        self.sizes = array("Q", (sizes[i] for i in order))
        self.names = array("I", (names[i] for i in order))
        self.ranks = array("B", (ranks[i] for i in order))
        self.tables = array("B", (tables[i] for i in order))

    def names_at(self, vaddrs: Iterable[int]) -> dict[int, str]:
        """The function each of these addresses falls in (its mangled name);
        those in none are left out. The file is read again for the names:
        gone or unreadable since, none are given."""
        try:
            with open(self.path, "rb") as f:
                read = functools.partial(_string_at, f.fileno())
                return {v: name for v in set(vaddrs) if (name := self._name_at(v, read)) is not None}
        except OSError:
            return {}

    def _name_at(self, vaddr: int, read: Callable[[int], str | None]) -> str | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0:
            return None
        start = self.starts[i]
        first = i
        while first > 0 and self.starts[first - 1] == start:
            first -= 1
        named = [(alias_rank(self.ranks[j], name), j, name)
                 for j in range(first, i + 1)
                 if (name := read(self._strtabs[self.tables[j]] + self.names[j]))]
        if not named:
            return None
        _rank, best, name = min(named)
        size = self.sizes[best]
        return name if size == 0 or vaddr < start + size else None

    def vaddr_of(self, file_offset: int) -> int | None:
        for seg in self.segments:
            if seg.offset <= file_offset < seg.offset + seg.memsz:
                return seg.vaddr + file_offset - seg.offset
        return None


def _sorted_order(starts: array[int]) -> array[int]:
    """The indices of starts in ascending order of their values. A file's
    symbol table comes in any order; /proc/kallsyms in order but for a
    few entries at its end (BPF programs, modules): its sorted head is kept
    as it is and only the rest sorted and merged in. Sorting all of it
    with a key function held three lists of 122,000 ints (10 MB)."""
    n = len(starts)
    head = next((i + 1 for i in range(n - 1) if starts[i] > starts[i + 1]), n)  # the part already in order
    if head <= 1:
        return _order_from(starts, 0)
    tail = _order_from(starts, head)
    order, done = array("I"), 0
    for j in tail:
        at = bisect.bisect_right(starts, starts[j], 0, head)
        order.extend(range(done, at))
        order.append(j)
        done = at
    order.extend(range(done, head))
    return order


def _order_from(starts: array[int], first: int) -> array[int]:
    """The indices from `first` on in ascending order of their values: one
    list of packed (start above the lowest, index) keys where both fit in
    64 bits, else sorted with a key function."""
    n = len(starts)
    if first >= n:
        return array("I")
    low, high = min(islice(starts, first, None)), max(islice(starts, first, None))
    if n < 1 << 24 and high - low < 1 << 40:
        return array("I", (k & 0xFFFFFF for k in sorted(((starts[i] - low) << 24) | i for i in range(first, n))))
    return array("I", sorted(range(first, n), key=starts.__getitem__))


def _string_at(fd: int, at: int, chunk: int = 256) -> str:
    """The NUL-ended string at a file offset ('' where the file ends first)."""
    data = b""
    while True:
        more = os.pread(fd, chunk, at + len(data))
        end = more.find(b"\0")
        if end >= 0 or not more:
            return (data + (more[:end] if end >= 0 else more)).decode("utf-8", "replace")
        data += more
        chunk *= 2


@dataclass
class Mapping:
    """One file-backed line of /proc/PID/maps."""

    start: int
    end: int
    offset: int
    path: str


def with_leaf_caller(leaf_first: list[int], caller: int, name: Callable[[int], str]) -> list[int]:
    """A user stack's addresses, leaf first, with the caller of a frameless
    leaf put back after the leaf: the frame-pointer walk, starting at the
    caller's frame, skipped it (the BPF programs read it off the stack's top:
    probes/user_stack.h's leaf_caller). Not twice: where the walk has it, as
    named, the stack is as it was."""
    if caller and len(leaf_first) > 1 and name(caller) != name(leaf_first[1]):
        return [leaf_first[0], caller, *leaf_first[1:]]
    return leaf_first


def special_mappings(maps_text: str, name: str) -> list[tuple[int, int]]:
    """The address ranges of a named kernel mapping ([uprobes], [vdso]) in a /proc/PID/maps text."""
    out = []
    for line in maps_text.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[5] == name:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


def file_mappings(maps_text: str, executable: bool = True) -> list[Mapping]:
    """The mappings of files in a /proc/PID/maps text; only those of code
    unless executable is False."""
    out = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and (not executable or "x" in parts[1]) and parts[5].startswith("/"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append(Mapping(lo, hi, int(parts[2], 16), parts[5].removesuffix(" (deleted)")))
    return sorted(out, key=lambda m: m.start)


def binary_code(maps_text: str, exe: str) -> tuple[int, int]:
    """The target binary's code in a /proc/PID/maps text (its lowest and
    highest address), else (0, 0): where a return address on its stack points."""
    code = [m for m in file_mappings(maps_text) if m.path == exe]
    return (min(m.start for m in code), max(m.end for m in code)) if code else (0, 0)


# where x86-64 puts the page of uretprobe trampolines (TASK_SIZE - PAGE_SIZE) when
# the process's maps do not show it yet (it is made at the first probe hit)
DEFAULT_TRAMPOLINES = 0x7FFFFFFFE000


def uprobe_trampolines(maps_text: str) -> int:
    """The [uprobes] page's address in a /proc/PID/maps text, else where the kernel puts it."""
    found = special_mappings(maps_text, UPROBES)
    return found[0][0] if found else DEFAULT_TRAMPOLINES


def process_maps(pid: int) -> tuple[str, str]:
    """A process's /proc/PID/maps text and its executable's path; empty where they cannot be read."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
        return maps, os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return "", ""


@functools.lru_cache(maxsize=65536)
def function_name(mangled: str) -> str:
    return qualified_name(demangle(mangled))


def user_names(pid: int, addresses: Iterable[int], maps_text: str | None = None,
               root: str | None = None, files: dict[str, Any] | None = None,
               named: Callable[[str], str] = function_name) -> dict[int, str]:
    """Each address of the process's mapped code to its function's name
    (`[file]` where its file has no symbol for it, `[unknown]` where no
    file is mapped). Read while the process runs: the mappings are those
    at the time. Each file is read once, into `files` (path -> its
    FileFunctions, None where unreadable) when given, for later calls.
    named: what a mangled symbol is shown as (its qualified name)."""
    files = {} if files is None else files
    root = root if root is not None else f"/proc/{pid}/root"
    if maps_text is None:
        with open(f"/proc/{pid}/maps") as f:
            maps_text = f.read()
    mappings = file_mappings(maps_text)
    starts = [m.start for m in mappings]
    trampolines = special_mappings(maps_text, UPROBES)
    by_file: dict[str, list[tuple[int, Mapping]]] = {}
    out = {}
    for address in set(addresses):
        i = bisect.bisect_right(starts, address) - 1
        if any(lo <= address < hi for lo, hi in trampolines):
            out[address] = UPROBES
        elif i < 0 or address >= mappings[i].end:
            out[address] = UNKNOWN
        else:
            by_file.setdefault(mappings[i].path, []).append((address, mappings[i]))
    for path, wanted in by_file.items():
        label = f"[{os.path.basename(path)}]"
        if path not in files:
            try:
                files[path] = FileFunctions(root + path if os.path.exists(root + path) else path)
            except TargetError:
                files[path] = None
        functions = files[path]
        vaddrs, mangled = {}, {}
        if functions:
            vaddrs = {address: functions.vaddr_of(address - m.start + m.offset) for address, m in wanted}
            mangled = functions.names_at(v for v in vaddrs.values() if v is not None)
        for address, _m in wanted:
            name = mangled.get(vaddrs.get(address))
            out[address] = named(name) if name else label
    return out


class KernelSymbols:
    """The kernel's text symbols for naming stack addresses: kallsyms gives
    no sizes, so an address falls in the nearest start below it. The first
    pass over the file keeps the starts and their line numbers only (flat
    arrays, 1.5 MB), once for every collector of a collection; each lookup
    then reads the names of the lines it wants."""

    def __init__(self, path: str = "/proc/kallsyms"):
        self.path = path
        self._index: tuple[array[int], array[int]] | None = None

    def _starts(self) -> tuple[array[int], array[int]]:
        if self._index is None:
            starts, lines = array("Q"), array("I")
            try:
                with open(self.path) as f:
                    for n, line in enumerate(f):
                        parts = line.split(None, 3)
                        if len(parts) >= 3 and parts[1] in "tTwW" and parts[0].strip("0"):
                            starts.append(int(parts[0], 16))
                            lines.append(n)
            except (OSError, ValueError):
                starts, lines = array("Q"), array("I")
            if any(starts[i] > starts[i + 1] for i in range(len(starts) - 1)):  # not in address order: sort it
                order = _sorted_order(starts)
                starts, lines = array("Q", (starts[i] for i in order)), array("I", (lines[i] for i in order))
            self._index = starts, lines
        return self._index

    def names(self, addresses: Iterable[int]) -> dict[int, str]:
        wanted = sorted(set(addresses))
        if not wanted:
            return {}
        starts, lines = self._starts()
        if not starts:
            return {}
        at_line: dict[int, list[int]] = {}   # the lines of each address's symbol and its aliases
        for address in wanted:
            i = bisect.bisect_right(starts, address) - 1
            start = starts[i] if i >= 0 else None
            while i >= 0 and starts[i] == start:
                at_line.setdefault(lines[i], []).append(address)
                i -= 1
        out: dict[int, str] = {}
        try:
            with open(self.path) as f:
                for n, line in enumerate(f):
                    for address in at_line.get(n, ()):
                        name = line.split()[2]
                        out[address] = max(out.get(address, name), name)   # of aliases, one chosen the same each time
        except OSError:
            return {}
        return out

