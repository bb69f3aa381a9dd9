"""The breakpoint guard's process (started by collectors/safety/guard_process.py, not
for people): see collectors/safety/breakpoints.py.

It starts while mysqlprobe starts, on the same CPUs, so it imports only
what waiting needs; the code that reads and resets breakpoints is
imported once mysqlprobe is gone without saying "done" (two guards that
imported everything up front took 0.1-0.15 s of CPU each from the start)."""

from __future__ import annotations

import os
import select
import signal
import sys

from mysqlprobe.collectors.safety.guard_process import receive, told_done

HOLDER_EXIT_WAIT_S = 30.0       # for the kernel to drop a killed mysqlprobe's links


def _log(line: str) -> None:
    """To the kernel's log, beside its own line about the uprobes it kept."""
    try:
        with open("/dev/kmsg", "w") as f:
            f.write(f"mysqlprobe: {line}\n")
    except OSError:
        pass


def holder_handle(holder: int) -> int | None:
    """A pidfd of mysqlprobe, readable once it has exited (its descriptors
    closed, its links dropped); None where it has exited already: killed
    before this guard got going, it is no longer this guard's parent (whose
    pid, the reaper's then, would keep the wait going to its end)."""
    if os.getppid() != holder:
        return None
    try:
        fd = os.pidfd_open(holder)
    except OSError:
        return None
    if os.getppid() != holder:  # gone between the two, its pid perhaps another's now
        os.close(fd)
        return None
    return fd


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    state = receive(sys.stdin)
    holder = holder_handle(state["holder"])
    if told_done(sys.stdin):
        return 0
    if holder is not None:
        select.select([holder], [], [], HOLDER_EXIT_WAIT_S)
    from mysqlprobe.collectors.safety.breakpoints import remove_left_breakpoints
    try:
        found, left = remove_left_breakpoints(state["pid"], state["binary"], state["offsets"])
    except OSError:  # the server is gone, and its code with it
        return 0
    if found:
        _log(f"the kernel kept {found} probes in the code of process {state['pid']} when mysqlprobe was "
             f"killed; {found - left} removed" + (f", {left} still wanted by another tracer" if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
