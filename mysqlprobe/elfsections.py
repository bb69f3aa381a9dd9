"""The section headers of a 64-bit little-endian ELF file, read with
struct: what both a server binary's reader (collectors/target/elf.py) and the BPF
objects' BTF reader (probes/btf.py) start from. pyelftools makes an object
of every section where a few are wanted, and its import alone took 25-55
ms of mysqlprobe's start."""

from __future__ import annotations

from typing import BinaryIO

import struct

from dataclasses import dataclass

ELF64_SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF


@dataclass(frozen=True, slots=True)
class Section:
    """One section header of an ELF file."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


def c_string(table: bytes, at: int) -> str:
    return table[at:table.index(b"\0", at)].decode("utf-8", "replace")


class ElfSections:
    """An open ELF file's header fields and sections. A file that is not a
    64-bit little-endian ELF file, or is cut short, raises ValueError."""

    def __init__(self, f: BinaryIO) -> None:
        self.file = f
        f.seek(0)
        self.head = f.read(64)
        if len(self.head) < 64 or self.head[:4] != b"\x7fELF":
            raise ValueError("no ELF magic")
        self.type, self.machine = struct.unpack_from("<HH", self.head, 16)
        self.check_kind()
        shoff = struct.unpack_from("<Q", self.head, 40)[0]
        shnum, shstrndx = struct.unpack_from("<HH", self.head, 60)
        raw = self._read(shoff, ELF64_SHDR.size) if shoff else b""
        if raw and shnum == 0:  # extended numbering: the count is in section 0
            shnum = ELF64_SHDR.unpack(raw)[5]
        if raw and shstrndx == SHN_XINDEX:
            shstrndx = ELF64_SHDR.unpack(raw)[6]
        headers = list(ELF64_SHDR.iter_unpack(self._read(shoff, shnum * ELF64_SHDR.size))) if shoff else []
        names = self._read(headers[shstrndx][4], headers[shstrndx][5]) if shstrndx < len(headers) else b""
        self.sections = [Section(c_string(names, h[0]), h[1], h[3], h[4], h[5], h[6]) for h in headers]

    def check_kind(self) -> None:
        """Refuses what the headers below cannot be read as."""
        if self.head[4] != 2 or self.head[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")

    def _read(self, offset: int, size: int) -> bytes:
        self.file.seek(offset)
        data = self.file.read(size)
        if len(data) != size:
            raise ValueError(f"truncated at offset {offset:#x}")
        return data

    def data(self, section: Section) -> bytes:
        return b"" if section.type == SHT_NOBITS else self._read(section.offset, section.size)

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)
