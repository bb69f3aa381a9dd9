"""When a window ends (its duration, Ctrl-C, SIGTERM or SIGHUP, the caller,
the target's exit), what signals do before and after it, and the status
line that shows it running."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Self, TextIO
if TYPE_CHECKING:
    from mysqlprobe.recorder.options import Control

from typing import Any

import signal
import sys
import threading
import time

from mysqlprobe.collectors.base import announce_pause, pause_asked
from mysqlprobe.collectors.kernel.process import alive
from mysqlprobe.errors import Interrupted


HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PHASES = {"symbols": "reading the binary's symbols", "calibration": "calibrating the probes' cost",
          "attach": "attaching the probes and setting up Performance Schema",
          "report": "writing the capture"}


class RunSignals:
    """SIGINT, SIGTERM and SIGHUP over a whole recording, by phase:

    before the window  they stop the run (Interrupted): the collectors close
                       on the way out, probes off and P_S put back;
    in the window      they end it, and the capture is written;
    after it           (probes coming off, the capture being written) the
                       first is noted and waits for the capture; a second
                       stops the run.

    Once one stops the run, further signals are ignored: cleaning up is not cut short."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.reason: str | None = None
        self.phase = "starting"
        self.mode = "abort"
        self._old: dict[signal.Signals, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for s in HANDLED:
                self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def reached(self, phase: str) -> None:
        """The run is in phase (a key of PHASES); with MYSQLPROBE_PAUSE_AT=phase it holds there a moment."""
        if self.mode == "abort":
            self.phase = PHASES[phase]
        seconds = pause_asked(phase)
        if seconds is not None:
            announce_pause(phase)
            until = time.monotonic() + seconds
            while time.monotonic() < until and self.reason is None:  # a signal in abort mode raises
                time.sleep(0.05)

    def window_opens(self) -> None:
        self.mode, self.phase = "window", "recording"

    def window_closed(self) -> None:
        self.mode, self.phase = "finish", "detaching and writing the capture"

    def ignore(self) -> None:
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)

    def _set_stop(self) -> None:
        """stop.set() from a thread of its own. The handler runs in the main
        thread between two bytecodes, maybe inside stop.wait() with the
        event's lock held: set() there waits for that lock for ever (a
        profiler hung an hour in CI so)."""
        threading.Thread(target=self.stop.set, name="mysqlprobe-signal", daemon=True).start()

    def _handler(self, signum: int, _frame: object) -> None:
        if self.mode == "window":
            self.reason = {int(signal.SIGINT): "interrupt", int(signal.SIGTERM): "sigterm"}.get(signum, "sighup")
            self._set_stop()
            return
        if self.mode == "finish" and self.reason is None:
            self.reason = "late " + signal.Signals(signum).name
            self._set_stop()  # nothing more after this capture (watch's next window)
            print(f"mysqlprobe: {signal.Signals(signum).name}: finishing the capture first "
                  "(signal again to stop without it)", file=sys.stderr, flush=True)
            return
        self.ignore()
        raise Interrupted(signum, self.phase)


class Window:
    """When the window ends: its duration, a stop (Ctrl-C, SIGTERM, the
    caller), or the target's exit."""

    def __init__(self, pid: int, duration: float | None, control: Control, stop_reason: str,
                 calls_so_far: Callable[[], int], progress: Callable[[float], str | None] | None = None) -> None:
        """progress: called about once a second with the seconds into the
        window; what it returns goes on the status line (an index build's
        stage and percentage)."""
        self.pid, self.duration, self.stop = pid, duration, control.stop
        self.signals, self.status = control.signals, control.status
        self.stop_reason, self.calls_so_far = stop_reason, calls_so_far
        self.progress = progress
        self._progress_at = 0.0
        self.start = time.monotonic()
        self.ended_by: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds`; True once the window has ended."""
        until = time.monotonic() + seconds
        while self.ended_by is None:
            now = time.monotonic()
            remaining = None if self.duration is None else self.duration - (now - self.start)
            if remaining is not None and remaining <= 0:
                self.ended_by = "duration"
                break
            if now >= until:
                return False
            step = min(0.5, until - now, remaining if remaining is not None else 0.5)
            if self.stop.wait(step):
                self.ended_by = self.signals.reason if self.signals and self.signals.reason else self.stop_reason
                break
            if not alive(self.pid):
                self.ended_by = "target exited"
                break
            elapsed = self.elapsed()
            if self.progress and elapsed - self._progress_at >= 1.0:
                self._progress_at = elapsed
                text = self.progress(elapsed)
                if self.status:
                    self.status.note = text
            if self.status:
                self.status.tick(elapsed, self.calls_so_far)
        return True


class StatusLine:
    """One line on stderr, rewritten in place: elapsed time and calls so far."""

    def __init__(self, stream: TextIO = sys.stderr, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled and stream.isatty()
        self._last = 0.0
        self.sampler = None
        self.note: str | None = None   # said after the counts (an index build's progress)

    def started(self, pid: int, functions: int, probes: int, exact: bool = True, budget: float = 0.10) -> None:
        mode = "every call" if exact else f"sampled within {100 * budget:g}% overhead, --exact for every call"
        print(f"Tracing PID {pid}: {functions} functions, {probes} probes ({mode}). "
              f"Ctrl-C to end.", file=self.stream, flush=True)

    def tick(self, elapsed: float, calls_so_far: Callable[[], int]) -> None:
        if not self.enabled or elapsed - self._last < 1:
            return
        self._last = elapsed
        samples = self.sampler.samples_so_far() if self.sampler else None
        self.stream.write(f"\r{elapsed:7.1f}s  {calls_so_far():>12,} calls"
                          + (f"  ~{samples:,} samples" if samples is not None else "")
                          + (f"  {self.note}" if self.note else "") + "\x1b[K")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()
