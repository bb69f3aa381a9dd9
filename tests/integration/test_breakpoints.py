"""kill -9 while probes go on or come off. The kernel removes a uprobe in
the task that drops it; with SIGKILL pending it cannot write the byte back
and keeps the breakpoint ("failed to unregister, leaking uprobe"): the int3
stays in the target's code for good. Reproduced on a process's libc with
bare uprobe_multi links (tests/integration/attach_loop.py), killed at
random moments until the kernel keeps some: the removal mysqlprobe runs
before it attaches takes them out, and so does the guard it leaves behind
when it is killed."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mysqlprobe.collectors.safety.breakpoint_guard import HOLDER_EXIT_WAIT_S
from mysqlprobe.collectors.safety.breakpoints import left_breakpoints, remove_left_breakpoints
from mysqlprobe.collectors.target.elf import file_offset, read_elf
from mysqlprobe.collectors.kernel.process import alive

from helpers import wait_until

pytestmark = pytest.mark.root

LOOP = str(Path(__file__).with_name("attach_loop.py"))
TRIALS = 60            # kills before concluding the kernel keeps nothing
FUNCTIONS = 1500       # enough that an attach or detach takes a while
# a mysqlprobe that starts its guard and is gone at once, before the guard's
# interpreter has started: it prints the guard's pid
GUARD_THEN_DIE = ("import os, sys\n"
                  "from mysqlprobe.collectors.safety.breakpoints import BreakpointGuard\n"
                  "guard = BreakpointGuard(int(sys.argv[1]), sys.argv[2], [int(sys.argv[3])])\n"
                  "print(guard.proc.pid, flush=True)\n"
                  "os._exit(0)\n")


# the same, for several offsets
GUARD_OF_THEN_DIE = ("import os, sys\n"
                     "from mysqlprobe.collectors.safety.breakpoints import BreakpointGuard\n"
                     "guard = BreakpointGuard(int(sys.argv[1]), sys.argv[2], [int(o) for o in sys.argv[3].split(',')])\n"
                     "print(guard.proc.pid, flush=True)\n"
                     "os._exit(0)\n")


def simple_functions(library: str) -> list[int]:
    """File offsets of functions of the library that begin with a push:
    instructions every kernel's uprobes can step over."""
    image, data = read_elf(library), Path(library).read_bytes()
    out = sorted({file_offset(image.segments, f.address) for f in image.functions if f.size >= 16})
    out = [o for o in out if data[o] in (0x53, 0x55) or (data[o] == 0x41 and 0x54 <= data[o + 1] <= 0x57)]
    return out[:FUNCTIONS]


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "600"])
    assert wait_until(lambda: "libc" in Path(f"/proc/{proc.pid}/maps").read_text())
    library = next(line.split()[-1] for line in Path(f"/proc/{proc.pid}/maps").read_text().splitlines()
                   if "/libc.so" in line)
    yield proc.pid, library
    proc.kill()
    proc.wait()


def kill_mid_attach(pid: int, library: str, offsets: list[int], guard: bool) -> int:
    """Run the attach loop and kill it at a random moment; the guard's pid (0: none)."""
    loop = subprocess.Popen([sys.executable, LOOP, str(pid), library, ",".join(map(str, offsets)),
                             *(["--guard"] if guard else [])], stdout=subprocess.PIPE, text=True)
    line = loop.stdout.readline().split()
    assert line and line[0] == "ready", "the attach loop did not start"
    time.sleep(random.uniform(0.02, 0.6))
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    return int(line[1])


def guard_lines(pid: int) -> int:
    """The guard's lines in the kernel's log about this process."""
    log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    return sum(1 for line in log.splitlines() if "mysqlprobe: the kernel kept" in line and f"process {pid} " in line)


def plant_breakpoints(pid: int, library: str, offsets: list[int]) -> None:
    """The state a kill mid-detach leaves, made by hand: an int3 at each
    offset of the process's code that no uprobe owns."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        for offset in offsets:
            for line in maps:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if parts[-1] == library and int(parts[2], 16) <= offset < int(parts[2], 16) + hi - lo:
                    mem.seek(lo + offset - int(parts[2], 16))
                    mem.write(b"\xcc")
                    break


def test_breakpoints_kept_by_the_kernel_are_taken_out(sleeper):
    pid, library = sleeper
    offsets = simple_functions(library)
    assert len(offsets) > 200
    kept: list[int] = []
    for _ in range(TRIALS):
        kill_mid_attach(pid, library, offsets, guard=False)
        kept = left_breakpoints(pid, library, offsets)
        if kept:
            break
    else:   # the kernel kept none this time: the state made by hand, the removal held to it alike
        plant_breakpoints(pid, library, offsets[:5])
        kept = left_breakpoints(pid, library, offsets)
        assert kept == offsets[:5]
    assert remove_left_breakpoints(pid, library, offsets) == (len(kept), 0)
    assert left_breakpoints(pid, library, offsets) == []


def test_the_guard_takes_them_out_after_a_kill(sleeper):
    pid, library = sleeper
    offsets = simple_functions(library)
    for _ in range(TRIALS):
        before = guard_lines(pid)
        guard = kill_mid_attach(pid, library, offsets, guard=True)
        assert wait_until(lambda: not alive(guard), timeout=30), "the guard did not finish"
        assert left_breakpoints(pid, library, offsets) == []
        if guard_lines(pid) > before:  # it found some, and (above) none is left
            return
    # the kernel kept none this time: the state made by hand (int3s no uprobe owns), and a guard whose
    # mysqlprobe is gone at once, held to it alike
    planted = offsets[:5]
    plant_breakpoints(pid, library, planted)
    assert left_breakpoints(pid, library, offsets) == planted
    before = guard_lines(pid)
    parent = subprocess.run([sys.executable, "-c", GUARD_OF_THEN_DIE, str(pid), library, ",".join(map(str, planted))],
                            capture_output=True, text=True, check=True, timeout=30)
    guard = int(parent.stdout)
    assert wait_until(lambda: not alive(guard), timeout=30), "the guard did not finish"
    assert left_breakpoints(pid, library, offsets) == [] and guard_lines(pid) > before


def test_a_guard_whose_mysqlprobe_died_before_it_started_does_not_wait_for_it(sleeper, tmp_path):
    """Killed while its guard was still starting, mysqlprobe is no longer the
    guard's parent by the time the guard looks for it: the guard goes on at
    once, rather than waiting its full HOLDER_EXIT_WAIT_S on the reaper
    that adopted it (a CI run's guard outlived the test's 30 s so)."""
    pid, library = sleeper
    offset = simple_functions(library)[0]
    parent = subprocess.run([sys.executable, "-c", GUARD_THEN_DIE, str(pid), library, str(offset)],
                            capture_output=True, text=True, check=True, timeout=30, cwd=tmp_path)
    guard = int(parent.stdout)
    assert wait_until(lambda: not alive(guard), timeout=HOLDER_EXIT_WAIT_S / 3), "the guard waited for the reaper"
    assert left_breakpoints(pid, library, [offset]) == []
