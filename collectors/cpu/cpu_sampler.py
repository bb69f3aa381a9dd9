"""CPU sampling in the kernel: a cpu-clock perf event on every CPU runs a
BPF program (probes/cpu_sample.bpf.c) that counts the target's samples by
thread and stack; the stacks are named once, when the window is over.

No perf process: nothing to spawn before the probes go on (two `perf
record` starts took 0.2-0.5 s of mysqlprobe's start under load, most of it
perf reading the kernel's symbols), nothing written per sample and no
`perf script` to read it back. The kernel walks frame pointers only: for
a binary built without them the recorder keeps perf record with DWARF
stacks for the CPU profile, and the bursts take the sampled address alone,
which is all they need there."""

from __future__ import annotations

from collections.abc import Callable

import ctypes
import re
import time

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.target.addresses import (UNKNOWN, UPROBES, binary_code, process_maps, uprobe_trampolines,
                                                    with_leaf_caller)
from mysqlprobe.collectors.base import Cost, Facts, Phases, Section
from mysqlprobe.collectors.cpu.cpu_bursts import burst_time_of
from mysqlprobe.collectors.kernel.phased import PhasedBpfCollector, PhasedPrograms
from mysqlprobe.collectors.cpu.perf import KERNEL_SUFFIX, STACKS_FILE, fold_samples, thread_roots, threads_record
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.collectors.cpu.perf_record import Unwinding
from mysqlprobe.errors import BpfError
from mysqlprobe.flamegraphs.stacks import stacks_summary
from mysqlprobe.probes import abi
from dataclasses import dataclass

SLICES_FILE = "stacks-by-time.folded"   # the CPU samples by slice of time: `slice;thread;frames count`
KERNEL_FRAME = "[kernel]"  # a burst sample's own frame when the CPU was in the kernel


def online_cpus(text: str | None = None) -> list[int]:
    """The CPUs of /sys/devices/system/cpu/online ('0-3,5')."""
    if text is None:
        with open("/sys/devices/system/cpu/online") as f:
            text = f.read()
    cpus: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


@dataclass
class SampleRecord:
    """CPU samples of one thread with one pair of stacks."""

    tid: int
    user: list[int]     # addresses, leaf first (the sampled address alone without user stacks)
    kernel: list[int]   # leaf first; empty unless the CPU was in the kernel and its stacks are taken
    in_kernel: bool
    count: int
    at_entry: bool = False   # at a return-probed function's first instructions: its callers unknown
    caller: int = 0          # a frameless leaf's caller, which the frame-pointer walk skipped
    slice: int = 0           # the slice of time it was taken in (sliced records only)


class CpuSampleSession(PhasedPrograms):
    """The sampling program on a cpu-clock event of every online CPU, the
    events open while the session is on."""

    object_name = "cpu_sample"
    programs = ("on_sample",)
    what = "cpu-clock perf events"
    maps = (".bss", "samples", "slices", "stacks", "recovered", "dropped")
    # open, its events interrupt every CPU at the frequency, counting or not:
    # the bursts' 4999 Hz left open from the load slowed 8 clients by 5-9%
    # in every phase of the window where no burst had run yet
    idle_while_off = False

    def __init__(self, pid: int, frequency: int, user_stacks: bool, kernel_stacks: bool, verbose: bool = False,
                 slice_ns: int = 0):
        self.frequency = frequency
        self.stacks = (abi.SAMPLE_USER_STACKS if user_stacks else 0) | (abi.SAMPLE_KERNEL_STACKS if kernel_stacks else 0)
        self.cpus = online_cpus()
        self.slice_ns = slice_ns
        self.origin_ns = time.monotonic_ns()   # the kernel's bpf_ktime_get_ns() reads the same clock
        super().__init__(pid, verbose)

    @property
    def period_ns(self) -> int:
        return round(1e9 / self.frequency)

    def config(self) -> abi.SampleConfig:
        maps, exe = process_maps(self.pid)
        return abi.SampleConfig(self.pid, self.stacks, uprobe_trampolines(maps), *binary_code(maps, exe),
                                self.origin_ns, self.slice_ns)

    def _attach(self) -> None:
        program = self._obj.program("on_sample")
        attr = libbpf.cpu_clock_attr(self.period_ns)
        for cpu in self.cpus:
            try:
                fd = libbpf.perf_event_open(attr, -1, cpu)
            except OSError as e:
                raise BpfError(f"a cpu-clock event on CPU {cpu}: {e.strerror or e}") from None
            self._obj.attach_perf_event(program, fd, f"the cpu-clock event of CPU {cpu}")

    def records(self, sliced: bool = False) -> list[SampleRecord]:
        """The samples by thread and stacks; sliced: by slice of time too
        (the `slices` map: empty unless the session slices)."""
        out = []
        count = ctypes.c_uint64()
        fd = self._fds["slices" if sliced else "samples"]
        for key in libbpf.keys(fd, abi.SampleKey):
            if libbpf.lookup(fd, key, count) and count.value:
                user = (self._kept(key.ustack, key.ucopied) if key.ustack >= 0 or key.ucopied
                        else [key.ip] if key.ip else [])
                out.append(SampleRecord(key.tid, user, self._kept(key.kstack, key.kcopied), bool(key.in_kernel),
                                        count.value, bool(key.at_entry), key.caller, key.slice))
        return out


# what GCC appends to a function it cloned (finish_task_switch.isra.0): perf shows the name without it
_CLONE_SUFFIX = re.compile(r"(\.(isra|constprop|part|cold|lto_priv)(\.\d+)?)+$")


def cpu_frames(record: SampleRecord, user_name: Callable[[int], str],
               kernel_name: Callable[[int], str | None]) -> list[str]:
    """A sample's frames, root first: its user frames, then its kernel ones
    (marked as perf's are). A sample at a return-probed function's entry is
    that function and [uprobes] (the probe's landing; the frames the
    kernel gave its callers are not to be trusted there)."""
    if record.at_entry and record.user:
        return [user_name(record.user[0]), UPROBES]
    addresses = with_leaf_caller(record.user, record.caller, user_name)
    user = [user_name(a) for a in reversed(addresses)] or [UNKNOWN]
    return user + [_CLONE_SUFFIX.sub("", kernel_name(a) or UNKNOWN) + KERNEL_SUFFIX for a in reversed(record.kernel)]


class BpfSampling(PhasedBpfCollector[CpuSampleSession]):
    """What both BPF samplers share: the session and its cost (the kernel's
    run time of the sampling program)."""

    can_pace = False

    def __init__(self, pid: int, frequency: int, user_stacks: bool, kernel_stacks: bool, verbose: bool = False,
                 slice_s: float = 0.0):
        super().__init__(pid, verbose)
        self.frequency, self.user_stacks, self.kernel_stacks = frequency, user_stacks, kernel_stacks
        self.slice_ns = round(slice_s * 1e9)
        self.switch_failures = 0
        self._switch_error = ""

    def new_session(self) -> CpuSampleSession:
        return CpuSampleSession(self.pid, self.frequency, self.user_stacks, self.kernel_stacks, self.verbose,
                                self.slice_ns)

    def _turn(self, on: bool) -> None:
        self._switched(on)

    def _switched(self, on: bool) -> bool:
        """Sampling on or off; whether it took. A CPU's event that cannot be
        opened again mid-window (the descriptors' limit reached, the CPU
        taken offline) leaves sampling off until the next try, counted,
        instead of ending the window."""
        try:
            super()._turn(on)
            return True
        except BpfError as e:
            self.live.stop()  # the CPUs it did open: off with the rest
            self.switch_failures += 1
            self._switch_error = str(e)
            return False

    def switch_notes(self) -> list[str]:
        if not self.switch_failures:
            return list(self.notes)
        return self.notes + [f"{self.label}: sampling could not be switched on {self.switch_failures} times "
                             f"({self._switch_error}); its samples miss those phases"]

    def _cost(self) -> Cost:
        cost = super()._cost()
        # the kernel times the program alone (2-6 us a run here); a sample costs ~15 us in all on
        # this VM with its timer interrupt (bench/SAMPLE_COST.md, perf's the same): that part is
        # in the measured slowdown (the events are closed in the quiet phases), not here
        return Cost(cost.target_s, cost.cpu_s, cost.method + "; the timer interrupts that run it are not in it")


class CpuProfileCollector(BpfSampling):
    """The window's CPU samples (the capture's `perf` section, whichever
    sampler took them), on all window but in the quiet phases."""

    name = "cpu_profile"
    optional = True
    phases = Phases(begin=10, prepare=30, start=45, collect=60)  # as perf record's (collectors/cpu/perf.py)
    quiets = True
    label, lacks = "CPU sampling in BPF", "CPU stacks (--sampler perf samples with the perf tool)"

    def __init__(self, pid: int, frequency: int, unwinding: Unwinding, verbose: bool = False,
                 slice_s: float = 0.0):
        super().__init__(pid, frequency, user_stacks=True, kernel_stacks=True, verbose=verbose, slice_s=slice_s)
        self.unwinding = unwinding
        self.started_at = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        super().start()
        self.started_at = time.monotonic()

    def _silence(self, on: bool) -> bool:
        return self._switched(not on)

    def stop(self) -> None:
        self.quiet(False)  # a quiet phase still open ends (nothing if none is)
        super().stop()
        if self.started_at and not self.seconds:
            self.seconds = time.monotonic() - self.started_at

    def collect(self, facts: Facts) -> Section:
        """The samples folded under the threads' names, and a summary; and
        the same samples by slice of time (the slice's number as their root
        frame), for the timeline's span (report.html)."""
        records = self.live.records()
        sliced = self.live.records(sliced=True) if self.slice_ns else []
        kernel = facts.kernel_symbols.names(a for r in records + sliced for a in r.kernel)
        user = self._user_names((a for r in records + sliced for a in r.user), facts)

        def named(rs: list[SampleRecord]) -> list[tuple[str, int | None, list[str], int]]:
            return [(facts.comms.get(r.tid, facts.process_comm), r.tid, cpu_frames(r, user, kernel.get), r.count)
                    for r in rs]
        whole = named(records)
        folded = fold_samples(whole, facts.thread_names)
        samples = sum(r.count for r in records)
        cost = self._cost()
        u = self.unwinding
        record = {"status": "collected", "sampler": "bpf", "event": "cpu-clock", "frequency_hz": self.frequency,
                  "unwinding": {"mode": u.mode, "describe": u.describe(), "reason": u.reason},
                  "samples": samples, "quiet_s": round(self.quiet_s, 6), "switch_failures": self.switch_failures,
                  "perf_cpu_share": round(cost.target_s / self.seconds, 4)
                  if cost.target_s is not None and self.seconds else None,
                  "dropped": self.live.dropped(abi.SAMPLE_DROPPED), "by_thread": threads_record(whole),
                  **stacks_summary(folded)}
        files = {STACKS_FILE: ("stacks_file", folded)} if samples else {}
        if sliced:
            # each slice's root: its number, from the session's origin (its monotonic time in the record)
            roots = thread_roots(whole, facts.thread_names)
            by_time = Folded()
            for r, (comm, tid, frames, count) in zip(sliced, named(sliced)):
                by_time.add([str(r.slice), roots(comm, tid)] + frames, count)
            record.update(slice_s=self.slice_ns / 1e9, slices_origin_s=round(self.live.origin_ns / 1e9, 9))
            files[SLICES_FILE] = ("slices_file", by_time)
        return Section(self.name, {self.name: record}, self.switch_notes(), cost, files)


class CpuBurstSampler(BpfSampling):
    """The bursts (collectors/cpu/cpu_bursts.py) sampled in BPF: on in the
    ordinary off-phases the duty cycles give them, off from the start."""

    name = "cpu_bursts"
    optional = True
    phases = Phases(begin=0, prepare=20, start=40, collect=90)  # as perf's bursts (collectors/cpu/cpu_bursts.py)
    can_burst = True
    label, lacks = "CPU bursts in BPF", "CPU bursts (short functions' costs come from the probes alone)"

    def __init__(self, pid: int, stages: dict[str, list[str]], frequency: int, stacks: Unwinding | None,
                 verbose: bool = False):
        super().__init__(pid, frequency, user_stacks=stacks is not None, kernel_stacks=False, verbose=verbose)
        self.stages, self.stacks = stages, stacks

    def start(self) -> None:
        self.meter.start()   # off until a burst

    def collect(self, facts: Facts) -> Section:
        records = self.live.records()
        mangled = self._user_names((a for r in records for a in r.user), facts, named=lambda symbol: symbol)
        period = self.live.period_ns
        read, samples = burst_time_of(((period, ([KERNEL_FRAME] if r.in_kernel else [])
                                        + [_symbol(mangled(a)) for a in r.user], r.count) for r in records),
                                      self.stages)
        record = {"status": "collected", "sampler": "bpf", "event": "cpu-clock", "frequency_hz": self.frequency,
                  "on_s": round(self.on_s, 6), "samples": samples, "target_cpu_s": round(read.target_ns / 1e9, 6),
                  "switch_failures": self.switch_failures, "functions": read.functions,
                  "stacks": self.stacks.describe() if self.stacks else None,
                  "dropped": self.live.dropped(abi.SAMPLE_DROPPED)}
        if self.stacks:
            record["stages"] = read.stages
        return Section(self.name, {self.name: record}, self.switch_notes(), self._cost())


def _symbol(name: str) -> str:
    """A frame as burst_time_of matches it: a mangled symbol, '' where none."""
    return "" if name.startswith("[") else name
