"""`perf record` as mysqlprobe runs it: the stack unwinding chosen from
the binary's own prologues (frame pointers when most functions set one
up, else DWARF with a bounded copy of the stack), the process itself, and
the FIFOs that switch its sampling on and off."""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import subprocess
import time

from mysqlprobe.collectors.base import Collector, CollectorUnavailable, opened
from mysqlprobe.collectors.target.elf import ElfImage
from mysqlprobe.collectors.kernel.process import cpu_seconds
from dataclasses import dataclass

DEFAULT_FREQUENCY = 99       # Hz: low overhead, and off the beat of 100 Hz timers
DWARF_STACK_BYTES = 8192     # user stack copied per sample for DWARF unwinding


class PerfUnavailable(Exception):
    pass


class ControlRefused(PerfUnavailable):
    """perf record does not take --control (older than 5.10)."""


@dataclass(frozen=True)
class Unwinding:
    """How perf takes user stacks (frame pointers or DWARF), and why that way."""

    mode: str      # "fp" or "dwarf"
    reason: str

    def call_graph(self) -> str:
        return "fp" if self.mode == "fp" else f"dwarf,{DWARF_STACK_BYTES}"

    def describe(self) -> str:
        return "frame pointers" if self.mode == "fp" else f"DWARF ({DWARF_STACK_BYTES}-byte stacks)"


def choose_unwinding(image: ElfImage, requested: str = "auto") -> Unwinding:
    if requested in ("fp", "dwarf"):
        return Unwinding(requested, "asked for with --perf-callgraph")
    share = image.frame_pointer_share
    if share is None:
        return Unwinding("dwarf", "no function symbols to tell whether frame pointers are kept")
    if share >= 0.5:  # builds without frame pointers keep them in almost no function
        return Unwinding("fp", f"{100 * share:.0f}% of sampled functions keep a frame pointer")
    return Unwinding("dwarf", f"only {100 * share:.0f}% of sampled functions keep a frame pointer")


def perf_binary() -> str:
    import shutil  # shutil imports the compressors: 5 ms of a start that runs no perf
    found = shutil.which("perf") or next((p for p in ("/usr/bin/perf", "/usr/sbin/perf") if os.path.exists(p)), None)
    if not found:
        raise PerfUnavailable("the perf tool is not installed (Debian: apt install linux-perf)")
    return found


class PerfRecorder:
    """`perf record` for one process, from start() to stop(), into perf_data.

    It samples every CPU (-a) and the target's samples are picked out when
    read: events on the target's threads would hook each of their context
    switches, enabled or not, and under 32 clients on 2 CPUs perf attached
    with its events off (-p PID -D -1) slowed the load by 8-17%; CPU-wide
    events cost only when they fire: at 99 Hz a few tenths of a percent of
    a CPU, so it samples the whole window (in the on-phases only, a short
    load's flame graph held a handful of samples)."""

    def __init__(self, pid: int, perf_data: str, unwinding: Unwinding | None, frequency: int = DEFAULT_FREQUENCY,
                 start_off: bool = False):
        # unwinding None: no stacks; start_off: sampling waits for sample(True)
        self.pid, self.perf_data, self.unwinding, self.frequency = pid, perf_data, unwinding, frequency
        self.start_off = start_off
        self.proc: subprocess.Popen[str] | None = None
        self.cpu_s = 0.0
        self.window_cpu_s: float | None = None  # perf's CPU from window_opens() to stop()
        self._window_cpu0: float | None = None
        self.error: str | None = None
        folder = os.path.dirname(perf_data)
        self.control_fifo, self.ack_fifo = os.path.join(folder, "control.fifo"), os.path.join(folder, "ack.fifo")
        self._control: int | None = None
        self._ack: int | None = None
        self.controlled = True  # perf takes enable/disable on a FIFO (perf 5.10+)

    def command(self) -> list[str]:
        control = [f"--control=fifo:{self.control_fifo},{self.ack_fifo}"] if self.controlled else []
        stacks = ["--call-graph", self.unwinding.call_graph()] if self.unwinding else []
        off = ["-D", "-1"] if self.start_off and self.controlled else []
        return [perf_binary(), "record", "-q", "-e", "cpu-clock", "-F", str(self.frequency), *stacks, *off,
                "-a", "-o", self.perf_data, *control]

    def _open_control(self) -> None:
        """The FIFOs perf takes 'enable' and 'disable' on, and acknowledges
        them on. Both ends are open before perf starts: perf's open of the
        acknowledgement FIFO for writing waits for a reader."""
        for path in (self.control_fifo, self.ack_fifo):
            if not os.path.exists(path):
                os.mkfifo(path, 0o600)
        self._control = os.open(self.control_fifo, os.O_RDWR | os.O_CLOEXEC)
        self._ack = os.open(self.ack_fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def sample(self, on: bool, timeout_s: float = 1.0) -> bool:
        """Turn sampling on or off; whether perf acknowledged it in time."""
        if self._control is None or self._ack is None or not self.proc or self.proc.poll() is not None:
            return False
        os.write(self._control, b"enable\n" if on else b"disable\n")
        ready, _, _ = select.select([self._ack], [], [], timeout_s)
        if not ready:
            return False
        try:
            return os.read(self._ack, 64).startswith(b"ack")
        except BlockingIOError:
            return False

    def close_control(self) -> None:
        for fd in (self._control, self._ack):
            if fd is not None:
                os.close(fd)
        self._control = self._ack = None

    def start(self) -> None:
        self.launch()
        self.ready()

    def launch(self) -> None:
        """Spawn perf; ready() waits until it records (two perfs start side by side)."""
        self._usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._spawn()

    def ready(self) -> None:
        try:
            self._wait_recording()
        except ControlRefused:
            self.controlled = False  # an older perf: it samples all along
            self._spawn()
            self._wait_recording()

    def _spawn(self) -> None:
        if self.controlled:
            try:
                self._open_control()
            except OSError:  # no FIFO where perf's data goes (a full or odd file system)
                self.close_control()
                self.controlled = False
        # its own session: a Ctrl-C for mysqlprobe does not end it before the window closes;
        # and it dies with mysqlprobe (kill -9 included), as the probes do
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=_die_with_parent)

    def _wait_recording(self) -> None:
        # perf opens its events within milliseconds; a failure ends it at once
        deadline = time.monotonic() + 0.5
        proc = opened(self.proc, "perf record")
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.exists(self.perf_data) and os.path.getsize(self.perf_data) > 0:
                return
            time.sleep(0.02)
        if proc.poll() is not None:
            self.close_control()
            err = (opened(proc.stderr, "perf's stderr").read() or "").strip()
            if self.controlled and "control" in err:
                raise ControlRefused("perf record does not take --control")
            lines = err.splitlines()
            raise PerfUnavailable(f"perf record failed: {lines[-1] if lines else f'exit {proc.returncode}'}")

    def window_opens(self) -> None:
        """From here perf's CPU counts as the window's (its start does not)."""
        self._window_cpu0 = cpu_seconds(self.proc.pid) if self.proc else None

    def close(self) -> None:
        """On any path: perf killed if it runs (its data is not wanted), the FIFOs closed."""
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        self.close_control()

    def stop(self) -> None:
        """End the recording (perf writes its data on SIGINT); perf's own CPU
        time is kept as its cost, in all (cpu_s) and in the window
        (window_cpu_s: writing its data falls outside)."""
        if not self.proc:
            return
        cpu = cpu_seconds(self.proc.pid)
        if cpu is not None and self._window_cpu0 is not None:
            self.window_cpu_s = cpu - self._window_cpu0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.proc.returncode not in (0, -signal.SIGINT) and not os.path.exists(self.perf_data):
            lines = (err or "").strip().splitlines()
            self.error = lines[-1] if lines else f"exit {self.proc.returncode}"
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (usage.ru_utime - self._usage0.ru_utime) + (usage.ru_stime - self._usage0.ru_stime)
        self.proc = None
        self.close_control()


def _launched(recorder: PerfRecorder, ready: bool = False) -> PerfUnavailable | None:
    """Launch perf (or, ready=True, wait until it records); what went wrong, if anything."""
    try:
        recorder.ready() if ready else recorder.launch()
    except PerfUnavailable as e:
        return e
    return None


class PerfProcessCollector(Collector):
    """A collector around one perf record: begin() spawns it, prepare()
    (through wait_recording()) waits until it records."""

    unavailable_note = "{error}"   # the capture's note when perf cannot run

    def __init__(self) -> None:
        super().__init__()
        self.recorder: PerfRecorder | None = None
        self._begun: PerfUnavailable | None = None   # what launching perf in begin() met
        self._tmp: str | None = None                 # new_recorder's work_dir(), for perf's files

    def new_recorder(self) -> PerfRecorder:
        raise NotImplementedError

    @property
    def perf(self) -> PerfRecorder:
        return opened(self.recorder, "perf record")

    def begin(self) -> None:
        self.recorder = self.new_recorder()
        self._begun = _launched(self.recorder)

    def wait_recording(self) -> None:
        if self.recorder is None:
            self.begin()
        error = self._begun or _launched(self.perf, ready=True)
        if error:
            raise CollectorUnavailable(str(error), self.unavailable_note.format(error=error)) from None

    def close(self) -> None:
        if self.recorder:
            self.recorder.close()
        if self._tmp:
            import shutil  # only where perf record ran
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
