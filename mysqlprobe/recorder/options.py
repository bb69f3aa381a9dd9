"""What a recording is asked to do, as one value."""

from __future__ import annotations

from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from mysqlprobe.recorder.window import RunSignals, StatusLine

import threading
from collections.abc import Callable

from mysqlprobe.collectors.perfschema.connection import ConnectOptions
from mysqlprobe.collectors.cpu.cpu_bursts import BURST_FREQUENCY
from mysqlprobe.collectors.cpu.perf import PerfOptions
from mysqlprobe.recorder.priority import START_NICE
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RecordOptions:
    """How one capture is recorded: window, mode, budget and collectors."""

    duration: float | None = None       # seconds; None: until stopped
    exact: bool = True                  # probes on all along; else duty cycles within `budget`
    budget: float = 0.05                # the slowdown the duty cycles may cost, a fraction
    correct: bool = True                # subtract the probes' own cost from latencies
    connect: ConnectOptions | None = field(default_factory=ConnectOptions)  # None: no server connection
    ps_waits: str = "io"
    full_sql: bool = False              # statements' full text in the capture; else their digests
    ps_whole_window: bool = False       # P_S setup on in the quiet phases too
    perf: PerfOptions | None = field(default_factory=PerfOptions)           # None: no CPU samples
    off_cpu: bool = True
    io: bool = True                     # the I/O system calls
    burst_freq: int = BURST_FREQUENCY   # sampled mode: CPU samples per second in the off-phases; 0: none
    sampler: str = "auto"               # CPU samples taken in BPF ("bpf"), by perf record ("perf"), or
                                        # in BPF where the binary keeps frame pointers ("auto")
    reuse_calibration: bool = True      # start from the last run's calibration on this kernel and CPU
    progress_counter: str | None = None  # a variable of the target read as its progress, for the rows changed
    build_progress: bool = False        # read an index build's progress from the server once a second
    start_nice: int | None = START_NICE  # the start's niceness until the window opens (recorder/priority.py)
    verbose: bool = False
    stop_reason: str = "stopped"        # window.ended_by when `stop` is set by the caller
    argv: tuple[str, ...] = ()


@dataclass
class Control:
    """How a running window is steered from outside: `stop` ends it, the
    signals handler says why, the status line shows progress."""

    stop: threading.Event = field(default_factory=threading.Event)
    signals: RunSignals | None = None
    status: StatusLine | None = None
    # told each read of an index build's progress (build_progress): its stage, percent and seconds left
    build_progress: Callable[[str, float, float | None], None] | None = None
