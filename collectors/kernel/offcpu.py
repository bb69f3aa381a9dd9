"""Off-CPU time: where the target's threads wait (I/O, locks, log flushes,
a CPU) during the window, from the sched_switch tracepoint in BPF
(probes/offcpu.bpf.c), as folded stacks weighted in microseconds."""

from __future__ import annotations

import ctypes
import time

from mysqlprobe import probes
from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import (Background, Collector, CollectorUnavailable, Cost, Facts, Section,
                                        lower_thread_priority)
from mysqlprobe.collectors.cpu.perf import KERNEL_SUFFIX, fold_samples
from mysqlprobe.collectors.target.addresses import UNKNOWN, function_name, user_names
from mysqlprobe.errors import BpfError
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import stacks_summary
from mysqlprobe.probes import abi
from mysqlprobe.probes.abi import STACK_DEPTH, Away, OffCpuKey, OffCpuValue
from dataclasses import dataclass

OFFCPU_FILE = "offcpu.folded"
# the off-CPU, I/O and sampling objects load behind the probes' own: 2-3 ms of
# CPU in every 10 ms the probes' load and calibration want
LOADER_NICENESS = 10
WAITING_FOR_CPU = "[waiting for a CPU]"   # the leaf of a preempted thread's stack


@dataclass
class OffCpuRecord:
    """Off-CPU time of one thread with one pair of stacks."""

    tid: int
    user: list[int]       # addresses, leaf first; empty when the stack could not be taken
    kernel: list[int]
    preempted: bool
    ns: int
    count: int


class PhasedPrograms:
    """A BPF object of tracepoint programs watching one process, attached
    only while a window or an on-phase is open (attached, they run on
    every event of the host, the target's or not), and from the load to
    the window's start, switched off. Use as a context manager; start()
    and stop() open and close."""

    object_name = ""
    programs: tuple[str, ...] = ()
    what = ""                 # the tracepoints, for messages
    maps: tuple[str, ...] = (".bss", "stacks", "dropped")
    # attached but switched off, it costs an early return per event (a
    # tracepoint's); False where the events cost the host anyway (a
    # sampler's timer interrupts): detached again once the check is done
    idle_while_off = True

    def __init__(self, pid: int, verbose: bool = False):
        self.pid = pid
        self._obj = libbpf.BpfObject(probes.object_path(self.object_name),
                                     abi.rodata(self.object_name, self.config()), verbose)
        try:
            # refused here, before any window opens, if at all; left attached
            # (switched off: .bss) for the window's start, which is a tenth of
            # a second away: a tracepoint's attach patches the kernel's code,
            # 6-16 ms here, on the way to the probes twice otherwise
            self._attach()
            if not self.idle_while_off:
                self._obj.detach_all()
            self.program_fds = [self._obj.program_fd(p) for p in self.programs]
            self._fds = {name: self._obj.map_fd(name) for name in self.maps}
        except BaseException:
            self._obj.close()
            raise

    def config(self):
        """The object's .rodata configuration: the target's process id."""
        return ctypes.c_uint32(self.pid)

    def _attach(self) -> None:
        for p in self.programs:
            self._obj.attach_program(self._obj.program(p), self.what)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _enable(self, on: bool) -> None:
        libbpf.update(self._fds[".bss"], ctypes.c_uint32(0), ctypes.c_uint32(1 if on else 0))

    def start(self) -> None:
        if not self._obj.attached:
            self._attach()
        self._enable(True)

    def stop(self) -> None:
        self._enable(False)
        self._obj.detach_all()

    def _stack(self, stack_id: int) -> list[int]:
        if stack_id < 0:
            return []
        frames = (ctypes.c_uint64 * STACK_DEPTH)()
        if not libbpf.lookup(self._fds["stacks"], ctypes.c_uint32(stack_id), frames):
            return []
        return [a for a in frames if a]

    def dropped(self, names: tuple[str, ...]) -> dict[str, int]:
        n = ctypes.c_uint64()
        return {what: n.value for i, what in enumerate(names)
                if libbpf.lookup(self._fds["dropped"], ctypes.c_uint32(i), n) and n.value}

    def run_stats(self) -> tuple[int, int]:
        """The kernel's run time (ns) and runs of the programs, summed."""
        stats = [libbpf.program_run_stats(fd) for fd in self.program_fds]
        return sum(ns for ns, _ in stats), sum(runs for _, runs in stats)

    def close(self) -> None:
        self._obj.close()


class OffCpuSession(PhasedPrograms):
    """The sched_switch program for one process. A wait still open when a
    phase closes counts up to then (`cut`)."""

    object_name = "offcpu"
    programs = ("on_switch",)
    what = "the sched_switch tracepoint"
    maps = (".bss", "offcpu", "stacks", "dropped", "aways")

    def __init__(self, pid: int, verbose: bool = False):
        super().__init__(pid, verbose)
        self.cut: dict[tuple, list[int]] = {}  # (tid, ustack, kstack, preempted) -> [ns, waits]

    def stop(self) -> None:
        super().stop()
        self._drain_open_waits(time.monotonic_ns())  # bpf_ktime_get_ns's clock

    def _drain_open_waits(self, now_ns: int) -> None:
        away = Away()
        for task in libbpf.keys(self._fds["aways"], ctypes.c_uint64):
            if libbpf.lookup(self._fds["aways"], task, away) and now_ns > away.ts:
                acc = self.cut.setdefault((away.tid, away.ustack, away.kstack, away.preempted), [0, 0])
                acc[0] += now_ns - away.ts
                acc[1] += 1
            libbpf.delete(self._fds["aways"], task)

    def records(self) -> list[OffCpuRecord]:
        """What the map holds, with the waits cut by the phases' ends added."""
        totals = {k: list(v) for k, v in self.cut.items()}
        value = OffCpuValue()
        for key in libbpf.keys(self._fds["offcpu"], OffCpuKey):
            if libbpf.lookup(self._fds["offcpu"], key, value):
                acc = totals.setdefault((key.tid, key.ustack, key.kstack, key.preempted), [0, 0])
                acc[0] += value.ns
                acc[1] += value.count
        return [OffCpuRecord(tid, self._stack(ustack), self._stack(kstack), bool(preempted), ns, count)
                for (tid, ustack, kstack, preempted), (ns, count) in totals.items()]



def kernel_frames(leaf_first: list[int], kernel_name) -> list[str]:
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


def fold_offcpu(records: list[OffCpuRecord], user_name, kernel_name, comms: dict[int, str], process_comm: str,
                thread_names: dict[int, str]) -> Folded:
    """Folded stacks weighted in microseconds off CPU: the thread's name, its
    user frames, then its kernel frames (blocked) or '[waiting for a CPU]'
    (preempted)."""
    samples = []
    for r in records:
        us = round(r.ns / 1000)
        if us <= 0:
            continue
        user = [user_name(a) for a in reversed(r.user)]
        leaf = [WAITING_FOR_CPU] if r.preempted else kernel_frames(r.kernel, kernel_name)
        samples.append((comms.get(r.tid, process_comm), r.tid, user + leaf, us))
    return fold_samples(samples, thread_names)


def totals(records: list[OffCpuRecord]) -> dict:
    """Seconds the threads were blocked and waited for a CPU, and how often they left it."""
    blocked = sum(r.ns for r in records if not r.preempted)
    waiting = sum(r.ns for r in records if r.preempted)
    return {"blocked_s": round(blocked / 1e9, 6), "waiting_for_cpu_s": round(waiting / 1e9, 6),
            "switches": sum(r.count for r in records)}


class PhasedBpfCollector(Collector):
    """A collector of PhasedPrograms: on in the window, or in the on-phases
    when paced. Its cost is what the kernel timed its programs' runs at,
    with run-time statistics held on while the window is open (where the
    kernel allows them)."""

    can_pace = True
    session_type: type = PhasedPrograms
    label = ""                # what it records, for messages
    lacks = ""                # what the capture lacks without it

    def __init__(self, pid: int, verbose: bool = False):
        super().__init__()
        self.pid, self.verbose = pid, verbose
        self.session = None
        self.meter = libbpf.RunTimeMeter(lambda: self.session.run_stats())
        self._loader: Background | None = None

    def begin(self) -> None:
        """Load and verify the object in a thread: the kernel's part (the
        maps' memory, the verifier) runs beside this process's other
        preparations, not after them."""
        self._loader = Background(self._load_behind, f"{self.name}-load")

    def _load_behind(self) -> PhasedPrograms:
        """The load, at a lower priority: on two CPUs the probes' own load
        and calibration, not due before the window, wait for it otherwise."""
        lower_thread_priority(LOADER_NICENESS)
        return self.new_session()

    def prepare(self) -> None:
        loader, self._loader = self._loader, None
        try:
            self.session = loader.join() if loader else self.new_session()
        except BpfError as e:
            note = f"{self.label}: {e}; the capture has no {self.lacks}"
            raise CollectorUnavailable(note, note) from None
        self.meter.open()

    def new_session(self) -> PhasedPrograms:
        return self.session_type(self.pid, self.verbose)

    def start(self) -> None:
        self.meter.start()
        self.resume()

    def _turn(self, on: bool) -> None:
        # attached while on only
        if on:
            self.session.start()
        else:
            self.session.stop()

    def stop(self) -> None:
        self.pause()
        self.meter.stop()

    def _cost(self) -> Cost:
        if not self.meter.measured:
            return Cost(method="not measured: the kernel refused BPF run-time statistics")
        return Cost(target_s=self.meter.ns / 1e9, method=f"the kernel's run time of the programs on "
                                                         f"{self.session.what} ({self.meter.runs} runs, all "
                                                         "threads of the host)")

    def _user_names(self, addresses, facts: Facts, named=function_name):
        """A name for each of these user addresses of the target, looked up
        together (named: what a mangled symbol is shown as)."""
        try:
            names = user_names(self.pid, addresses, files=facts.mapped_files, named=named)
        except OSError:  # the target is gone: its mappings with it
            return lambda _address: UNKNOWN
        return lambda address: names.get(address, UNKNOWN)

    def close(self) -> None:
        self.meter.close()
        if self._loader:  # begun, never prepared: what it loaded is released here
            self.session, self._loader = self._loader.settle(), None
        if self.session:
            self.session.close()
            self.session = None


class OffCpuCollector(PhasedBpfCollector):
    """Where the target's threads waited in the window: the on-phases
    sample the time away, a wait still open at a phase's end counted up to
    it."""

    name = "off_cpu"
    session_type = OffCpuSession
    label, lacks = "off-CPU time", "off-CPU stacks"

    def collect(self, facts: Facts) -> Section:
        """The stacks folded under the threads' names, and a summary."""
        records = self.session.records()
        kernel = facts.kernel_symbols.names(a for r in records for a in r.kernel)
        folded = fold_offcpu(records, self._user_names((a for r in records for a in r.user), facts), kernel.get,
                             facts.comms, facts.process_comm, facts.thread_names)
        summary = stacks_summary(folded)
        record = {"status": "collected", "unit": "us", **totals(records),
                  "threads": [{"thread": t["thread"], "us": t["samples"]} for t in summary["threads"]],
                  "top_self": [{"function": f["function"], "us": f["samples"], "share": f["share"]}
                               for f in summary["top_self"]],
                  "dropped": self.session.dropped(abi.OFFCPU_DROPPED),
                  **({"on_s": round(self.on_s, 6)} if self.paced else {})}
        return Section(self.name, {self.name: record}, list(self.notes), self._cost(),
                       {OFFCPU_FILE: ("stacks_file", folded)} if folded.stacks else {})
