"""The one contract every collector keeps: prepare -> start -> stop ->
collect, and close on every exit path.

  prepare()  get ready to record (load and attach, connect, start a helper);
             raise CollectorUnavailable for a cause the user can live with
  start()    the window opens
  stop()     the window closes
  collect()  the raw section, the collector's own notes, and what it
             measured itself to cost (Section)
  close()    release whatever is held; safe to call at any point, twice

Collectors return data: they write no file (folded stacks and the like go
in Section.files for the recorder to write) and know nothing of the
capture document above them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import os
import sys
import threading
import time
from typing import Any, ClassVar

from mysqlprobe.collectors.target.addresses import KernelSymbols
from dataclasses import dataclass, field


PAUSE_ENV = "MYSQLPROBE_PAUSE_AT"   # POINT[:SECONDS]: hold there, for the fault suite to signal
PAUSE_S = 5.0


def pause_asked(point: str) -> float | None:
    """How long to hold at point, where MYSQLPROBE_PAUSE_AT names it; else None."""
    at, _, seconds = os.environ.get(PAUSE_ENV, "").partition(":")
    return float(seconds or PAUSE_S) if at == point else None


def announce_pause(point: str) -> None:
    print(f"mysqlprobe: paused at {point} ({PAUSE_ENV})", file=sys.stderr, flush=True)


def hold_if_asked(point: str) -> None:
    """Hold at point a while, where MYSQLPROBE_PAUSE_AT names it (the fault
    suite kills mysqlprobe there)."""
    seconds = pause_asked(point)
    if seconds is not None:
        announce_pause(point)
        time.sleep(seconds)


V = TypeVar("V")


def opened(value: V | None, what: str) -> V:
    """What a phase made (a loaded object, a helper, a connection), where a
    later phase uses it: used before it exists is a bug, said so."""
    if value is None:
        raise RuntimeError(f"{what} used before it was opened")
    return value


class CollectorUnavailable(Exception):
    """A collector cannot run here (no perf, no BTF, no connection): the
    capture goes on without it. reason goes in its section, note in the
    capture's warnings."""

    def __init__(self, reason: str, note: str, status: str = "unavailable"):
        super().__init__(note)
        self.reason, self.note, self.status = reason, note, status


@dataclass
class Cost:
    """What a collector cost, as it measured it.

    target_s  time it added to the target's threads (probe hits x their
              calibrated cost, BPF program run time), None where it cannot
              tell from its own side
    cpu_s     CPU it used outside the target (its helper processes, this
              process's reads)
    method    how the figures were obtained"""

    target_s: float | None = None
    cpu_s: float | None = None
    method: str = ""

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 6)
        return {"target_s": r(self.target_s), "cpu_s": r(self.cpu_s), "method": self.method}


@dataclass
class Facts:
    """What the collectors collected first tell the ones after them: the
    threads' names (Performance Schema's by Linux thread id, the kernel's
    comm), the process's own name, and the files its stacks pass through."""

    thread_names: dict[int, str] = field(default_factory=dict)
    comms: dict[int, str] = field(default_factory=dict)
    process_comm: str = ""
    # the target's mapped files' function tables, read once for all the stacks
    # of one collection (addresses.user_names): off-CPU's and I/O's share them
    mapped_files: dict[str, Any] = field(default_factory=dict)
    # the kernel's symbol starts, read once for the CPU and off-CPU stacks
    kernel_symbols: KernelSymbols = field(default_factory=KernelSymbols)


@dataclass
class Section:
    """A collector's part of the capture: `fields` are top-level keys of the
    document; `files` are written beside it: name -> (the field of this
    section that will name it, Folded stacks or the path of a file to move)."""

    name: str
    fields: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    files: dict[str, Any] = field(default_factory=dict)


T = TypeVar("T")


class Background(Generic[T]):
    """A collector's slow part (a BPF object to verify, a server to set up)
    run in a thread from begin(), so that the collectors' slow parts run
    side by side; join() gives its result or raises what it raised.
    close() must join it before releasing what it may still be making."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"mysqlprobe-{name}", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._result = fn()
        except BaseException as e:  # handed to join()
            self._error = e

    def join(self) -> T:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result  # type: ignore[return-value]   # set, since fn returned

    def settle(self) -> T | None:
        """Its result once finished, None if it failed (for close(): what it
        made must be released, what it raised no longer matters)."""
        try:
            return self.join()
        except BaseException:
            return None


def lower_thread_priority(by: int) -> None:
    """Nice this thread (only: Linux nices threads one by one) by `by`: what
    it does in the kernel yields the CPUs to the threads on the way to the
    probes. Left as it was where the system refuses."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + by, 19))
    except OSError:
        pass


@dataclass(frozen=True)
class Phases:
    """Where a collector comes in each of the recorder's phases, lower
    first: begin (its slow part set going), prepare, start and collect; stop
    and close go in the reverse of start. Each collector declares its own,
    with the reason beside it, and the recorder sorts by them."""

    begin: int
    prepare: int
    start: int
    collect: int


class Collector:
    """Base of every collector; subclasses override what they need.

    A collector whose cost grows with the load (per context switch, per
    sample) can be paced: in sampled mode it runs only in the duty cycles'
    on-phases, resume() and pause() turning it on and off, so its cost is
    inside what the cycles measure and pace on.

    One that stays on through the window (its data would be thin in the
    on-phases alone) can be quieted: off for the duty cycles' quiet
    phases, off-phases in which nothing of mysqlprobe costs the load, so
    that their speed is the load's own and what the collector costs is
    measured too.

    One that must not see the probes (it samples the code they would slow)
    can burst: on in the ordinary off-phases only, resume() and pause()
    turning it on and off; the quiet phases stay clean of it."""

    name = "collector"
    phases = Phases(begin=50, prepare=50, start=50, collect=50)
    optional = False    # a run may leave it out: its section then says "not requested"
    can_pace = False
    quiets = False      # a quiet phase can switch it off (can_quiet)
    can_burst = False

    kinds: ClassVar[list[type[Collector]]] = []   # every collector class, as they are defined

    @property
    def can_quiet(self) -> bool:
        """Whether a quiet phase switches it off now."""
        return self.quiets

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Collector.kinds.append(cls)

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.paced = False
        self.on_s = 0.0          # seconds it was on, when paced
        self._on_since: float | None = None
        self.quiet_s = 0.0       # seconds it was off in quiet phases, when quieted
        self._quiet_since: float | None = None

    def begin(self) -> None:
        """Start, before prepare(), what takes a while without this process
        (a perf to spawn, a BPF object to verify), so that every collector's
        slow part runs side by side; prepare() waits for it. Optional."""

    def pace(self) -> None:
        """Run only in on-phases from now on (before prepare)."""
        self.paced = self.can_pace

    def resume(self) -> None:
        if self._on_since is None:
            self._on_since = time.monotonic()
            self._turn(True)

    def pause(self) -> None:
        if self._on_since is not None:
            self._turn(False)
            self.on_s += time.monotonic() - self._on_since
            self._on_since = None

    def _turn(self, on: bool) -> None:
        """Switch what costs the load on or off (paced collectors)."""

    def quiet(self, on: bool) -> bool:
        """Off for a quiet phase (on=True), or back on; whether it did."""
        if not self.can_quiet or on == (self._quiet_since is not None) or not self._silence(on):
            return False
        if on:
            self._quiet_since = time.monotonic()
        elif self._quiet_since is not None:
            self.quiet_s += time.monotonic() - self._quiet_since
            self._quiet_since = None
        return True

    def _silence(self, on: bool) -> bool:
        """Switch what stays on all window off (on=True) or back on (quieted
        collectors); whether it took."""
        return False

    def prepare(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def collect(self, facts: Facts) -> Section:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def unavailable(self, status: str, reason: str) -> Section:
        """The section of a collector that could not run."""
        return Section(self.name, {self.name: {"status": status, "reason": reason}}, list(self.notes))


def optional_sections() -> list[str]:
    """The sections of the collectors a run may leave out (of those defined)."""
    return list(dict.fromkeys(k.name for k in Collector.kinds if k.optional))


class CpuClock:
    """CPU seconds this process spent in a collector's own calls (status
    reads, map reads between cycles): wrap them with `with clock:`."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> "CpuClock":
        self._t0 = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.thread_time() - self._t0
