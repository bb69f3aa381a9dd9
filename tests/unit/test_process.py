"""What the process collector reads from /proc: the per-thread CPU clock
the P_S collector uses for the server's threads serving mysqlprobe's
connections, and the window's snapshots of mysqld and the host. psutil,
which the collector used to import (15 ms of every start), is the outside
reference: each figure of ours lies between psutil's read just before and
just after it."""

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from mysqlprobe.collectors.kernel import process as P
from mysqlprobe.collectors.kernel.process import CLOCK_TICKS, thread_cpu_seconds


def test_a_threads_cpu_time_is_its_own_not_its_processes():
    tids, ready, done = {}, threading.Barrier(3), threading.Event()

    def work(name, spin_s):
        tids[name] = threading.get_native_id()
        t0 = time.thread_time()
        while time.thread_time() - t0 < spin_s:
            pass
        ready.wait(10)
        done.wait(10)

    workers = [threading.Thread(target=work, args=(name, s)) for name, s in (("busy", 0.3), ("idle", 0.0))]
    for w in workers:
        w.start()
    ready.wait(10)
    busy, idle = (thread_cpu_seconds(os.getpid(), tids[n]) for n in ("busy", "idle"))
    done.set()
    for w in workers:
        w.join()
    tick = 1 / CLOCK_TICKS  # the coarsest clock it may have read
    assert busy is not None and 0.3 - 2 * tick <= busy <= 0.4
    assert idle is not None and idle <= 2 * tick
    # gone with its thread (join() returns before the kernel has reaped the task: poll a while)
    deadline = time.monotonic() + 10
    while thread_cpu_seconds(os.getpid(), tids["busy"]) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_cpu_seconds(os.getpid(), tids["busy"]) is None


def test_without_schedstat_the_clock_ticks_of_stat_are_read(tmp_path):
    task = tmp_path / "7" / "task" / "8"
    task.mkdir(parents=True)
    # comm with a space and a parenthesis; utime 150 and stime 50 ticks
    (task / "stat").write_text("8 (my (odd) comm) S 1 8 8 0 -1 4194560 0 0 0 0 150 50 0 0 20 0 1 0\n")
    assert thread_cpu_seconds(7, 8, proc=str(tmp_path)) == 200 / CLOCK_TICKS
    (task / "schedstat").write_text("1234567890 5 6\n")
    assert thread_cpu_seconds(7, 8, proc=str(tmp_path)) == 1.23456789
    assert thread_cpu_seconds(7, 9, proc=str(tmp_path)) is None


@pytest.fixture()
def busy_child():
    """A process with a few threads that burn CPU and write a file."""
    code = ("import threading, time, os, tempfile\n"
            "def spin():\n"
            "    end = time.time() + 30\n"
            "    while time.time() < end: pass\n"
            "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n"
            "with tempfile.TemporaryFile() as f:\n"
            "    f.write(os.urandom(1 << 20)); f.flush(); os.fsync(f.fileno())\n"
            "print('ready', flush=True); time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    yield child.pid
    child.kill()
    child.wait()


def between(low, ours, high):
    return low <= ours <= high


def test_a_snapshot_agrees_with_psutil(busy_child):
    p = psutil.Process(busy_child)
    before_cpu, before_ctx, before_host = p.cpu_times(), p.num_ctx_switches(), psutil.cpu_times()
    ours = P.snapshot(busy_child)
    after_cpu, after_ctx, after_host = p.cpu_times(), p.num_ctx_switches(), psutil.cpu_times()
    assert ours is not None
    assert between(before_cpu.user, ours.user_s, after_cpu.user)
    assert between(before_cpu.system, ours.system_s, after_cpu.system)
    assert between(before_ctx.voluntary, ours.ctx_voluntary, after_ctx.voluntary)
    assert between(before_ctx.involuntary, ours.ctx_involuntary, after_ctx.involuntary)
    assert ours.write_bytes == p.io_counters().write_bytes >= 1 << 20
    assert abs(ours.rss_bytes - p.memory_info().rss) < 1 << 20
    threads = {t.id: t.user_time + t.system_time for t in p.threads()}
    assert set(ours.thread_cpu) == set(threads) and ours.threads == 4
    assert all(ours.thread_cpu[tid] <= threads[tid] for tid in threads)
    assert max(ours.thread_cpu.values()) > 0
    assert ours.thread_names[busy_child] == p.name()
    for name, value in ours.host.items():
        assert between(getattr(before_host, name), value, getattr(after_host, name)), name
    assert P.cpu_seconds(busy_child) >= ours.user_s + ours.system_s


def test_a_process_gone_is_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert P.snapshot(child.pid) is None
    assert P.cpu_seconds(child.pid) is None


def test_a_thread_that_ends_between_listing_and_reading_is_left_out(tmp_path):
    """A /proc tree whose task lists a thread gone by the time it is read."""
    me = os.getpid()
    proc = tmp_path / "proc"
    task = proc / str(me) / "task"
    for tid in (me, me + 1):
        (task / str(tid)).mkdir(parents=True)
    stat = f"{me} (mysqld) S 1 " + " ".join(["0"] * 9) + " 250 50 " + " ".join(["0"] * 30)
    (proc / str(me) / "stat").write_text(stat)
    (task / str(me) / "stat").write_text(stat)
    (task / str(me) / "comm").write_text("mysqld\n")
    (proc / str(me) / "status").write_text("voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n")
    (proc / str(me) / "statm").write_text("100 25 0 0 0 0 0\n")
    (proc / "stat").write_text("cpu  10 0 20 300 4 0 0 1 0 0\ncpu0 10 0 20 300 4 0 0 1 0 0\n")
    snap = P.snapshot(me, proc=str(proc))
    assert snap.threads == 1 and snap.thread_cpu == {me: 300 / P.CLOCK_TICKS}
    assert (snap.user_s, snap.system_s) == (250 / P.CLOCK_TICKS, 50 / P.CLOCK_TICKS)
    assert (snap.ctx_voluntary, snap.ctx_involuntary, snap.rss_bytes) == (7, 3, 25 * P.PAGE_SIZE)
    assert snap.read_bytes is None   # no io file: not readable, not a failure
    assert snap.host["steal"] == 1 / P.CLOCK_TICKS and snap.host["idle"] == 300 / P.CLOCK_TICKS


def test_context_switches_are_every_threads_not_the_first_ones():
    from mysqlprobe.collectors.kernel.process import ProcessSnapshot, context_switches
    def snap(ctx, leader):
        return ProcessSnapshot(0.0, 0.0, 0.0, leader[0], leader[1], None, None, 0, len(ctx), {}, {}, {}, ctx)
    start = snap({1: (10, 1), 2: (5, 0)}, (10, 1))
    end = snap({1: (30, 2), 3: (7, 1)}, (30, 2))   # thread 2 ended, thread 3 was born in between
    assert context_switches(start, end) == (20 + 7, 1 + 1)
    assert context_switches(snap({}, (10, 1)), snap({}, (13, 1))) == (3, 0)   # no threads read: the first's


def test_a_live_process_counts_its_threads_switches(tmp_path):
    import threading
    import time
    from mysqlprobe.collectors.kernel.process import context_switches, snapshot
    done, slept = threading.Event(), threading.Event()

    def work():
        for _ in range(50):
            time.sleep(0.001)
        slept.set()
        done.wait()   # alive at the second snapshot: a thread that ended is not counted

    start = snapshot(os.getpid())
    worker = threading.Thread(target=work)
    worker.start()
    slept.wait()
    mid = snapshot(os.getpid())
    done.set()
    worker.join()
    # the sleeping thread switched out ~50 times; /proc/PID/status's count (this thread's) barely moved
    assert context_switches(start, mid)[0] >= 40
    assert mid.ctx_voluntary - start.ctx_voluntary < 40


def test_a_blocked_threads_callers_are_scanned_from_its_stack():
    """Words on the stack that point into code just after a call are its
    callers, innermost first; data that merely looks like an address is not."""
    import io
    from mysqlprobe.collectors.kernel.process import scanned_return_addresses
    code_lo, code_hi = 0x400000, 0x500000
    memory = bytearray(0x600000)
    call_site = 0x401000                        # call rel32: e8 xx xx xx xx, returning to call_site + 5
    memory[call_site:call_site + 5] = b"\xe8\x00\x00\x00\x00"
    indirect = 0x402000                         # call *%rax: ff d0, returning to indirect + 2
    memory[indirect:indirect + 2] = b"\xff\xd0"
    sp = 0x580000
    words = [0x1234, call_site + 5, 0x403000, indirect + 2, 0x7fff0000]
    for i, w in enumerate(words):
        memory[sp + 8 * i:sp + 8 * i + 8] = w.to_bytes(8, "little")
    found = scanned_return_addresses(io.BytesIO(bytes(memory)), sp, [(code_lo, code_hi)])
    assert found == [call_site + 5, indirect + 2]
