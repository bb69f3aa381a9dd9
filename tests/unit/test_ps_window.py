"""The P_S collector's first readings run beside the probes' attach, and
whatever uses its connection in the window waits for them (a connection
serves one query at a time)."""

from __future__ import annotations

import os
import threading

from mysqlprobe.collectors.connection import ConnectOptions
from mysqlprobe.collectors.ps_window import PerfSchemaCollector

RELEASE_AFTER_S = 0.2  # orders nothing: a release before the quiet phase would only let a bug pass


class SlowPerfSchema:
    """A PerfSchema whose summaries wait to be released; what runs on its connection, in order."""

    def __init__(self):
        self.release = threading.Event()
        self.used: list[str] = []
        self.own_threads: set[int] = set()
        self.restored = True

    def summaries(self) -> dict:
        self.release.wait(30)
        self.used.append("summaries")
        return {}

    def timer_now(self) -> int:
        self.used.append("timer")
        return 1

    def threads(self) -> list[dict]:
        self.used.append("threads")
        return []

    def quieted_setup(self) -> tuple[list[str], list[str]]:
        return ["events_stages_current"], []

    def quiet(self, on: bool) -> int:
        self.used.append(f"quiet {on}")
        return 1


class Alone:
    """A setup lease with no other profiler of the server."""

    def if_alone(self, change) -> bool:
        change()
        return True


def _collector() -> tuple[PerfSchemaCollector, SlowPerfSchema]:
    collector = PerfSchemaCollector(os.getpid(), ConnectOptions())
    ps = SlowPerfSchema()
    collector.ps, collector.conn, collector.lease = ps, object(), Alone()
    collector.progress = None
    return collector, ps


def test_start_returns_before_the_first_readings():
    collector, ps = _collector()
    collector.start()
    try:
        assert ps.used == []   # still waiting for the server
    finally:
        ps.release.set()
        collector._readings_done()
    assert ps.used == ["summaries", "timer", "threads"]


def test_a_quiet_phase_waits_for_the_first_readings():
    collector, ps = _collector()
    collector.start()
    threading.Timer(RELEASE_AFTER_S, ps.release.set).start()
    assert collector.quiet(True)
    assert ps.used == ["summaries", "timer", "threads", "quiet True"]
    assert collector.own_rows_changed == 1


def test_a_quiet_phase_after_failed_readings_does_not_switch():
    collector, ps = _collector()
    failed = []

    def give_up():
        failed.append(True)
        collector.ps = None  # what _give_up leaves

    collector._first_readings = give_up
    collector.start()
    assert not collector.quiet(True) and failed and ps.used == []
