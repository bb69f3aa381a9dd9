"""Off-CPU stacks from the sched_switch tracepoint, on the known-cost target:
it blocks in wait_in_sleep() for a time the kernel guarantees as a minimum
(nanosleep does not return early), so the stack and a lower bound on its
time are known."""

from __future__ import annotations

import json
import re
import time

import pytest

from helpers import Profiler
from mysqlprobe.collectors.kernel.offcpu import OffCpuSession
from mysqlprobe.collectors.target.addresses import user_names
from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.stacks import UNDER_WAY

pytestmark = pytest.mark.root

SLEEP_MS = 307  # prime


def _sleep(proc, ms: int, command: str = "sleep") -> int:
    """known_cost's `command` (sleep, libsleep, leafsleep) for ms: the ns it slept."""
    proc.stdin.write(f"{command} {ms}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())["slept_ns"]


def test_a_blocked_thread_is_found_in_the_function_it_blocked_in(known_cost, tmp_path):
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "cost_1us", "--exact", "--no-cpu")
    slept = _sleep(known_cost, SLEEP_MS)
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    off = doc["off_cpu"]
    assert off["status"] == "collected" and off["stacks_file"] == "offcpu.folded"
    stacks = folded.parse((tmp_path / "offcpu.folded").read_text().splitlines())
    in_sleep = {s: us for s, us in stacks.stacks.items() if "wait_in_sleep" in s.split(";")}
    assert in_sleep, stacks.stacks
    for stack in in_sleep:
        frames = stack.split(";")
        after = frames[frames.index("wait_in_sleep") + 1:]
        assert after and all(f.endswith("_[k]") for f in after)   # then the kernel, down to where it slept
        assert "schedule_[k]" not in after and not any(f.startswith("bpf_") for f in after)
    assert sum(in_sleep.values()) >= (SLEEP_MS - 1) * 1000          # at least the time asked for, in us
    assert sum(in_sleep.values()) <= slept / 1000 + 1                # and no more than it slept
    assert off["blocked_s"] >= SLEEP_MS / 1000 - 0.001
    cost = doc["collectors"]["off_cpu"]["cost"]   # the kernel's run time of its program, over the window
    assert cost["target_s"] > 0 and re.search(r"\(\d+ runs, all threads of the host\)", cost["method"]), cost
    assert "off-CPU: blocked" in out and "do_nanosleep_[k]" in out         # where it waited, in the report
    assert (tmp_path / "offcpu.svg").read_text().startswith("<svg")
    assert "Off-CPU flame graph" in (tmp_path / "report.html").read_text()


def test_no_off_cpu_leaves_it_out(known_cost, tmp_path):
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "cost_1us", "--exact", "--no-cpu", "--no-off-cpu")
    _sleep(known_cost, 11)
    code, _, err = prof.stop()
    assert code == 0, err
    assert prof.profile()["off_cpu"] == {"status": "not requested"}
    assert not (tmp_path / "offcpu.folded").exists()


def test_a_wait_open_when_a_phase_ends_counts_up_to_its_end(known_cost):
    with OffCpuSession(known_cost.pid) as session:
        session.start()
        known_cost.stdin.write(f"sleep {SLEEP_MS}\n")
        known_cost.stdin.flush()
        time.sleep(0.05)
        t0 = time.monotonic_ns()
        session.stop()                                   # it still sleeps: cut here
        open_for = time.monotonic_ns() - t0
        slept = json.loads(known_cost.stdout.readline())["slept_ns"]
        session.start()                                  # its switch-in, in a later phase, adds nothing
        session.stop()
        cut = [r for r in session.records() if r.ns >= 40_000_000]
    assert len(cut) == 1 and cut[0].count == 1 and not cut[0].preempted
    assert cut[0].tid == known_cost.pid                  # its main thread slept
    assert cut[0].ns < slept - open_for - 100_000_000    # not its whole sleep: up to the phase's end


def test_a_wait_under_way_when_the_tracing_switches_on_again_is_timed_from_then(known_cost):
    """After a quiet phase, a thread already asleep has no switch-out on
    record: its wait is timed from the switch-on to its wake-up, under the
    system call it was blocked in then (read from /proc at the switch-on)."""
    with OffCpuSession(known_cost.pid) as session:
        session.start()                                  # the window's first phase, then a quiet one
        session.stop()
        sent = time.monotonic_ns()
        known_cost.stdin.write(f"sleep {SLEEP_MS}\n")
        known_cost.stdin.flush()
        time.sleep(0.05)                                 # asleep, the tracing off
        t0 = time.monotonic_ns()
        session.start()                                  # on again: its wait under way
        started = time.monotonic_ns()
        slept = json.loads(known_cost.stdout.readline())["slept_ns"]
        woke_by = time.monotonic_ns()                    # it woke, and wrote, before this
        session.stop()
        under = [r for r in session.records() if r.frame]
    assert len(under) == 1 and under[0].tid == known_cost.pid and under[0].count == 1, under
    assert under[0].frame in (UNDER_WAY.format("clock_nanosleep"), UNDER_WAY.format("nanosleep")), under[0].frame
    # it woke at least `slept` after the command was sent, and the switch-on was stamped inside start()
    assert sent + slept - started <= under[0].ns <= woke_by - t0, (under[0].ns, sent, slept, t0, started, woke_by)


def _slept_in(known_cost, tmp_path, command: str, caller: str, leaf: str, probe: str = "cost_1us") -> dict:
    """known_cost's `command` for SLEEP_MS under the tool: its off-CPU stacks through `leaf`
    hold the sleep, each ending main -> caller -> leaf; the capture."""
    prof = Profiler(known_cost.pid, tmp_path, "--probe", probe, "--exact", "--no-cpu")
    slept = _sleep(known_cost, SLEEP_MS, command)
    code, _, err = prof.stop()
    assert code == 0, err
    stacks = folded.parse((tmp_path / "offcpu.folded").read_text().splitlines())
    mine = {s: us for s, us in stacks.stacks.items() if leaf in s.split(";")}
    assert mine, stacks.stacks
    assert sum(mine.values()) >= (SLEEP_MS - 1) * 1000 and sum(mine.values()) <= slept / 1000 + 1
    for stack in mine:
        user = [f for f in stack.split(";")[1:] if not f.endswith("_[k]")]
        # root first: ... main, the caller, the library's function; no trampoline in between
        assert user[-3:] == ["main", caller, leaf], stack
    return prof.profile()


@pytest.mark.parametrize("probed", [False, True], ids=["unprobed", "return-probed"])
def test_a_wait_in_a_library_without_frame_pointers_keeps_its_callers(known_cost, tmp_path, probed):
    """sleep_in_library() (tests/fixtures/frameless.S) points %rbp at its
    caller's timespec while it sleeps, as glibc's select() does: the
    kernel's walk from %rbp ends there. The off-CPU program recovers the
    callers from the stack (probes/user_stack.h): wait_in_library, then
    main. Return-probed, wait_in_library's return address on the stack is
    the uretprobe trampoline: the recovered stack names its caller still."""
    doc = _slept_in(known_cost, tmp_path, "libsleep", "wait_in_library", "sleep_in_library",
                    "wait_in_library" if probed else "cost_1us")
    assert doc["off_cpu"]["recovered_s"] >= (SLEEP_MS - 1) / 1000


def test_a_wait_in_a_frameless_system_call_wrapper_keeps_its_caller(known_cost, tmp_path):
    """sleep_in_leaf() (tests/fixtures/frameless.S) sleeps as glibc's system
    call wrappers do, with no frame of its own and %rbp its caller's: the
    kernel's walk from %rbp goes on from wait_in_leaf's frame, to main, and
    skips wait_in_leaf. The off-CPU program reads it off the stack's top;
    the stack is main, wait_in_leaf, sleep_in_leaf, not recovered."""
    doc = _slept_in(known_cost, tmp_path, "leafsleep", "wait_in_leaf", "sleep_in_leaf")
    assert doc["off_cpu"]["recovered_s"] < (SLEEP_MS - 1) / 1000   # the walk was whole: nothing to recover


def _schedstat(pid: int) -> tuple[int, int]:
    """The kernel's ns on a CPU and ns waiting on a run queue of a thread."""
    on, runq, _ = open(f"/proc/{pid}/task/{pid}/schedstat").read().split()
    return int(on), int(runq)


def _switch_outs(pid: int) -> int:
    """The kernel's count of a thread's switch-outs, blocked and preempted."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/task/{pid}/status"))
    return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])


def test_paced_stacks_add_up_to_every_wait_the_kernel_counted(known_cost):
    """Paced at 20 stacks a CPU a second, 3 x 307 sleeps of 1 ms (and the
    reads of the commands between them) leave the CPU ~1,500 times a second:
    the program walks every stack for the first 0.1 s (no rate yet), few
    after, times every wait, and the thread's stacks are spread to its
    blocked time, as the kernel's schedstat counts it (wall less on CPU less
    run queue); the sleeps' stacks hold what the sleeps took."""
    with OffCpuSession(known_cost.pid, stacks_per_cpu_s=20) as session:
        (on0, runq0), t0, out0 = _schedstat(known_cost.pid), time.monotonic_ns(), _switch_outs(known_cost.pid)
        session.start()
        slept = sum(_sleep(known_cost, 1) for _ in range(3 * SLEEP_MS))
        session.stop()
        (on1, runq1), t1, out1 = _schedstat(known_cost.pid), time.monotonic_ns(), _switch_outs(known_cost.pid)
        mine = [r for r in session.records() if r.tid == known_cost.pid]
        timed = session._thread_waits()
        waits = sum(w.count for (tid, _, _), w in timed.items() if tid == known_cost.pid)
        taken = sum(w.walked for (tid, _, _), w in timed.items() if tid == known_cost.pid)
    blocked = sum(r.ns for r in mine if not r.preempted)
    # every switch-out the kernel counted (a sleep each, and most reads of the next command: a
    # command already in the pipe is read without one); the last read's may come after the session
    assert out1 - out0 - 1 <= waits <= out1 - out0 and waits >= 3 * SLEEP_MS, (waits, out1 - out0)
    assert taken < waits / 4, (taken, waits)   # paced: few walked after 0.1 s
    assert blocked == pytest.approx((t1 - t0) - (on1 - on0) - (runq1 - runq0), rel=0.05)
    names = user_names(known_cost.pid, [a for r in mine for a in r.user])
    in_sleep = sum(r.ns for r in mine if not r.preempted and any(names.get(a) == "wait_in_sleep" for a in r.user))
    assert in_sleep == pytest.approx(slept, rel=0.15)
