"""When a window ends (its duration, Ctrl-C or SIGTERM, the caller, the
target's exit) and the status line that shows it running."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


class StopSignals:
    """SIGINT and SIGTERM end the window; while the probes come off, further
    signals are ignored so detaching cannot be cut short."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.reason: str | None = None
        self._old: dict = {}

    def _handler(self, signum, _frame):
        self.reason = "interrupt" if signum == signal.SIGINT else "sigterm"
        self.stop.set()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handler)
        return self

    def ignore(self):
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def alive(pid: int) -> bool:
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


class Window:
    """When the window ends: its duration, a stop (Ctrl-C, SIGTERM, the
    caller), or the target's exit."""

    def __init__(self, pid: int, duration: float | None, control, stop_reason: str, calls_so_far):
        self.pid, self.duration, self.stop = pid, duration, control.stop
        self.signals, self.status = control.signals, control.status
        self.stop_reason, self.calls_so_far = stop_reason, calls_so_far
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
            if self.status:
                self.status.tick(self.elapsed(), self.calls_so_far)
        return True


class StatusLine:
    """One line on stderr, rewritten in place: elapsed time and calls so far."""

    def __init__(self, stream=sys.stderr, enabled: bool = True):
        self.stream = stream
        self.enabled = enabled and stream.isatty()
        self._last = 0.0
        self.sampler = None

    def started(self, pid: int, functions: int, probes: int, exact: bool = True, budget: float = 0.10) -> None:
        mode = "every call" if exact else f"sampled within {100 * budget:g}% overhead, --exact for every call"
        print(f"Tracing PID {pid}: {functions} functions, {probes} probes ({mode}). "
              f"Ctrl-C to end.", file=self.stream, flush=True)

    def tick(self, elapsed: float, calls_so_far) -> None:
        if not self.enabled or elapsed - self._last < 1:
            return
        self._last = elapsed
        samples = self.sampler.samples_so_far() if self.sampler else None
        self.stream.write(f"\r{elapsed:7.1f}s  {calls_so_far():>12,} calls"
                          + (f"  ~{samples:,} samples" if samples is not None else ""))
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()
