"""The BPF collectors' objects load in threads begun before prepare():
what a load raises there is the collector's note at prepare(), as it was
when prepare() loaded; a collector closed while its load still runs waits
for it and closes what it made. The sessions here stand in for a BPF
object (loading one needs root: tests/integration load the real ones)."""

from __future__ import annotations

import threading

import pytest

from mysqlprobe.collectors.base import CollectorUnavailable
from mysqlprobe.collectors.offcpu import PhasedBpfCollector
from mysqlprobe.errors import BpfError


class Session:
    """What new_session() returns: records being closed."""

    what = "a stand-in tracepoint"
    made: list["Session"] = []

    def __init__(self, pid: int, verbose: bool = False):
        self.closed = False
        Session.made.append(self)

    def close(self) -> None:
        self.closed = True


class RefusedSession(Session):
    def __init__(self, pid: int, verbose: bool = False):
        raise BpfError("loading the BPF programs failed (run with -v for the verifier log)")


class SlowSession(Session):
    release = threading.Event()
    loading = threading.Event()

    def __init__(self, pid: int, verbose: bool = False):
        SlowSession.loading.set()
        assert SlowSession.release.wait(10)
        super().__init__(pid, verbose)


def collector(session_type) -> PhasedBpfCollector:
    c = PhasedBpfCollector(1)
    c.name, c.label, c.lacks, c.session_type = "stand_in", "a stand-in", "stand-in stacks", session_type
    return c


def test_a_load_begun_early_is_the_session_prepare_gets():
    Session.made.clear()
    c = collector(Session)
    c.begin()
    c.prepare()
    assert c.session is Session.made[0] and len(Session.made) == 1  # loaded once, in the thread
    c.close()
    assert Session.made[0].closed


def test_a_load_refused_in_its_thread_is_a_note_at_prepare():
    c = collector(RefusedSession)
    c.begin()
    with pytest.raises(CollectorUnavailable) as refused:
        c.prepare()
    assert refused.value.note.startswith("a stand-in: loading the BPF programs failed")
    assert "stand-in stacks" in refused.value.note
    c.close()  # nothing made, nothing to close


def test_closed_mid_load_it_waits_and_closes_what_the_load_made():
    SlowSession.made.clear()
    SlowSession.release.clear()
    SlowSession.loading.clear()
    c = collector(SlowSession)
    c.begin()
    assert SlowSession.loading.wait(10)
    closer = threading.Thread(target=c.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close() returned while the object was still loading"
    SlowSession.release.set()
    closer.join(10)
    assert not closer.is_alive() and SlowSession.made and SlowSession.made[0].closed


def test_a_host_it_cannot_run_on_loads_nothing():
    Session.made.clear()

    class Elsewhere(PhasedBpfCollector):
        def unsupported(self) -> str | None:
            return "stand-in: not on this host"

    c = Elsewhere(1)
    c.session_type = Session
    c.begin()
    with pytest.raises(CollectorUnavailable, match="not on this host"):
        c.prepare()
    assert Session.made == []
