"""Symbols of a running mysqld, without root: PID -> binary -> functions.

Reads .symtab and .dynsym (or those of a separate debug file found by
build-id or .gnu_debuglink), demangles C++ names, matches them by qualified
name rather than full signature (signatures drift between versions), turns a
function's virtual address into the file offset a uprobe needs (PIE and
non-PIE), and tells the server family and version from the binary itself."""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.common.exceptions import ELFError

from mysqlprobe.collectors import debuginfo
from mysqlprobe.collectors.cxxnames import CLONE, DEMANGLED_CLONE, clone_kind, demangle, qualified_name
from mysqlprobe.errors import TargetError

_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym
STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF = 0

_LENGTH = re.compile(r"(?<!\d)[1-9]\d*")  # a <length> of a mangled source name
# Clones whose address is not the entry of the whole function.
_FRAGMENT_CLONES = ("part", "cold")


# --------------------------------------------------------------------------- ELF

@dataclass(frozen=True)
class Segment:
    vaddr: int
    memsz: int
    offset: int
    executable: bool


@dataclass(frozen=True)
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
    for st_name, st_info, _other, shndx, value, size in _SYM.iter_unpack(data):
        kind = st_info & 0xF
        if kind not in (STT_FUNC, STT_GNU_IFUNC) or shndx == SHN_UNDEF or not value:
            continue
        end = strtab.index(b"\0", st_name)
        out.append(Function(strtab[st_name:end].decode("utf-8", "replace"), value, size,
                            binding_names.get(st_info >> 4, "other"), section.name))
    return out


def read_elf(path: str) -> ElfImage:
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.elfclass != 64 or elf["e_machine"] != "EM_X86_64":
                raise TargetError(f"{path}: only x86-64 ELF binaries are supported")
            segments = [
                Segment(p["p_vaddr"], p["p_memsz"], p["p_offset"], bool(p["p_flags"] & 1))
                for p in elf.iter_segments() if p["p_type"] == "PT_LOAD"
            ]
            build_id = debuglink = rodata = None
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
                elif sec.name == ".rodata" and sec["sh_type"] != "SHT_NOBITS":
                    rodata = (sec["sh_offset"], sec["sh_size"])
                elif sec.name == ".debug_info" and sec["sh_type"] != "SHT_NOBITS":
                    has_debug_info = True
                elif sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                    if sec["sh_type"] == "SHT_SYMTAB":
                        has_symtab = True
                    functions.extend(_read_functions(elf, sec))
            return ElfImage(path, elf["e_type"] == "ET_DYN", build_id, debuglink, has_symtab,
                            has_debug_info, segments, functions, rodata)
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


# --------------------------------------------------------------------------- server identity

@dataclass(frozen=True)
class ServerInfo:
    family: str               # "mysql", "mariadb" or "unknown"
    version: str | None       # "10.2.11", "5.7.44"
    line: str                 # catalog line: "mysql-5.6", "mysql-5.7", "mysql-8.0", "mariadb"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.version.split(".")) if self.version else ()

    def describe(self) -> str:
        name = {"mysql": "MySQL", "mariadb": "MariaDB"}.get(self.family, "unknown server")
        return f"{name} {self.version or '(version unknown)'}"


_MARIADB_VERSION = re.compile(rb"(?<![\d.])(\d{1,2}\.\d{1,2}\.\d{1,3})-MariaDB")
_MYSQL_VERSION = re.compile(rb"\x00((?:5\.[0-7]|8\.[0-4]|9\.\d)\.\d{1,3})(?:-[\w.]+)?\x00")


def line_for(family: str, version: tuple[int, ...], has_function) -> str:
    if family == "mariadb":
        return "mariadb"
    if version:
        if version >= (8, 0):
            return "mysql-8.0"
        if version >= (5, 7):
            return "mysql-5.7"
        return "mysql-5.6"
    # no version string: tell the line by what the binary contains
    if has_function("BlockReporter::is_corrupted"):
        return "mysql-8.0"
    if has_function("Partition_helper::ph_write_row"):
        return "mysql-5.7"
    return "mysql-5.6"


def identify_server(image: ElfImage, has_function) -> ServerInfo:
    """Family and version from the version string in .rodata; has_function
    (qualified name -> bool) settles what the string does not."""
    rodata = image.rodata()
    m = _MARIADB_VERSION.search(rodata)
    if m:
        version = m.group(1).decode()
        return ServerInfo("mariadb", version, "mariadb")
    m = _MYSQL_VERSION.search(rodata)
    looks_mysql = any(has_function(n) for n in ("handler::ha_write_row", "mysql_parse", "dispatch_command"))
    if m or looks_mysql:
        version = m.group(1).decode() if m else None
        vt = tuple(int(x) for x in version.split(".")) if version else ()
        return ServerInfo("mysql", version, line_for("mysql", vt, has_function))
    return ServerInfo("unknown", None, "unknown")


# --------------------------------------------------------------------------- symbol table

@dataclass(frozen=True)
class ResolvedSymbol:
    """A function a uprobe can be attached to."""

    name: str          # qualified: ha_partition::write_row
    demangled: str     # full signature, as c++filt prints it
    mangled: str
    address: int
    offset: int        # in the executable file
    binding: str


class SymbolTable:
    """Functions of one binary, matched by qualified name or glob."""

    def __init__(self, image: ElfImage, symbols_from: ElfImage | None = None):
        self.image = image
        self.symbols_from = symbols_from or image
        by_addr: dict[int, Function] = {}
        for fn in self.symbols_from.functions + (image.functions if symbols_from else []):
            kind = clone_kind(fn.mangled)
            if kind in _FRAGMENT_CLONES:
                continue
            prev = by_addr.get(fn.address)
            # one entry per address: prefer .symtab, then global names
            if prev is None or (prev.table == ".dynsym" and fn.table == ".symtab"):
                by_addr[fn.address] = fn
        self.functions = sorted(by_addr.values(), key=lambda f: f.address)
        self._names: dict[str, list[Function]] | None = None
        self._index: tuple[dict, dict] | None = None

    @property
    def names(self) -> dict[str, list[Function]]:
        if self._names is None:
            names: dict[str, list[Function]] = {}
            for fn in self.functions:
                names.setdefault(fn.name, []).append(fn)
            self._names = names
        return self._names

    def _resolve(self, fn: Function) -> ResolvedSymbol:
        return ResolvedSymbol(fn.name, fn.demangled, fn.mangled, fn.address,
                              file_offset(self.image.segments, fn.address), fn.binding)

    def lookup(self, name: str) -> list[ResolvedSymbol]:
        """Every copy of a function by qualified name (all overloads and
        compiler clones), by a full demangled signature, or by mangled name."""
        if "(" in name:
            want = _normalize_signature(name)
            found = [f for f in self.functions if _normalize_signature(f.demangled) == want]
        elif name.startswith("_Z"):
            found = [f for f in self.functions if f.mangled == name or CLONE.sub("", f.mangled) == name]
        else:
            found = self._by_qualified_name(name)
        return [self._resolve(f) for f in found]

    def _by_qualified_name(self, name: str) -> list[Function]:
        if self._names is not None or not _indexable(name):
            return list(self.names.get(name, []))
        # before all names are demangled: the mangled form of a::b holds the
        # source names "1a" and "1b"; candidates come from an index of them,
        # and only those are demangled. C names are compared directly
        parts = name.split("::")
        needles = [f"{len(p)}{p}" for p in parts]
        mangled, plain = self._source_names()
        out = [f for f in mangled.get(needles[-1], []) if all(n in f.mangled for n in needles) and f.name == name]
        if len(parts) == 1:
            out += plain.get(name, [])
        return sorted(out, key=lambda f: f.address)

    def _source_names(self) -> tuple[dict[str, list[Function]], dict[str, list[Function]]]:
        """Functions by each <length><name> their mangled names hold, and C
        functions by name (clone suffix off); built once."""
        if self._index is None:
            mangled: dict[str, list[Function]] = {}
            plain: dict[str, list[Function]] = {}
            for f in self.functions:
                m = f.mangled
                if not m.startswith("_Z"):
                    plain.setdefault(CLONE.sub("", m), []).append(f)
                    continue
                for d in _LENGTH.finditer(m):
                    token = m[d.start():d.end() + int(d.group())]
                    bucket = mangled.setdefault(token, [])
                    if not bucket or bucket[-1] is not f:
                        bucket.append(f)
            self._index = (mangled, plain)
        return self._index

    def glob(self, pattern: str) -> list[ResolvedSymbol]:
        rx = re.compile(fnmatch.translate(pattern))
        return [self._resolve(f) for n, fns in sorted(self.names.items()) if rx.match(n) for f in fns]

    def similar(self, name: str, limit: int = 3) -> list[str]:

        return difflib.get_close_matches(name, list(self.names), n=limit, cutoff=0.75)


def _indexable(name: str) -> bool:
    """Whether a qualified name's parts appear as they are in its mangled form
    (std:: is abbreviated there, template arguments and operators encoded)."""
    return not (name.startswith("std::") or any(c in name for c in "<>( ~") or "operator" in name)


def _normalize_signature(text: str) -> str:
    return re.sub(r"\s+", "", DEMANGLED_CLONE.sub("", text))


# --------------------------------------------------------------------------- processes

@dataclass(frozen=True)
class Target:
    pid: int
    exe: str          # path as the process sees it (its mount namespace)
    proc_exe: str     # /proc/PID/exe: readable and attachable from here
    root: str         # /proc/PID/root
    comm: str
    deleted: bool


def resolve_target(pid: int) -> Target:
    proc = Path(f"/proc/{pid}")
    if pid <= 0 or not proc.is_dir():
        raise TargetError(f"no process with PID {pid}")
    try:
        exe = os.readlink(proc / "exe")
    except PermissionError:
        who = ("even as root: it runs in another namespace, or the kernel hides it" if os.geteuid() == 0
               else f"run as root or as the owner of PID {pid}")
        raise TargetError(f"cannot read /proc/{pid}/exe ({who})") from None
    except FileNotFoundError:
        raise TargetError(f"PID {pid} has exited or is a kernel thread") from None
    comm = (proc / "comm").read_text().strip() if (proc / "comm").exists() else "?"
    deleted = exe.endswith(" (deleted)")
    return Target(pid, exe.removesuffix(" (deleted)"), str(proc / "exe"), str(proc / "root"), comm, deleted)


@dataclass
class Binary:
    """A server binary with its symbols, ready for probing."""

    path: str                 # file read (for a process: /proc/PID/exe)
    display_path: str         # the path a person knows it by
    image: ElfImage
    symbols: SymbolTable
    debug_file: str | None
    server: ServerInfo
    load_seconds: float = 0.0


def load_binary(path: str, display_path: str | None = None, root: str = "/",
                debug_file: str | None = None) -> Binary:
    """A binary and its symbols: from debug_file when given (it must have the
    same build-id), else from .symtab, else from a debug file found for it."""
    started = time.monotonic()
    display = display_path or path
    image = read_elf(path)
    symbols_from = None
    if debug_file:
        symbols_from = read_elf(debug_file)
        if image.build_id and symbols_from.build_id and symbols_from.build_id != image.build_id:
            raise TargetError(f"{debug_file} belongs to build-id {symbols_from.build_id}, not {image.build_id}")
    elif not image.has_symtab:
        debug_file = debuginfo.find_debug_file(image, display, root, read_elf)
        if debug_file:
            symbols_from = read_elf(debug_file)
    table = SymbolTable(image, symbols_from)
    server = identify_server(image, lambda name: bool(table.lookup(name)))
    return Binary(path, display, image, table, debug_file, server, time.monotonic() - started)


def load_target_binary(target: Target, debug_file: str | None = None) -> Binary:
    return load_binary(target.proc_exe, target.exe, target.root, debug_file)
