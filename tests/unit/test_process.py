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
    tick = 1 / CLOCK_TICKS
    assert busy is not None and 0.3 - 2 * tick <= busy <= 0.4
    assert idle is not None and idle <= 2 * tick
    assert thread_cpu_seconds(os.getpid(), tids["busy"]) is None         # gone with its thread
