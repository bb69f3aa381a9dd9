"""mysqlprobe with the times of its duty cycles' phases written, one JSON
line each, to the file $PHASE_LOG (monotonic clock, as any other process
on the host reads it): for bench/phases.py profile, which sets them against
the load's speed it polls from outside. Nothing else changes, unless
$PHASE_LOG_PATCH names one of PATCHES: an experiment on what stays on in
the quiet phases.

    PHASE_LOG=FILE [PHASE_LOG_PATCH=NAME] python bench/phase_log.py [mysqlprobe's arguments]"""

from __future__ import annotations

import json
import os
import time

from mysqlprobe import cli
from mysqlprobe.collectors.uprobes import calibration
from mysqlprobe.recorder import duty

_out = open(os.environ["PHASE_LOG"], "a", buffering=1)


def note(event: str, **more) -> None:
    _out.write(json.dumps({"t": time.monotonic(), "event": event, **more}) + "\n")


def logged(name: str, before=None, after=None):
    """Wrap DutyCycles.<name>: an event when it is called, one when it returns."""
    inner = getattr(duty.DutyCycles, name)

    def wrapper(self, *args, **kwargs):
        if before:
            note(before, **({"on": args[0]} if args and isinstance(args[0], bool) else {}))
        result = inner(self, *args, **kwargs)
        if after:
            note(after, **({"on": args[0], "took": result} if args and isinstance(args[0], bool) else {}))
        return result
    setattr(duty.DutyCycles, name, wrapper)


def _run(self, started):
    """The window's cycles, the detach of each on-phase noted."""
    detach = self.session.detach_target

    def detach_noted():
        note("detach")
        detach()
        note("detached")
    self.session.detach_target = detach_noted
    note("window", rows=started[1])
    try:
        return _inner_run(self, started)
    finally:
        note("window_end")


_inner_run = duty.DutyCycles.run
duty.DutyCycles.run = _run
logged("_attach", "attach", "attached")
logged("_on_phase", None, "on_end")
logged("_quiet", None, "quiet")
logged("_burst", None, "burst")
_tail = duty.DutyCycles._tail


def _tail_noted(self, middle, end_t, end_rows):
    note("quiet_middle", at=middle[0])
    return _tail(self, middle, end_t, end_rows)


duty.DutyCycles._tail = _tail_noted


def no_follow() -> None:
    """No calibration bursts in the window (the first calibration only)."""
    calibration.Calibrator.follow = lambda self, session, **kw: None


def probes_once() -> None:
    """The probes on for the window's first on-phase only: the later
    on-phases run without them (their figures are void), so that no attach
    or detach of the server's breakpoints falls near the quiet phases."""
    run = duty.DutyCycles.run

    def without_reattach(self, started):
        self.session.attach_target = lambda: None
        return run(self, started)
    duty.DutyCycles.run = without_reattach


PATCHES = {"no_follow": no_follow, "probes_once": probes_once}
if os.environ.get("PHASE_LOG_PATCH"):
    PATCHES[os.environ["PHASE_LOG_PATCH"]]()

if __name__ == "__main__":
    raise SystemExit(cli.main())
