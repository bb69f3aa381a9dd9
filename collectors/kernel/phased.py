"""The base of the kernel's BPF collectors (off-CPU, I/O, the BPF CPU
sampler): an object of tracepoint or perf-event programs watching one
process, attached only while the window or an on-phase is open, and the
collector around it, whose cost is the kernel's own timing of its runs."""

from __future__ import annotations

from typing import Generic, Self, TypeVar

from collections.abc import Callable, Iterable

import ctypes

from mysqlprobe import probes
from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import (Background, Collector, CollectorUnavailable, Cost, Facts,
                                        lower_thread_priority, opened)
from mysqlprobe.collectors.target.addresses import UNKNOWN, function_name, user_names
from mysqlprobe.errors import BpfError
from mysqlprobe.probes import abi
from mysqlprobe.probes.abi import STACK_DEPTH

# the off-CPU, I/O and sampling objects load behind the probes' own: 2-3 ms of
# CPU in every 10 ms the probes' load and calibration want
LOADER_NICENESS = 10


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

    def config(self) -> ctypes.Structure | ctypes.c_uint32:
        """The object's .rodata configuration: the target's process id."""
        return ctypes.c_uint32(self.pid)

    def _attach(self) -> None:
        for p in self.programs:
            self._obj.attach_program(self._obj.program(p), self.what)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
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

    def _stack(self, stack_id: int, map_name: str = "stacks") -> list[int]:
        return self._frames(map_name, ctypes.c_uint32(stack_id)) if stack_id >= 0 else []

    def _kept(self, stack_id: int, copied: int, map_name: str = "stacks") -> list[int]:
        """A stack by its id in map_name, or, where that map refused it, by
        the key of its copy in `recovered` (probes/kept_stack.h)."""
        return self._frames("recovered", ctypes.c_uint64(copied)) if copied else self._stack(stack_id, map_name)

    def _frames(self, map_name: str, key: libbpf.CData) -> list[int]:
        """A stack of addresses a map keeps under key, leaf first (none where it keeps none)."""
        frames = (ctypes.c_uint64 * STACK_DEPTH)()
        if not libbpf.lookup(self._fds[map_name], key, frames):
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


S = TypeVar("S", bound=PhasedPrograms)


class PhasedBpfCollector(Collector, Generic[S]):
    """A collector of PhasedPrograms: on in the window, or in the on-phases
    when paced. Its cost is what the kernel timed its programs' runs at,
    with run-time statistics held on while the window is open (where the
    kernel allows them)."""

    can_pace = True
    session_type: type[S]
    label = ""                # what it records, for messages
    lacks = ""                # what the capture lacks without it

    def __init__(self, pid: int, verbose: bool = False):
        super().__init__()
        self.pid, self.verbose = pid, verbose
        self.session: S | None = None
        self.meter = libbpf.RunTimeMeter(lambda: self.live.run_stats())
        self._loader: Background[S] | None = None

    @property
    def live(self) -> S:
        """The loaded programs (from prepare() on)."""
        return opened(self.session, f"{self.label}'s BPF programs")

    def begin(self) -> None:
        """Load and verify the object in a thread: the kernel's part (the
        maps' memory, the verifier) runs beside this process's other
        preparations, not after them."""
        self._loader = Background(self._load_behind, f"{self.name}-load")

    def _load_behind(self) -> S:
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

    def new_session(self) -> S:
        return self.session_type(self.pid, self.verbose)

    def start(self) -> None:
        self.meter.start()
        self.resume()

    def _turn(self, on: bool) -> None:
        # attached while on only
        if on:
            self.live.start()
        else:
            self.live.stop()

    def stop(self) -> None:
        self.pause()
        self.meter.stop()

    def _cost(self) -> Cost:
        if not self.meter.measured:
            return Cost(method="not measured: the kernel refused BPF run-time statistics")
        return Cost(target_s=self.meter.ns / 1e9, method=f"the kernel's run time of the programs on "
                                                         f"{self.live.what} ({self.meter.runs} runs, all "
                                                         "threads of the host)")

    def _user_names(self, addresses: Iterable[int], facts: Facts,
                    named: Callable[[str], str] = function_name) -> Callable[[int], str]:
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
