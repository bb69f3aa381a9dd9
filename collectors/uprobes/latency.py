"""The uprobe latency collector: the target's functions timed per call in
the kernel (probes/uprobe_latency.bpf.c), read back as one raw record per
function: calls, total and histogram (corrected and raw), per partition and
per (thread, probed caller)."""

from __future__ import annotations

from collections.abc import Iterable
from mysqlprobe.probes.histogram import Histogram

from typing import Any

import time

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.base import Background, Collector, Cost, Facts, Phases, Section, opened
from mysqlprobe.collectors.safety.breakpoints import (BreakpointGuard, probed_offsets, remove_left_breakpoints,
                                               sentinel_offset)
from mysqlprobe.collectors.uprobes.calibration import Calibration, CalibrationCollector
from mysqlprobe.collectors.uprobes.counts import ProbeCounts, Snapshot, StatementCounts
from mysqlprobe.collectors.uprobes.session import ProbeSpec, UprobeSession
from mysqlprobe.probes.abi import COM_QUERY, COM_STMT_EXECUTE, STMT_KEY_NO_TEXT
from mysqlprobe.sqltext import normalized, redacted

COMMANDS = {0: "Sleep", 1: "Quit", 2: "Init DB", 3: "Query", 4: "Field List", 9: "Statistics", 14: "Ping",
            17: "Change user", 22: "Prepare", 23: "Execute", 24: "Long Data", 25: "Close stmt",
            26: "Reset stmt", 27: "Set option", 28: "Fetch"}


def latency_fields(total_ns: int, histogram: Histogram) -> dict[str, Any]:
    return {"total_ns": total_ns, "histogram": histogram.to_record()}


def probe_record(spec: ProbeSpec, counts: ProbeCounts | None, calibration: Calibration | None,
                 corrected: bool) -> dict[str, Any]:
    """One probed function: what it is and what the kernel counted. The
    latencies are corrected for the probes' own cost unless `corrected` is
    off; `raw` has them as measured."""
    sym = spec.symbol
    counts = counts or ProbeCounts()
    own = calibration.own_of(spec) if calibration else 0.0
    pair = calibration.pair_of(spec) if calibration else 0.0

    def latency(total: int, hist: Histogram, ctotal: int, chist: Histogram) -> dict[str, Any]:
        return {**(latency_fields(ctotal, chist) if corrected else latency_fields(total, hist)),
                "raw": latency_fields(total, hist)}

    return {
        "id": spec.index, "stage": spec.stage, "symbol": sym.demangled, "name": sym.name, "mangled": sym.mangled,
        "address": f"{sym.address:#x}", "offset": f"{sym.offset:#x}",
        "entry": {"class": spec.entry_class, "skipped_endbr64": bool(spec.skip),
                  "own_cost_ns": round(own, 1), "pair_cost_ns": round(pair, 1)},
        "partition_source": spec.partition.describe() if spec.partition else None,
        "calls": counts.calls,
        **latency(counts.total_ns, counts.hist, counts.corrected_ns, counts.chist),
        "nested_probe_hits": counts.nested_hits,
        "cpu_waits": {"calls": counts.preempted_calls, "total_ns": counts.preempted_ns},
        "partitions": [{"id": pid, "calls": p.calls, **latency(p.total_ns, p.hist, p.corrected_ns, p.chist)}
                       for pid, p in sorted(counts.partitions.items())],
        "callers": [{"tid": tid, "parent": parent, "calls": c, "total_ns": cor if corrected else tot,
                     "raw_total_ns": tot}
                    for (tid, parent), (c, tot, cor) in sorted(counts.callers.items(), key=lambda kv: (
                        kv[0][0], -1 if kv[0][1] is None else kv[0][1]))],
    }


def statement_text(counts: StatementCounts, key: int, full_sql: bool) -> str:
    """What a statement shape is called: its first text's literals made ?
    (or kept, with full_sql); a command without text by its name."""
    if key & STMT_KEY_NO_TEXT or counts.command != COM_QUERY:
        if counts.command == COM_STMT_EXECUTE:
            return f"(Execute of prepared statement #{key & 0xffffffff})"
        return f"({COMMANDS.get(counts.command, f'command {counts.command}')})"
    text = counts.text.decode("utf-8", "replace")
    if not counts.text_complete:
        # the kernel reads a prefix: what follows an unterminated literal is cut
        quotes = [i for i, ch in enumerate(text) if ch in "'\""]
        if len(quotes) % 2:
            text = text[:quotes[-1]]
        text = text.rstrip() + " …"
    return redacted(text) if full_sql else normalized(text)


def statement_records(snapshot_statements: dict[int, StatementCounts], corrected: bool,
                      full_sql: bool) -> list[dict[str, Any]]:
    """The statement shapes the kernel kept, most time first."""
    out = []
    for key, c in sorted(snapshot_statements.items(), key=lambda kv: -kv[1].total_ns):
        out.append({
            "key": f"{key:#x}", "command": c.command, "text": statement_text(c, key, full_sql),
            "text_complete": c.text_complete, "executions": c.executions,
            **latency_fields(c.total_ns, c.hist), "probe_hits": c.probe_hits, "probe_cost_ns": c.probe_cost_ns,
            "calls": [{"probe": probe, "parent": parent, "stage": stage, "calls": n,
                       "total_ns": cor if corrected else tot, "raw_total_ns": tot}
                      for (probe, parent, stage), (n, tot, cor) in sorted(c.calls.items(), key=lambda kv: tuple(
                          -1 if k is None else k for k in kv[0]))],
        })
    return out


class LatencyCollector(Collector):
    """Loads the latency program with the calibration helper's probes,
    calibrates, then attaches the target's probes: the target pays for no
    probe that does not count. start() opens the window, stop() closes it
    and takes the target's probes off; the helper's stay until close()."""

    name = "latency"
    # its BPF object begins loading early (the attach waits for it, not for the
    # others'); prepared after the calibration it needs; started last: its attach
    # opens the window
    phases = Phases(begin=30, prepare=50, start=100, collect=20)

    def __init__(self, pid: int, exe: str, specs: list[ProbeSpec], calibration: CalibrationCollector,
                 corrected: bool = True, verbose: bool = False, full_sql: bool = False):
        super().__init__()
        self.pid, self.exe, self.verbose, self.full_sql = pid, exe, verbose, full_sql
        self.specs, self.calibration, self.corrected = specs, calibration, corrected
        self.session: UprobeSession | None = None
        self.timings: dict[str, float] = {}
        self._snapshot: Snapshot | None = None
        self._loader: Background[UprobeSession] | None = None
        self.guard: BreakpointGuard | None = None
        # on_switch's run time and runs over the window
        self.switches = libbpf.RunTimeMeter(lambda: self.probes.switch_run_stats())

    def begin(self) -> None:
        """Load and verify the BPF object in a thread (a tenth of a second,
        more under load) while the other collectors get ready. Needs the
        calibration collector begun: its helper is probed in the same session.
        The breakpoint guard starts here too, off the path to the attach,
        once the verification is under way."""
        self._loader = Background(self._open_session, "bpf-load")
        self._guard_breakpoints()

    def _open_session(self) -> UprobeSession:
        return UprobeSession(self.pid, self.exe, self.specs, self.verbose,
                             calibration=self.calibration.group, defer_target=True).open()

    def prepare(self) -> None:
        if self._loader:
            loader, self._loader = self._loader, None
            self.session = loader.join()
        elif self.session is None:
            self.session = self._open_session()
        if self.probes.cpu_waits_left_out:  # on before calibrating: in a hit's cost
            self.switches.open()
        t0 = time.monotonic()
        self.calibration.calibrate(self.probes)
        self.timings["calibration_s"] = round(time.monotonic() - t0, 3)
        if self.guard is None:  # not begun
            self._guard_breakpoints()
        t0 = time.monotonic()
        self.probes.attach_target()
        self.timings["attach_s"] = round(time.monotonic() - t0, 3)

    def _guard_breakpoints(self) -> None:
        """Take out breakpoints a killed profiler left where these probes go,
        and start the guard that takes out any this one leaves if killed."""
        offsets = probed_offsets(self.specs) + sentinel_offset(self.exe)
        try:
            found, left = remove_left_breakpoints(self.pid, self.exe, offsets)
        except OSError as e:
            self.notes.append(f"could not check the target's code for breakpoints left behind: {e}")
            found = left = 0
        if found - left:
            self.notes.append(f"{found - left} breakpoints an earlier profiler left in the target's code when it "
                              "was killed (the kernel keeps them) were taken out")
        self.guard = BreakpointGuard(self.pid, self.exe, offsets)

    @property
    def can_duty_cycle(self) -> bool:
        """Attaching and detaching take one system call each (uprobe_multi links)."""
        return self.probes.link_kind == "uprobe_multi"

    @property
    def probes(self) -> UprobeSession:
        """The attached probes, for the duty cycles to drive (recorder/duty.py Probes)."""
        return opened(self.session, "the probes' session")

    def keep_statements_out(self, tids: Iterable[int]) -> None:
        """Statements of these threads (mysqlprobe's own connections) are not kept."""
        self.probes.keep_statements_out(tids)

    def total_calls(self) -> int:
        return self.probes.total_calls()

    def stage_calls(self, part: dict[str, int] | None = None) -> dict[str, int]:
        """Calls returned so far per probed stage, read live (cheap: one map
        lookup a probe); part: stages counted in that partition key only."""
        out: dict[str, int] = {}
        index_calls = self.probes.calls(s.index for s in self.specs if s.stage)
        for spec in self.specs:
            if spec.stage:
                calls = (self.probes.part_calls(spec.index, part[spec.stage]) if part and spec.stage in part
                         else index_calls.get(spec.index, 0))
                out[spec.stage] = out.get(spec.stage, 0) + calls
        return out

    @property
    def attached_count(self) -> int:
        return self.probes.attached_count

    def start(self) -> None:
        self.switches.start()
        self.probes.start()

    def stop(self) -> None:
        self.probes.stop()
        self.probes.detach_target()
        self._snapshot = self.probes.snapshot()
        self.switches.stop()

    def collect(self, facts: Facts) -> Section:
        cal = self.calibration.current()
        snapshot = opened(self._snapshot, "the window's probe counts")
        probes = [probe_record(s, snapshot.probes.get(s.index), cal, self.corrected) for s in self.specs]
        hits_s = sum(p["calls"] * p["entry"]["pair_cost_ns"] for p in probes) / 1e9
        switch_s = self.switches.ns / 1e9 if self.switches.measured else 0.0
        session = self.probes
        engine = {"probes_attached": session.attached_count, "links": session.link_kind,
                  "cpu_waits_left_out": session.cpu_waits_left_out,
                  "sentinel_offset": session.sentinel_offset,
                  "counters": snapshot.counters, "timings": dict(self.timings)}
        if self.switches.measured and session.cpu_waits_left_out:
            # on in every phase, the quiet ones too: a cost no phase comparison shows
            engine["switch_program"] = {"s": round(switch_s, 6), "runs": self.switches.runs}
        cost = Cost(target_s=hits_s * (cal.in_situ or 1.0) + switch_s,
                    method="probe hits x their calibrated cost per hit"
                    + (f" x the in-situ factor {cal.in_situ:.2f} the duty cycles measured" if cal.in_situ else "")
                    + (f", and the kernel's run time of the sched_switch program that keeps waits for a CPU out "
                       f"of the calls ({self.switches.runs} runs, every thread of the host)" if switch_s else ""))
        fields = {"probes": probes, "engine": engine, "latencies": "corrected" if self.corrected else "raw"}
        boundary = next((s for s in self.specs if s.statement), None)
        if boundary:
            fields["statements"] = {
                "probe": boundary.index, "text": "full" if self.full_sql else "normalized",
                "shapes": statement_records(snapshot.statements, self.corrected, self.full_sql)}
        return Section(self.name, fields, list(self.notes), cost)

    def close(self) -> None:
        if self._loader:  # a load under way ends before its object is closed
            self.session = self._loader.settle()
            self._loader = None
        if self.session:
            self.session.close()
        self.switches.close()
        if self.guard:
            self.guard.done()
