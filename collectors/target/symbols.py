"""Symbols of a running mysqld, without root: PID -> binary -> functions.

Reads .symtab and .dynsym (or those of a separate debug file found by
build-id or .gnu_debuglink), demangles C++ names, matches them by qualified
name rather than full signature (signatures drift between versions), turns a
function's virtual address into the file offset a uprobe needs (PIE and
non-PIE), and tells the server family and version from the binary itself."""

from __future__ import annotations

from collections.abc import Callable

from mysqlprobe.collectors.target.debuginfod import Progress


import fnmatch
import os
import re
import time
from pathlib import Path

from mysqlprobe.catalog import family_name
from mysqlprobe.collectors.target import debuginfo
from mysqlprobe.collectors.target import debuginfod
from mysqlprobe.collectors.target.debug_match import check_debug_file
from mysqlprobe.collectors.target.cxxnames import CLONE, DEMANGLED_CLONE, clone_kind
from mysqlprobe.collectors.target.elf import ElfImage, Function, file_offset, read_elf
from mysqlprobe.errors import TargetError
from dataclasses import dataclass

_LENGTH = re.compile(r"(?<!\d)[1-9]\d*")  # a <length> of a mangled source name
# Clones whose address is not the entry of the whole function.
_FRAGMENT_CLONES = ("part", "cold")


# --------------------------------------------------------------------------- server identity

@dataclass(frozen=True)
class ServerInfo:
    """Which server a binary is: family, version and the catalog's line for it."""

    family: str               # "mysql", "mariadb" or "unknown"
    version: str | None       # "10.2.11", "5.7.44"
    line: str                 # catalog line: "mysql-5.6", "mysql-5.7", "mysql-8.0", "mariadb"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.version.split(".")) if self.version else ()

    def describe(self) -> str:
        return f"{family_name(self.family)} {self.version or '(version unknown)'}"


_MARIADB_VERSION = re.compile(rb"(?<![\d.])(\d{1,2}\.\d{1,2}\.\d{1,3})-MariaDB")
_MYSQL_VERSION = re.compile(rb"\x00((?:5\.[0-7]|8\.[0-4]|9\.\d)\.\d{1,3})(?:-[\w.]+)?\x00")


def line_for(family: str, version: tuple[int, ...], has_function: Callable[[str], bool]) -> str:
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


def identify_server(image: ElfImage, has_function: Callable[[str], bool]) -> ServerInfo:
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
        self._index: tuple[dict[str, list[Function]], dict[str, list[Function]]] | None = None
        self.released = False

    @property
    def names(self) -> dict[str, list[Function]]:
        self._check()
        if self._names is None:
            names: dict[str, list[Function]] = {}
            for fn in self.functions:
                names.setdefault(fn.name, []).append(fn)
            self._names = names
        return self._names

    def release(self) -> None:
        """Let the tables go once the probes are planned (a server's are
        about 20 MB; the window and the collection reuse that memory).
        A lookup after this is a mistake and says so. What perf's unwinding
        is chosen from is measured first, and kept on the image."""
        _ = self.image.frame_pointer_share  # measured now, while the functions are here
        self.functions, self._names, self._index = [], None, None
        self.image.functions = []
        self.symbols_from.functions = []
        self.released = True

    def _check(self) -> None:
        if self.released:
            raise RuntimeError("the symbol table was released after planning")

    def _resolve(self, fn: Function) -> ResolvedSymbol:
        return ResolvedSymbol(fn.name, fn.demangled, fn.mangled, fn.address,
                              file_offset(self.image.segments, fn.address), fn.binding)

    def lookup(self, name: str) -> list[ResolvedSymbol]:
        """Every copy of a function by qualified name (all overloads and
        compiler clones), by a full demangled signature, or by mangled name."""
        self._check()
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

    def usdt_sites(self, provider: str, name: str) -> list[ResolvedSymbol]:
        """Every site of a USDT probe, as a place to attach (binding "usdt";
        no symbol needed: the notes survive strip)."""
        return [ResolvedSymbol(f"usdt:{provider}:{name}", f"USDT {provider}:{name}", "", p.address,
                               file_offset(self.image.segments, p.address), "usdt")
                for p in self.image.usdt if (p.provider, p.name) == (provider, name)]

    def usdt_semaphore(self, provider: str, name: str) -> int:
        """The file offset of a USDT probe's semaphore (0: none)."""
        sems = {p.semaphore for p in self.image.usdt if (p.provider, p.name) == (provider, name)} - {0}
        return file_offset(self.image.segments, sems.pop()) if len(sems) == 1 else 0

    def glob(self, pattern: str) -> list[ResolvedSymbol]:
        self._check()
        rx = re.compile(fnmatch.translate(pattern))
        return [self._resolve(f) for n, fns in sorted(self.names.items()) if rx.match(n) for f in fns]

    def similar(self, name: str, limit: int = 3) -> list[str]:

        import difflib  # for a name not found only

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
    """The process to probe, and its binary as seen from here."""

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
    # where the debug file came from: "given", "local", "debuginfod cache" or a debuginfod server
    debug_source: str | None = None
    debuginfod_errors: list[str] | None = None  # servers asked in vain, and why


def load_binary(path: str, display_path: str | None = None, root: str = "/",
                debug_file: str | None = None, debuginfod_urls: list[str] | None = None,
                progress: Progress | None = None, force_debug_file: bool = False) -> Binary:
    """A binary and its symbols: from debug_file when given (it must have the
    same build-id and layout: collectors/target/debug_match.py), else from .symtab, else from a debug file found for it
    on this machine, else from the debuginfod servers (DEBUGINFOD_URLS when
    debuginfod_urls is None)."""
    started = time.monotonic()
    display = display_path or path
    image = read_elf(path)
    symbols_from, source, errors = None, None, None
    if debug_file:
        symbols_from, source = read_elf(debug_file), "given"
        check_debug_file(path, image, debug_file, symbols_from, force_debug_file, display)
    elif not image.has_symtab:
        debug_file = debuginfo.find_debug_file(image, display, root, read_elf)
        source = "local" if debug_file else None
        urls = debuginfod.server_urls() if debuginfod_urls is None else debuginfod_urls
        if not debug_file and image.build_id:  # the cache is read with no server named too
            fetched = debuginfod.fetch_debuginfo(image.build_id, urls, read_elf, progress=progress)
            debug_file, errors = fetched.path, (fetched.errors if urls else None)
            source = f"debuginfod {fetched.source}" if fetched.path else None
        if debug_file:
            symbols_from = read_elf(debug_file)
    table = SymbolTable(image, symbols_from)
    server = identify_server(image, lambda name: bool(table.lookup(name)))
    return Binary(path, display, image, table, debug_file, server, time.monotonic() - started, source, errors)


def load_target_binary(target: Target, debug_file: str | None = None, debuginfod_urls: list[str] | None = None,
                       progress: Progress | None = None, force_debug_file: bool = False) -> Binary:
    return load_binary(target.proc_exe, target.exe, target.root, debug_file, debuginfod_urls, progress,
                       force_debug_file)
