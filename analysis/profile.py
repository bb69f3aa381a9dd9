"""Stage summaries of an insert profile capture (profile.json): pure
functions of the document, so `mysqlprobe report` gives the same answer
later, without root, as the live run did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any


import math

from mysqlprobe.catalog import BY_NAME
from mysqlprobe.probes.histogram import Histogram
from mysqlprobe.analysis.views import UNRESOLVED, Cycle, Latency, Probe, Sampling, Window

if TYPE_CHECKING:   # the Profile is made of these figures
    from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.per_call import (SAMPLED, SAMPLED_METHODS, SAMPLED_STACKS, Z95, PerCall, best_per_call,
                                          per_call, sampled_per_call, samples_to_resolve)
from mysqlprobe.analysis.index_build import rows_scanned as index_rows_scanned
from mysqlprobe.analysis.sampling import Estimate, estimate_by_rows, estimate_total, rounded
from dataclasses import dataclass, field


@dataclass
class PartitionSummary:
    id: int
    calls: int = 0
    total_ns: int = 0
    histogram: Histogram = Histogram()
    raw_total_ns: int = 0
    raw_histogram: Histogram = Histogram()

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.calls if self.calls else None


@dataclass
class StageSummary:
    stage: str
    title: str
    symbols: list[str]
    mangled: list[str] = field(default_factory=list)
    nested_probe_hits: int = 0  # other probes' hits inside its calls: it has probed callees
    calls: int = 0
    total_ns: int = 0
    histogram: Histogram = Histogram()
    raw_total_ns: int = 0
    raw_histogram: Histogram = Histogram()
    overhead_ns: float = 0
    partitions: dict[int, PartitionSummary] = field(default_factory=dict)
    partition_source: str | None = None
    cycle_calls: list[float] | None = None    # sampled mode: calls counted per duty cycle
    cycle_row_calls: list[float] | None = None  # of those, the calls while the cycle's rows were counted
    classes: set[str] = field(default_factory=set)  # how its probes' first instructions are taken (calibration)
    cpu_wait_calls: int = 0  # calls that waited for a CPU, and that time: left out of the latencies
    cpu_wait_ns: int = 0

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.calls if self.calls else None

    def percentiles(self) -> dict[str, float | None]:
        return self.histogram.percentiles()


def _add(summary: StageSummary | PartitionSummary, calls: int, latency: Latency, raw: Latency) -> None:
    """Add a probe's or a partition's latencies (corrected and raw) into a summary."""
    summary.calls += calls
    summary.total_ns += latency.total_ns
    summary.histogram += latency.histogram
    summary.raw_total_ns += raw.total_ns
    summary.raw_histogram += raw.histogram


def stage_of(probes: Sequence[Probe]) -> dict[int, str]:
    """Probe id -> its stage name."""
    return {p.id: p.stage for p in probes}


def stage_summaries(probes: Sequence[Probe], cycles: Sequence[Cycle] | None) -> list[StageSummary]:
    """One summary per stage that was probed, in catalog order, summing the
    stage's functions (e.g. every get_partition_id_* variant); `cycles`:
    the duty cycles' counts in sampled mode."""
    out: dict[str, StageSummary] = {}
    for j, p in enumerate(probes):
        st = BY_NAME.get(p.stage)
        s = out.get(p.stage)
        if s is None:
            s = out[p.stage] = StageSummary(p.stage, st.title if st else p.symbol, [])
        s.symbols.append(p.symbol)
        s.mangled.append(p.mangled)
        s.nested_probe_hits += p.nested_probe_hits
        s.cpu_wait_calls += p.cpu_wait_calls
        s.cpu_wait_ns += p.cpu_wait_ns
        if p.entry_class:
            s.classes.add(p.entry_class)
        _add(s, p.calls, p.latency, p.raw)
        if cycles is not None:
            s.cycle_calls = _add_per_cycle(s.cycle_calls, [c.calls[j] for c in cycles])
            s.cycle_row_calls = _add_per_cycle(s.cycle_row_calls, [(c.row_calls or (0,) * (j + 1))[j]
                                                                   for c in cycles])
        s.overhead_ns += p.overhead_ns
        if p.partition_source:
            s.partition_source = p.partition_source
        for part in p.partitions:
            _add(s.partitions.setdefault(part.id, PartitionSummary(part.id)), part.calls, part.latency, part.raw)
    order = {n: i for i, n in enumerate(BY_NAME)}
    return sorted(out.values(), key=lambda s: (order.get(s.stage, len(order)), s.stage))


def _add_per_cycle(acc: list[float] | None, per: list[float]) -> list[float]:
    return per if acc is None else [a + b for a, b in zip(acc, per)]


def sampled_cycles(profile: Profile) -> tuple[Cycle, ...] | None:
    """The duty cycles' counts; None in exact mode."""
    return profile.sampling.per_cycle if profile.sampled else None


def coverage(profile: Profile) -> float:
    """Fraction of the window the probes were on (1 when every call was counted)."""
    cycles = sampled_cycles(profile)
    if cycles is None:
        return 1.0
    window = profile.window.duration_s
    return min(sum(c.on_s for c in cycles) / window, 1.0) if window else 1.0


def window_scale(profile: Profile) -> float:
    """What counted figures are multiplied by to stand for the whole window:
    the window's rows over the on-phases' rows, or else the inverse of the
    share of time the probes were on (1 when every call was counted)."""
    if estimate_basis(profile) == "rows":
        counted = sum(sum(c.calls) for c in profile.sampling.per_cycle)
        kept = row_cycles(profile)
        per_row = sum(sum(c.row_calls or ()) for c in kept) / sum(c.rows or 0 for c in kept)
        return per_row * (profile.window.rows_changed or 0) / counted if counted else 1.0
    cover = coverage(profile)
    return 1 / cover if cover > 0 else 1.0


def estimated_calls(s: StageSummary, profile: Profile) -> Estimate:
    cycles = sampled_cycles(profile)
    if cycles is None or s.cycle_calls is None:
        return Estimate(float(s.calls), float(s.calls), float(s.calls))
    if estimate_basis(profile) == "rows":
        calls = estimate_by_rows(row_pairs(profile, s), profile.window.rows_changed or 0, s.calls)
        return read_doubt_interval(calls, row_cycles(profile), unprobed_rate(profile.sampling), s.calls)
    return _by_time([(c.on_s, c.probe_s, n) for c, n in zip(cycles, s.cycle_calls)], profile)


def read_doubt_interval(calls: Estimate, kept: list[Cycle], rate: float | None, counted: float) -> Estimate:
    """Calls per row from one cycle has no spread between cycles to give an
    interval; its doubt is where its rows sit in their reads: each read of
    the row counter lies somewhere in its width, which at the load's
    unprobed rate (the most rows a second it could change) is that many
    rows either way against the rows the cycle counted. A 1-s statement
    that began in a window's only on-phase put 1,000-4,000 rows there, and
    reads 1-5 ms wide put its count 2-4% out (bench/RESULTS.md, section 4)."""
    if calls.low is not None or len(kept) != 1 or not rate or not kept[0].rows or not kept[0].read_s:
        return calls
    doubt = sum(kept[0].read_s) / 2 * rate / kept[0].rows
    return Estimate(calls.value, max(calls.value * (1 - doubt), float(counted)), calls.value * (1 + doubt))


MEMORY_COUNTER = "memory:"  # window.rows_counter: a variable read from the target (--progress-counter)


def memory_counter(window: Window) -> str | None:
    """The variable of the target read as its progress in place of the
    server's rows (--progress-counter), or None."""
    counter = window.rows_counter or ""
    return counter[len(MEMORY_COUNTER):] if counter.startswith(MEMORY_COUNTER) else None


# rows counted inside the on-phases before calls per row is taken from them: a
# cycle that caught a statement opening its tables saw 1 row and 13 calls
MIN_CYCLE_ROWS = 200


def row_cycles(profile: Profile) -> list[Cycle]:
    """The cycles calls per row is taken from: those whose row counter was
    read close enough to their calls (not misread)."""
    return [c for c in sampled_cycles(profile) or () if not c.misread]


def row_pairs(profile: Profile, s: StageSummary) -> list[tuple[int, float]]:
    """(rows, the stage's calls while they were counted) of those cycles."""
    return [(c.rows or 0, n) for c, n in zip(sampled_cycles(profile) or (), s.cycle_row_calls or ()) if not c.misread]


def estimate_basis(profile: Profile) -> str | None:
    """What sampled counts were scaled by: the server's rows or the time
    (also where every cycle's rows were misread)."""
    cycles = sampled_cycles(profile)
    if cycles is None:
        return None
    known = profile.window.rows_changed and all(c.rows is not None and c.row_calls is not None for c in cycles)
    return "rows" if known and sum(c.rows or 0 for c in row_cycles(profile)) >= MIN_CYCLE_ROWS else "time"


def probe_estimate(profile: Profile, j: int) -> Estimate:
    """Sampled mode: the window's calls of the j-th probe, on the basis its
    stage's estimate has (the server's rows, else the time): one function's
    calls and its stage's are one figure, whichever output prints them."""
    cycles = profile.sampling.per_cycle
    if estimate_basis(profile) == "rows":
        pairs = [(c.rows or 0, (c.row_calls or (0,) * (j + 1))[j]) for c in cycles if not c.misread]
        return estimate_by_rows(pairs, profile.window.rows_changed or 0, profile.probes[j].calls)
    return _by_time([(c.on_s, c.probe_s, c.calls[j]) for c in cycles], profile)


def _by_time(cycles: list[tuple[float, float, float]], profile: Profile) -> Estimate:
    """The window's calls from (on_s, probe_s, calls) per cycle, with the
    capture's doubt on the probes' cost."""
    return estimate_total(cycles, profile.window.duration_s, profile.sampling.cost_uncertainty,
                          profile.calibration.in_situ_high)


MIN_OFF_ROWS = 200  # rows in the off-phases before their speed stands for the unprobed load's


def printed_slowdown(profile: Profile) -> float | None:
    """The slowdown a report prints: the measured one, where it is 1.0 or
    more. Below 1.0 the load's own variation outweighed what mysqlprobe cost
    it (a load cannot run faster for being probed): not measurable (None),
    its doubt (slowdown_doubt) printed instead."""
    measured = measured_slowdown(profile)
    return measured if measured is not None and measured >= 1.0 else None


# two-sided 95% quantiles of Student's t by degrees of freedom (more: the normal's)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
       12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}


def t95(df: int) -> float:
    return next((T95[k] for k in sorted(T95) if df <= k), 1.96)


def reference_rate_doubt(profile: Profile) -> float | None:
    """The 95% doubt on the unprobed row rate, relative: from how the rate
    varied between the reference phases (slowdown_reference) of the
    capture's cycles, a phase's rate taken to vary as one over its length
    (a phase twice as long averages out twice as much). Their second halves
    (quiet_tail) are half as long as the quiet phases whose spread is
    recorded: theirs is taken as the phases' times the square root of two.
    None with fewer than two such phases with rows."""
    kind, cycles = slowdown_reference(profile), sampled_cycles(profile)
    if kind is None or not cycles:
        return None
    parts = [(p.s, p.rows) for c in cycles for p in c.off
             if p.rows and p.s > 0 and p.quiet == (kind != "off")]
    if len(parts) < 2:
        return None
    seconds = sum(s for s, _ in parts)
    rate = sum(r for _, r in parts) / seconds
    # the variance of a second's rate, from the phases' spread about the mean, each by its length
    per_second = sum(s * (r / s - rate) ** 2 for s, r in parts) / (len(parts) - 1)
    doubt = t95(len(parts) - 1) * math.sqrt(per_second / seconds) / rate
    return doubt * (math.sqrt(2) if kind == "quiet_tail" else 1.0)


def slowdown_interval(profile: Profile) -> tuple[float, float] | None:
    """The measured slowdown's 95% interval, from the reference rate's doubt,
    its low end at 1.0 at least (a load is not sped up by being probed);
    None where the doubt is not known."""
    measured, doubt = measured_slowdown(profile), reference_rate_doubt(profile)
    if measured is None or doubt is None:
        return None
    return round(max(measured * (1 - doubt), 1.0), 4), round(max(measured * (1 + doubt), 1.0), 4)


def slowdown_doubt(profile: Profile) -> float | None:
    """The ± a report prints beside 'not measurable': the interval's half
    width, or, where it is not known, how far below 1.0 the measure fell."""
    measured, doubt = measured_slowdown(profile), reference_rate_doubt(profile)
    if measured is None:
        return None
    return round(max(measured * doubt if doubt is not None else 0.0, 1.0 - measured), 4)


def measured_slowdown(profile: Profile) -> float | None:
    """How much mysqlprobe slowed the load down: what the phases show
    (phase_slowdown) times what they cannot (standing_slowdown, where the
    capture has it). None when it was not measured. Below 1.0 where the
    load's own variation outweighed its cost: printed_slowdown is what a
    report prints."""
    phases = phase_slowdown(profile)
    if phases is None:
        return None
    standing = standing_slowdown(profile)
    return round(phases * standing, 4) if standing else phases


def load_span_seconds(profile: Profile) -> float:
    """The time the load ran in the window: from the row counter's read
    before its first change to the read after its last (`sampling.load_s`),
    less the part of each edge's reads the load did not run in, at its
    unprobed rate (a window opened 8 s before a 0.5-s statement, polling
    every 0.4 s, counted 0.13 s before the statement's first row as its
    time: a quarter of it); the window where no span was recorded."""
    sampling = profile.sampling
    if not sampling.load_s:
        return profile.window.duration_s
    rate = unprobed_rate(sampling)
    edges = [edge for edge in sampling.load_edges if edge is not None]
    if len(edges) == 2 and edges[0] == edges[1]:   # a load between two reads: one edge
        edges = edges[:1]
    return max(sampling.load_s - sum(edge.idle_s(rate) for edge in edges), 1e-6)


def phase_slowdown(profile: Profile) -> float | None:
    """How much the collectors slowed the load down, from the server's own
    progress: its row rate with nothing of mysqlprobe on (the quiet
    off-phases; in captures without them, every off-phase, where what stays
    on all window is on too) against its rate over the whole window, every
    on-phase, attach and detach included, over the time the load ran in it
    (load_span_seconds: a window opened before it started is idle till then).
    Captures without off-phase totals: from the time the cycles lost one by
    one. None when it was not measured."""
    sampling, window = profile.sampling, profile.window
    rows: int | None = window.rows_changed
    unprobed = unprobed_rate(sampling)
    if sampling.load_s and sampling.load_rows:  # over the span the load ran
        rows, seconds = sampling.load_rows, load_span_seconds(profile)
    else:
        seconds = window.duration_s
    if unprobed and rows:
        return round(float(unprobed / (rows / seconds)), 4)
    if sampling.phase("off")[0] is not None:
        return None
    lost, duration = sampling.lost_s, window.duration_s
    return duration / (duration - lost) if lost is not None and 0 <= lost < duration else None


def standing_cpu_s(profile: Profile) -> float | None:
    """CPU seconds mysqlprobe took in every phase, the quiet ones too: its
    own process, its calibration helper, the server's threads serving its
    connections (progress reads, the thread watch), and the kernel's run
    time of the sched_switch program that keeps waits for a CPU out of the
    calls (on all session, every thread of the host)."""
    own = profile.window.own_cpu_s
    if own is None:
        return None
    helper = ((profile.collector_costs or {}).get("calibration") or {}).get("cpu_s") or 0.0
    server = profile.perf_schema.own_connections_cpu_s
    switches = profile.engine.switch_program_s
    return float(own + helper + server + switches)


def standing_slowdown(profile: Profile) -> float | None:
    """What the CPU mysqlprobe took in every phase cost the load, which no
    comparison of phases can show. A CPU second taken from a host whose
    CPUs were all busy is one the others lost; from an idle host, nobody's:
    each counts by the share of the host's usable CPU time that was busy
    (steal is nobody's to use). None where the capture lacks the figures."""
    own, host, cpus = standing_cpu_s(profile), profile.process.host_cpu_share, profile.host.cpus
    idle = host.get("idle")
    if own is None or not cpus or idle is None:
        return None
    usable_share = 1.0 - (host.get("steal") or 0.0)
    busy_share = max(0.0, 1.0 - (idle + (host.get("iowait") or 0.0)) / usable_share)
    others = cpus * profile.window.duration_s * usable_share * busy_share - own
    return round(1.0 + own * busy_share / others, 4) if others > 0 else None


MIN_TAIL_S = 1.0  # of quiet halves: a load's speed varies more than that over shorter spans


def _phase_rate(sampling: Sampling, kind: str) -> float | None:
    """Rows per second in the off-phases of a kind (one of REFERENCES),
    summed; None with too few rows (or halves too short) to trust."""
    rows, seconds = sampling.phase(kind)
    if kind == "quiet_tail" and (seconds or 0) < MIN_TAIL_S:
        return None
    return rows / seconds if rows is not None and rows >= MIN_OFF_ROWS and seconds else None


# what the load's unprobed speed is read from, best first: the second halves
# of the quiet off-phases (the load over the on-phase before them: convoys
# of the probed threads drained, which are the on-phase's cost), the whole
# quiet phases, the ordinary off-phases (CPU sampling on)
REFERENCES = ("quiet_tail", "quiet", "off")


def _reference(sampling: Sampling) -> tuple[str, float] | None:
    """The best of REFERENCES with enough rows, and its rows per second."""
    return next(((kind, rate) for kind in REFERENCES if (rate := _phase_rate(sampling, kind))), None)


def unprobed_rate(sampling: Sampling) -> float | None:
    ref = _reference(sampling)
    return ref[1] if ref else None


def slowdown_reference(profile: Profile) -> str | None:
    """What the measured slowdown is set against: one of REFERENCES, or None."""
    ref = _reference(profile.sampling)
    return ref[0] if ref else None


def always_on_slowdown(profile: Profile) -> float | None:
    """What the collectors that stay on all window (CPU sampling) cost the
    load: its rate in the quiet off-phases over its rate in the others."""
    quiet, ordinary = _phase_rate(profile.sampling, "quiet"), _phase_rate(profile.sampling, "off")
    return round(quiet / ordinary, 4) if quiet and ordinary else None


def calibrated_slowdown(profile: Profile) -> float | None:
    """Sampled mode: the slowdown the duty cycles' probes would cause by
    their calibrated cost alone (the estimate where none was measured)."""
    cycles = sampled_cycles(profile)
    if cycles is None:
        return None
    window, probe_s = profile.window.duration_s, sum(c.probe_s for c in cycles)
    return round(window / (window - probe_s), 4) if 0 <= probe_s < window else None


def window_ns(profile: Profile) -> int:
    return int(profile.window.duration_s * 1e9)


def latency_record(total: int, calls: int, histogram: Histogram) -> dict[str, Any]:
    return {"total_ns": total, "mean_ns": total / calls if calls else None,
            "percentiles_ns": histogram.percentiles(), "histogram": histogram.to_record()}


# cycles with calls before the probes' mean per call stands for a window: the first
# ones of a statement come at its start (tables opened, pages read in); with three,
# row_insert came out 4.7 us a call in a 4-s statement whose unprobed truth was 1.6
MIN_PROBED_CYCLES = 5


def cycles_with_calls(s: StageSummary) -> int | None:
    """In sampled mode, the duty cycles that saw calls of the stage; None in exact mode."""
    return None if s.cycle_calls is None else sum(1 for n in s.cycle_calls if n)


def stage_per_call(s: StageSummary, profile: Profile) -> PerCall:
    """A call's mean cost: the probes' where they resolve it, else the CPU
    bursts'. Without their stacks (own CPU only) not for a stage with
    probed callees: it spends its time mostly in those, which its own CPU
    leaves out. One only counted, not timed, has no cost to give.

    Where the probes saw the stage in fewer than MIN_PROBED_CYCLES cycles
    (a statement of a second or two), their calls are those of a moment,
    often its start (tables opened, pages read in: several times a steady
    call's cost): the bursts', spread over the off-phases, stand for the
    window instead wherever they resolve the mean."""
    probed = per_call(s.calls, s.total_ns, s.raw_total_ns, s.raw_histogram, profile.calibration, s.classes)
    figures = burst_figures(s, profile)
    if not s.raw_total_ns or (s.nested_probe_hits and not (figures and figures.callees)):
        return probed
    sampled = burst_per_call(figures, profile, probed.probe_noise_ns)
    few = cycles_with_calls(s)
    if few is not None and few < MIN_PROBED_CYCLES and sampled is not None and sampled.resolved:
        return sampled
    return best_per_call(probed, sampled)


@dataclass(frozen=True)
class BurstFigures:
    samples: int
    cpu_ns: int
    calls: Estimate
    callees: bool  # samples with the stage's functions on the stack; else in their own code


def burst_figures(s: StageSummary, profile: Profile) -> BurstFigures | None:
    """The CPU bursts' samples in the stage's functions and the stage's calls
    in the off-phases they ran in (calls per row times their rows; without a
    row counter, the window's estimate times their share of it); None where
    no burst ran."""
    bursts = profile.cpu_bursts
    (rows, seconds), basis = profile.sampling.phase("burst"), estimate_basis(profile)
    if bursts.status != "collected" or bursts.samples == 0 or s.cycle_calls is None:
        return None  # (no sample of the target at all: the sampler saw nothing to divide)
    if basis == "rows" and rows:
        pairs = row_pairs(profile, s)
        calls = single_cycle_interval(estimate_by_rows(pairs, rows, 0, apart=True), sum(n for _, n in pairs))
    elif basis == "time" and seconds:
        # calls per unprobed second in the on-phases, over the bursts' seconds
        window = estimated_calls(s, profile)
        share = seconds / profile.window.duration_s
        calls = Estimate(window.value * share, None if window.low is None else window.low * share,
                         None if window.high is None else window.high * share)
    else:
        return None
    if bursts.stages is not None:  # taken with stacks
        samples, ns = bursts.stages.get(s.stage, (0, 0))
        return BurstFigures(samples, ns, calls, True)
    mine = [bursts.functions.get(m, (0, 0)) for m in s.mangled]
    return BurstFigures(sum(n for n, _ in mine), sum(ns for _, ns in mine), calls, False)


def single_cycle_interval(calls: Estimate, counted: float) -> Estimate:
    """Calls per row from one cycle has no spread between cycles to give an
    interval: it gets the counted calls' own (Poisson) doubt, the least it
    has, so that the bursts of a short window can stand on it."""
    if calls.low is not None or calls.value <= 0 or counted <= 0:
        return calls
    half = Z95 * calls.value / math.sqrt(counted)
    return Estimate(calls.value, max(calls.value - half, 0.0), calls.value + half)


def burst_per_call(figures: BurstFigures | None, profile: Profile, probe_noise_ns: float = 0.0) -> PerCall | None:
    hz = profile.cpu_bursts.frequency_hz
    if figures is None or not hz:
        return None
    period = 1e9 / hz
    return sampled_per_call(figures.cpu_ns, figures.samples, period, figures.calls, probe_noise_ns,
                            SAMPLED_STACKS if figures.callees else SAMPLED)


def burst_record(s: StageSummary, profile: Profile, mean: PerCall) -> dict[str, Any] | None:
    """What profile.json keeps of the bursts' figure for a stage whose mean is `mean`."""
    figures = burst_figures(s, profile)
    if figures is None:
        return None
    pc = burst_per_call(figures, profile)
    return {"samples": figures.samples, "cpu_ns": figures.cpu_ns, "callees_included": figures.callees,
            "calls": figures.calls.to_json(), "mean_ns": rounded(pc.mean_ns) if pc else None,
            "mean_ns_ci95": [rounded(pc.low_ns), rounded(pc.high_ns)] if pc else None,
            "resolved": pc.resolved if pc else False, "used": mean.method in SAMPLED_METHODS,
            **({} if pc is None or pc.resolved else {"samples_to_resolve": samples_to_resolve(figures.calls)})}


def partition_per_call(p: PartitionSummary, s: StageSummary, profile: Profile) -> PerCall:
    return per_call(p.calls, p.total_ns, p.raw_total_ns, p.raw_histogram, profile.calibration, s.classes)


def stage_record(s: StageSummary, profile: Profile) -> dict[str, Any]:
    """A stage summary as it is stored in profile.json. In sampled mode calls
    are those counted; estimated_calls, calls_per_s and share_of_window stand
    for the whole window."""
    window = window_ns(profile)
    seconds = window / 1e9 if window else 0
    est = estimated_calls(s, profile)
    share = s.total_ns * window_scale(profile) / window if window else None
    mean = stage_per_call(s, profile)
    figure = next((f for f in profile.figures if f.stage == s.stage), None)
    unresolved = figure is not None and figure.mark == UNRESOLVED
    return {
        "stage": s.stage,
        "title": s.title,
        "symbols": s.symbols,
        "calls": s.calls,
        "estimated_calls": est.to_json(),
        "calls_per_s": round(est.value / seconds, 3) if seconds else None,
        **latency_record(s.total_ns, s.calls, s.histogram),
        # as the text prints them: percentiles within the probes' doubt per call are withheld
        **({"percentiles_ns": None, "percentiles_withheld": "the probes' doubt per call is wider than their "
            "resolution"} if unresolved else {}),
        **mean.to_json(),
        "off_phase_cpu": burst_record(s, profile, mean),
        "share_of_window": round(share, 6) if share is not None else None,
        "raw": latency_record(s.raw_total_ns, s.calls, s.raw_histogram),
        "overhead_ns": s.overhead_ns,
        "cpu_waits": {"calls": s.cpu_wait_calls, "total_ns": s.cpu_wait_ns},
        "partition_source": s.partition_source,
        "partitions": [{"id": p.id, "calls": p.calls, **latency_record(p.total_ns, p.calls, p.histogram),
                        **partition_per_call(p, s, profile).to_json(),
                        "raw": latency_record(p.raw_total_ns, p.calls, p.raw_histogram)}
                       for _, p in sorted(s.partitions.items())],
    }


ROW_INSERT_STAGE = "innodb.row_insert"   # one call a row InnoDB inserts


def rows_inserted(profile: Profile) -> tuple[int | None, str]:
    """The rows the load inserted in the window, and where the figure comes
    from: the server's Innodb_rows_inserted, else the load's own count (the
    lab's driver), else the rows an index build scanned (its probes), else the calls of InnoDB's row insert (counted, or
    estimated for the window), else the rows the server changed (its
    Handler_* counters: a partitioned table's row passes Handler_write
    twice, so this comes last). Every figure per row divides by this one."""
    status = profile.perf_schema.server_status
    if status.get("Innodb_rows_inserted"):
        return int(status["Innodb_rows_inserted"]), "Innodb_rows_inserted"
    if profile.workload.rows:
        return int(profile.workload.rows), "the load's own count"
    scanned = index_rows_scanned(profile)
    if scanned:   # a build inserts no row: its figures are per row of the table it indexes
        return round(scanned), "rows the index build scanned"
    stage = next((s for s in profile.stages if s.stage == ROW_INSERT_STAGE and s.calls), None)
    if stage is not None:
        estimated = stage.cycle_calls is not None   # sampled: the window's calls from the duty cycles'
        return (round(estimated_calls(stage, profile).value),
                f"calls of {ROW_INSERT_STAGE}{', estimated for the window' if estimated else ''}")
    rows = profile.window.rows_changed
    return (int(rows), profile.window.rows_counter or "rows changed") if rows else (None, "")
