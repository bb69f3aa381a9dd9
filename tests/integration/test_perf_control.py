"""CPU sampling switched off and on through perf's control FIFO, as the
duty cycles' quiet phases do: perf acknowledges each switch, and a process
that never stops running has no sample while sampling is off."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mysqlprobe.collectors.cpu.perf_record import PerfRecorder, Unwinding, perf_binary

pytestmark = pytest.mark.root

OFF_S = 1.3


def sample_times(perf_data, pid: int) -> list[float]:
    out = subprocess.run([perf_binary(), "script", "-i", str(perf_data), "--pid", str(pid), "-F", "time"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(float(line.strip().rstrip(":")) for line in out.splitlines() if line.strip())


def test_no_sample_while_sampling_is_off_and_samples_either_side(tmp_path):
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    recorder = PerfRecorder(spinner.pid, str(tmp_path / "perf.data"), Unwinding("fp", "test"), frequency=97)
    try:
        recorder.start()
        time.sleep(0.7)
        assert recorder.sample(False)          # acknowledged
        time.sleep(OFF_S)
        assert recorder.sample(True)
        time.sleep(0.7)
    finally:
        recorder.stop()
        spinner.kill()
        spinner.wait()
    assert recorder.controlled and recorder.error is None
    times = sample_times(tmp_path / "perf.data", spinner.pid)
    gaps = [b - a for a, b in zip(times, times[1:])]
    # about 97 samples a second while on (the spinner has a CPU to itself or shares one)
    assert len(times) > 30, times
    longest = max(gaps)
    assert longest >= OFF_S - 0.1, (longest, gaps)
    # the gap is the one switched off: samples at a normal pace on either side
    split = gaps.index(longest)
    assert split > 10 and len(gaps) - split > 10
    assert sorted(gaps)[-2] < 0.5


def test_switching_a_stopped_recorder_is_refused(tmp_path):
    recorder = PerfRecorder(1, str(tmp_path / "perf.data"), Unwinding("fp", "test"))
    assert not recorder.sample(False)           # never started: nothing to switch


def test_without_its_fifos_perf_samples_all_along(tmp_path):
    (tmp_path / "control.fifo").mkdir()           # the FIFO cannot be made or opened there
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    recorder = PerfRecorder(spinner.pid, str(tmp_path / "perf.data"), Unwinding("fp", "test"), frequency=97)
    try:
        recorder.start()
        assert not recorder.controlled
        assert not recorder.sample(False)        # nothing to switch it with: it keeps sampling
        time.sleep(0.5)
    finally:
        recorder.stop()
        spinner.kill()
        spinner.wait()
    assert recorder.error is None and len(sample_times(tmp_path / "perf.data", spinner.pid)) > 10
