"""The start ahead of the load: from the command's start to the window's
opening, mysqlprobe's threads (and what they spawn) run at a lower
niceness than the caller's, then every one of them goes back to it.

Under load the start is bound by the CPU it is given, not by what it
does: on two CPUs shared with four inserting clients, its 0.12 s of CPU
took a median 0.247 s of wall time (0.156-0.621) at the caller's niceness
and 0.178 s (0.135-0.306) at -10 (bench/STARTUP_NICE.md). The load gives up the same CPU either
way, at once instead of spread over the start; the window, where the
duty cycles measure what mysqlprobe costs, runs at the caller's.

Linux nices each thread on its own, and a new thread or process takes
its creator's niceness: raised on the main thread before anything is
spawned, it reaches the threads and helpers of the start; put back on
every thread of this process and of its descendants."""

from __future__ import annotations

import argparse

import os
from pathlib import Path

START_NICE = -10  # the default; 0 or more: the start runs at the caller's


def _nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # gone meanwhile
        return []


def _children(pid: int) -> list[int]:
    out = []
    for tid in _tasks(pid):
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def descendants_tasks(pid: int) -> list[int]:
    """Every thread of pid and of the processes below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out += _tasks(p)
        todo += _children(p)
    return out


class StartPriority:
    """The process's start priority: raised once a recording starts,
    settled once its window opens (and on any way out)."""

    def __init__(self) -> None:
        self.caller_nice: int | None = None  # set while raised
        self.applied: int | None = None      # the start's niceness, the last time it was raised

    @property
    def raised(self) -> bool:
        return self.caller_nice is not None

    def raise_to(self, nice: int | None) -> None:
        """This thread (and what it spawns from here) at `nice`, where that
        is below the caller's and the system allows it; None or a niceness
        not below the caller's leaves it (or puts it back) as the caller's."""
        caller = self.caller_nice if self.caller_nice is not None else _nice_of(0)
        if nice is None or nice >= caller:
            self.settle()
            self.applied = None
            return
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:  # no CAP_SYS_NICE: the start runs as the caller's
            self.applied = None
            return
        self.caller_nice, self.applied = caller, nice

    def settle(self) -> None:
        """Every thread of this process and of its descendants back to the
        caller's niceness."""
        caller, self.caller_nice = self.caller_nice, None
        if caller is None:   # not raised
            return
        for tid in descendants_tasks(os.getpid()):
            try:
                if _nice_of(tid) < caller:
                    os.setpriority(os.PRIO_PROCESS, tid, caller)
            except OSError:  # ended meanwhile
                pass


def asked_start_nice(argv: list[str]) -> int:
    """--start-nice's value as spelled in argv, read before the imports it
    covers; argparse reads it again and has the last word (an abbreviated
    option, a value it refuses)."""
    nice = START_NICE
    for i, arg in enumerate(argv):
        if arg == "--start-nice":
            value = argv[i + 1] if i + 1 < len(argv) else ""
        elif arg.startswith("--start-nice="):
            value = arg.partition("=")[2]
        else:
            continue
        try:
            nice = int(value)
        except ValueError:
            pass
    return nice


def add_start_nice(p: argparse.ArgumentParser) -> None:
    """--start-nice, for the commands that record."""
    p.add_argument("--start-nice", type=int, default=START_NICE, metavar="NICE",
                   help="the start's niceness, until the probes are attached (default %(default)s: under load the "
                        "start runs ahead of it, which gives up the same CPU at once); the window runs at "
                        "the caller's. 0: the caller's all along")


START_PRIORITY = StartPriority()  # the process has one scheduling state
