"""CPU sampling with the perf tool during the probes' window, turned into
folded stacks (FlameGraph's format) with the thread's name as root frame.

MariaDB and MySQL are usually built without frame pointers: the unwinding
is chosen from the binary's own prologues (frame pointers when most
functions set one up, else DWARF with a bounded copy of the stack: see
perf_record)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar


from typing import Any

import os
import re
import subprocess
import time
from collections import Counter

from mysqlprobe.collectors.base import Cost, Facts, Phases, Section, opened
from mysqlprobe.collectors.cpu.perf_record import (DEFAULT_FREQUENCY, PerfProcessCollector, PerfRecorder, PerfUnavailable,
                                               choose_unwinding, perf_binary)
from mysqlprobe.collectors.kernel.process import cpu_seconds
from mysqlprobe.flamegraphs.stacks import CONNECTION_FRAMES
from mysqlprobe.collectors.workdir import work_dir
from mysqlprobe.collectors.target.cxxnames import qualified_name
from mysqlprobe.collectors.target.elf import ElfImage
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import stacks_summary
from dataclasses import dataclass

STACKS_FILE = "stacks.folded"
KERNEL_SUFFIX = "_[k]"       # FlameGraph's mark for kernel frames

_FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


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


def fold_script(lines: Iterable[str], thread_names: dict[int, str] | None = None,
                by_thread: list[Any] | None = None) -> tuple[Folded, int]:
    """Folded stacks from `perf script -F comm,tid,ip,sym,dso` output, with
    the thread's name as root frame: its Performance Schema name (by tid,
    from thread_names), else its comm when the server named its threads,
    else comm/entry function ('mysqld/buf_flush_page_cleaner_coordinator').
    Returns the stacks and the number of samples; by_thread, where given,
    gets the samples per tid (threads_record)."""
    names = thread_names or {}
    samples: list[tuple[str, int | None, list[str], int]] = []  # comm, tid, frames root first, weight
    header: tuple[str, int | None] | None = None
    frames: list[str] = []

    def flush() -> None:
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
    if by_thread is not None:
        by_thread += threads_record(samples)
    return fold_samples(samples, names), len(samples)


def threads_record(samples: Sequence[tuple[str, int | None, list[str], int]]) -> list[dict[str, Any]]:
    """Per tid, its samples' weight and whether any of its stacks is a client
    connection's (the wall-time account joins them with the kernel's
    per-thread times)."""
    weights: Counter[Any] = Counter()
    connection: set[int] = set()
    for _, tid, frames, weight in samples:
        if tid is None:
            continue
        weights[tid] += weight
        if tid not in connection and any(f in CONNECTION_FRAMES for f in frames):
            connection.add(tid)
    return [{"tid": tid, "samples": n, "connection": tid in connection} for tid, n in sorted(weights.items())]


def fold_samples(samples: Sequence[tuple[str, int | None, list[str], int]], thread_names: dict[int, str]) -> Folded:
    """Folded stacks from (comm, tid, frames root first, weight), each under
    its thread's name: its Performance Schema name (by tid), else its comm
    when the server named its threads, else comm/entry function."""
    root = thread_roots(samples, thread_names)
    folded = Folded()
    for comm, tid, stack, weight in samples:
        folded.add([root(comm, tid)] + stack, weight)
    return folded


def thread_roots(samples: Sequence[tuple[str, int | None, list[str], int]],
                 thread_names: dict[int, str]) -> Callable[[str, int | None], str]:
    """The root frame each (comm, tid) of the samples is folded under (fold_samples)."""
    entries: dict[int | None, Counter[Any]] = {}
    comms = Counter(comm for comm, _, _, _ in samples)
    for _, tid, stack, _ in samples:
        entry = entry_function(stack)
        if entry:
            entries.setdefault(tid, Counter())[entry] += 1
    process_comm = comms.most_common(1)[0][0] if comms else ""

    def root(comm: str, tid: int | None) -> str:
        name = thread_names.get(tid) if tid is not None else None
        if name is not None:
            return name
        entry_counts = entries.get(tid)
        return f"{comm}/{entry_counts.most_common(1)[0][0]}" if comm == process_comm and entry_counts else comm
    return root


def _header(line: str) -> tuple[str, int | None]:
    """'mariadbd 12345' or 'my thread 12345/12345 ...': comm may hold spaces."""
    parts = line.split()
    for i in range(len(parts) - 1, 0, -1):
        tid = parts[i].split("/")[-1]
        if tid.isdigit():
            return " ".join(parts[:i]), int(tid)
    return line.strip(), None


T = TypeVar("T")


def read_perf_script(perf_data: str, pid: int, fields: str, read: Callable[[Iterable[str]], tuple[T, int]],
                     *options: str) -> tuple[T, int]:
    """What read(lines) makes of `perf script -F fields` over one process's
    samples; read returns (result, samples). A perf script that failed
    before giving a sample raises PerfUnavailable."""
    proc = subprocess.Popen([perf_binary(), "script", "-i", perf_data, "--pid", str(pid), "-F", fields, *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    assert proc.stdout is not None   # asked for: PIPE
    result, samples = read(proc.stdout)
    _, err = proc.communicate()
    if proc.returncode != 0 and samples == 0:
        raise PerfUnavailable(f"perf script failed: {(err.strip().splitlines() or ['?'])[-1]}")
    return result, samples


@dataclass(frozen=True)
class PerfOptions:
    """The perf collector's settings from the command line."""

    frequency: int = DEFAULT_FREQUENCY
    callgraph: str = "auto"       # auto, fp or dwarf
    keep_data: bool = False       # keep DIR/perf.data


class PerfCollector(PerfProcessCollector):
    """CPU samples of the window. It records from prepare(): a sampled
    process pays more per probe hit, and the calibration that the latency
    collector makes after it should see the conditions of the window."""

    name = "cpu_profile"
    optional = True
    # perf record starts early (reading the kernel's symbols takes 0.1-0.5 s under
    # load) and before the calibration, which should see the probes' cost with it on
    phases = Phases(begin=10, prepare=30, start=45, collect=60)
    quiets = True
    unavailable_note = "CPU sampling: {error}; the report has no stacks"

    def __init__(self, pid: int, image: ElfImage, opts: PerfOptions):
        super().__init__()
        self.pid, self.image, self.opts = pid, image, opts
        self.record: dict[str, Any] = {}
        self.started_at = 0.0
        self.seconds = 0.0
        self._cpu0: float | None = None

    def new_recorder(self) -> PerfRecorder:
        self._tmp = work_dir("perf")
        return PerfRecorder(self.pid, os.path.join(self._tmp, "perf.data"),
                            choose_unwinding(self.image, self.opts.callgraph), self.opts.frequency)

    def prepare(self) -> None:
        self.wait_recording()
        unwinding = opened(self.perf.unwinding, "the perf collector's stack unwinding")
        self.started_at = time.monotonic()
        self._cpu0 = cpu_seconds(self.pid)
        self.record = {"status": "recording", "event": "cpu-clock", "frequency_hz": self.opts.frequency,
                       "unwinding": {"mode": unwinding.mode, "describe": unwinding.describe(),
                                     "reason": unwinding.reason},
                       "command": " ".join(self.perf.command())}

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
        self.perf.window_opens()

    def _silence(self, on: bool) -> bool:
        return self.perf.sample(not on)

    def stop(self) -> None:
        """perf takes a moment to write its data: not part of the window."""
        self.quiet(False)  # a quiet phase still open ends (nothing if none is)
        if self.recorder and self.recorder.proc:
            self.perf.stop()
            self.seconds = time.monotonic() - self.started_at

    def collect(self, facts: Facts) -> Section:
        """The samples folded under the threads' names, and a summary."""
        self.stop()
        if self.perf.error:
            return self.unavailable("unavailable", self._note(f"perf record failed: {self.perf.error}"))
        weights: list[dict[str, Any]] = []
        try:
            # --no-inline: resolving inlined frames through addr2line takes minutes on a server binary
            folded, samples = read_perf_script(self.perf.perf_data, self.pid, "comm,tid,ip,sym,dso",
                                               lambda lines: fold_script(lines, facts.thread_names, weights),
                                               "--no-inline")
        except PerfUnavailable as e:
            return self.unavailable("unavailable", self._note(str(e)))
        cpu_s = self.perf.cpu_s
        self.record.update({"status": "collected", "samples": samples, "perf_cpu_s": round(cpu_s, 3),
                            "quiet_s": round(self.quiet_s, 6), "by_thread": weights,
                            "perf_cpu_share": round(cpu_s / self.seconds, 4) if self.seconds else None,
                            **stacks_summary(folded)})
        files: dict[str, tuple[str, Any]] = {}
        if samples:
            files[STACKS_FILE] = ("stacks_file", folded)
        if self.opts.keep_data:
            files["perf.data"] = ("perf_data", self._keep_perf_data())
        cost = Cost(cpu_s=self.perf.window_cpu_s, method="perf's own CPU time in the window (starting and writing "
                    f"its data, {cpu_s:.2f}s in all, fall outside it); what sampling adds to the target's "
                    "threads is not seen from here")
        return Section(self.name, {self.name: self.record}, list(self.notes), cost, files)

    def _note(self, reason: str) -> str:
        self.notes.append(f"CPU sampling: {reason}; the report has no stacks")
        return reason

    def _keep_perf_data(self) -> str:
        """perf.data moved out of the directory close() removes."""
        import shutil  # only where perf record ran
        import tempfile
        keep = tempfile.mkdtemp(prefix="mysqlprobe-perf-data-")
        return shutil.move(self.perf.perf_data, os.path.join(keep, "perf.data"))
