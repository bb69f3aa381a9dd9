"""Profile one load from its first row to its last: the load starts once the
probes are attached, and its end closes the window. Used by demo and bench."""

from __future__ import annotations

import sys
import threading
from typing import Callable

from mysqlprobe.capture import Capture
from mysqlprobe.collectors.cpu.perf import PerfOptions
from mysqlprobe.collectors.perfschema.connection import ConnectOptions
from mysqlprobe.recorder.options import Control, RecordOptions
from mysqlprobe.recorder.plan import Plan
from mysqlprobe.recorder.recorder import Recorder
from mysqlprobe.recorder.window import RunSignals, StatusLine


class _LoadWhenAttached(StatusLine):
    """Starts the load once the probes are attached; ends the window when it is done."""

    def __init__(self, load: Callable[[], tuple[int, float]], stop: threading.Event, quiet: bool):
        super().__init__(enabled=not quiet)
        self.load, self.stop, self.quiet = load, stop, quiet
        self.result: tuple[int, float] | None = None
        self.error: BaseException | None = None

    def started(self, pid: int, functions: int, probes: int, exact: bool = True, budget: float = 0.10) -> None:
        if not self.quiet:
            super().started(pid, functions, probes, exact, budget)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self.load()
        except BaseException as e:
            self.error = e
        finally:
            self.stop.set()


def profile_load(target, binary, plan: Plan, load: Callable[[], tuple[int, float]], *, socket: str,
                 exact: bool, verbose: bool = False, quiet: bool = False,
                 frequency: int | None = None, build_progress: bool = False) -> tuple[Capture, int, float]:
    """The capture of one load, and the load's (rows, seconds). frequency:
    the CPU samples' rate where not the default (a plan without probes
    records the sampled wall-time account alone); build_progress: the load
    builds an index (the server's progress reports, InnoDB's compressions)."""
    control = Control()
    control.status = status = _LoadWhenAttached(load, control.stop, quiet)
    options = RecordOptions(exact=exact, connect=ConnectOptions(socket=socket), verbose=verbose,
                            stop_reason="load finished", argv=tuple(sys.argv), build_progress=build_progress,
                            perf=PerfOptions(frequency=frequency) if frequency else PerfOptions())
    with RunSignals(control.stop) as control.signals:
        cap = Recorder(target, binary, plan, options, control).record()
    if status.error:
        raise status.error
    if status.result is None:  # interrupted before the load ended
        raise KeyboardInterrupt
    rows, seconds = status.result
    return cap, rows, seconds
