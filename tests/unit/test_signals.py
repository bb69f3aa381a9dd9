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
    with RunSignals(threading.Event()) as signals:
        signals.reached("calibration")
        with pytest.raises(Interrupted) as e:
            send(sig)
        assert signal.getsignal(sig) == signal.SIG_IGN  # cleaning up is not cut short by another one
    assert e.value.exit_code == 128 + sig
    assert str(e.value) == f"stopped by {signal.Signals(sig).name} while calibrating the probes' cost; nothing was recorded"
    assert signal.getsignal(sig) != signal.SIG_IGN  # the caller's handler is back


@pytest.mark.parametrize("sig, reason", [(signal.SIGINT, "interrupt"), (signal.SIGTERM, "sigterm"),
                                         (signal.SIGHUP, "sighup")])
def test_in_the_window_a_signal_ends_it(sig, reason):
    stop = threading.Event()
    with RunSignals(stop) as signals:
        signals.window_opens()
        send(sig)
        assert stop.is_set() and signals.reason == reason


def test_while_the_capture_is_written_the_first_signal_waits_and_a_second_stops(capsys):
    stop = threading.Event()
    with RunSignals(stop) as signals:
        signals.window_opens()
        signals.window_closed()
        signals.reached("report")   # no pause asked for: returns at once
        send(signal.SIGTERM)
        assert "SIGTERM: finishing the capture first" in capsys.readouterr().err
        assert stop.is_set()        # and nothing after it (watch's next window)
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
