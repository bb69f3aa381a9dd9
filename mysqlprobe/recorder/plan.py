"""The probe plan: which functions of the binary to time, for which stage,
and how the kernel will handle each one's first instruction."""

from __future__ import annotations

from typing import TextIO
from mysqlprobe.collectors.target.symbols import Target

from typing import TYPE_CHECKING, cast
if TYPE_CHECKING:
    from mysqlprobe.catalog import PartitionSource, StatementArgs, UsdtPair
    from mysqlprobe.collectors.target.symbols import ResolvedSymbol

from typing import Any

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from mysqlprobe import catalog
from mysqlprobe.caches import PlanCache
from mysqlprobe.collectors.target import debuginfod
from mysqlprobe.collectors.uprobes.calibration import entry_point
from mysqlprobe.collectors.target.elf import UsdtArg, read_build_id
from mysqlprobe.collectors.target.symbols import Binary, load_target_binary
from mysqlprobe.collectors.uprobes.session import ProbeSpec, UsdtSites
from mysqlprobe.errors import MysqlprobeError, NoSymbolsError, TargetError, UsageError
from dataclasses import dataclass, field, replace


@dataclass
class Plan:
    """The probes to attach, and what could not be planned and why."""

    specs: list[ProbeSpec] = field(default_factory=list)
    unavailable: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0  # reading symbols and resolving the probes
    cached: bool = False  # taken from the plan cache (an earlier run on the same build)


def plan_probes(binary: Binary, stages: list[str], patterns: list[str], into: Plan | None = None) -> Plan:
    """The probes of stages and patterns; into: a plan to add them to."""
    started = time.monotonic()
    plan = into or Plan()
    seen = {s.symbol.address for s in plan.specs}

    def add(sym: ResolvedSymbol, stage: str | None, partition: PartitionSource | None,
            statement: StatementArgs | None = None, marks_stage: bool = False, usdt: UsdtSites | None = None) -> None:
        if sym.address in seen:
            return
        seen.add(sym.address)
        skip, klass = entry_point(binary.path, sym.offset)
        plan.specs.append(ProbeSpec(len(plan.specs), sym, stage, partition, skip=skip, entry_class=klass,
                                    statement=statement, marks_stage=marks_stage, with_return=not marks_stage,
                                    usdt=usdt))

    for res in catalog.resolve(stages, binary.symbols, binary.server):
        if not res.available and res.applicable:
            names = ", ".join(c.name for c in res.stage.candidates)
            why = ("the binary has no such USDT probe (built without DTrace/SystemTap probes)"
                   if any(c.usdt for c in res.stage.candidates)
                   else f"none of {names} is in the binary (not built, or inlined)")
            plan.unavailable.append({"stage": res.stage.name, "reason": why})
        for cand, sym in res.probes:
            text_arg = cand.statement.text if cand.statement and cand.statement.usdt else None
            sites = usdt_sites(binary, cand.usdt, text_arg) if cand.usdt else None
            if cand.usdt and not sites:
                plan.unavailable.append({"stage": res.stage.name,
                                         "reason": f"USDT probe {cand.usdt.done} has no site in the binary"})
                continue
            add(sym, res.stage.name, cand.partition, cand.statement, cand.marks_stage, sites)
    _one_statement_boundary(plan)
    for pattern in patterns:
        found = binary.symbols.glob(pattern) if any(c in pattern for c in "*?[") \
            else binary.symbols.lookup(pattern)
        if not found:
            hint = binary.symbols.similar(pattern)
            raise UsageError(f"--probe {pattern}: no such function in {binary.display_path}"
                             + (f" (did you mean {', '.join(hint)}?)" if hint else ""))
        for sym in found:
            add(sym, None, None)
    plan.seconds += time.monotonic() - started + (0.0 if into else binary.load_seconds)
    return plan


def plan_cached(path: str, display_path: str, cache: PlanCache | None, parts: tuple[Any, ...],
                make: Callable[[], tuple[Binary, Plan]]) -> tuple[Binary, Plan]:
    """make()'s binary (its symbols released) and plan, or those an earlier
    run made for the same build of the file at `path` and the same `parts`
    (stages, functions, options). Only a plan from the binary's own symbol
    table is kept: one from a debug file found for a stripped binary would
    say where that file came from when it was not read (and one without
    symbols would outlast the debug package that gives them)."""
    started = time.monotonic()
    try:
        build_id = read_build_id(path) if cache else None
    except TargetError:
        build_id = None
    key = cache.key(build_id, os.path.getsize(path), *parts) if cache and build_id else None
    found = cache.load(key) if cache and key else None
    if found:
        binary, plan = found
        binary.path = binary.image.path = path  # this process's, as make() would have it
        binary.display_path = display_path
        plan.seconds, plan.cached = time.monotonic() - started, True
        return binary, plan
    binary, plan = make()
    if cache and key and binary.image.has_symtab and not binary.debug_file:
        binary.symbols.release()
        cache.save(key, (binary, plan))
    return binary, plan


def plan_in_child(target: Target, stages: list[str], functions: list[str] | None = None) -> tuple[Binary, Plan]:
    """The target's binary read and its probes planned in a child process,
    which takes the symbol table's memory with it when it ends: read into
    the heap of a process that lives for weeks (watch), each server
    restart left it 4-7 MB larger (bench/SOAK.md). What comes back is the
    plan and the binary, its table released; an error is raised here."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: nothing of the parent's (probes, P_S) is its to undo
        try:
            os.close(read_end)
            try:
                binary = load_target_binary(target)
                plan = plan_probes(binary, stages, functions or [])
                binary.symbols.release()
                payload = pickle.dumps((binary, plan))
            except MysqlprobeError as e:
                payload = pickle.dumps(e)
            except BaseException as e:  # noqa: B036 - whatever it was, the parent says it
                payload = pickle.dumps(RuntimeError(f"planning failed: {type(e).__name__}: {e}"))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)  # never back into the parent's code, whatever happened
    os.close(write_end)
    reply: bytes | None = None
    try:
        with os.fdopen(read_end, "rb") as answer:
            reply = answer.read()
    finally:
        if reply is None:   # interrupted: the child's answer is not wanted
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    result = pickle.loads(reply) if reply else RuntimeError("planning failed: its process ended unheard")
    if isinstance(result, BaseException):
        raise result
    return cast("tuple[Binary, Plan]", result)


def _one_statement_boundary(plan: Plan) -> None:
    """Statements are kept under one boundary: sql.statement's where it is
    planned, else the first. Another (sql.query_exec's USDT pair beside
    dispatch_command) is timed as a span only: inside the boundary's
    statement its starts would nest and keep nothing of their own."""
    boundaries = [s for s in plan.specs if s.statement]
    if len(boundaries) < 2:
        return
    keep = next((s for s in boundaries if s.stage == catalog.STATEMENT), boundaries[0])
    plan.specs = [replace(s, statement=None) if s.statement and s is not keep else s
                  for s in plan.specs]


def usdt_sites(binary: Binary, pair: UsdtPair, text_arg: int | None = None) -> UsdtSites | None:
    """Where a USDT pair attaches; None without a done site (no span to time).
    text_arg: the start probe's operand holding a statement's text, kept
    for each start site (a statement boundary)."""
    table = binary.symbols

    def sites(name: str) -> tuple[tuple[int, int], ...]:
        sem = table.usdt_semaphore(pair.provider, name)
        return tuple((s.offset, sem) for s in table.usdt_sites(pair.provider, name))
    dones = sites(pair.done)
    if not dones:
        return None
    texts: tuple[UsdtArg | None, ...] = ()
    if text_arg is not None:
        texts = tuple(p.args[text_arg] if len(p.args) > text_arg else None for p in table.image.usdt
                      if (p.provider, p.name) == (pair.provider, pair.start))
    return UsdtSites(sites(pair.start), dones, texts)


def usdt_stand_ins(binary: Binary, stages: list[str]) -> list[str]:
    """The insert profile's USDT stages (catalog.INSERT_PROFILE_USDT) not
    asked for already whose probes the binary's notes hold: on a stripped
    binary they stand in for the functions it lost."""
    def present(pair: UsdtPair | None) -> bool:
        if pair is None:
            return False
        sites = usdt_sites(binary, pair)
        return bool(sites and sites.starts)
    return [name for name in catalog.INSERT_PROFILE_USDT if name not in stages
            and all(present(c.usdt) for c in catalog.stage(name).candidates)]


def owning_package(path: str, dpkg_info: str = "/var/lib/dpkg/info",
                   rpm: str | None = None) -> tuple[str, str] | None:
    """("dpkg" or "rpm", the package that installed path): from dpkg's file
    lists, else from `rpm -qf` where rpm answers."""
    real = os.path.realpath(path)
    try:
        names = [n for n in os.listdir(dpkg_info) if n.endswith(".list")]
    except OSError:
        names = []
    for n in names:
        try:
            with open(os.path.join(dpkg_info, n), errors="replace") as f:
                if any(line.rstrip("\n") in (path, real) for line in f):
                    return "dpkg", n[: -len(".list")].split(":")[0]
        except OSError:
            continue
    import shutil  # imports the compressors: only here, on a binary dpkg does not know
    rpm = rpm or shutil.which("rpm")
    if rpm:
        try:
            done = subprocess.run([rpm, "-qf", "--queryformat", "%{NAME}", real], capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0 and done.stdout.strip() and " " not in done.stdout.strip():
            return "rpm", done.stdout.strip()
    return None


DEBUG_PACKAGE = {"dpkg": "install {}-dbgsym (from the Debian debug archive)",
                 "rpm": "install its debug info (dnf debuginfo-install {})"}


def check_symbols(binary: Binary, plan: Plan, stages: list[str]) -> NoSymbolsError | None:
    """A stripped binary without debug symbols cannot be probed by name: the
    error that says which stages that costs and what to install (the caller
    raises it, or goes on without those stages), or None."""
    if binary.image.has_symtab or binary.debug_file or not stages:
        return None
    lost = [u["stage"] for u in plan.unavailable]
    if not lost:
        return None
    pkg = owning_package(binary.display_path)
    what = DEBUG_PACKAGE[pkg[0]].format(pkg[1]) if pkg else "install the server's debug symbols package"
    build_id = f" (build-id {binary.image.build_id})" if binary.image.build_id else ""
    if binary.debuginfod_errors:  # servers were asked: what they said
        fetch = f"debuginfod failed ({'; '.join(binary.debuginfod_errors)})"
    elif binary.debuginfod_errors is not None:
        fetch = "no debuginfod server asked has it"
    else:
        server = debuginfod.distribution_server()
        fetch = f"set DEBUGINFOD_URLS={server}" if server else "set DEBUGINFOD_URLS to a debuginfod server"
    fix = f"{what}, {fetch}, or pass --debug-file"
    return NoSymbolsError(f"{binary.display_path} is stripped and no debug symbols were found{build_id}: "
                          f"{', '.join(lost)} cannot be probed; {fix}", lost, fix)


def list_plan(binary: Binary, plan: Plan, out: TextIO = sys.stdout) -> None:
    print(f"{binary.display_path}: {binary.server.describe()} ({binary.server.line}), "
          f"{'PIE' if binary.image.pie else 'non-PIE'}, symbols from {symbols_source(binary)}", file=out)
    for s in plan.specs:
        part = f"  [partition: {s.partition.describe()}]" if s.partition else ""
        part += {"statement": "  [statement boundary]", "usdt_statement": "  [statement boundary]",
                 "stage": "  [stage changes]"}.get(s.kind, "")
        entry = f"  [entry {s.entry_class}{', after endbr64' if s.skip else ''}]"
        print(f"{s.stage or '-':<30} {s.symbol.address:#x} {s.symbol.demangled}{part}{entry}", file=out)
    for u in plan.unavailable:
        print(f"{u['stage']:<30} unavailable: {u['reason']}", file=out)
    list_usdt(binary, out)


def list_usdt(binary: Binary, out: TextIO = sys.stdout) -> None:
    """The binary's USDT probes by provider and name: sites, semaphore and
    arguments (what the notes say; they stay in a stripped binary)."""
    sites: dict[tuple[str, str], list[Any]] = {}
    for p in binary.image.usdt:
        sites.setdefault((p.provider, p.name), []).append(p)
    if not sites:
        return
    print(f"USDT probes (.note.stapsdt, kept by strip): {len(sites)} probes at {len(binary.image.usdt)} sites",
          file=out)
    for (provider, name), found in sorted(sites.items()):
        specs = {p.spec for p in found}
        args = (", ".join(a.describe() for a in found[0].args) or "no arguments") if len(specs) == 1 else \
            "arguments differ between sites"
        semaphore = f"semaphore {found[0].semaphore:#x}" if found[0].semaphore else "no semaphore"
        label = f"usdt:{provider}:{name}"
        print(f"{label:<30} {len(found)} site{'s' if len(found) > 1 else ''}, {semaphore}; {args}", file=out)


def symbols_source(binary: Binary) -> str:
    if binary.debug_file:
        source = binary.debug_source or ""
        return f"debug file {binary.debug_file}" + (f" ({source})" if source.startswith("debuginfod") else "")
    return ".symtab" if binary.image.has_symtab else ".dynsym only (stripped)"


def target_record(target: Target, binary: Binary) -> dict[str, Any]:
    return {
        "pid": target.pid,
        "comm": target.comm,
        "binary": binary.display_path,
        "binary_deleted": target.deleted,
        "build_id": binary.image.build_id,
        "pie": binary.image.pie,
        "symbols": symbols_source(binary),
        "server": {"family": binary.server.family, "version": binary.server.version,
                   "line": binary.server.line},
    }
