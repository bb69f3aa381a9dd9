"""The Profile: a capture's recorded document and what analysis derives
from it on demand (probe and stage figures, estimates, attribution,
overhead). Every reporter takes a Profile, so a live run and `mysqlprobe
report` on its saved capture print the same thing.

Captures of schema 1 also stored derived fields (stages, attribution,
overhead, per-probe estimates): they are left out and derived again."""

from __future__ import annotations

from typing import Any

from functools import cached_property

from mysqlprobe.analysis.account import Account, build as build_account
from mysqlprobe.analysis.attribution import StatementTree, attribute
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.analysis.consistency import MEAN, TOTAL, Violation, check as check_bounds, withheld
from mysqlprobe.analysis.figures import stage_figures
from mysqlprobe.analysis.index_build import SUBJECT as INDEX_BUILD_SUBJECT, IndexBuild, build as build_index
from mysqlprobe.analysis.sampling import Estimate
from mysqlprobe.analysis.schema_check import DERIVED_SECTIONS, check_document, upgraded
from mysqlprobe.analysis.statements import Digest, by_digest
from mysqlprobe.analysis.ps_figures import ps_deltas
from mysqlprobe.analysis.stack_summaries import CpuSummary, IoSummary, OffCpuSummary
from mysqlprobe.analysis.views import (STACK_SECTIONS, Calibration, CpuBursts, Engine, Host, Overhead, PerfSchema, Probe, Process,
                                      Sampling, StackSection, Statements, Workload,
                                      StageFigure, Target, Window)
from mysqlprobe.analysis.profile import (StageSummary, always_on_slowdown, calibrated_slowdown, estimated_calls,
                                         measured_slowdown, phase_slowdown, printed_slowdown, probe_estimate,
                                         slowdown_doubt, slowdown_interval, slowdown_reference,
                                         rows_inserted, sampled_cycles, stage_of, stage_record, stage_summaries,
                                         standing_cpu_s, standing_slowdown, window_ns)

DERIVED_IN_SCHEMA_1 = tuple(sorted(DERIVED_SECTIONS))


class Profile:
    def __init__(self, doc: dict[str, Any], stacks: dict[str, Folded] | None = None, recorded_here: bool = False):
        """stacks: the capture's CPU and off-CPU folded stacks by section
        ("cpu_profile", "off_cpu"), for the wall-time account; without
        them the account has no split. recorded_here: the document this
        process's recorder just made, held to its shape but not to the
        types and ranges a capture from elsewhere is: a recording is never
        lost at its end to a type no earlier capture had."""
        self.folded = stacks or {}
        self.schema_version = doc.get("schema_version")   # as written, before any upgrade
        doc = upgraded(doc)
        check_document(doc, shape_only=recorded_here)  # a field of the wrong shape: one CaptureError, not a KeyError
        self.recorded = {k: v for k, v in doc.items() if k not in DERIVED_IN_SCHEMA_1}
        self.probes = tuple(Probe.of(p) for p in doc.get("probes", []))
        # the recorded sections the analysis functions still read as they are (the probes are typed)
        self.doc = {k: v for k, v in self.recorded.items() if k != "probes"}

    @cached_property
    def rows_inserted(self) -> tuple[int | None, str]:
        """The window's rows inserted and their source: what every per-row figure divides by (profile.py)."""
        return rows_inserted(self)

    @cached_property
    def account(self) -> Account | None:
        """The load threads' wall time by mechanism (account.py): what every figure of time reads."""
        return build_account(self, self.folded.get("cpu_profile"), self.folded.get("off_cpu"))

    @cached_property
    def index_build(self) -> IndexBuild | None:
        """The window's index build, phase by phase (index_build.py); None without one."""
        return build_index(self)

    @cached_property
    def subject(self) -> str:
        """What the capture profiles: an "index build" where one ran and the
        server counted no row inserted (its rows are those the build indexed),
        else "insert"."""
        if self.index_build is not None and self.rows_inserted[1] != "Innodb_rows_inserted":
            return INDEX_BUILD_SUBJECT
        return "insert"

    @cached_property
    def stages(self) -> list[StageSummary]:
        return stage_summaries(self.probes, sampled_cycles(self))

    @cached_property
    def figures(self) -> list[StageFigure]:
        """Per stage, the figures the reporters print (analysis/figures.py)."""
        return stage_figures(self.stages, self)

    @cached_property
    def consistency(self) -> list[Violation]:
        """The printed figures that break a physical bound (analysis/consistency.py)."""
        return check_bounds(self)

    @cached_property
    def stage_records(self) -> list[dict[str, Any]]:
        return [stage_record(s, self) for s in self.stages]

    @cached_property
    def stage_of(self) -> dict[int, str]:
        """Probe id -> its stage."""
        return stage_of(self.probes)

    def probe_calls(self, j: int) -> Estimate:
        """The window's calls of the j-th probe: those counted, or in sampled mode the estimate."""
        if self.sampled:
            return probe_estimate(self, j)
        n = float(self.probes[j].calls)
        return Estimate(n, n, n)

    def probe_records(self) -> list[dict[str, Any]]:
        """Recorded probes with their derived figures (and, sampled, their estimate)."""
        return [{**p.to_json(), **({"estimated_calls": self.probe_calls(j).to_json()} if self.sampled else {})}
                for j, p in enumerate(self.probes)]

    @cached_property
    def sampling(self) -> Sampling:
        return Sampling.of(self.doc.get("sampling"))

    @cached_property
    def stacks(self) -> dict[str, StackSection]:
        """The collectors of stacks (views.STACK_SECTIONS), as the capture keeps them."""
        return {name: StackSection.of(name, self.doc.get(name), self.schema_version) for name in STACK_SECTIONS}

    @cached_property
    def cpu_summary(self) -> CpuSummary:
        """The CPU samples' figures beside their flame graph."""
        return CpuSummary.of(self.doc.get("cpu_profile"), self.stacks["cpu_profile"])

    @cached_property
    def off_cpu_summary(self) -> OffCpuSummary:
        return OffCpuSummary.of(self.doc.get("off_cpu"), self.stacks["off_cpu"])

    @cached_property
    def io_summary(self) -> IoSummary:
        return IoSummary.of(self.doc.get("io"), self.stacks["io"])

    @cached_property
    def host(self) -> Host:
        return Host.of(self.doc.get("host"))

    @cached_property
    def engine(self) -> Engine:
        return Engine.of(self.doc.get("engine"))

    @cached_property
    def process(self) -> Process:
        return Process.of(self.doc.get("process"))

    @cached_property
    def workload(self) -> Workload:
        """The lab driver's own record of the load (empty for a capture of someone's load)."""
        return Workload.of(self.doc.get("workload"))

    @property
    def warnings(self) -> list[str]:
        return list(self.doc.get("warnings") or [])

    @cached_property
    def statements(self) -> Statements:
        """The statement probe's shapes (views.Statements)."""
        return Statements.of(self.doc.get("statements"))

    @cached_property
    def perf_schema(self) -> PerfSchema:
        return PerfSchema.of(self.doc.get("perf_schema"))

    @cached_property
    def ps_summaries(self) -> dict[str, Any]:
        """The P_S summaries' and counters' changes over the window, those of
        the instruments off in the quiet phases scaled to it (ps_figures.py)."""
        a = self.account
        threads = a.threads if a is not None and a.threads else self.process.threads
        return ps_deltas(self.perf_schema, self.window, self.sampling, threads)

    @cached_property
    def collector_costs(self) -> dict[str, dict[str, Any]] | None:
        """What each collector measured itself to cost (None: a schema-1
        capture, which kept no collectors' record)."""
        collectors = self.doc.get("collectors")
        if collectors is None:
            return None
        return {name: c["cost"] for name, c in collectors.items() if c.get("cost")}

    @cached_property
    def cpu_bursts(self) -> CpuBursts:
        return CpuBursts.of(self.doc.get("cpu_bursts"))

    @cached_property
    def calibration(self) -> Calibration:
        return Calibration.of(self.doc, self.sampled)

    @property
    def sampled(self) -> bool:
        return self.sampling.sampled

    @cached_property
    def attribution(self) -> list[StatementTree]:
        """Where the longest statements' time went (attribution.py)."""
        partitions = {s["stage"]: s["partitions"] for s in self.stage_records if s.get("partitions")}
        return attribute(self, partitions, figures=self.printed_totals)

    @cached_property
    def printed_totals(self) -> dict[str, tuple[float | None, str]]:
        """Per stage, its window total as the stage table prints it and its
        mark: "<" an upper bound, "?" withheld (a bound broken)."""
        out: dict[str, tuple[float | None, str]] = {}
        for f in self.figures:
            if withheld(self.consistency, f.stage, TOTAL) or withheld(self.consistency, f.stage, MEAN):
                out[f.stage] = (None, "?")
            else:
                out[f.stage] = (f.total_ns, "<" if f.total_bound else "")
        return out

    @cached_property
    def by_digest(self) -> list[Digest]:
        """Per statement digest, per execution (statements.py)."""
        return by_digest(self)

    @cached_property
    def target(self) -> Target:
        return Target.of(self.doc["target"])

    @cached_property
    def window(self) -> Window:
        return Window.of(self.doc["window"])

    @cached_property
    def overhead(self) -> Overhead:
        """The probes' calibrated cost, the slowdown the duty cycles measured,
        and what each collector measured itself to cost."""
        # one figure for the probes' cost: the latency collector's own (its probe hits x their calibrated
        # cost, x the in-situ factor the cycles measured, and the switch program's run time), else the
        # probes' calibrated cost alone (captures from before collectors kept theirs)
        measured = ((self.collector_costs or {}).get("latency") or {}).get("target_s")
        estimated = measured * 1e9 if measured else sum(p.overhead_ns for p in self.probes)
        window = window_ns(self)
        return Overhead(estimated_ns=estimated, share_of_window=round(estimated / window, 6) if window else None,
                        measured_slowdown=printed_slowdown(self),
                        measured_against=slowdown_reference(self),
                        phase_slowdown=phase_slowdown(self),
                        standing_slowdown=standing_slowdown(self),
                        standing_cpu_s=standing_cpu_s(self),
                        always_on_slowdown=always_on_slowdown(self),
                        estimated_slowdown=calibrated_slowdown(self),
                        by_collector=self.collector_costs or {},
                        slowdown_estimate=measured_slowdown(self),
                        slowdown_interval=slowdown_interval(self),
                        slowdown_doubt=slowdown_doubt(self))

    def estimated_calls(self, s: StageSummary) -> Estimate:
        return estimated_calls(s, self)

    def to_json(self) -> dict[str, Any]:
        """The document with everything derived from it: `report --json`."""
        return {**self.recorded, "probes": self.probe_records(), "stages": self.stage_records,
                "attribution": {"by_thread": [t.to_json() for t in self.attribution],
                                "by_digest": [d.to_json() for d in self.by_digest]},
                "overhead": self.overhead.to_json(), "consistency": [v.to_json() for v in self.consistency],
                "account": self.account.to_json() if self.account else None,
                "index_build": self.index_build.to_json() if self.index_build else None}
