"""The recorder: composes the collectors into one window and one capture.

Each collector goes through prepare -> start -> stop -> collect; close
runs on every path. The phases run in orders that keep the window tight
and the measures honest:

  begin    what is slow without this process starts side by side: a perf
           record to spawn (where the binary lacks frame pointers), the
           probes' BPF object to verify, the P_S setup
  prepare  off-CPU, I/O, the CPU samplers (a perf record records from here,
           so that the calibration sees the window's conditions; the BPF
           samplers' events open with the window), the calibration helper,
           the probes (calibrated, then attached), P_S, process
  start    calibration, P_S and process readings, perf, off-CPU, I/O; the
           probes last: their start opens the window
  stop     the reverse: the probes come off first
  collect  P_S and process first: their thread names go to the stacks

A collector that cannot run gives its note and the others go on; the
probes and their calibration are what a capture is, and fail it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from mysqlprobe.collectors.target.elf import ElfImage

from typing import Any, TypeVar

import ctypes
import gc
import os
import resource
import time
from contextlib import ExitStack

from mysqlprobe import probes
from mysqlprobe.probes import histogram
from mysqlprobe.caches import CalibrationCache
from mysqlprobe.capture import Capture, PendingFile, as_json, new_document, now_utc
from mysqlprobe.catalog import SHORT_STAGES
from mysqlprobe.collectors.base import Collector, CollectorUnavailable, Facts, Section, optional_sections
from mysqlprobe.collectors.uprobes.calibration import COST_CLASS, CalibrationCollector
from mysqlprobe.collectors.cpu.cpu_bursts import CpuBurstCollector, burst_stacks, burst_stages
from mysqlprobe.collectors.uprobes.latency import LatencyCollector
from mysqlprobe.collectors.kernel.io import IoCollector
from mysqlprobe.collectors.kernel.offcpu import OffCpuCollector
from mysqlprobe.collectors.cpu.cpu_sampler import CpuBurstSampler, CpuProfileCollector
from mysqlprobe.collectors.cpu.perf import PerfCollector, PerfOptions
from mysqlprobe.collectors.cpu.perf_record import Unwinding, choose_unwinding
from mysqlprobe.collectors.perfschema.settings import ROW_COUNTERS
from mysqlprobe.collectors.kernel.process import ProcessCollector
from mysqlprobe.collectors.uprobes.progress import MemoryCounter, counter_symbol
from mysqlprobe.collectors.perfschema.build_progress import altered_table_rows, eta_s
from mysqlprobe.collectors.uprobes.build_progress import LEAF, PHASE_STAGES, ProbedBuildProgress
from mysqlprobe.collectors.perfschema.collector import PerfSchemaCollector, thread_names
from mysqlprobe.collectors.target.symbols import Binary, Target
from mysqlprobe.errors import PermissionProblem
from mysqlprobe.recorder.duty import Bursts, DutyCycles, difference
from mysqlprobe.recorder.options import Control, RecordOptions
from mysqlprobe.recorder.plan import Plan, target_record
from mysqlprobe.recorder.priority import START_PRIORITY
from mysqlprobe.recorder.window import Window
from dataclasses import replace

# the CPU samples' slices of time (report.html's span): about this many over a window of known length
SLICES_WANTED = 200
SHORTEST_SLICE_S = 0.01
# a window until Ctrl-C or the load's end: 200 slices in 20 s; at 99 Hz on 2 CPUs the slices' map
# (65,536 stacks) holds 5 minutes of samples were each one a stack of its own, and more as they repeat
OPEN_WINDOW_SLICE_S = 0.1


def slice_seconds(duration: float | None) -> float:
    """The length of the CPU samples' slices of time for a window of -d seconds (None: open)."""
    if not duration:
        return OPEN_WINDOW_SLICE_S
    return max(round(duration / SLICES_WANTED, 3), SHORTEST_SLICE_S)


def cpu_profile(pid: int, image: ElfImage, perf: PerfOptions, sampler: str, verbose: bool = False,
                duration: float | None = None) -> Collector:
    """The window's CPU samples: taken in BPF where the kernel can walk the
    stacks (frame pointers), else by perf record, which copies each
    sample's user stack for DWARF unwinding; --sampler decides otherwise.
    In BPF they are sliced in time too (slice_seconds)."""
    unwinding = choose_unwinding(image, perf.callgraph)
    if sampler == "bpf" or (sampler == "auto" and unwinding.mode == "fp" and not perf.keep_data):
        if unwinding.mode != "fp":
            unwinding = Unwinding("fp", "--sampler bpf: the kernel walks frame pointers only")
        return CpuProfileCollector(pid, perf.frequency, unwinding, verbose, slice_seconds(duration))
    return PerfCollector(pid, image, perf)


def cpu_bursts(pid: int, stages: dict[str, Any], frequency: int, stacks: Unwinding | None, sampler: str,
               verbose: bool = False) -> Collector:
    """The off-phases' CPU bursts: in BPF (they need frame pointers for
    stacks only, and take the sampled address alone without them) unless
    --sampler perf."""
    if sampler == "perf":
        return CpuBurstCollector(pid, stages, frequency, stacks)
    return CpuBurstSampler(pid, stages, frequency, stacks, verbose)


C = TypeVar("C", bound=Collector)


class Recorder:
    def __init__(self, target: Target, binary: Binary, plan: Plan, options: RecordOptions,
                 control: Control | None = None):
        self.target, self.binary, self.plan, self.options = target, binary, plan, options
        self.control = control or Control()
        # --progress-counter's variable found first: a name the binary lacks is told before anything is made
        self.counter_symbol = counter_symbol(binary.debug_file or binary.path, binary.display_path,
                                             options.progress_counter) if options.progress_counter else None
        self.counter: MemoryCounter | None = None  # opened with the window's collectors
        self.collectors = self._collectors()
        self.unavailable: dict[str, CollectorUnavailable] = {}
        self.notes: list[str] = []
        self.timings: dict[str, Any] = {}  # seconds each collector took to prepare and to start, and to the window

    def _collectors(self) -> dict[str, Collector]:
        o, pid = self.options, self.target.pid
        specs = [replace(s, cost_class=COST_CLASS.get(s.entry_class, 0) if o.correct else 0) for s in self.plan.specs]
        self.calibration_cache = CalibrationCache(probes.helper_path("calibrate")) if o.reuse_calibration else None
        calibration = CalibrationCollector(len(specs), self.calibration_cache.load() if self.calibration_cache else None)
        out: dict[str, Collector] = {}
        if o.perf:
            out["cpu_profile"] = cpu_profile(pid, self.binary.image, o.perf, o.sampler, o.verbose, o.duration)
        if o.off_cpu:
            out["off_cpu"] = OffCpuCollector(pid, o.verbose)
        if o.io:
            out["io"] = IoCollector(pid, o.verbose)
        if specs:  # else a capture of what the other collectors see (a stripped binary)
            if not o.exact and o.burst_freq:  # needs off-phases
                out["cpu_bursts"] = cpu_bursts(pid, burst_stages(specs), o.burst_freq,
                                               burst_stacks(self.binary.image), o.sampler, o.verbose)
            out["calibration"] = calibration
            out["latency"] = LatencyCollector(pid, self.target.proc_exe, specs, calibration, o.correct, o.verbose,
                                              o.full_sql)
        if o.connect is not None:
            out["perf_schema"] = PerfSchemaCollector(pid, o.connect, o.ps_waits, o.full_sql,
                                                       whole_window=o.ps_whole_window,
                                                       build_progress=o.build_progress)
        out["process"] = ProcessCollector(pid)
        if not o.exact:  # what costs per switch or per sample runs in the on-phases only
            for c in out.values():
                c.pace()
        return out

    def _one(self, kind: type[C]) -> C | None:
        """The run's collector of this kind, if it has one."""
        return next((c for c in self.collectors.values() if isinstance(c, kind)), None)

    def _ordered(self, phase: str) -> list[str]:
        """The collectors' names in the order they take `phase` (collectors/base.py Phases)."""
        return sorted(self.collectors, key=lambda n: getattr(self.collectors[n].phases, phase))

    def _running(self, phase: str) -> list[Collector]:
        return [self.collectors[n] for n in self._ordered(phase) if n not in self.unavailable]

    def record(self) -> Capture:
        """Calibrate, attach, keep the window open (all along, or in duty
        cycles within the budget), detach, and collect."""
        if os.geteuid() != 0:
            raise PermissionProblem("attaching uprobes needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)")
        START_PRIORITY.raise_to(self.options.start_nice)  # raised already when the command began
        try:
            return self._record()
        finally:
            START_PRIORITY.settle()  # on a way out before the window

    def _record(self) -> Capture:
        with ExitStack() as stack:
            self.counter = self._progress_counter()
            if self.counter:
                stack.callback(self.counter.close)
            begin = self._ordered("begin")
            for name in begin:
                stack.callback(self.collectors[name].close)
            for name in begin:  # what is slow starts side by side: perf's spawns, the BPF load
                self._prepare(name, begin=True)
            for name in self._ordered("prepare"):
                if name not in self.unavailable:
                    if name == "calibration":
                        self._reached("calibration")
                    self._prepare(name)
            self._keep_own_statements_out()
            self._reached("attach")
            window, sampling, rows = self._window()
            sections = self._collect()
            self._keep_calibration()
        give_back_free_memory()  # the window's collectors are closed
        status = self.control.status
        if status:
            status.done()
        return self._capture(window, sampling, rows, sections)

    def _reached(self, phase: str) -> None:
        if self.control.signals:
            self.control.signals.reached(phase)

    def _prepare(self, name: str, begin: bool = False) -> None:
        t0 = time.monotonic()
        try:
            self.collectors[name].begin() if begin else self.collectors[name].prepare()
        except CollectorUnavailable as e:
            self.unavailable[name] = e
        phase = self.timings.setdefault("begin_s" if begin else "prepare_s", {})
        phase[name] = round(time.monotonic() - t0, 3)

    def _keep_calibration(self) -> None:
        """The calibration's bursts, for the next run on this kernel and CPU to start from."""
        cal = self._one(CalibrationCollector)
        kept = cal.kept() if cal and "calibration" not in self.unavailable else {}
        if self.calibration_cache and kept:
            if not self.calibration_cache.save(kept):
                self.notes.append(f"could not keep the calibration in {self.calibration_cache.path}: "
                                  "the next run calibrates afresh")

    def _keep_own_statements_out(self) -> None:
        ps, latency = self._one(PerfSchemaCollector), self._one(LatencyCollector)
        if ps and "perf_schema" not in self.unavailable and latency:
            latency.keep_statements_out(ps.own_os_threads())

    def _window(self) -> tuple[dict[str, Any], dict[str, Any], int | None]:
        """Open the window, keep it open until it ends, close it."""
        o, latency = self.options, self._one(LatencyCollector)
        exact = o.exact
        if latency is None:
            if not exact:
                self.notes.append("no probes, so no duty cycles: the other collectors ran all along, their "
                                  "cost as each measured it (overhead.by_collector)")
            exact = True
        elif not exact and not latency.can_duty_cycle:
            self.notes.append("duty cycles need uprobe_multi links (Linux 6.6+): every call was counted")
            exact = True
        for c in [c for c in self._running("start") if c is not latency]:
            t0 = time.monotonic()
            c.start()
            self.timings.setdefault("start_s", {})[c.name] = round(time.monotonic() - t0, 3)
        # what loading the BPF objects left free (5-8 ms), before the window: in it, at the
        # caller's niceness under heavy load, it stretched the first on-phase
        give_back_free_memory()
        rows_changed = self._rows_changed()
        start_wall = now_utc()
        started = (time.monotonic(), rows_changed())
        own_cpu0 = own_cpu_seconds()
        if self.control.signals:
            self.control.signals.window_opens()  # from here a signal ends the window, and it is written
        if latency:
            latency.start()  # before the announcement: a load started on it is counted from its first call
        self.timings["process_start_to_window_s"] = since_process_start()
        ps = self._one(PerfSchemaCollector)
        if ps and ps.build_progress and ps.build_progress.source == "processlist" and latency:
            ps.build_progress = probed_build_progress(ps, latency) or ps.build_progress
        win = Window(self.target.pid, o.duration, self.control, o.stop_reason,
                     latency.total_calls if latency else (lambda: 0),
                     self._build_progress(ps) if ps and ps.build_progress else None)
        if self.control.status:
            self.control.status.started(self.target.pid, len(self.plan.specs),
                                        latency.attached_count if latency else 0, exact, o.budget)
        self.timings["start_nice"] = START_PRIORITY.applied
        START_PRIORITY.settle()  # the window at the caller's niceness: what the load feels from here is measured
        if exact or latency is None:
            while not win.wait(3600):
                pass
            rows_at_end, sampling = rows_changed(), {"mode": "exact"}
        else:
            running = self._running("start")
            cycles = DutyCycles(latency.probes, latency.specs, latency.calibration, win, o.budget, rows_changed,
                                paced=[c for c in running if c.paced],
                                quieted=[c for c in running if c.can_quiet and not c.paced],
                                bursts=Bursts([c for c in running if c.can_burst],
                                              {s.index for s in latency.specs
                                               if s.stage is None or s.stage in SHORT_STAGES}))
            rows_at_end = cycles.run(started)
            latency.calibration.record_in_situ(cycles.in_situ_factor())
            sampling = cycles.record(o.budget)
        elapsed, own_cpu = win.elapsed(), own_cpu_seconds() - own_cpu0
        if win.progress:
            win.progress(elapsed)   # a last read: a build that ended since the last one is seen to its end
        if self.control.signals:
            self.control.signals.window_closed()  # the probes come off, the capture is written
        for c in reversed(self._running("start")):
            c.stop()
        window = {"start": start_wall, "duration_s": round(elapsed, 6), "requested_s": o.duration,
                  "ended_by": win.ended_by, "rows_changed": difference(rows_at_end, started[1]),
                  "rows_counter": self.counter.label if self.counter else "+".join(ROW_COUNTERS),
                  "own_cpu_s": round(own_cpu, 4), "start_monotonic_s": round(started[0], 6)}
        return window, sampling, rows_at_end

    def _build_progress(self, ps: PerfSchemaCollector) -> Callable[[float], str | None]:
        """The index build's stage, percentage and time left, for the status
        line (and whoever the control says wants each read: watch's gauge)."""
        sink = self.control.build_progress

        def line(at_s: float) -> str | None:
            reading = ps.read_build_progress(at_s)
            if reading is None or ps.build_progress is None:
                return None
            left = eta_s(ps.build_progress.readings)
            if sink:
                sink(reading.stage, reading.percent, left)
            return f"index build: {reading.stage} {reading.percent:.0f}%" + (f", ~{left:.0f}s left" if left else "")
        return line

    def _progress_counter(self) -> MemoryCounter | None:
        if not self.counter_symbol or not self.options.progress_counter:
            return None
        return MemoryCounter(self.target.pid, self.target.exe, self.binary.image.segments,
                             self.options.progress_counter, self.counter_symbol)

    def _rows_changed(self) -> Callable[[], int | None]:
        """The load's progress: the counter read from the target's memory
        where one is named, else the server's rows changed (None: neither)."""
        if self.counter:
            return self.counter.read
        ps = self._one(PerfSchemaCollector)
        return ps.rows_changed if ps else (lambda: None)

    def _collect(self) -> list[Section]:
        """Each collector's section; P_S's thread names and the process's
        comms go to the folded stacks of those collected after them."""
        facts = Facts(process_comm=self.target.comm)
        sections = []
        for c in self._running("collect"):
            sections.append(c.collect(facts))
            if c.name == "perf_schema":
                facts.thread_names = thread_names(sections[-1].fields.get("perf_schema"))
            elif isinstance(c, ProcessCollector):
                facts.comms = c.thread_comms()
        return sections

    def _capture(self, window: dict[str, Any], sampling: dict[str, Any], rows: int | None, sections: list[Section]) -> Capture:
        head = {"target": target_record(self.target, self.binary), "window": window, "sampling": sampling,
                "unavailable": self.plan.unavailable}
        cap = assemble(self.options.argv, head, sections, self.unavailable, list(self.plan.warnings) + self.notes,
                       self._ordered("begin"))
        cap.doc["engine"]["timings"] = {"symbols_s": round(self.plan.seconds, 3), "plan_cached": self.plan.cached,
                                        **cap.doc["engine"]["timings"], **self.timings}
        return cap


def since_process_start() -> float | None:
    """Seconds since this process was started (to 10 ms: the kernel counts its start in clock ticks)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return round(time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"), 3)


def give_back_free_memory() -> None:
    """Hand the memory malloc holds free back to the system: what libbpf
    and a window's collection freed stays in the process otherwise (10-16 MB
    after each of watch's windows)."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def own_cpu_seconds() -> float:
    """This process's CPU seconds so far, every thread's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def assemble(argv: Sequence[str], head: dict[str, Any], sections: list[Section], unavailable: dict[str, CollectorUnavailable],
             warnings: list[str], order: list[str] | None = None) -> Capture:
    """One capture from the window's head (target, window, sampling, the
    stages the plan could not probe) and the collectors' sections: their
    fields, notes (after `warnings`), costs and files."""
    doc = new_document(argv)
    doc.update({"histogram_scheme": histogram.SCHEME, **head})
    for name in optional_sections():   # each collector declares whether a run may leave it out
        doc[name] = {"status": "not requested"}
    files: list[PendingFile] = []
    notes: list[str] = []
    collectors: dict[str, dict[str, Any]] = {}
    by_name = {s.name: s for s in sections}
    for name in order or [*by_name, *unavailable]:  # the collectors' begin order
        if name in unavailable:
            e = unavailable[name]
            doc[name] = {"status": e.status, "reason": e.reason}
            notes.append(e.note)
            collectors[name] = {"status": e.status}
        elif name in by_name:
            s = by_name[name]
            doc.update(s.fields)
            notes += s.notes
            collectors[name] = {"status": "collected", "cost": s.cost.to_json()}
            files += [PendingFile(name, fld, fname, content) for fname, (fld, content) in s.files.items()]
    doc["warnings"] = warnings + notes
    doc["collectors"] = collectors
    if "latency" not in by_name:   # nothing was probed: the fields the probes give, empty
        doc.setdefault("probes", [])
        doc.setdefault("engine", {"probes_attached": 0, "links": None, "counters": {}, "timings": {}})
        doc.setdefault("latencies", "corrected")
    return Capture(as_json(doc), files)


def probed_build_progress(ps: PerfSchemaCollector, latency: LatencyCollector) -> ProbedBuildProgress | None:
    """A build's progress from the probes where the server's report has
    none to give (MariaDB's PROCESSLIST before 10.5) and the build's phase
    functions are probed (--index-profile); None otherwise."""
    planned = {s.stage for s in latency.specs}
    if not PHASE_STAGES <= planned or ps.build_progress is None:
        return None
    conn = ps.build_progress.conn
    return ProbedBuildProgress(conn, lambda: latency.stage_calls(LEAF), lambda: altered_table_rows(conn))

