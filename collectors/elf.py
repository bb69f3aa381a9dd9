"""The ELF files mysqlprobe reads: a server binary or its debug file, the
parts of it the probes need (function symbols, load segments, build-id,
debuglink), and a virtual address's file offset."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from elftools.elf.elffile import ELFFile
from elftools.common.exceptions import ELFError

from mysqlprobe.collectors.cxxnames import demangle, qualified_name
from mysqlprobe.errors import TargetError

ELF64_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym
STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF = 0


@dataclass(frozen=True)
class Segment:
    vaddr: int
    memsz: int
    offset: int
    executable: bool


@dataclass(frozen=True, slots=True)
class Function:
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

    def rodata(self) -> bytes:
        if not self._rodata:
            return b""
        with open(self.path, "rb") as f:
            f.seek(self._rodata[0])
            return f.read(self._rodata[1])


def _read_functions(elf: ELFFile, section) -> list[Function]:
    strtab = elf.get_section(section["sh_link"]).data()
    data = section.data()
    out = []
    binding_names = {STB_LOCAL: "local", STB_GLOBAL: "global", STB_WEAK: "weak"}
    for st_name, st_info, _other, shndx, value, size in ELF64_SYM.iter_unpack(data):
        kind = st_info & 0xF
        if kind not in (STT_FUNC, STT_GNU_IFUNC) or shndx == SHN_UNDEF or not value:
            continue
        end = strtab.index(b"\0", st_name)
        out.append(Function(strtab[st_name:end].decode("utf-8", "replace"), value, size,
                            binding_names.get(st_info >> 4, "other"), section.name))
    return out


def load_segments(elf: ELFFile) -> list[Segment]:
    return [Segment(p["p_vaddr"], p["p_memsz"], p["p_offset"], bool(p["p_flags"] & 1))
            for p in elf.iter_segments() if p["p_type"] == "PT_LOAD"]


def read_elf(path: str) -> ElfImage:
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.elfclass != 64 or elf["e_machine"] != "EM_X86_64":
                raise TargetError(f"{path}: only x86-64 ELF binaries are supported")
            segments = load_segments(elf)
            build_id = debuglink = rodata = stapsdt = stapsdt_base = None
            functions: list[Function] = []
            has_symtab = has_debug_info = False
            for sec in elf.iter_sections():
                if sec.name == ".note.gnu.build-id":
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = note["n_desc"]
                elif sec.name == ".gnu_debuglink":
                    raw = sec.data()
                    name = raw[: raw.index(b"\0")].decode()
                    crc_at = (len(name) + 4) & ~3
                    debuglink = (name, struct.unpack_from("<I", raw, crc_at)[0])
                elif sec.name == ".note.stapsdt":
                    stapsdt = sec.data()
                elif sec.name == ".stapsdt.base":
                    stapsdt_base = sec["sh_addr"]
                elif sec.name == ".rodata" and sec["sh_type"] != "SHT_NOBITS":
                    rodata = (sec["sh_offset"], sec["sh_size"])
                elif sec.name == ".debug_info" and sec["sh_type"] != "SHT_NOBITS":
                    has_debug_info = True
                elif sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                    if sec["sh_type"] == "SHT_SYMTAB":
                        has_symtab = True
                    functions.extend(_read_functions(elf, sec))
            usdt = _read_usdt(stapsdt, stapsdt_base) if stapsdt else []
            return ElfImage(path, elf["e_type"] == "ET_DYN", build_id, debuglink, has_symtab,
                            has_debug_info, segments, functions, rodata, usdt)
    except FileNotFoundError:
        raise TargetError(f"{path}: no such file") from None
    except PermissionError:
        raise TargetError(f"{path}: permission denied (run as root or as the mysqld user)") from None
    except (ELFError, struct.error, ValueError) as e:
        raise TargetError(f"{path}: not a readable ELF file ({e})") from None


def file_offset(segments: list[Segment], vaddr: int) -> int:
    """File offset of a virtual address, through the PT_LOAD that maps it.

    Non-PIE binaries have absolute addresses (0x400000+), PIE ones start near
    0; either way offset = vaddr - p_vaddr + p_offset."""
    for seg in segments:
        if seg.vaddr <= vaddr < seg.vaddr + seg.memsz:
            return vaddr - seg.vaddr + seg.offset
    raise ValueError(f"address {vaddr:#x} is in no PT_LOAD segment")
