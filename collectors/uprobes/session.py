"""Uprobe latency collector: attaches probes/uprobe_latency.bpf.c to a list of
functions of one process and reads back, per probe, calls, total time, a
latency histogram, and the same per partition and per thread."""

from __future__ import annotations

from collections.abc import Iterable

import ctypes
import errno
import os
import time

from mysqlprobe import probes
from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import opened
from mysqlprobe.collectors.safety.breakpoints import sentinel_offset
from mysqlprobe.collectors.target.elf import UsdtArg
from mysqlprobe.collectors.target.symbols import ResolvedSymbol
from mysqlprobe.errors import BpfError, UsageError
from mysqlprobe.probes import abi
from mysqlprobe.probes.histogram import Histogram
from mysqlprobe.probes.abi import (COOKIE_ARG_SHIFT, COOKIE_CLASS_SHIFT, COOKIE_ENTRY_ONLY, COOKIE_MODE_SHIFT,
                                   COUNTERS, MAX_PROBES, NO_PARENT, PART_ARG_OUT_PTR, PART_ARG_VALUE,
                                   PART_NONE, STMT_CMD_ARG_SHIFT, STMT_CMD_QUERY, STMT_DISP_SHIFT,
                                   STMT_LEN_ARG_SHIFT, STMT_LEN_NONE, STMT_REG_NONE, STMT_TEXT_ARG_SHIFT,
                                   STMT_TEXT_DEREF, STMT_TEXT_INDIRECT, STMT_TEXT_LEN, STMT_TEXT_USDT,
                                   STMT_USDT_FLAT, EdgeKey, EdgeStats, LatencyConfig, PartKey, PartStats, ProbeStats,
                                   StmtEdgeKey, StmtStats)
from mysqlprobe.collectors.uprobes.counts import PartCounts, ProbeCounts, Snapshot, StatementCounts, probe_counts
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mysqlprobe.catalog import PartitionSource, StatementArgs


# the BPF programs (entry, return or None) of each kind of probe; a USDT
# pair's "return" program is a plain uprobe on its done sites
PROGRAMS = {"function": ("probe_entry", "probe_return"), "statement": ("stmt_entry", "stmt_return"),
            "stage": ("stage_entry", None), "usdt": ("probe_entry", "probe_return"),
            "usdt_statement": ("stmt_entry", "stmt_return")}
USDT_KINDS = ("usdt", "usdt_statement")

# general registers in the order of struct x86_64_regs (uprobe_latency.bpf.c)
_REGISTERS = {name: i for i, name in enumerate(
    ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi",
     "orig_rax", "rip", "cs", "eflags", "rsp"))}


@dataclass(frozen=True)
class UsdtSites:
    """Where a USDT start/done pair is attached: file offsets of every start
    site and every done site, with each one's semaphore (file offset, 0: none).
    texts: for a statement boundary, each start site's operand holding the
    statement's text (None where that site has none mysqlprobe can read)."""

    starts: tuple[tuple[int, int], ...]  # (site, semaphore)
    dones: tuple[tuple[int, int], ...]
    texts: tuple[UsdtArg | None, ...] = ()


def usdt_text_operand(arg: UsdtArg | None) -> int:
    """A USDT site's text operand as its cookie bits: a 64-bit register, or
    the 8 bytes at one plus a displacement that fits 16 bits; anything else
    (a constant, a narrower operand, a far displacement) reads no text."""
    reg = _REGISTERS.get(arg.register) if arg and arg.size == 8 and arg.register else None
    if arg is None or reg is None or arg.kind not in ("reg", "mem") or not -0x8000 <= arg.value < 0x8000:
        return (STMT_TEXT_USDT | STMT_REG_NONE) << STMT_TEXT_ARG_SHIFT
    if arg.kind == "reg":
        return (STMT_TEXT_USDT | reg) << STMT_TEXT_ARG_SHIFT
    return ((STMT_TEXT_USDT | STMT_TEXT_DEREF | reg) << STMT_TEXT_ARG_SHIFT
            | (arg.value & 0xFFFF) << STMT_DISP_SHIFT)


@dataclass(frozen=True)
class ProbeSpec:
    """One function to time; index is its slot in the BPF maps."""

    index: int
    symbol: ResolvedSymbol
    stage: str | None = None
    partition: PartitionSource | None = None
    with_return: bool = True  # False: count entries only (calibration)
    skip: int = 0             # bytes past the symbol to attach at (an endbr64)
    entry_class: str = ""     # how the kernel handles the probed instruction (calibration.py)
    cost_class: int = 0       # row of the costs map that corrects it; 0: none
    statement: StatementArgs | None = None  # a statement boundary (stmt_entry/stmt_return)
    marks_stage: bool = False  # P_S's start_stage: keeps each thread's stage (stage_entry)
    usdt: UsdtSites | None = None  # a USDT start/done pair: timed from start to done

    @property
    def kind(self) -> str:
        """Which programs it attaches (PROGRAMS)."""
        if self.usdt:
            return "usdt_statement" if self.statement else "usdt"
        return "stage" if self.marks_stage else "statement" if self.statement else "function"

    @property
    def cost_share(self) -> float:
        """Of its class's calibrated pair cost: an entry-only stage probe is taken as half."""
        return 0.5 if self.marks_stage else 1.0

    @property
    def attach_offset(self) -> int:
        return self.symbol.offset + self.skip

    @property
    def cookie(self) -> int:
        if self.marks_stage:
            return self.index | (self.cost_class << COOKIE_CLASS_SHIFT)
        if self.statement and self.statement.usdt:  # each start site adds its text operand (site_cookies)
            return (self.index | STMT_CMD_QUERY << STMT_CMD_ARG_SHIFT | STMT_LEN_NONE << STMT_LEN_ARG_SHIFT
                    | (0 if self.statement.nests else STMT_USDT_FLAT) | self.cost_class << COOKIE_CLASS_SHIFT)
        if self.statement:
            st = self.statement
            return (self.index | (st.command << STMT_CMD_ARG_SHIFT) | (st.text << STMT_TEXT_ARG_SHIFT)
                    | (STMT_TEXT_INDIRECT if st.indirect else 0) | (self.cost_class << COOKIE_CLASS_SHIFT)
                    | (st.length << STMT_LEN_ARG_SHIFT))
        mode, arg = PART_NONE, 0
        if self.partition:
            mode = PART_ARG_VALUE if self.partition.kind == "arg" else PART_ARG_OUT_PTR
            arg = self.partition.arg
        entry_only = 0 if self.with_return else COOKIE_ENTRY_ONLY
        return (self.index | (mode << COOKIE_MODE_SHIFT) | (arg << COOKIE_ARG_SHIFT) | entry_only
                | (self.cost_class << COOKIE_CLASS_SHIFT))


    def site_cookies(self, sites: str) -> list[tuple[int, int, int]]:
        """(site, semaphore, cookie) of a USDT pair's "starts" or "dones"."""
        usdt = opened(self.usdt, "a USDT pair's sites")
        at = getattr(usdt, sites)
        if sites == "starts" and self.kind == "usdt_statement":
            texts = usdt.texts or (None,) * len(at)
            return [(offset, ref, self.cookie | usdt_text_operand(text)) for (offset, ref), text in zip(at, texts)]
        return [(offset, ref, self.cookie) for offset, ref in at]


@dataclass(frozen=True)
class ProbeGroup:
    """Functions of one process to probe."""

    pid: int
    binary: str  # path to attach through, e.g. /proc/PID/exe
    specs: tuple[ProbeSpec, ...]


SENTINEL_GRACE_S = 0.05  # the target's probes out this long before the sentinel goes


class UprobeSession:
    """Loads the latency program for one process and attaches it to specs;
    optionally also to the calibration helper (a second process whose probes
    count whether the window is open or not).

    Everything is detached by close() / leaving the with-block; should the
    process die instead, the kernel drops the links with its descriptors."""

    def __init__(self, pid: int, binary: str, specs: list[ProbeSpec], verbose: bool = False,
                 calibration: ProbeGroup | None = None, defer_target: bool = False):
        total = len(specs) + (len(calibration.specs) if calibration else 0)
        if total > MAX_PROBES:
            raise UsageError(f"{total} functions to probe; at most {MAX_PROBES} at once")
        self.pid = pid
        self.binary = binary
        self.specs = specs
        self.calibration = calibration
        self.defer_target = defer_target  # attach the target's probes only at attach_target()
        self.verbose = verbose
        self._obj: libbpf.BpfObject | None = None
        self._windows = 0     # windows opened so far
        self._open = False
        self._sentinel: tuple[int, int] | None = None  # (link, file offset)
        self._target_links: list[int] | None = None

    def open(self) -> "UprobeSession":
        """Load and attach: uprobe_multi links where the kernel has them (one
        system call to attach or detach them all), else a link per probe."""
        rodata = abi.rodata("uprobe_latency", LatencyConfig(abi.UPROBE_LATENCY_ABI, self.pid,
                                                            self.calibration.pid if self.calibration else 0))
        try:
            if os.environ.get("MYSQLPROBE_LINKS") == "perf":  # force the fallback
                raise BpfError("per-probe links requested")
            self._obj = libbpf.BpfObject(probes.object_path("uprobe_latency"), rodata, self.verbose, multi=True)
            self._attach_all()
        except BpfError as e:
            forced = os.environ.get("MYSQLPROBE_LINKS") == "perf"
            if not forced and e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS,
                                                                errno.E2BIG):
                self.close()
                raise
            self.close()
            self._obj = libbpf.BpfObject(probes.object_path("uprobe_latency"), rodata, self.verbose, multi=False)
            try:
                self._attach_all()
            except BaseException:
                self.close()
                raise
        except BaseException:
            self.close()
            raise
        return self

    @property
    def obj(self) -> libbpf.BpfObject:
        return opened(self._obj, "the probes' BPF object")

    @property
    def link_kind(self) -> str:
        return "uprobe_multi" if self._obj and self._obj.multi else "perf_event"

    def _attach_all(self) -> None:
        self._fds = {name: self.obj.map_fd(name)
                     for name in ("stats", "part_stats", "edges", "counters", "costs", ".bss", "statements",
                                  "stmt_edges", "quiet_threads")}
        self.cpu_waits_left_out = self._attach_switches()
        if self.calibration:
            self._attach_group(self.calibration)
        if self.obj.multi:
            self._attach_sentinel()
        self._target_links = None
        if self.defer_target:
            return
        self.attach_target()

    def _attach_sentinel(self) -> None:
        """A probe at the target's entry point, which its running threads never
        reach, attached until the session closes. The kernel marks a process
        that has uprobes (MMF_HAS_UPROBES); when a thread's breakpoint has no
        probe any more (removed meanwhile), it looks whether any probe is left
        in the process's code and clears the mark if not; and the trap of an
        int3 in a process without the mark is not taken for a uprobe's:
        SIGTRAP. A thread that ran into a probe just as a duty cycle took the
        probes out, and reached that test only once the mark was cleared (its
        CPU held up between the trap and the test), dies so: the likely end
        of a server under watch, killed at the int3 of a probe while marked
        as having none. With one probe that stays, the mark does. Where it
        cannot be placed, the session goes on without it."""
        for offset in sentinel_offset(self.binary):
            try:
                link = self.obj.attach_uprobe_multi(self.obj.program("sentinel"), self.pid, self.binary,
                                                     [offset], [0], False)
            except BpfError:
                return
            self._sentinel = (link, offset)

    @property
    def sentinel_offset(self) -> int | None:
        """Where the sentinel put its breakpoint (None without one)."""
        return self._sentinel[1] if self._sentinel else None

    def _attach_switches(self) -> bool:
        """on_switch, that keeps waits for a CPU out of the calls, on for the session
        (off the window a switch costs it an array read); False: waits stay in."""
        try:
            self.obj.attach_program(self.obj.program("on_switch"), "the sched_switch tracepoint")
            return True
        except BpfError:
            return False

    def switch_run_stats(self) -> tuple[int, int]:
        """The kernel's (ns, runs) of on_switch, while run-time statistics are on."""
        return libbpf.program_run_stats(self.obj.program_fd("on_switch")) if self.cpu_waits_left_out else (0, 0)

    def _attach_group(self, g: ProbeGroup) -> list[int]:
        """Returns the links of a multi attach (none to track for per-probe links)."""
        links = []
        for kind, (entry, ret) in PROGRAMS.items():
            links += self._attach_programs(g, [s for s in g.specs if s.kind == kind], entry, ret)
        return links

    def _attach_programs(self, g: ProbeGroup, specs: list[ProbeSpec], entry_name: str,
                         return_name: str | None) -> list[int]:
        if not specs:
            return []
        entry = self.obj.program(entry_name)
        with_return = [s for s in specs if s.with_return]
        ret = self.obj.program(opened(return_name, f"the return program of {specs[0].kind} probes")) \
            if with_return or specs[0].kind in USDT_KINDS else 0
        if specs[0].kind in USDT_KINDS:
            return self._attach_usdt(g, specs, entry, ret)
        if self.obj.multi:
            # returns first: an entry without its return would leave frames on the stacks
            links = []
            if with_return:
                links.append(self.obj.attach_uprobe_multi(ret, g.pid, g.binary, [s.attach_offset for s in with_return],
                                                           [s.cookie for s in with_return], True))
            links.append(self.obj.attach_uprobe_multi(entry, g.pid, g.binary, [s.attach_offset for s in specs],
                                                       [s.cookie for s in specs], False))
            return links
        for spec in specs:
            if spec.with_return:
                self.obj.attach_uprobe(ret, g.pid, g.binary, spec.attach_offset, spec.cookie, True)
            self.obj.attach_uprobe(entry, g.pid, g.binary, spec.attach_offset, spec.cookie, False)
        return []

    def _attach_usdt(self, g: ProbeGroup, specs: list[ProbeSpec], entry: int, ret: int) -> list[int]:
        """Entries on every start site, the return program as a plain uprobe
        on every done site, all with the pair's cookie (a statement's start
        sites each with their text operand); done sites first, as returns
        are for functions."""
        links = []
        for program, sites in ((ret, "dones"), (entry, "starts")):
            at = [site for s in specs for site in s.site_cookies(sites)]
            if not at:
                continue
            if self.obj.multi:
                links.append(self.obj.attach_uprobe_multi(program, g.pid, g.binary, [a[0] for a in at],
                                                           [a[2] for a in at], False, [a[1] for a in at]))
                continue
            for offset, ref, cookie in at:
                self.obj.attach_uprobe(program, g.pid, g.binary, offset, cookie, False, ref)
        return links

    def detach_target(self) -> None:
        """Remove the target's probes, keep the calibration helper's (duty cycles)."""
        if self._obj and self._obj.multi and self._target_links:
            self._obj.detach(self._target_links)
            self._target_links = None

    def attach_target(self) -> None:
        if self._obj and self._target_links is None:
            self._target_links = self._attach_group(ProbeGroup(self.pid, self.binary, tuple(self.specs)))

    def __enter__(self) -> "UprobeSession":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def attached(self) -> int:
        return self._obj.attached if self._obj else 0

    @property
    def attached_count(self) -> int:
        """Probes this session attaches (entry and return), attached or not right now."""
        return sum(len(s.usdt.starts) + len(s.usdt.dones) if s.usdt else 2 if s.with_return else 1
                   for s in self.specs)

    def _set_enabled(self, on: bool) -> None:
        # .bss holds one variable, `enabled`: 0, or the number of the open window
        if on == self._open:
            return
        self._open = on
        if on:
            self._windows += 1
        libbpf.update(self._fds[".bss"], ctypes.c_uint32(0), ctypes.c_uint32(self._windows if on else 0))

    def keep_statements_out(self, tids: Iterable[int]) -> None:
        """Statements of these threads (mysqlprobe's own connections) are not kept."""
        for tid in tids:
            libbpf.update(self._fds["quiet_threads"], ctypes.c_uint32(tid), ctypes.c_uint8(1))

    def set_cost(self, cost_class: int, own_ns: int, pair_ns: int) -> None:
        """What the kernel subtracts, per probe of that class, from the calls it times (whole ns, >= 0)."""
        libbpf.update(self._fds["costs"], ctypes.c_uint32(cost_class), (ctypes.c_uint64 * 2)(own_ns, pair_ns))

    def probe_counts(self, index: int) -> ProbeCounts:
        """Totals of one probe (no partitions or threads): cheap enough to poll."""
        value = ProbeStats()
        if not libbpf.lookup(self._fds["stats"], ctypes.c_uint32(index), value):
            return ProbeCounts()
        return probe_counts(value)

    def calls(self, indices: Iterable[int]) -> dict[int, int]:
        """Calls counted so far per probe, read in one quick pass: what the
        duty cycles put next to the server's row counter."""
        value = ProbeStats()
        fd = self._fds["stats"]
        return {i: value.calls if libbpf.lookup(fd, ctypes.c_uint32(i), value) else 0 for i in indices}

    def calls_and_time(self, indices: Iterable[int]) -> dict[int, tuple[int, int]]:
        """Calls and corrected ns so far per probe, in one pass: each duty
        cycle's own figures (the report's timeline)."""
        value = ProbeStats()
        fd = self._fds["stats"]
        return {i: (value.calls, value.corrected_ns) if libbpf.lookup(fd, ctypes.c_uint32(i), value) else (0, 0)
                for i in indices}

    def start(self) -> None:
        """Open the window: every probe counts from now on."""
        self._set_enabled(True)

    def stop(self) -> None:
        """Close the window at once for all probes; detaching can then take its time."""
        if self._obj:
            self._set_enabled(False)

    def detach(self) -> None:
        """Stop timing and remove the probes; the maps stay readable until close()."""
        if self._obj:
            self.stop()
            self._sentinel_last()
            self._obj.detach_all()

    def close(self) -> None:
        if self._obj:
            self._sentinel_last()
            self._obj.close()
            self._obj = None

    def _sentinel_last(self) -> None:
        """The target's probes out a while before the sentinel: a thread
        still on its way from their breakpoints finds the kernel's mark."""
        if self._sentinel and self._target_links:
            self.detach_target()
            time.sleep(SENTINEL_GRACE_S)

    def total_calls(self) -> int:
        return sum(self.probe_counts(spec.index).calls for spec in self.specs)

    def part_calls(self, index: int, part: int) -> int:
        """Calls of one probe with one partition key so far (an index level, for BtrBulk::insert)."""
        value = PartStats()
        found = libbpf.lookup(self._fds["part_stats"], PartKey(probe=index, part=part), value)
        return value.calls if found else 0

    def snapshot(self) -> Snapshot:
        if not self._obj:
            raise BpfError("the probes are closed")
        out: dict[int, ProbeCounts] = {}
        value = ProbeStats()
        for spec in self.specs:
            if libbpf.lookup(self._fds["stats"], ctypes.c_uint32(spec.index), value):
                out[spec.index] = probe_counts(value)
        part = PartStats()
        for key in libbpf.keys(self._fds["part_stats"], PartKey):
            if key.probe in out and libbpf.lookup(self._fds["part_stats"], key, part):
                out[key.probe].partitions[key.part] = PartCounts(part.calls, part.total_ns, Histogram.of_slots(part.hist),
                                                                 part.corrected_ns, Histogram.of_slots(part.chist))
        edge = EdgeStats()
        for key in libbpf.keys(self._fds["edges"], EdgeKey):
            if key.probe in out and libbpf.lookup(self._fds["edges"], key, edge):
                parent = None if key.parent == NO_PARENT else key.parent
                out[key.probe].callers[(key.tid, parent)] = (edge.calls, edge.total_ns, edge.corrected_ns)
        counters = {}
        c = ctypes.c_uint64()
        for i, name in enumerate(COUNTERS):
            counters[name] = c.value if libbpf.lookup(self._fds["counters"], ctypes.c_uint32(i), c) else 0
        return Snapshot(out, counters, self._statements())

    def _statements(self) -> dict[int, StatementCounts]:
        out: dict[int, StatementCounts] = {}
        value = StmtStats()
        for key in libbpf.keys(self._fds["statements"], ctypes.c_uint64):  # noqa: SIM118 (a BPF map)
            if libbpf.lookup(self._fds["statements"], key, value) and value.executions:
                text = value.text[:value.text_len]  # (ctypes stops at the NUL)
                out[key.value] = StatementCounts(value.command, text, value.text_len < STMT_TEXT_LEN,
                                                 value.executions, value.total_ns, Histogram.of_slots(value.hist),
                                                 value.probe_hits, value.probe_cost_ns)
        edge = EdgeStats()
        for key in libbpf.keys(self._fds["stmt_edges"], StmtEdgeKey):
            if key.stmt in out and libbpf.lookup(self._fds["stmt_edges"], key, edge):
                parent = None if key.parent == NO_PARENT else key.parent
                out[key.stmt].calls[(key.probe, parent, key.stage or None)] = (edge.calls, edge.total_ns,
                                                                                edge.corrected_ns)
        return out
