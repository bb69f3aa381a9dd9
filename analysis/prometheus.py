"""Profiles in the Prometheus text exposition format (version 0.0.4): what
`mysqlprobe report DIR --prometheus` prints and `mysqlprobe watch` serves,
checked by `promtool check metrics`.

Names follow Prometheus's conventions: the `mysqlprobe_` prefix, seconds,
`_total` on counters. Totals adds profiles up (watch's windows, one after
another), so counters only grow: calls (the estimate for the whole window
in sampled mode), latency histograms of the calls the probes timed (their
own cost taken off), rows changed, P_S stage time. Partitions are the top
PARTITIONS_SHOWN by calls and `other`, so a table of 8,192 partitions does
not make 8,192 series."""

from __future__ import annotations

from typing import Any

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from mysqlprobe import __version__
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import memory_counter
from mysqlprobe.analysis.views import Target
from mysqlprobe.probes.histogram import Histogram

PARTITIONS_SHOWN = 10
# the histograms' bounds: one per octave, 16 ns to 17 s, the same in every scrape
# (the profiles' own buckets, four per octave, fold into them exactly)
LADDER_NS = [2 ** k for k in range(4, 35)]


def _label_value(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items()) + "}"


def _number(x: float) -> str:
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return repr(float(x))


class Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: object) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _top_partitions(calls: Counter[Any]) -> list[tuple[str, float]]:
    ranked = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))
    shown: list[tuple[str, float]] = [(f"p{pid}", n) for pid, n in ranked[:PARTITIONS_SHOWN]]
    rest = sum(n for _, n in ranked[PARTITIONS_SHOWN:])
    return shown + ([("other", rest)] if len(ranked) > PARTITIONS_SHOWN else [])


class Totals:
    """Profiles added up: what the exposition shows."""

    def __init__(self) -> None:
        self.calls: Counter[Any] = Counter()                  # (stage, function) -> calls
        self.histograms: dict[tuple[str, str], Histogram] = defaultdict(Histogram)  # (stage, function) -> its calls
        self.latency_ns: Counter[Any] = Counter()             # (stage, function) -> corrected ns
        self.cpu_wait_ns: Counter[Any] = Counter()            # (stage, function) -> waits for a CPU, left out
        self.partitions: dict[str, Counter[Any]] = defaultdict(Counter)     # stage -> partition id -> calls
        self.ps_stage_s: Counter[Any] = Counter()
        self.progress: Counter[Any] = Counter()  # --progress-counter's variable: its change
        self.index_rows = 0.0                                   # rows index builds scanned
        self.index_phase_s: dict[str, float] = defaultdict(float)   # build phase -> seconds of wall time
        self.compressions: Counter[Any] = Counter()             # "ops" / "failures": InnoDB's INNODB_CMP counts
        self.with_builds = False
        self.rows = self.window_s = self.on_s = 0.0
        self.with_rows = False
        self.target: Target | None = None
        self.slowdown: float | None = None               # the last profile's
        self.budget: float | None = None
        self.profiles = 0

    def add(self, profile: Profile) -> "Totals":
        self.profiles += 1
        self.target = profile.target
        for j, p in enumerate(profile.probes):
            key = (p.stage, p.name)
            self.calls[key] += round(profile.probe_calls(j).value)
            if p.latency.histogram.calls:
                self.histograms[key] += p.latency.histogram
                self.latency_ns[key] += max(p.total_ns, 0)
                self.cpu_wait_ns[key] += p.cpu_wait_ns
        for s in profile.stages:
            for part in s.partitions.values():
                self.partitions[s.stage][part.id] += part.calls
        for st in profile.ps_summaries.get("stages") or []:
            self.ps_stage_s[st["name"]] += st["timer_ps"] / 1e12
        window, sampling = profile.window, profile.sampling
        changed, counter = window.rows_changed, memory_counter(window)
        if changed is not None and counter:
            self.progress[counter] += changed
        elif changed is not None:
            self.rows += changed
            self.with_rows = True
        self._add_build(profile)
        self.window_s += window.duration_s
        self.on_s += sampling.on_s if sampling.sampled else window.duration_s
        slowdown = profile.overhead.measured_slowdown
        self.slowdown = slowdown if slowdown is not None and math.isfinite(slowdown) else None
        self.budget = sampling.overhead_budget
        return self

    def _add_build(self, profile: Profile) -> None:
        """An index build's figures as the text report has them (analysis/index_build.py)."""
        b = profile.index_build
        if b is None:
            return
        self.with_builds = True
        self.index_rows += b.rows_scanned or 0
        for ph in b.phases:
            if ph.share is not None and b.shares_of_ns:
                self.index_phase_s[ph.name] += ph.share * b.shares_of_ns / 1e9
        if b.server_compressions is not None:
            self.compressions["ops"] += b.server_compressions
            self.compressions["failures"] += b.compression_failures or 0

    def _build_families(self, out: Exposition) -> None:
        if self.index_rows:   # unknown where neither a probe nor the load counted them
            out.family("mysqlprobe_index_build_rows_total", "counter",
                       "Rows of the table index builds scanned (counted by --index-profile, else the load's own "
                       "count).")
            out.sample("mysqlprobe_index_build_rows_total", round(self.index_rows))
        out.family("mysqlprobe_index_build_phase_seconds_total", "counter",
                   "Index builds' wall time by phase (scan, merge sort, insert, flush), from the threads' stacks.")
        for phase, seconds in sorted(self.index_phase_s.items()):
            out.sample("mysqlprobe_index_build_phase_seconds_total", round(seconds, 9), phase=phase)
        if self.compressions:
            out.family("mysqlprobe_page_compressions_total", "counter",
                       "ROW_FORMAT=COMPRESSED page compressions while an index build was profiled (INNODB_CMP).")
            out.sample("mysqlprobe_page_compressions_total", self.compressions["ops"])
            out.family("mysqlprobe_page_compression_failures_total", "counter",
                       "Of those, the compressions that did not fit the page (compressed again after a split).")
            out.sample("mysqlprobe_page_compression_failures_total", self.compressions["failures"])

    def exposition(self, out: Exposition | None = None) -> str:
        out = out or Exposition()
        out.family("mysqlprobe_build_info", "gauge", "mysqlprobe's version and the server it profiled.")
        t = self.target
        out.sample("mysqlprobe_build_info", 1, version=__version__, server_family=(t and t.family) or "",
                   server_version=(t and t.version) or "")
        out.family("mysqlprobe_window_seconds_total", "counter", "Time profiled, over every window.")
        out.sample("mysqlprobe_window_seconds_total", round(self.window_s, 6))
        out.family("mysqlprobe_stage_calls_total", "counter",
                   "Calls of each probed function (sampled mode: the estimate for the whole window).")
        for (stage, function), n in sorted(self.calls.items()):
            out.sample("mysqlprobe_stage_calls_total", n, stage=stage, function=function)
        out.family("mysqlprobe_stage_latency_seconds", "histogram",
                   "Latency of the calls the probes timed, their own cost taken off.")
        for key in sorted(self.histograms):
            self._histogram(out, key)
        out.family("mysqlprobe_stage_cpu_wait_seconds_total", "counter",
                   "Time the timed calls waited for a CPU (runnable, switched out): not in their latency.")
        for (stage, function) in sorted(self.histograms):
            out.sample("mysqlprobe_stage_cpu_wait_seconds_total", round(self.cpu_wait_ns[(stage, function)] / 1e9, 9),
                       stage=stage, function=function)
        if self.partitions:
            out.family("mysqlprobe_partition_calls_total", "counter",
                       f"Calls counted per partition (the top {PARTITIONS_SHOWN} by calls, the rest as other).")
            for stage in sorted(self.partitions):
                for name, calls in _top_partitions(self.partitions[stage]):
                    out.sample("mysqlprobe_partition_calls_total", calls, stage=stage, partition=name)
        if self.with_rows:
            out.family("mysqlprobe_rows_changed_total", "counter", "Rows the server changed while profiled.")
            out.sample("mysqlprobe_rows_changed_total", round(self.rows))
        if self.progress:
            out.family("mysqlprobe_progress_total", "counter",
                       "The change, while profiled, of the server's variable read as its progress "
                       "(--progress-counter).")
            for name, n in sorted(self.progress.items()):
                out.sample("mysqlprobe_progress_total", n, counter=name)
        if self.ps_stage_s:
            out.family("mysqlprobe_ps_stage_seconds_total", "counter",
                       "Time Performance Schema timed in each statement stage.")
            for name, seconds in sorted(self.ps_stage_s.items()):
                out.sample("mysqlprobe_ps_stage_seconds_total", round(seconds, 9), ps_stage=name)
        if self.slowdown is not None:
            out.family("mysqlprobe_overhead_slowdown_ratio", "gauge",
                       "How much slower the load ran over the last window, from the server's own progress.")
            out.sample("mysqlprobe_overhead_slowdown_ratio", self.slowdown)
        if self.budget is not None:
            out.family("mysqlprobe_overhead_budget_ratio", "gauge", "The slowdown the duty cycles may cost.")
            out.sample("mysqlprobe_overhead_budget_ratio", self.budget)
        if self.with_builds:
            self._build_families(out)
        out.family("mysqlprobe_probes_on_seconds_total", "counter", "Time the probes were attached.")
        out.sample("mysqlprobe_probes_on_seconds_total", round(self.on_s, 6))
        return out.text()

    def _histogram(self, out: Exposition, key: tuple[str, str]) -> None:
        name, (stage, function) = "mysqlprobe_stage_latency_seconds", key
        buckets = self.histograms[key].buckets()
        for le in LADDER_NS:
            below = sum(b.count for b in buckets if b.high <= le)
            out.sample(f"{name}_bucket", below, stage=stage, function=function, le=_number(le / 1e9))
        cumulative = self.histograms[key].calls
        out.sample(f"{name}_bucket", cumulative, stage=stage, function=function, le="+Inf")
        out.sample(f"{name}_sum", round(self.latency_ns[key] / 1e9, 12), stage=stage, function=function)
        out.sample(f"{name}_count", cumulative, stage=stage, function=function)


def exposition(profile: Profile) -> str:
    return Totals().add(profile).exposition()


@dataclass(frozen=True, slots=True)
class WatchState:
    """mysqlprobe watch's own state, served beside the windows' totals."""

    up: int
    windows: int
    failures: int
    probes: int
    functions: int
    build: tuple[str, float, float | None] | None   # the index build under way: stage, percent, seconds left


def watch_exposition(state: WatchState, totals: Totals) -> str:
    """What watch's /metrics serves: its own state, then the windows' totals."""
    out = Exposition()
    out.family("mysqlprobe_up", "gauge", "1 while the watched server runs and is profiled.")
    out.sample("mysqlprobe_up", state.up)
    out.family("mysqlprobe_windows_total", "counter", "Windows profiled and added to these figures.")
    out.sample("mysqlprobe_windows_total", state.windows)
    out.family("mysqlprobe_window_failures_total", "counter", "Windows that could not be recorded.")
    out.sample("mysqlprobe_window_failures_total", state.failures)
    out.family("mysqlprobe_probes", "gauge", "Probes (entries and returns) the last window attached.")
    out.sample("mysqlprobe_probes", state.probes)
    out.family("mysqlprobe_functions", "gauge", "Functions the last window probed.")
    out.sample("mysqlprobe_functions", state.functions)
    if state.build is not None:
        stage, percent, left = state.build
        out.family("mysqlprobe_index_build_progress_ratio", "gauge",
                   "The index build under way: the share of its stage's work done, as the server reports "
                   "it (P_S WORK_COMPLETED / WORK_ESTIMATED, else MariaDB's PROGRESS of the statement).")
        out.sample("mysqlprobe_index_build_progress_ratio", round(percent / 100, 4), stage=stage)
        if left is not None:
            out.family("mysqlprobe_index_build_seconds_left", "gauge",
                       "The index build's time left at its rate so far.")
            out.sample("mysqlprobe_index_build_seconds_left", round(left, 1), stage=stage)
    return totals.exposition(out)
