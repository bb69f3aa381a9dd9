"""The per-thread CPU clock the P_S collector uses for the server's threads
serving mysqlprobe's connections."""

import os
import threading
import time

from mysqlprobe.collectors.process import CLOCK_TICKS, thread_cpu_seconds


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
