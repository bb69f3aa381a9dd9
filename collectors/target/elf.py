"""The ELF files mysqlprobe reads: a server binary or its debug file, the
parts of it the probes need (function symbols, load segments, build-id,
debuglink), and a virtual address's file offset."""

from __future__ import annotations

from typing import Any, BinaryIO

from collections.abc import Iterable, Iterator

import contextlib
import functools
import re
import struct

from mysqlprobe.collectors.target.cxxnames import demangle, qualified_name
from mysqlprobe.elfsections import SHT_NOBITS, ElfSections, Section, c_string
from mysqlprobe.errors import TargetError
from dataclasses import dataclass, field

ELF64_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym
ELF64_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 1, 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF = 0
SHT_SYMTAB, SHT_DYNSYM = 2, 11
PT_LOAD, ET_DYN, EM_X86_64, NT_GNU_BUILD_ID = 1, 3, 62, 3
PROLOGUE_SAMPLE = 400  # functions whose first bytes are read to detect frame pointers
_SET_FRAME_POINTER = bytes.fromhex("4889e5")  # mov %rsp,%rbp


@dataclass(frozen=True)
class Segment:
    """One loadable segment (program header) of an ELF file."""

    vaddr: int
    memsz: int
    offset: int
    executable: bool


@dataclass(frozen=True, slots=True)
class Function:
    """A function symbol of an ELF file: its name as linked, where and how long."""

    mangled: str
    address: int
    size: int
    binding: str      # "global", "local", "weak"
    table: str        # ".symtab" or ".dynsym"

    @property
    def demangled(self) -> str:
        return demangle(self.mangled)

    @property
    def name(self) -> str:
        return qualified_name(self.demangled)


@dataclass(frozen=True)
class UsdtArg:
    """One argument of a USDT probe, as its note spells it ("-4@%r13d", "8@16080(%rbx)", "-4@$3")."""

    size: int          # bytes
    signed: bool
    kind: str          # "reg", "mem" (register + offset) or "const"
    register: str | None
    value: int         # the offset for "mem", the constant for "const"

    def describe(self) -> str:
        width = f"{'s' if self.signed else 'u'}{8 * self.size}"
        if self.kind == "const":
            return f"{width} {self.value}"
        if self.kind == "reg":
            return f"{width} %{self.register}"
        return f"{width} *(%{self.register}{self.value:+d})"


@dataclass(frozen=True)
class UsdtProbe:
    """A statically defined probe site (.note.stapsdt): it survives strip."""

    provider: str
    name: str
    address: int       # of the site (a nop), load base applied as the note says
    semaphore: int     # its counter's address (0: none); probes on must raise it
    args: tuple[UsdtArg, ...]
    spec: str          # the arguments as the note spells them


_USDT_ARG = re.compile(r"^(-?)(\d+)@(?:%(\w+)|\$(-?\d+)|(-?\d*)\(%(\w+)\))$")


def parse_usdt_args(spec: str) -> tuple[UsdtArg, ...]:
    """The argument specs of a note (x86-64 forms: register, register+offset
    memory, constant); a form not understood raises ValueError."""
    out = []
    for word in spec.split():
        m = _USDT_ARG.match(word)
        if not m:
            raise ValueError(f"USDT argument {word!r} not understood")
        neg, size, reg, const, offset, base = m.groups()
        if reg:
            out.append(UsdtArg(int(size), bool(neg), "reg", reg, 0))
        elif const is not None:
            out.append(UsdtArg(int(size), bool(neg), "const", None, int(const)))
        else:
            out.append(UsdtArg(int(size), bool(neg), "mem", base, int(offset or 0)))
    return tuple(out)


NT_STAPSDT = 3
_USDT_ADDRS = struct.Struct("<QQQ")  # pc, .stapsdt.base as linked, semaphore


def _read_usdt(raw: bytes, base_addr: int | None) -> list[UsdtProbe]:
    """The probes of a .note.stapsdt section's bytes; base_addr: where
    .stapsdt.base is now (prelink may have moved the code since the note was written)."""
    out, at = [], 0
    while at + 12 <= len(raw):
        namesz, descsz, kind = struct.unpack_from("<III", raw, at)
        name_at = at + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        at = desc_at + ((descsz + 3) & ~3)
        if kind != NT_STAPSDT or raw[name_at:name_at + namesz].rstrip(b"\0") != b"stapsdt":
            continue
        desc = raw[desc_at:desc_at + descsz]
        pc, base, semaphore = _USDT_ADDRS.unpack_from(desc)
        provider, name, spec = (desc[_USDT_ADDRS.size:].split(b"\0") + [b"", b""])[:3]
        shift = base_addr - base if base_addr is not None and base else 0
        spec_text = spec.decode("ascii", "replace")
        try:
            args = parse_usdt_args(spec_text)
        except ValueError:
            args = ()
        out.append(UsdtProbe(provider.decode("ascii", "replace"), name.decode("ascii", "replace"), pc + shift,
                             semaphore + shift if semaphore else 0, args, spec_text))
    return out


@dataclass
class ElfImage:
    """The parts of one ELF file mysqlprobe needs."""

    path: str
    pie: bool
    build_id: str | None
    debuglink: tuple[str, int] | None
    has_symtab: bool
    has_debug_info: bool
    segments: list[Segment]
    functions: list[Function]
    _rodata: tuple[int, int] | None = field(default=None, repr=False)  # (file offset, size)
    usdt: list[UsdtProbe] = field(default_factory=list)

    @functools.cached_property
    def frame_pointer_share(self) -> float | None:
        """Share of the functions that set up a frame pointer in their first
        bytes, from an even sample of them; None without function symbols.
        Measured once and kept: the symbol table is let go after planning."""
        functions = sorted((f for f in self.functions if f.size >= 16), key=lambda f: f.address)
        if not functions:
            return None
        step = max(len(functions) // PROLOGUE_SAMPLE, 1)
        sample = functions[::step][:PROLOGUE_SAMPLE]
        with_fp = 0
        with open(self.path, "rb") as f:
            for fn in sample:
                try:
                    f.seek(file_offset(self.segments, fn.address))
                except ValueError:
                    continue
                # shrink-wrapped code may test its arguments before the prologue
                with_fp += _SET_FRAME_POINTER in f.read(min(fn.size, 32))
        return with_fp / len(sample)

    def rodata(self) -> bytes:
        if not self._rodata:
            return b""
        with open(self.path, "rb") as f:
            f.seek(self._rodata[0])
            return f.read(self._rodata[1])


class ElfHeaders(ElfSections):
    """An x86-64 ELF file's sections and its load segments."""

    def __init__(self, f: BinaryIO, path: str) -> None:
        self.path = path
        super().__init__(f)
        phoff = struct.unpack_from("<Q", self.head, 32)[0]
        phnum = struct.unpack_from("<H", self.head, 56)[0]
        self.segments = [Segment(vaddr, memsz, offset, bool(flags & 1))
                         for kind, flags, offset, vaddr, _pa, _fs, memsz, _al
                         in ELF64_PHDR.iter_unpack(self._read(phoff, phnum * ELF64_PHDR.size))
                         if kind == PT_LOAD]

    def check_kind(self) -> None:
        if self.head[4] != 2 or self.head[5] != 1 or self.machine != EM_X86_64:
            raise TargetError(f"{self.path}: only x86-64 ELF binaries are supported")

    def symbol_tables(self) -> Iterator[tuple[Section, Section, Iterator[tuple[Any, ...]]]]:
        """(table, its string table's section, Elf64_Sym tuples) of .symtab and .dynsym."""
        for sec in self.sections:
            if sec.type in (SHT_SYMTAB, SHT_DYNSYM):
                yield sec, self.sections[sec.link], ELF64_SYM.iter_unpack(self.data(sec))

    def function_symbols(self) -> Iterator[tuple[Section, bytes, Iterator[tuple[Any, ...]]]]:
        """(table, strtab, Elf64_Sym tuples) of .symtab and .dynsym."""
        for sec, strtab, symbols in self.symbol_tables():
            yield sec, self.data(strtab), symbols


def _build_id(notes: bytes) -> str | None:
    at = 0
    while at + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, at)
        desc = at + 12 + ((namesz + 3) & ~3)
        if kind == NT_GNU_BUILD_ID and notes[at + 12:at + 12 + namesz].rstrip(b"\0") == b"GNU":
            return notes[desc:desc + descsz].hex()
        at = desc + ((descsz + 3) & ~3)
    return None


def defined_function(st_info: int, shndx: int, value: int) -> bool:
    """An Elf64_Sym of a function this file defines, at an address."""
    return (st_info & 0xF) in (STT_FUNC, STT_GNU_IFUNC) and shndx != SHN_UNDEF and value != 0


def _read_functions(table: Section, strtab: bytes, symbols: Iterable[tuple[Any, ...]]) -> list[Function]:
    binding_names = {STB_LOCAL: "local", STB_GLOBAL: "global", STB_WEAK: "weak"}
    return [Function(c_string(strtab, st_name), value, size, binding_names.get(st_info >> 4, "other"), table.name)
            for st_name, st_info, _other, shndx, value, size in symbols if defined_function(st_info, shndx, value)]


@contextlib.contextmanager
def elf_file(path: str) -> Iterator[ElfHeaders]:
    """The headers of the ELF file at path, open while in the block; any
    way the file cannot be read (missing, no permission, truncated,
    malformed) is one TargetError."""
    try:
        with open(path, "rb") as f:
            yield ElfHeaders(f, path)
    except FileNotFoundError:
        raise TargetError(f"{path}: no such file") from None
    except PermissionError:
        raise TargetError(f"{path}: permission denied (run as root or as the mysqld user)") from None
    except (struct.error, ValueError, IndexError) as e:
        raise TargetError(f"{path}: not a readable ELF file ({e})") from None
    except OSError as e:
        raise TargetError(f"{path}: cannot be read ({e.strerror or e})") from None


def data_symbol(path: str, name: str) -> tuple[int, int] | None:
    """(address, size) of the variable `name` (a defined object symbol of
    .symtab or .dynsym, its name as the table has it), or None."""
    wanted = name.encode() + b"\0"
    with elf_file(path) as elf:
        for _table, strtab, symbols in elf.function_symbols():
            # where the name may start in the string table (a longer name's tail among them)
            at, starts = strtab.find(wanted), set()
            while at >= 0:
                starts.add(at)
                at = strtab.find(wanted, at + 1)
            for st_name, st_info, _other, shndx, value, size in symbols if starts else ():
                if st_name in starts and (st_info & 0xF) == STT_OBJECT and shndx != SHN_UNDEF:
                    return value, size
    return None


def read_build_id(path: str) -> str | None:
    """The file's build-id from its section headers alone (no symbol read)."""
    with elf_file(path) as elf:
        note = elf.section(".note.gnu.build-id")
        return _build_id(elf.data(note)) if note else None


def read_elf(path: str) -> ElfImage:
    with elf_file(path) as elf:
        build_id = debuglink = rodata = stapsdt = stapsdt_base = None
        has_debug_info = False
        for sec in elf.sections:
            if sec.name == ".note.gnu.build-id":
                build_id = _build_id(elf.data(sec))
            elif sec.name == ".gnu_debuglink":
                raw = elf.data(sec)
                name = raw[: raw.index(b"\0")].decode()
                crc_at = (len(name) + 4) & ~3
                debuglink = (name, struct.unpack_from("<I", raw, crc_at)[0])
            elif sec.name == ".note.stapsdt":
                stapsdt = elf.data(sec)
            elif sec.name == ".stapsdt.base":
                stapsdt_base = sec.addr
            elif sec.name == ".rodata" and sec.type != SHT_NOBITS:
                rodata = (sec.offset, sec.size)
            elif sec.name == ".debug_info" and sec.type != SHT_NOBITS:
                has_debug_info = True
        functions = [fn for table, strtab, symbols in elf.function_symbols()
                     for fn in _read_functions(table, strtab, symbols)]
        has_symtab = any(sec.type == SHT_SYMTAB for sec in elf.sections)
        usdt = _read_usdt(stapsdt, stapsdt_base) if stapsdt else []
        return ElfImage(path, elf.type == ET_DYN, build_id, debuglink, has_symtab,
                        has_debug_info, elf.segments, functions, rodata, usdt)


def entry_offset(path: str) -> int:
    """File offset of the binary's entry point (e_entry, `_start`): code a
    process runs once, as it starts, and never again."""
    with elf_file(path) as elf:
        return file_offset(elf.segments, struct.unpack_from("<Q", elf.head, 24)[0])


def file_offset(segments: list[Segment], vaddr: int) -> int:
    """File offset of a virtual address, through the PT_LOAD that maps it.

    Non-PIE binaries have absolute addresses (0x400000+), PIE ones start near
    0; either way offset = vaddr - p_vaddr + p_offset."""
    for seg in segments:
        if seg.vaddr <= vaddr < seg.vaddr + seg.memsz:
            return vaddr - seg.vaddr + seg.offset
    raise ValueError(f"address {vaddr:#x} is in no PT_LOAD segment")
