"""CPU sampling with the perf tool during the probes' window, turned into
folded stacks (FlameGraph's format) with the thread's name as root frame.

MariaDB and MySQL are usually built without frame pointers: the unwinding
is chosen from the binary's own prologues (frame pointers when most
functions set one up, else DWARF with a bounded copy of the stack)."""

from __future__ import annotations

import ctypes
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

from mysqlprobe.collectors.base import Collector, CollectorUnavailable, Cost, Facts, Section
from mysqlprobe.collectors.process import cpu_seconds
from mysqlprobe.collectors.workdir import work_dir
from mysqlprobe.collectors.cxxnames import qualified_name
from mysqlprobe.collectors.elf import ElfImage, file_offset
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import stacks_summary

STACKS_FILE = "stacks.folded"
DEFAULT_FREQUENCY = 99       # Hz: low overhead, and off the beat of 100 Hz timers
DWARF_STACK_BYTES = 8192     # user stack copied per sample for DWARF unwinding
KERNEL_SUFFIX = "_[k]"       # FlameGraph's mark for kernel frames
PROLOGUE_SAMPLE = 400        # functions whose first bytes are read to detect frame pointers

_SET_FRAME_POINTER = bytes.fromhex("4889e5")  # mov %rsp,%rbp
_FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


class PerfUnavailable(Exception):
    pass


class ControlRefused(PerfUnavailable):
    """perf record does not take --control (older than 5.10)."""


@dataclass(frozen=True)
class Unwinding:
    mode: str      # "fp" or "dwarf"
    reason: str

    def call_graph(self) -> str:
        return "fp" if self.mode == "fp" else f"dwarf,{DWARF_STACK_BYTES}"

    def describe(self) -> str:
        return "frame pointers" if self.mode == "fp" else f"DWARF ({DWARF_STACK_BYTES}-byte stacks)"


def frame_pointer_share(image: ElfImage) -> float | None:
    """Share of the binary's functions that set up a frame pointer in their
    first bytes, from an even sample of them; None without function symbols."""
    functions = sorted((f for f in image.functions if f.size >= 16), key=lambda f: f.address)
    if not functions:
        return None
    step = max(len(functions) // PROLOGUE_SAMPLE, 1)
    sample = functions[::step][:PROLOGUE_SAMPLE]
    with_fp = 0
    with open(image.path, "rb") as f:
        for fn in sample:
            try:
                f.seek(file_offset(image.segments, fn.address))
            except ValueError:
                continue
            # shrink-wrapped code may test its arguments before the prologue
            with_fp += _SET_FRAME_POINTER in f.read(min(fn.size, 32))
    return with_fp / len(sample)


def choose_unwinding(image: ElfImage, requested: str = "auto") -> Unwinding:
    if requested in ("fp", "dwarf"):
        return Unwinding(requested, "asked for with --perf-callgraph")
    share = frame_pointer_share(image)
    if share is None:
        return Unwinding("dwarf", "no function symbols to tell whether frame pointers are kept")
    if share >= 0.5:  # builds without frame pointers keep them in almost no function
        return Unwinding("fp", f"{100 * share:.0f}% of sampled functions keep a frame pointer")
    return Unwinding("dwarf", f"only {100 * share:.0f}% of sampled functions keep a frame pointer")


def perf_binary() -> str:
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
        self.proc: subprocess.Popen | None = None
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
        if self._control is None or not self.proc or self.proc.poll() is not None:
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
        self._usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            self._launch()
        except ControlRefused:
            self.controlled = False  # an older perf: it samples all along
            self._launch()

    def _launch(self) -> None:
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
        # perf opens its events within milliseconds; a failure ends it at once
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(self.perf_data) and os.path.getsize(self.perf_data) > 0:
                return
            time.sleep(0.02)
        if self.proc.poll() is not None:
            self.close_control()
            err = (self.proc.stderr.read() or "").strip()
            if self.controlled and "control" in err:
                raise ControlRefused("perf record does not take --control")
            lines = err.splitlines()
            raise PerfUnavailable(f"perf record failed: {lines[-1] if lines else f'exit {self.proc.returncode}'}")

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


def short_frame(symbol: str, dso: str) -> str:
    """One flame graph frame: the function's qualified name without its
    parameters, '_[k]' on kernel frames, '[library]' when unsymbolized."""
    kernel = dso.startswith("[kernel") or symbol.startswith("bpf_prog_")  # BPF programs run in the kernel
    if symbol in ("", "[unknown]"):
        name = "[unknown]" if dso in ("", "[unknown]") else f"[{os.path.basename(dso).strip('[]')}]"
    else:
        name = qualified_name(re.sub(r"(\+0x[0-9a-f]+|@@?[\w.]+)$", "", symbol))
    return name + KERNEL_SUFFIX if kernel else name


# the outermost frame of a stack unwound to the thread's start
_STACK_BOTTOM = {"_start", "clone", "clone3", "__clone", "__clone3", "__clone_internal", "start_thread"}
# the thread's start in a libc without its symbol table (Debian's): clone3 and start_thread
_LIBC_UNSYMBOLIZED = re.compile(r"\[(libc|libpthread)[-.][\w.]*\]$")
# frames below a thread's own entry function (libc, the P_S thread wrapper)
_THREAD_START = _STACK_BOTTOM | {"__libc_start_main", "__libc_start_call_main", "pfs_spawn_thread", "[unknown]"}


def entry_function(root_first: list[str]) -> str | None:
    """The function a thread started in, from a stack that reaches its start."""
    if not root_first or not (root_first[0] in _STACK_BOTTOM or _LIBC_UNSYMBOLIZED.match(root_first[0])):
        return None  # the unwinding stopped short of the thread's start
    for frame in root_first:
        if frame not in _THREAD_START and not frame.endswith(KERNEL_SUFFIX) and not frame.startswith("["):
            return frame
    return None


def fold_script(lines, thread_names: dict[int, str] | None = None) -> tuple[Folded, int]:
    """Folded stacks from `perf script -F comm,tid,ip,sym,dso` output, with
    the thread's name as root frame: its Performance Schema name (by tid,
    from thread_names), else its comm when the server named its threads,
    else comm/entry function ('mysqld/buf_flush_page_cleaner_coordinator').
    Returns the stacks and the number of samples."""
    names = thread_names or {}
    samples: list[tuple[str, int | None, list[str], int]] = []  # comm, tid, frames root first, weight
    header: tuple[str, int | None] | None = None
    frames: list[str] = []

    def flush():
        if header is not None:
            samples.append((header[0], header[1], frames[::-1], 1))

    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            flush()
            header, frames = None, []
            continue
        if not line[0].isspace():
            flush()
            header, frames = _header(line), []
            continue
        m = _FRAME.match(line)
        if m and header is not None:
            frames.append(short_frame(m.group(2), m.group(3)))
    flush()
    return fold_samples(samples, names), len(samples)


def fold_samples(samples: list[tuple[str, int | None, list[str], int]], thread_names: dict[int, str]) -> Folded:
    """Folded stacks from (comm, tid, frames root first, weight), each under
    its thread's name: its Performance Schema name (by tid), else its comm
    when the server named its threads, else comm/entry function."""
    entries: dict[int | None, Counter] = {}
    comms = Counter(comm for comm, _, _, _ in samples)
    for _, tid, stack, _ in samples:
        entry = entry_function(stack)
        if entry:
            entries.setdefault(tid, Counter())[entry] += 1
    process_comm = comms.most_common(1)[0][0] if comms else ""
    folded = Folded()
    for comm, tid, stack, weight in samples:
        root = thread_names.get(tid) if tid is not None else None
        if root is None:
            entry = entries.get(tid)
            root = f"{comm}/{entry.most_common(1)[0][0]}" if comm == process_comm and entry else comm
        folded.add([root] + stack, weight)
    return folded


def _header(line: str) -> tuple[str, int | None]:
    """'mariadbd 12345' or 'my thread 12345/12345 ...': comm may hold spaces."""
    parts = line.split()
    for i in range(len(parts) - 1, 0, -1):
        tid = parts[i].split("/")[-1]
        if tid.isdigit():
            return " ".join(parts[:i]), int(tid)
    return line.strip(), None


def read_perf_script(perf_data: str, pid: int, fields: str, read, *options: str):
    """What read(lines) makes of `perf script -F fields` over one process's
    samples; read returns (result, samples). A perf script that failed
    before giving a sample raises PerfUnavailable."""
    proc = subprocess.Popen([perf_binary(), "script", "-i", perf_data, "--pid", str(pid), "-F", fields, *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    result, samples = read(proc.stdout)
    _, err = proc.communicate()
    if proc.returncode != 0 and samples == 0:
        raise PerfUnavailable(f"perf script failed: {(err.strip().splitlines() or ['?'])[-1]}")
    return result, samples


@dataclass(frozen=True)
class PerfOptions:
    frequency: int = DEFAULT_FREQUENCY
    callgraph: str = "auto"       # auto, fp or dwarf
    keep_data: bool = False       # keep DIR/perf.data


class PerfCollector(Collector):
    """CPU samples of the window. It records from prepare(): a sampled
    process pays more per probe hit, and the calibration that the latency
    collector makes after it should see the conditions of the window."""

    name = "perf"
    can_quiet = True

    def __init__(self, pid: int, image: ElfImage, opts: PerfOptions):
        super().__init__()
        self.pid, self.image, self.opts = pid, image, opts
        self.recorder: PerfRecorder | None = None
        self.record: dict = {}
        self._tmp: str | None = None
        self.started_at = 0.0
        self.seconds = 0.0
        self._cpu0: float | None = None

    def prepare(self) -> None:
        unwinding = choose_unwinding(self.image, self.opts.callgraph)
        self._tmp = work_dir("perf")
        self.recorder = PerfRecorder(self.pid, os.path.join(self._tmp, "perf.data"), unwinding, self.opts.frequency)
        try:
            self.recorder.start()
        except PerfUnavailable as e:
            raise CollectorUnavailable(str(e), f"CPU sampling: {e}; the report has no stacks") from None
        self.started_at = time.monotonic()
        self._cpu0 = cpu_seconds(self.pid)
        self.record = {"status": "recording", "event": "cpu-clock", "frequency_hz": self.opts.frequency,
                       "unwinding": {"mode": unwinding.mode, "describe": unwinding.describe(),
                                     "reason": unwinding.reason},
                       "command": " ".join(self.recorder.command())}

    def samples_so_far(self) -> int | None:
        """About how many samples perf has taken: cpu-clock samples each
        thread once per 1/frequency seconds of its CPU time."""
        if not self.recorder or not self.started_at:
            return None
        cpu = cpu_seconds(self.pid)
        if cpu is None:
            return None
        if self._cpu0 is None:
            self._cpu0 = cpu
        return int((cpu - self._cpu0) * self.opts.frequency)

    def start(self) -> None:
        self.recorder.window_opens()

    def _silence(self, on: bool) -> bool:
        return self.recorder.sample(not on)

    def stop(self) -> None:
        """perf takes a moment to write its data: not part of the window."""
        if self._quiet_since is not None:
            self.quiet(False)
        if self.recorder and self.recorder.proc:
            self.recorder.stop()
            self.seconds = time.monotonic() - self.started_at

    def collect(self, facts: Facts) -> Section:
        """The samples folded under the threads' names, and a summary."""
        self.stop()
        if self.recorder.error:
            return self.unavailable("unavailable", self._note(f"perf record failed: {self.recorder.error}"))
        try:
            # --no-inline: resolving inlined frames through addr2line takes minutes on a server binary
            folded, samples = read_perf_script(self.recorder.perf_data, self.pid, "comm,tid,ip,sym,dso",
                                               lambda lines: fold_script(lines, facts.thread_names), "--no-inline")
        except PerfUnavailable as e:
            return self.unavailable("unavailable", self._note(str(e)))
        cpu_s = self.recorder.cpu_s
        self.record.update({"status": "collected", "samples": samples, "perf_cpu_s": round(cpu_s, 3),
                            "quiet_s": round(self.quiet_s, 6),
                            "perf_cpu_share": round(cpu_s / self.seconds, 4) if self.seconds else None,
                            **stacks_summary(folded)})
        files = {}
        if samples:
            files[STACKS_FILE] = ("stacks_file", folded)
        if self.opts.keep_data:
            files["perf.data"] = ("perf_data", self._keep_perf_data())
        cost = Cost(cpu_s=self.recorder.window_cpu_s, method="perf's own CPU time in the window (starting and writing "
                    f"its data, {cpu_s:.2f}s in all, fall outside it); what sampling adds to the target's "
                    "threads is not seen from here")
        return Section(self.name, {self.name: self.record}, list(self.notes), cost, files)

    def _note(self, reason: str) -> str:
        self.notes.append(f"CPU sampling: {reason}; the report has no stacks")
        return reason

    def _keep_perf_data(self) -> str:
        """perf.data moved out of the directory close() removes."""
        keep = tempfile.mkdtemp(prefix="mysqlprobe-perf-data-")
        return shutil.move(self.recorder.perf_data, os.path.join(keep, "perf.data"))

    def close(self) -> None:
        if self.recorder:
            self.recorder.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

