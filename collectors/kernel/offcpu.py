"""Off-CPU time: where the target's threads wait (I/O, locks, log flushes,
a CPU) during the window, from the sched_switch tracepoint in BPF
(probes/offcpu.bpf.c), as folded stacks weighted in microseconds.

Every wait is timed, per thread, kind (blocked, or waiting for a CPU) and
decade of length. Where the target leaves its CPUs more than
STACKS_PER_CPU_S times a second (an OLTP load), a CPU takes the stacks of
one switch-out in N, by count, each weighed N; each thread's time of a kind
and decade is then spread over its taken stacks of the same by their
weighed waits (a ratio estimate), so the stacks add up to every thread's
timed waits; where none was taken that time stays apart (`unstacked_s`),
in no stack."""

from __future__ import annotations

from collections.abc import Callable

from typing import Any

import ctypes
import time

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import Facts, Phases, Section
from mysqlprobe.collectors.kernel.phased import PhasedBpfCollector, PhasedPrograms
from mysqlprobe.collectors.cpu.perf import KERNEL_SUFFIX, fold_samples
from mysqlprobe.collectors.target.addresses import (UNKNOWN, binary_code, process_maps, uprobe_trampolines,
                                                    with_leaf_caller)
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.collectors.kernel.process import blocked_threads
from mysqlprobe.flamegraphs.stacks import (CONNECTION_FRAMES, UNDER_WAY, WAITING_FOR_CPU, connection_stacks,
                                           stacks_summary)
from mysqlprobe.probes import abi
from mysqlprobe.probes.abi import Away, OffCpuKey, OffCpuValue
from dataclasses import dataclass

OFFCPU_FILE = "offcpu.folded"
# stacks a CPU takes a second, about, where the target's switch-outs are more: an OLTP load of
# 8 sysbench clients leaves them ~25,000 times a second on this 2-CPU VM, and a switch-out's
# stacks cost the kernel ~3 us (the walks of both stacks): 1,000 a CPU keeps that near 0.6%
STACKS_PER_CPU_S = 1000
# probes/offcpu.h: waits are spread over the stacks of waits of their own decade of length
SHORTEST_LENGTH_NS, WAIT_LENGTHS = 100_000, 5


def wait_length(ns: int) -> int:
    """A wait's decade of length, as the off-CPU program classes it."""
    bound = SHORTEST_LENGTH_NS
    for i in range(WAIT_LENGTHS - 1):
        if ns < bound:
            return i
        bound *= 10
    return WAIT_LENGTHS - 1


@dataclass
class OffCpuRecord:
    """Off-CPU time of one thread with one pair of stacks."""

    tid: int
    user: list[int]       # addresses, leaf first; empty when the stack could not be taken
    kernel: list[int]
    preempted: bool
    ns: int
    count: int
    recovered: bool = False   # the user stack recovered by scanning where the frame pointers stopped in a library
    caller: int = 0           # stopped in a library's frameless function: its caller, which the walk skipped
    length: int = 0           # its waits' decade of length (wait_length): spread among their own
    frame: str = ""           # no stacks, one frame in their place (UNDER_WAY)


@dataclass
class ThreadWaits:
    """Every wait of one thread of one kind, timed (its stacks taken or not)."""

    ns: int = 0
    count: int = 0
    walked: int = 0   # of them, those whose stacks were taken


class OffCpuSession(PhasedPrograms):
    """The sched_switch program for one process. A wait still open when a
    phase closes counts up to then (`cut`)."""

    object_name = "offcpu"
    programs = ("on_switch",)
    what = "the sched_switch tracepoint"
    maps = (".bss", "offcpu", "stacks", "kernel_stacks", "dropped", "aways", "recovered", "thread_waits",
            "switched_on", "under_way")

    def __init__(self, pid: int, verbose: bool = False, stacks_per_cpu_s: int = STACKS_PER_CPU_S):
        self.stacks_per_cpu_s = stacks_per_cpu_s   # before the base loads the program with config()
        super().__init__(pid, verbose)
        # (tid, ustack, kstack, preempted, urecovered, caller, length, kcopied) -> [ns, waits]: taken stacks'
        # waits cut short
        self.cut: dict[tuple[Any, ...], list[int]] = {}
        self.cut_waits: dict[tuple[int, bool, int], ThreadWaits] = {}   # every wait cut short, by (tid, preempted, length)
        self.unstacked_ns = 0   # waits of a thread and kind none of whose stacks was taken
        self.walked = 0         # waits whose stacks were taken
        self.switches = 0       # waits timed
        # waits under way when the tracing switched on again (after a quiet phase), by (tid, what the
        # thread was blocked in then: 'S 7', or '' where it was not blocked): [ns, waits]
        self.under_way: dict[tuple[int, str], list[int]] = {}
        self._starts = 0
        self._blocked: dict[int, str] = {}   # at the last switch-on

    def start(self) -> None:
        """On: from the second start on (a quiet phase over), what each thread
        is blocked in is read first, then the switch-on time stamped, for the
        waits already under way (probes/offcpu.bpf.c's `under_way`). The
        window's first start leaves them to the process's snapshot."""
        zero = ctypes.c_uint32(0)
        if self._starts:
            self._blocked = blocked_now(self.pid)
            libbpf.update(self._fds["switched_on"], zero, ctypes.c_uint64(time.monotonic_ns()))
        else:
            libbpf.update(self._fds["switched_on"], zero, ctypes.c_uint64(0))
        self._starts += 1
        super().start()

    def config(self) -> abi.OffCpuConfig:
        """The target, the stacks a CPU takes a second, its binary's code where
        a recovered stack's return addresses point, and its page of uretprobe
        trampolines."""
        maps, exe = process_maps(self.pid)
        return abi.OffCpuConfig(self.pid, self.stacks_per_cpu_s, *binary_code(maps, exe), uprobe_trampolines(maps))

    def stop(self) -> None:
        super().stop()
        self._drain_open_waits(time.monotonic_ns())  # bpf_ktime_get_ns's clock
        self._drain_under_way()

    def _drain_under_way(self) -> None:
        timed = abi.OffCpuTimed()
        for tid in libbpf.keys(self._fds["under_way"], ctypes.c_uint32):
            if libbpf.lookup(self._fds["under_way"], tid, timed):
                acc = self.under_way.setdefault((tid.value, self._blocked.get(tid.value, "")), [0, 0])
                acc[0] += timed.ns
                acc[1] += timed.count
            libbpf.delete(self._fds["under_way"], tid)

    def _drain_open_waits(self, now_ns: int) -> None:
        away = Away()
        for task in libbpf.keys(self._fds["aways"], ctypes.c_uint64):
            if libbpf.lookup(self._fds["aways"], task, away) and now_ns > away.ts:
                length = wait_length(now_ns - away.ts)
                waits = self.cut_waits.setdefault((away.tid, bool(away.preempted), length), ThreadWaits())
                waits.ns += now_ns - away.ts
                waits.count += 1
                waits.walked += bool(away.taken)
                if away.taken:   # weighed as the program weighs it: by the waits it stands for
                    acc = self.cut.setdefault(_key(away, length), [0, 0])
                    acc[0] += (now_ns - away.ts) * away.taken
                    acc[1] += away.taken
            libbpf.delete(self._fds["aways"], task)

    def records(self) -> list[OffCpuRecord]:
        """What the map holds, with the waits cut by the phases' ends added,
        each thread's taken stacks of a kind carrying all its waits of it."""
        totals = {k: list(v) for k, v in self.cut.items()}
        value = OffCpuValue()
        for key in libbpf.keys(self._fds["offcpu"], OffCpuKey):
            if libbpf.lookup(self._fds["offcpu"], key, value):
                acc = totals.setdefault(_key(key, key.length), [0, 0])
                acc[0] += value.ns
                acc[1] += value.count
        # a user stack recovered (probes/user_stack.h) is kept by its hash in `recovered`, as a stack
        # its map refused is; the kernel stacks are in a map of their own (probes/offcpu.h)
        taken = [OffCpuRecord(tid, self._kept(ustack, urecovered), self._kept(kstack, kcopied, "kernel_stacks"),
                              bool(preempted), ns, count, bool(urecovered) and not urecovered & abi.COPIED_STACK,
                              caller, length)
                 for (tid, ustack, kstack, preempted, urecovered, caller, length, kcopied), (ns, count)
                 in totals.items()]
        timed = self._thread_waits()
        self.walked = sum(w.walked for w in timed.values())
        self.switches = sum(w.count for w in timed.values())
        records, self.unstacked_ns = spread_waits(taken, timed)
        return records + [OffCpuRecord(tid, [], [], False, ns, count, frame=UNDER_WAY.format(system_call(blocked)))
                          for (tid, blocked), (ns, count) in sorted(self.under_way.items())]

    def _thread_waits(self) -> dict[tuple[int, bool, int], ThreadWaits]:
        """Every wait timed, by (tid, preempted, length), those cut short with them."""
        out = {k: ThreadWaits(w.ns, w.count, w.walked) for k, w in self.cut_waits.items()}
        value = abi.OffCpuTimed()
        for key in libbpf.keys(self._fds["thread_waits"], abi.OffCpuThreadKey):
            if libbpf.lookup(self._fds["thread_waits"], key, value):
                waits = out.setdefault((key.tid, bool(key.preempted), key.length), ThreadWaits())
                waits.ns += value.ns
                waits.count += value.count
                waits.walked += value.walked
        return out


def spread_waits(taken: list[OffCpuRecord],
                 timed: dict[tuple[int, bool, int], ThreadWaits]) -> tuple[list[OffCpuRecord], int]:
    """Each thread's taken stacks of a kind (preempted or blocked, and of
    one decade of length) scaled to all its timed waits of that kind (their
    ns and their count); and the ns of the threads' kinds with no stack
    taken. Unpaced, every wait's stacks were taken: the records are as
    they were."""
    sampled: dict[tuple[int, bool, int], list[int]] = {}
    for r in taken:
        acc = sampled.setdefault((r.tid, r.preempted, r.length), [0, 0])
        acc[0] += r.ns
        acc[1] += r.count
    out = []
    for r in taken:
        ns, count = sampled[(r.tid, r.preempted, r.length)]
        all_waits = timed.get((r.tid, r.preempted, r.length))
        if all_waits is None or (all_waits.ns, all_waits.count) == (ns, count) or not ns:
            out.append(r)
            continue
        out.append(OffCpuRecord(r.tid, r.user, r.kernel, r.preempted, round(r.ns * all_waits.ns / ns),
                                max(1, round(r.count * all_waits.count / count)) if count else r.count,
                                r.recovered, r.caller, r.length))
    unstacked = sum(w.ns for k, w in timed.items() if k not in sampled)
    return out, unstacked


def _key(k: Away | OffCpuKey, length: int) -> tuple[int, ...]:
    """An open wait's or a map key's identity: its thread, stacks and decade of length."""
    return (k.tid, k.ustack, k.kstack, k.preempted, k.urecovered, k.caller, length, k.kcopied)



# x86-64 system call numbers a blocked thread of a server is commonly in, by name
SYSTEM_CALLS = {0: "read", 7: "poll", 17: "pread64", 18: "pwrite64", 23: "select", 35: "nanosleep", 45: "recvfrom",
                47: "recvmsg", 74: "fsync", 75: "fdatasync", 202: "futex", 208: "io_getevents", 230: "clock_nanosleep",
                232: "epoll_wait", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait"}


def system_call(blocked: str) -> str:
    """The system call of a blocked thread's 'S 7' by name (its number where
    unnamed), '?' where it was not blocked."""
    _, _, call = blocked.partition(" ")
    return SYSTEM_CALLS.get(int(call), call) if call.isdigit() else "?"


def blocked_now(pid: int) -> dict[int, str]:
    """Each blocked thread of the process now: its state and system call ('S 7')."""
    try:
        return {tid: state for tid, (state, _) in blocked_threads(f"/proc/{pid}").items()}
    except OSError:   # the process is gone
        return {}


def kernel_frames(leaf_first: list[int], kernel_name: Callable[[int], str | None]) -> list[str]:
    """A blocked thread's kernel frames, root first, down to where it gave up
    its CPU: the scheduler and the tracing that took the stack are left out."""
    out = []
    for address in reversed(leaf_first):
        name = kernel_name(address) or UNKNOWN
        if name in _SCHEDULER or name.startswith("bpf_"):
            break
        out.append(name + KERNEL_SUFFIX)
    return out


_SCHEDULER = {"schedule", "__schedule", "schedule_idle", "preempt_schedule", "preempt_schedule_common"}


def fold_offcpu(records: list[OffCpuRecord], user_name: Callable[[int], str],
                kernel_name: Callable[[int], str | None], comms: dict[int, str], process_comm: str,
                thread_names: dict[int, str]) -> Folded:
    """Folded stacks weighted in microseconds off CPU: the thread's name, its
    user frames, then its kernel frames (blocked) or '[waiting for a CPU]'
    (preempted)."""
    samples: list[tuple[str, int | None, list[str], int]] = []
    for r in records:
        us = round(r.ns / 1000)
        if us <= 0:
            continue
        if r.frame:
            samples.append((comms.get(r.tid, process_comm), r.tid, [r.frame], us))
            continue
        user = [user_name(a) for a in reversed(with_leaf_caller(r.user, r.caller, user_name))]
        leaf = [WAITING_FOR_CPU] if r.preempted else kernel_frames(r.kernel, kernel_name)
        samples.append((comms.get(r.tid, process_comm), r.tid, user + leaf, us))
    return fold_samples(samples, thread_names)


def by_thread(records: list[OffCpuRecord], user_name: Callable[[int], str]) -> list[dict[str, Any]]:
    """Per thread, ns blocked and ns waiting for a CPU, as traced, and
    whether any of its stacks is a client connection's."""
    out: dict[int, list[int]] = {}
    connection: set[int] = set()
    for r in records:
        acc = out.setdefault(r.tid, [0, 0])
        acc[1 if r.preempted else 0] += r.ns
        if r.tid not in connection and any(user_name(a) in CONNECTION_FRAMES for a in r.user):
            connection.add(r.tid)
    return [{"tid": tid, "blocked_ns": b, "runq_ns": q, "connection": tid in connection}
            for tid, (b, q) in sorted(out.items())]


def totals(records: list[OffCpuRecord], switches: int | None = None) -> dict[str, Any]:
    """Seconds the threads were blocked and waited for a CPU, and how often
    they left it (switches: as timed, where the records' counts are spread)."""
    blocked = sum(r.ns for r in records if not r.preempted)
    waiting = sum(r.ns for r in records if r.preempted)
    recovered = sum(r.ns for r in records if r.recovered)
    return {"blocked_s": round(blocked / 1e9, 6), "waiting_for_cpu_s": round(waiting / 1e9, 6),
            "switches": sum(r.count for r in records) if switches is None else switches,
            "recovered_s": round(recovered / 1e9, 6)}


class OffCpuCollector(PhasedBpfCollector[OffCpuSession]):
    """Where the target's threads waited in the window: every switch of
    theirs timed, all window long but in the duty cycles' quiet phases (the
    wall-time account needs the whole window, not the probes' on-phases); a
    wait still open when it goes off counted up to then."""

    name = "off_cpu"
    optional = True
    can_pace = False
    quiets = True
    # its BPF object loads first in prepare, while a perf record starts; it starts right
    # after the process's snapshot of the threads' times and stops right before the
    # last (collectors/kernel/process.py): a wait open at the end is counted up to
    # where the kernel's times are read, not the other collectors' stops later
    phases = Phases(begin=50, prepare=0, start=92, collect=70)
    session_type = OffCpuSession
    label, lacks = "off-CPU time", "off-CPU stacks"

    def _silence(self, on: bool) -> bool:
        self._turn(not on)
        return True

    def stop(self) -> None:
        self.quiet(False)  # a quiet phase still open ends
        super().stop()

    def collect(self, facts: Facts) -> Section:
        """The stacks folded under the threads' names, and a summary."""
        records = self.live.records()
        kernel = facts.kernel_symbols.names(a for r in records for a in r.kernel)
        user = self._user_names((a for r in records for a in (*r.user, r.caller) if a), facts)
        folded = fold_offcpu(records, user, kernel.get, facts.comms, facts.process_comm, facts.thread_names)
        summary = stacks_summary(folded)
        record = {"status": "collected", "unit": "us", **totals(records, self.live.switches),
                  "threads": [{"thread": t["thread"], "us": t["samples"]} for t in summary["threads"]],
                  "top_self": [{"function": f["function"], "us": f["samples"], "share": f["share"]}
                               for f in summary["top_self"]],
                  # the client connections' time, picked as offcpu.svg picks them
                  "load_us": connection_stacks(folded).total,
                  "dropped": self.live.dropped(abi.OFFCPU_DROPPED),
                  "by_thread": by_thread(records, user), "quiet_s": round(self.quiet_s, 6),
                  # the pacing of the stacks, and the waits of a thread and kind none of whose stacks it took
                  "stacks_per_cpu_s": self.live.stacks_per_cpu_s, "stacks_walked": self.live.walked,
                  "unstacked_s": round(self.live.unstacked_ns / 1e9, 6),
                  **({"on_s": round(self.on_s, 6)} if self.paced else {})}
        return Section(self.name, {self.name: record}, list(self.notes), self._cost(),
                       {OFFCPU_FILE: ("stacks_file", folded)} if folded.stacks else {})
