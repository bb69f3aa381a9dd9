"""What SIGINT, SIGTERM and SIGHUP do before, in and after the window."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from mysqlprobe.errors import Interrupted
from mysqlprobe.recorder.window import RunSignals


def send(sig: int) -> None:
    os.kill(os.getpid(), sig)  # the handler runs before os.kill returns to Python code


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_before_the_window_a_signal_stops_the_run_with_128_plus_its_number(sig):
    # the caller's own: SIG_IGN where the test run was started in the background by a shell
    callers = signal.getsignal(sig)
    with RunSignals(threading.Event()) as signals:
        signals.reached("calibration")
        with pytest.raises(Interrupted) as e:
            send(sig)
        assert signal.getsignal(sig) == signal.SIG_IGN  # cleaning up is not cut short by another one
    assert e.value.exit_code == 128 + sig
    assert str(e.value) == f"stopped by {signal.Signals(sig).name} while calibrating the probes' cost; nothing was recorded"
    assert signal.getsignal(sig) == callers  # the caller's handler is back


@pytest.mark.parametrize("sig, reason", [(signal.SIGINT, "interrupt"), (signal.SIGTERM, "sigterm"),
                                         (signal.SIGHUP, "sighup")])
def test_in_the_window_a_signal_ends_it(sig, reason):
    stop = threading.Event()
    with RunSignals(stop) as signals:
        signals.window_opens()
        send(sig)
        assert stop.wait(5) and signals.reason == reason


def test_a_signal_inside_the_windows_wait_does_not_deadlock_on_the_events_lock():
    # the main thread was inside stop.wait(), holding the event's lock, when
    # the signal came: the handler must not wait for that lock
    stop = threading.Event()
    with RunSignals(stop) as signals:
        signals.window_opens()
        with stop._cond:                      # as Event.wait() holds it between its steps
            handler = threading.Thread(target=signals._handler, args=(signal.SIGINT, None), daemon=True)
            handler.start()
            handler.join(timeout=2)
            returned = not handler.is_alive()
        assert returned                       # the handler came back with the lock still held
        assert stop.wait(5) and signals.reason == "interrupt"


def test_while_the_capture_is_written_the_first_signal_waits_and_a_second_stops(capsys):
    stop = threading.Event()
    with RunSignals(stop) as signals:
        signals.window_opens()
        signals.window_closed()
        signals.reached("report")   # no pause asked for: returns at once
        send(signal.SIGTERM)
        assert "SIGTERM: finishing the capture first" in capsys.readouterr().err
        assert stop.wait(5)         # and nothing after it (watch's next window)
        with pytest.raises(Interrupted) as e:
            send(signal.SIGINT)
    assert e.value.exit_code == 130 and "while detaching and writing the capture" in str(e.value)


def test_a_pause_for_the_fault_suite_ends_at_a_deferred_signal(monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_PAUSE_AT", "report:30")
    with RunSignals(threading.Event()) as signals:
        signals.window_opens()
        signals.window_closed()
        threading.Timer(0.2, send, args=(signal.SIGHUP,)).start()
        signals.reached("report")   # returns at the signal, not after 30 s
        assert signals.reason == "late SIGHUP"
