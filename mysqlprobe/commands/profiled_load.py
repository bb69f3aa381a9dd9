"""Profile one load from its first row to its last: the load starts once the
probes are attached, and its end closes the window. Used by demo and bench."""

from __future__ import annotations

import sys
import threading
from typing import Callable

from mysqlprobe.collectors.connection import ConnectOptions
from mysqlprobe.collectors.perf import PerfOptions
from mysqlprobe.commands.record import Plan, StatusLine, StopSignals, record


class _LoadWhenAttached(StatusLine):
    """Starts the load once the probes are attached; ends the window when it is done."""

    def __init__(self, load: Callable[[], tuple[int, float]], stop: threading.Event, quiet: bool):
        super().__init__(enabled=not quiet)
        self.load, self.stop, self.quiet = load, stop, quiet
        self.result: tuple[int, float] | None = None
        self.error: BaseException | None = None

    def started(self, session, functions: int, exact: bool = True, budget: float = 0.10) -> None:
        if not self.quiet:
            super().started(session, functions, exact, budget)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self.load()
        except BaseException as e:
            self.error = e
        finally:
            self.stop.set()


def profile_load(target, binary, plan: Plan, load: Callable[[], tuple[int, float]], *, socket: str,
                 out_dir: str | None, exact: bool, verbose: bool = False, quiet: bool = False,
                 perf: PerfOptions | None = PerfOptions()) -> tuple[dict, int, float]:
    """The capture of one load, and the load's (rows, seconds)."""
    stop = threading.Event()
    status = _LoadWhenAttached(load, stop, quiet)
    with StopSignals(stop) as signals:
        doc = record(target, binary, plan, duration=None, stop=stop, argv=sys.argv, status=status,
                     verbose=verbose, signals=signals, stop_reason="load finished", exact=exact,
                     connect=ConnectOptions(socket=socket), perf=perf, out_dir=out_dir)
    if status.error:
        raise status.error
    if status.result is None:  # interrupted before the load ended
        raise KeyboardInterrupt
    rows, seconds = status.result
    return doc, rows, seconds
