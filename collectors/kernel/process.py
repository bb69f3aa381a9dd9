"""Process collector: what mysqld and the host did over the window, read
from /proc (proc(5)). It explains the time the probes cannot see: CPU in system mode,
context switches (threads blocking on I/O or locks), I/O bytes, iowait and
steal (a noisy neighbour on a VM)."""

from __future__ import annotations

from collections.abc import Callable

from typing import BinaryIO

from typing import Any

import os
import time

from mysqlprobe.collectors.base import Collector, Cost, CpuClock, Facts, Phases, Section
from mysqlprobe.collectors.target.addresses import UNKNOWN, file_mappings, user_names
from dataclasses import dataclass, field

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# /proc/stat's "cpu" line, in its order (proc(5))
HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


@dataclass
class ProcessSnapshot:
    """The target's CPU times and context switches at one moment."""

    at: float                      # time.monotonic()
    user_s: float
    system_s: float
    ctx_voluntary: int
    ctx_involuntary: int
    read_bytes: int | None
    write_bytes: int | None
    rss_bytes: int
    threads: int
    thread_cpu: dict[int, float]   # tid -> user + system seconds
    host: dict[str, float]         # /proc/stat's cpu line (HOST_CPU_FIELDS), seconds
    thread_names: dict[int, str]
    thread_ctx: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid -> (voluntary, involuntary)
    thread_sched: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid -> (on CPU ns, run-queue ns)
    thread_born: dict[int, float] = field(default_factory=dict)   # tid -> its start, seconds of CLOCK_BOOTTIME
    thread_waiting: dict[int, str] = field(default_factory=dict)  # tid -> its state and system call, if blocked
    thread_stack: dict[int, list[int]] = field(default_factory=dict)  # tid -> return addresses, if blocked
    boottime: float = 0.0                                          # CLOCK_BOOTTIME at `at`


def _stat_fields_of(path: str) -> list[str]:
    """A stat file of /proc, its fields after the command's parenthesis (state first)."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _times(fields: list[str]) -> tuple[float, float]:
    """(user, system) seconds: utime and stime, fields 14 and 15 of proc(5)."""
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def _stat_times(path: str) -> tuple[float, float]:
    return _times(_stat_fields_of(path))


def _keyed(path: str) -> dict[str, int]:
    """A /proc file of 'key: number' lines (status, io)."""
    out = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            parts = value.split()
            if parts and parts[0].isdigit():
                out[key.strip()] = int(parts[0])
    return out


def schedstat(path: str) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable on a run queue) of a thread: the scheduler's
    own exact counts (/proc/PID/task/TID/schedstat, CONFIG_SCHED_INFO)."""
    try:
        with open(path) as f:
            on, runq = f.read().split()[:2]
        return int(on), int(runq)
    except (OSError, ValueError):
        return None


def waiting_state(task: str, stat_fields: list[str]) -> tuple[str, int] | None:
    """('S 7', user stack pointer) for a blocked thread (state, system call
    number), else None: what it was doing when the window opened, for the
    time it spent off a CPU that the off-CPU tracing never saw begin."""
    state = stat_fields[0]
    if state not in ("S", "D", "I"):
        return None
    try:
        with open(f"{task}/syscall") as f:
            fields = f.read().split()   # number, six arguments, stack pointer, program counter
        call, sp = fields[0], int(fields[7], 16) if len(fields) > 7 else 0
    except (OSError, IndexError, ValueError):
        call, sp = "?", 0
    return f"{state} {call}", sp


STACK_SCAN_BYTES = 16384   # of a blocked thread's stack, read from its pointer up
STACK_SCAN_FRAMES = 48


def scanned_return_addresses(mem: BinaryIO, sp: int, code: list[tuple[int, int]]) -> list[int]:
    """The words on a blocked thread's user stack that point into code just
    after a call instruction, innermost first: its callers, read from its
    memory without stopping it (frame pointers cannot be walked from
    outside: the thread's registers are not to be had). A scan may keep a
    stale return address below a live one; the innermost mechanism read
    from them is what counts."""
    try:
        mem.seek(sp)
        data = mem.read(STACK_SCAN_BYTES)
    except (OSError, ValueError, OverflowError):
        return []
    out: list[int] = []
    for i in range(0, len(data) - 7, 8):
        word = int.from_bytes(data[i:i + 8], "little")
        if not any(lo + 7 <= word < hi for lo, hi in code):
            continue
        try:
            mem.seek(word - 7)
            b = mem.read(7)
        except (OSError, ValueError):
            continue
        if len(b) == 7 and (b[2] == 0xE8 or (b[5] == 0xFF and (b[6] & 0x38) == 0x10)
                            or (b[4] == 0xFF and (b[5] & 0x38) == 0x10) or (b[1] == 0xFF and (b[2] & 0x38) == 0x10)):
            out.append(word)
            if len(out) >= STACK_SCAN_FRAMES:
                break
    return out


def host_cpu_times(path: str = "/proc/stat") -> dict[str, float]:
    with open(path) as f:
        values = f.readline().split()[1:]
    return {name: int(v) / CLOCK_TICKS for name, v in zip(HOST_CPU_FIELDS, values)}


def snapshot(pid: int, proc: str = "/proc", stacks: bool = False, times_first: bool = False) -> ProcessSnapshot | None:
    """None when the process is gone or cannot be read; stacks: scan each
    blocked thread's stack for its callers too. The threads' run and queue
    times (schedstat) are read in one pass of their own, as close to the
    window as can be: last where the window opens after the snapshot, first
    (times_first) where it closed before it. Read with the rest, a thread's
    time was up to the whole pass (10-20 ms on a slow host) from the
    window's edge: the waits the tracing could not see."""
    base = f"{proc}/{pid}"
    try:
        # the blocked threads' stacks first (their scan takes 10-80 ms): the threads'
        # times are read last, at the snapshot's time, as close to the window as can be
        scanned = _scan_stacks(pid, _blocked_stack_pointers(base), proc) if stacks else {}
        sched: dict[int, tuple[int, int]] = _sched_times(base) if times_first else {}
        at = time.monotonic()
        user, system = _stat_times(f"{base}/stat")
        status = _keyed(f"{base}/status")
        read_b: int | None
        write_b: int | None
        try:
            io = _keyed(f"{base}/io")
            read_b, write_b = io["read_bytes"], io["write_bytes"]
        except (OSError, KeyError):  # another user's, without root
            read_b = write_b = None
        with open(f"{base}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE_SIZE
        thread_cpu, names, thread_ctx, born, waiting = {}, {}, {}, {}, {}
        boottime = time.clock_gettime(time.CLOCK_BOOTTIME)
        for entry in os.listdir(f"{base}/task"):
            task = f"{base}/task/{entry}"
            try:
                fields = _stat_fields_of(f"{task}/stat")
            except OSError:  # ended since the listing
                continue
            tid = int(entry)
            thread_cpu[tid] = sum(_times(fields))
            born[tid] = int(fields[19]) / CLOCK_TICKS
            state = waiting_state(task, fields)
            if state:
                waiting[tid] = state[0]
            names[tid] = thread_name(pid, tid, proc)
            try:
                keyed = _keyed(f"{base}/task/{entry}/status")
                thread_ctx[tid] = (keyed.get("voluntary_ctxt_switches", 0), keyed.get("nonvoluntary_ctxt_switches", 0))
            except OSError:
                pass
        host = host_cpu_times(f"{proc}/stat")
        if not times_first:
            sched = _sched_times(base)
            at = time.monotonic()
    except (OSError, IndexError, ValueError):
        return None
    return ProcessSnapshot(at, user, system, status.get("voluntary_ctxt_switches", 0),
                           status.get("nonvoluntary_ctxt_switches", 0), read_b, write_b, rss, len(thread_cpu),
                           thread_cpu, host, names, thread_ctx, sched, born, waiting, scanned, boottime)


def _sched_times(base: str) -> dict[int, tuple[int, int]]:
    """Each thread's schedstat (run and queue times), in one pass."""
    out = {}
    for entry in os.listdir(f"{base}/task"):
        counts = schedstat(f"{base}/task/{entry}/schedstat")
        if counts:
            out[int(entry)] = counts
    return out


def blocked_threads(base: str) -> dict[int, tuple[str, int]]:
    """Each blocked thread of the process at `base` (/proc/PID), by tid: its
    state and system call ('S 7') and its user stack pointer (waiting_state)."""
    out = {}
    for entry in os.listdir(f"{base}/task"):
        try:
            state = waiting_state(f"{base}/task/{entry}", _stat_fields_of(f"{base}/task/{entry}/stat"))
        except OSError:   # ended since the listing
            continue
        if state:
            out[int(entry)] = state
    return out


def _blocked_stack_pointers(base: str) -> dict[int, int]:
    """Each blocked thread's user stack pointer, by tid."""
    return {tid: sp for tid, (_, sp) in blocked_threads(base).items()}


def _scan_stacks(pid: int, sps: dict[int, int], proc: str = "/proc") -> dict[int, list[int]]:
    """Each blocked thread's callers, scanned from its stack (root may read another's memory)."""
    try:
        with open(f"{proc}/{pid}/maps") as f:
            code = [(m.start, m.end) for m in file_mappings(f.read())]
        with open(f"{proc}/{pid}/mem", "rb", buffering=0) as mem:
            return {tid: scanned_return_addresses(mem, sp, code) for tid, sp in sps.items() if sp}
    except OSError:
        return {}


def context_switches(start: ProcessSnapshot, end: ProcessSnapshot) -> tuple[int, int]:
    """Voluntary and involuntary switches of all the process's threads in
    between (/proc/PID/status counts its first thread's only): each thread's
    own, from 0 for one born in between; one that ended in between is lost."""
    if not end.thread_ctx:
        return end.ctx_voluntary - start.ctx_voluntary, end.ctx_involuntary - start.ctx_involuntary
    vol = inv = 0
    for tid, (v, i) in end.thread_ctx.items():
        v0, i0 = start.thread_ctx.get(tid, (0, 0))
        vol, inv = vol + max(v - v0, 0), inv + max(i - i0, 0)
    return vol, inv


def thread_times(start: ProcessSnapshot, end: ProcessSnapshot,
                 named: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    """Each thread's wall time in the window and how the kernel spent it:
    on a CPU and runnable on a run queue (schedstat, exact), its context
    switches, and, for one blocked when the window opened, what it was
    blocked in. A thread born in the window counts from its start; one
    that ended in it is lost (the count is in `threads_ended`). named: a
    blocked thread's scanned callers' names by address, innermost first."""
    if not end.thread_sched:
        return []
    window_s = end.at - start.at
    out = []
    for tid, (on, runq) in sorted(end.thread_sched.items()):
        on0, runq0 = start.thread_sched.get(tid, (0, 0))
        born = tid not in start.thread_sched
        wall_s = max(min(end.boottime - end.thread_born.get(tid, 0.0), window_s), 0.0) if born else window_s
        v, i = end.thread_ctx.get(tid, (0, 0))
        v0, i0 = start.thread_ctx.get(tid, (0, 0))
        out.append({"tid": tid, "comm": end.thread_names.get(tid, "?"), "wall_ns": round(wall_s * 1e9),
                    "on_cpu_ns": max(on - on0, 0), "runq_ns": max(runq - runq0, 0),
                    "voluntary": max(v - v0, 0), "involuntary": max(i - i0, 0), "born_in_window": born,
                    "blocked_at_start": start.thread_waiting.get(tid),
                    **({"blocked_in": [named(a) for a in start.thread_stack[tid]]}
                       if named and start.thread_stack.get(tid) else {})})
    return out


def cpu_seconds(pid: int, proc: str = "/proc") -> float | None:
    """User + system CPU seconds of a process so far; None when it is gone."""
    try:
        return sum(_stat_times(f"{proc}/{pid}/stat"))
    except (OSError, IndexError, ValueError):
        return None


def thread_cpu_seconds(pid: int, tid: int, proc: str = "/proc") -> float | None:
    """CPU seconds one thread of a process has run so far: the scheduler's
    own count in ns (schedstat), else user + system in clock ticks (stat);
    None when it is gone."""
    task = f"{proc}/{pid}/task/{tid}"
    try:
        with open(f"{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        return sum(_stat_times(f"{task}/stat"))
    except (OSError, IndexError, ValueError):
        return None


def thread_name(pid: int, tid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def window_record(start: ProcessSnapshot | None, end: ProcessSnapshot | None, top_threads: int = 10,
                  named: Callable[[int], str] | None = None) -> dict[str, Any] | None:
    """The changes between two snapshots, as profile.json stores them (pure)."""
    if start is None or end is None:
        return None
    seconds = max(end.at - start.at, 1e-9)

    def delta(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else b - a

    host_total = sum(end.host.values()) - sum(start.host.values())
    host = {k: round((end.host[k] - start.host.get(k, 0.0)) / host_total, 4) if host_total > 0 else None
            for k in end.host}
    cpu = {tid: end.thread_cpu[tid] - start.thread_cpu.get(tid, 0.0) for tid in end.thread_cpu}
    busiest = sorted(cpu.items(), key=lambda kv: -kv[1])[:top_threads]
    return {
        "seconds": round(seconds, 6),
        "cpu_user_s": round(end.user_s - start.user_s, 4),
        "cpu_system_s": round(end.system_s - start.system_s, 4),
        "cpu_cores": round((end.user_s - start.user_s + end.system_s - start.system_s) / seconds, 4),
        **dict(zip(("ctx_switches_voluntary", "ctx_switches_involuntary"), context_switches(start, end))),
        "read_bytes": delta(start.read_bytes, end.read_bytes),
        "write_bytes": delta(start.write_bytes, end.write_bytes),
        "rss_bytes": end.rss_bytes,
        "threads": end.threads,
        "busiest_threads": [{"tid": tid, "name": end.thread_names.get(tid, "?"), "cpu_s": round(s, 4)}
                            for tid, s in busiest],
        "host_cpu_share": host,
        "thread_times": thread_times(start, end, named),
        "threads_ended": len(set(start.thread_cpu) - set(end.thread_cpu)),
    }


class ProcessCollector(Collector):
    """mysqld and the host over the window: two snapshots."""

    name = "process"
    # its snapshots the last thing before the window opens and the first after it
    # closes: the threads' times the account spreads are the samplers' window,
    # not 60-80 ms more of it (the other collectors' starts); collected early,
    # the threads' comms name the stacks collected after it
    phases = Phases(begin=70, prepare=70, start=90, collect=10)

    def __init__(self, pid: int):
        super().__init__()
        self.pid = pid
        self.clock = CpuClock()
        self.first: ProcessSnapshot | None = None
        self.last: ProcessSnapshot | None = None

    def start(self) -> None:
        with self.clock:
            self.first = snapshot(self.pid, stacks=True)

    def stop(self) -> None:
        with self.clock:
            self.last = snapshot(self.pid, times_first=True)

    def thread_comms(self) -> dict[int, str]:
        """The threads' names by tid, as the kernel had them at the window's end."""
        return self.last.thread_names if self.last else {}

    def collect(self, facts: Facts) -> Section:
        named = None
        addresses = {a for stack in (self.first.thread_stack.values() if self.first else ()) for a in stack}
        if addresses:
            with self.clock:
                try:
                    names = user_names(self.pid, addresses, files=facts.mapped_files)
                    named = lambda a: names.get(a, UNKNOWN)  # noqa: E731
                except OSError:  # the target is gone: its mappings with it
                    pass
        cost = Cost(cpu_s=self.clock.seconds, method="this process's CPU time reading /proc")
        return Section(self.name, {"process": window_record(self.first, self.last, named=named)}, list(self.notes),
                       cost)


def alive(pid: int) -> bool:
    """The process runs (a zombie has ended, for our purpose)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


STOPPED_STATES = ("T", "t")   # stopped by a signal (SIGSTOP, SIGTSTP), or by a tracer


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


@dataclass(frozen=True)
class ServerProcess:
    """The server process as it was when first seen: told apart from one that
    is gone (or restarted under the same PID) and from one that is paused."""

    pid: int
    start_ticks: int | None

    @classmethod
    def of(cls, pid: int) -> "ServerProcess":
        fields = _stat_fields(pid)
        return cls(pid, int(fields[19]) if fields else None)

    def gone(self) -> bool:
        fields = _stat_fields(self.pid)
        return fields is None or fields[0] in ("Z", "X") or int(fields[19]) != self.start_ticks

    def stopped(self) -> bool:
        fields = _stat_fields(self.pid)
        return fields is not None and fields[0] in STOPPED_STATES and int(fields[19]) == self.start_ticks
