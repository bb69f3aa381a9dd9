"""The start's priority: raised for the start, and every thread and helper
of it back at the caller's niceness once the window opens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from mysqlprobe.recorder.priority import START_NICE, StartPriority, asked_start_nice, descendants_tasks


def nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def in_own_thread(fn):
    """fn run in a thread of its own: niceness is per thread, the test's stays as it was."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.root
def test_what_the_start_spawns_runs_at_its_niceness_and_all_goes_back_at_the_window():
    def start_and_open_window():
        caller = nice(0)
        prio = StartPriority()
        prio.raise_to(caller - 7)
        raised = nice(0)
        ready, stop = threading.Event(), threading.Event()
        tids = []

        def helper_thread():
            tids.append(threading.get_native_id())
            ready.set()
            stop.wait(10)

        thread = threading.Thread(target=helper_thread)
        thread.start()
        ready.wait(10)
        child = subprocess.Popen(["sleep", "30"])
        try:
            during = {"main": raised, "thread": nice(tids[0]), "child": nice(child.pid)}
            prio.settle()
            after = {"main": nice(0), "thread": nice(tids[0]), "child": nice(child.pid)}
            mine = set(descendants_tasks(os.getpid()))
        finally:
            child.kill()
            child.wait()
            stop.set()
            thread.join()
        return caller, prio.applied, during, after, child.pid in mine and tids[0] in mine

    caller, applied, during, after, found = in_own_thread(start_and_open_window)
    assert applied == caller - 7
    assert during == {"main": caller - 7, "thread": caller - 7, "child": caller - 7}
    assert after == {"main": caller, "thread": caller, "child": caller}
    assert found


@pytest.mark.root
def test_a_niceness_not_below_the_callers_leaves_the_start_as_the_callers():
    def ask(*values):
        prio = StartPriority()
        seen = []
        for v in values:
            prio.raise_to(v)
            seen.append((nice(0), prio.applied))
        prio.settle()
        return nice(0), seen

    caller = in_own_thread(lambda: nice(0))
    end, seen = in_own_thread(lambda: ask(None, caller, caller + 3))
    assert end == caller and seen == [(caller, None)] * 3
    # raised by the command, then put back by its option (--start-nice 0)
    end, seen = in_own_thread(lambda: ask(caller - 10, caller))
    assert end == caller and seen == [(caller - 10, caller - 10), (caller, None)]


CANNOT_RAISE = """
import os
from mysqlprobe.recorder.priority import StartPriority
prio = StartPriority()
prio.raise_to(-10)
print(os.getpriority(os.PRIO_PROCESS, 0), prio.applied, prio.raised)
prio.settle()
"""


def test_without_the_right_to_raise_the_start_runs_as_the_callers():
    # root keeps its uid and loses CAP_SYS_NICE (util-linux's setpriv): as in a container without it
    drop = ["setpriv", "--bounding-set=-sys_nice"] if os.geteuid() == 0 else []
    out = subprocess.run([*drop, sys.executable, "-c", CANNOT_RAISE], capture_output=True, text=True, check=True)
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    assert out.stdout.split() == [str(caller), "None", "False"]


def test_the_start_nice_asked_is_read_before_the_imports():
    assert asked_start_nice(["-p", "1", "--insert-profile"]) == START_NICE
    assert asked_start_nice(["-p", "1", "--start-nice", "0"]) == 0
    assert asked_start_nice(["watch", "--start-nice=-5", "-p", "1"]) == -5
    assert asked_start_nice(["--start-nice", "-3", "--start-nice", "2"]) == 2  # the last, as argparse
    # what argparse will refuse leaves the default until it does; a missing value too
    assert asked_start_nice(["--start-nice", "low"]) == START_NICE
    assert asked_start_nice(["--start-nice"]) == START_NICE
