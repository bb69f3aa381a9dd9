"""The text report of an insert profile: a pure function of the Profile,
under 80 columns."""

from __future__ import annotations

from typing import Any

import textwrap

from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.consistency import CALLS, MEAN, PERCENTILES, TOTAL, Violation, report_lines, withheld
from mysqlprobe.analysis.headline import digest_headlines, headline, render as render_headline, slowdown_words
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.views import WITHHELD, Calibration, Overhead, Process, StageFigure
from mysqlprobe.analysis.per_call import SAMPLED_METHODS, PerCall, samples_to_resolve, window_total
from mysqlprobe.analysis.profile import (StageSummary, burst_figures, coverage, estimate_basis,
                                         estimated_calls, memory_counter, partition_per_call,
                                         row_cycles, stage_per_call, window_ns)
from mysqlprobe.analysis.ps_figures import quiet_scale
from mysqlprobe.analysis.textfit import fit as _fit, pct
from mysqlprobe.analysis.stacks_report import io_block, off_cpu_block, samples_block
from mysqlprobe.analysis.where_report import attribution_block, digest_block
from mysqlprobe.analysis.figures import _latencies, histogram_withheld, stage_figures, total_text, unresolved_note

fmt = H.format_ns


def _rate(calls: float, seconds: float) -> str:
    if not seconds:
        return "-"
    r = calls / seconds
    return f"{r / 1e6:.2f}M" if r >= 1e6 else f"{r / 1e3:.1f}k" if r >= 1e4 else f"{r:.0f}"


def header(profile: Profile) -> list[str]:
    t, w = profile.target, profile.window
    lines = [
        f"mysqlprobe {profile.subject} profile: {t.server}, PID {t.pid}",
        f"binary   {t.binary}",
        f"symbols  {t.symbols}",
        f"window   {w.start}, {w.duration_s:.2f}s (ended by {w.ended_by})",
        f"probes   {profile.engine.probes_attached} attached on {len(profile.probes)} functions"
        + _overhead(profile.overhead),
    ] + _overhead_lines(profile) + _latency_basis(profile.calibration) + _sampling_line(profile)
    return lines


def _costs(by_collector: dict[str, Any]) -> str:
    """What each collector measured itself to cost: in the target, and CPU of its own."""
    target = [f"{n} {fmt(c['target_s'] * 1e9)}" for n, c in by_collector.items() if c.get("target_s")]
    cpu = [f"{n} {fmt(c['cpu_s'] * 1e9)}" for n, c in by_collector.items() if c.get("cpu_s")]
    return "; ".join(part for part in (("in the target: " + ", ".join(target)) if target else "",
                                       ("CPU of their own: " + ", ".join(cpu)) if cpu else "") if part)


def _overhead_lines(profile: Profile) -> list[str]:
    """The slowdown the load felt, as the duty cycles measured it from the
    server's row rate with the collectors on and off, and each collector's
    own measure of its cost (captures of schema 1 have none)."""
    o = profile.overhead
    if profile.collector_costs is None:
        return []
    if o.slowdown_estimate is not None:
        first = slowdown_words(o).replace("the load ran", "load ran", 1) + _slowdown_basis(profile)
    elif not profile.sampled:
        first = "slowdown not measured: every call counted (--exact)"
    else:
        estimate = o.estimated_slowdown
        first = ("slowdown not measured (no row counter from the server)"
                 + (f"; the probes' calibrated cost alone: ~{estimate:.2f}x" if estimate else ""))
    costs = _costs(o.by_collector)
    parts = _slowdown_parts(profile)
    return _fit([f"overhead {first}"] + ([f"         {parts}"] if parts else [])
                + ([f"         {costs}"] if costs else []), indent=9)


def _slowdown_parts(profile: Profile) -> str:
    """The details of the slowdown: what the phases show, what the CPU
    mysqlprobe took in every phase adds, and the CPU sampler's own part."""
    o = profile.overhead
    out = []
    if o.standing_slowdown and o.phase_slowdown and o.standing_cpu_s is not None:
        out += [f"collectors on against off {o.phase_slowdown:.2f}x",
                f"mysqlprobe's CPU in every phase ({fmt(o.standing_cpu_s * 1e9)}) {o.standing_slowdown:.3f}x"]
    if o.measured_against in ("quiet", "quiet_tail") and o.always_on_slowdown and o.always_on_slowdown >= 1:
        out.append(f"CPU sampling {o.always_on_slowdown:.2f}x")
    return ("in parts: " + "; ".join(out)) if out else ""


def _slowdown_basis(profile: Profile) -> str:
    """What the measured slowdown compares: the load's row rate in the
    window against its rate in the quiet off-phases (nothing of ours on but
    the P_S setup) or, without them, in every off-phase."""
    o = profile.overhead
    sampled = profile.stacks["cpu_profile"].collected
    if o.measured_against in ("quiet", "quiet_tail"):
        halves = " (their second halves)" if o.measured_against == "quiet_tail" else ""
        ps_on = profile.perf_schema.collected and "perf_schema" not in profile.sampling.quieted
        basis = (f"its row rate in the window against its rate with the collectors off{halves}"
                 + ("; the Performance Schema setup stays on" if ps_on else ""))
    elif sampled:
        basis = "its row rate with the probes on and off; CPU sampling ran all along and is not in this figure"
    else:
        basis = "its row rate with the collectors on and off"
    return f" ({basis})"


def _overhead(o: Overhead) -> str:
    if not o.estimated_ns:
        return ""
    share = o.share_of_window
    return f"; cost ~{fmt(o.estimated_ns)}" + (f" ({pct(share)} of window)" if share is not None else "")


def _latency_basis(cal: Calibration) -> list[str]:
    if not cal.corrected:
        return ["latency  raw: includes the probes' own cost (run without --raw to correct)"]
    costs = ", ".join(f"{fmt(c.entry_ns + c.return_ns)} {k}" for k, c in sorted(cal.classes.items()))
    lines = [f"latency  corrected; probe cost per call {costs}"]
    factor = cal.in_situ_factor or 1.0   # None: not measured
    if factor != 1.0:
        lines.append(f"         in the on-phases the probes cost the load {factor:.2f}x their calibrated cost")
    return lines


def _count(n: float, estimated: bool) -> str:
    """Counted calls to the unit up to 10M; estimates to three figures."""
    if not estimated:
        return f"{n / 1e6:.1f}M" if n >= 1e7 else f"{n:.0f}"
    text = (f"{n / 1e6:.3g}M" if n >= 999_500 else f"{n / 1e3:.3g}k" if n >= 10_000
            else f"{n:.0f}")
    return "~" + text


def partition_figures(s: StageSummary, profile: Profile) -> list[dict[str, Any]]:
    total = sum(p.calls for p in s.partitions.values()) or 1
    out = []
    for pid, p in sorted(s.partitions.items()):
        pc = partition_per_call(p, s, profile)
        time_ns, bound = window_total(p.total_ns, pc, p.calls)
        out.append({"id": pid, "calls": p.calls, "share": p.calls / total, "total_ns": time_ns, "total_bound": bound,
                    **_latencies(pc, p.histogram.percentiles())})
    return out


def summary_table(profile: Profile) -> list[str]:
    violations = profile.consistency
    seconds = window_ns(profile) / 1e9
    sampled = profile.sampled
    lines = [f"{'stage':<30}{'calls':>7} {'calls/s':>7} {'total':>6} {'share':>6} "
             f"{'p50':>6} {'p90':>6} {'p99':>6}"]
    figures = profile.figures
    for f in figures:
        if not f.calls and not f.counted:
            continue  # on the one line below
        untimed = f.counted and f.p50 == "-"  # an entry-only probe: counted, not timed
        total, share = ("-", "-") if untimed else total_text(f.total_ns, f.share, f.total_bound)
        if withheld(violations, f.stage, TOTAL):
            total, share = WITHHELD, WITHHELD
        p50, p90, p99 = ((WITHHELD,) * 3 if withheld(violations, f.stage, PERCENTILES)
                         else (f.p50, f.p90, f.p99))
        calls, rate = ((WITHHELD, WITHHELD) if withheld(violations, f.stage, CALLS)
                       else (_count(f.calls, sampled), _rate(f.calls, seconds)))
        lines.append(f"{f.stage + f.mark:<30}{calls:>7} {rate:>7} "
                     f"{total:>6} {share:>6} {p50:>6} {p90:>6} {p99:>6}")
    return lines + idle_line(profile) + unresolved_note(f.mark for f in figures) + report_lines(violations)


def idle_line(profile: Profile) -> list[str]:
    """The stages no call reached in the window, on one line."""
    idle = [f.stage for f in profile.figures if not f.calls and not f.counted]
    return textwrap.wrap("not called in the window: " + ", ".join(idle), 80, subsequent_indent="  ") if idle else []


def _sampling_line(profile: Profile) -> list[str]:
    sampling = profile.sampling
    if not sampling.sampled:
        return []
    counter = memory_counter(profile.window)
    rows = f"by the counter {counter} in its memory" if counter else "by the server's rows changed"
    basis = {"rows": rows, "time": "by time"}[estimate_basis(profile) or "time"]
    # captures of schema 1 have no overhead line: the slowdown is said here
    measured = f", {slowdown_words(profile.overhead)}" if profile.collector_costs is None \
        and profile.overhead.slowdown_estimate is not None else ""
    # an interval comes from how calls vary between cycles: one cycle gives none
    interval = "95% intervals below" if sampling.cycles >= 2 else \
        "one cycle: its intervals are where its rows sit in their reads (a longer window narrows them)"
    misread = sampling.cycles - len(row_cycles(profile))
    left_out = ([f"         {misread} of {sampling.cycles} cycles left out of calls per row: the server's "
                 "row counter was read too far from their calls"] if misread else [])
    return [f"sampling probes on {pct(coverage(profile))} of the window ({sampling.cycles} cycles, budget "
            f"{pct(sampling.overhead_budget)}{measured})",
            f"         ~ = estimate scaled {basis}; {interval}"] + left_out


def partition_table(s: StageSummary, profile: Profile) -> list[str]:
    if not s.partitions:
        return []
    source = f"read at {s.partition_source}" if s.partition_source else "from the probed call chain"
    lines = [f"  per partition (partition id {source}):",
             f"  {'partition':>9}{'calls':>10}{'share':>8}{'total':>9}{'mean':>8}{'p50':>8}{'p99':>8}"]
    figures = partition_figures(s, profile)
    for f in figures:
        lines.append(f"  {str(f['id']) + f['mark']:>9}{f['calls']:>10}{pct(f['share']):>8}{_part_total(f):>9}"
                     f"{f['mean']:>8}{f['p50']:>8}{f['p99']:>8}")
    return lines + unresolved_note((f["mark"] for f in figures), "  ")


WIDE_INTERVAL = 0.25  # an estimate this uncertain (relative half-width) says how to do better


def estimate_line(s: StageSummary, profile: Profile, violations: list[Violation] | None = None) -> list[str]:
    """In sampled mode: the window's calls as estimated, with their interval."""
    if s.cycle_calls is None or not s.calls:
        return []
    est = estimated_calls(s, profile)
    if withheld(violations or [], s.stage, CALLS):
        return [f"  {WITHHELD} calls in the window: withheld (see above)"]
    if est.low is None:
        return [f"  ~{est.value:,.0f} calls in the window (no interval: one cycle saw them)"]
    high = est.high if est.high is not None else est.value
    half = (high - est.low) / 2 / est.value if est.value else 0.0
    lines = [f"  ~{est.value:,.0f} calls in the window, 95% interval {est.low:,.0f} to {est.high:,.0f} "
             f"(+-{100 * half:.0f}%)"]
    if half > WIDE_INTERVAL:
        lines += textwrap.wrap("few duty cycles, or cycles that disagree (a load that changed as it ran): a "
                               "longer window narrows it, --exact counts every call", 78,
                               initial_indent="  ", subsequent_indent="  ")
    return lines


def burst_line(s: StageSummary, profile: Profile, pc: PerCall) -> list[str]:
    """Where a mean came from CPU samples: how many, over how many calls;
    for a bound, how much longer a window would give a mean."""
    figures = burst_figures(s, profile)
    assert figures is not None   # a mean from CPU samples has them
    what = "CPU with its callees'" if figures.callees else "own CPU (callees left out)"
    rate = profile.cpu_bursts.frequency_hz
    # the CPU bursts' samples, not the flame graph's 'CPU samples': another sampler, at its own rate
    text = (f"the mean is the function's {what}: {figures.samples} samples of the CPU bursts"
            f"{f' ({rate:g} Hz)' if rate else ''} over ~{figures.calls.value:,.0f} calls, taken with the probes off")
    if not pc.resolved:
        text += "; " + resolve_hint(figures.samples, samples_to_resolve(figures.calls), profile.window.duration_s)
    return textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="  ")


def resolve_hint(samples: int, needed: int | None, window_s: float) -> str:
    """What would turn a bound from CPU samples into a mean: the samples grow
    with the window (the bursts are a share of it)."""
    if needed is None:
        return "the calls' own doubt keeps it a bound"
    if not samples:
        return f"about {needed} samples would give a mean"
    longer = max(needed / samples, 1.0)
    return f"about {needed} would give a mean: a window of about {H.upper_ns(window_s * longer * 1e9)}"


def cpu_wait_line(s: StageSummary) -> list[str]:
    """The calls that waited for a CPU: their waits are not in the times shown."""
    if not s.cpu_wait_calls:
        return []
    return textwrap.wrap(f"{s.cpu_wait_calls} of the calls waited for a CPU ({fmt(s.cpu_wait_ns)} in all, "
                         "runnable but switched out): left out of these times", 78,
                         initial_indent="  ", subsequent_indent="  ")


def _interval(pc: PerCall) -> str:
    if pc.low_ns is None:
        return ""
    if not pc.resolved:
        return " (95% interval: at most that)"
    return f" (95% interval {fmt(pc.low_ns)} to {fmt(pc.high_ns)})"


def _part_total(f: dict[str, Any]) -> str:
    return total_text(f["total_ns"], f["share"], f["total_bound"])[0]


def _total(f: StageFigure) -> str:
    return total_text(f.total_ns, f.share, f.total_bound)[0]


def stage_detail(s: StageSummary, profile: Profile, violations: list[Violation] | None = None) -> list[str]:
    lines = _fit([f"{s.stage}: {s.title}"])
    lines += [f"  {sym}" for sym in s.symbols]
    pc = stage_per_call(s, profile)
    mean = WITHHELD + " (withheld, see above)" if withheld(violations or [], s.stage, MEAN) else pc.text() + _interval(pc)
    # the total the stage table prints: one value for one figure
    total = WITHHELD if withheld(violations or [], s.stage, TOTAL) else _total(stage_figures([s], profile)[0])
    counted = s.cycle_calls is not None   # sampled: the calls the probes saw; the total is the window's
    lines += textwrap.wrap(f"calls {s.calls}{' counted' if counted else ''}, total"
                           f"{' in the window ~' if counted and total != WITHHELD else ' '}{total}, mean {mean}", 78,
                           initial_indent="  ", subsequent_indent="  ")
    if pc.method in SAMPLED_METHODS:
        lines += burst_line(s, profile, pc)
    lines += cpu_wait_line(s)
    lines += estimate_line(s, profile, violations)
    # the corrected latencies the percentiles came from: where they are withheld, no distribution to draw either
    why = histogram_withheld(s, profile)
    lines += [f"  histogram: {WITHHELD} ({why})"] if why else H.render_ascii(s.histogram)
    lines += partition_table(s, profile)
    return lines


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def process_block(p: Process) -> list[str]:
    """mysqld and the host over the window (/proc: the capture's process section)."""
    return _fit([f"{label:<9}{value}" for label, value in process_facts(p)], indent=9)


def process_facts(p: Process) -> list[tuple[str, str]]:
    """(label, figures) of mysqld and the host over the window; a label of '' goes on from the line before."""
    if not p.recorded:
        return []
    def share(k: str) -> str:
        value = p.host_cpu_share.get(k)
        return pct(value) if value is not None else "-"
    facts = [("process", f"CPU user {p.cpu_user_s:.2f}s system {p.cpu_system_s:.2f}s "
                         f"({p.cpu_cores:.2f} cores); {p.threads} threads, RSS {_bytes(p.rss_bytes)}"),
             ("", f"context switches {p.voluntary_switches} voluntary, "
                  f"{p.involuntary_switches} involuntary; I/O read {_bytes(p.read_bytes)}, "
                  f"write {_bytes(p.write_bytes)}"),
             ("host", f"user {share('user')}, system {share('system')}, iowait {share('iowait')}, "
                      f"steal {share('steal')}, idle {share('idle')}")]
    if p.busiest:
        facts.append(("busiest", ", ".join(f"{tid} {name} {cpu_s:.2f}s" for tid, name, cpu_s in p.busiest[:3])))
    return facts


def perf_schema_block(profile: Profile) -> list[str]:
    facts = perf_schema_facts(profile)
    if not facts:
        return []
    (_, source), rest = facts[0], facts[1:]
    return _fit(["", f"Performance Schema ({source})"]
                + [f"  {label}: {value}" if label else f"  {value}" for label, value in rest])


def perf_schema_facts(profile: Profile) -> list[tuple[str, str]]:
    """(label, figures) of Performance Schema over the window: its source first."""
    ps = profile.perf_schema
    if not ps.collected:
        return []
    d = profile.ps_summaries
    facts = [("Performance Schema", f"{ps.connection}, {len(ps.statements)} statements in the window")]
    for title, key in (("stages", "stages"), ("waits", "waits")):
        top = [r for r in d.get(key, []) if not r["name"].startswith("idle")][:4]
        if top:
            facts.append((f"top {title}", ", ".join(f"{r['name'].split('/')[-1]} {fmt(r['timer_ps'] / 1000)}"
                                                    for r in top)))
    scale = quiet_scale(ps, profile.window, profile.sampling)
    if scale is not None:
        facts.append(("", f"the {len(ps.quieted_instruments)} instruments mysqlprobe turned on were off in the "
                          f"quiet phases (so their cost is in the measured slowdown): their figures x{scale:.2f} "
                          "for the whole window"))
    status = d.get("status") or {}
    if status:
        facts.append(("status", ", ".join(f"{k} +{v}" for k, v in sorted(status.items()) if v)))
    return facts


GLOSSARY = ("marks: ~ estimated for the whole window from the part of the time the probes were on; * percentiles "
            "withheld: the probes' cost per call is too uncertain for them; < at most this (its interval is wider "
            "than the value); ? not shown: it could not be true (the lines above say why)")


MECHANISM_SHOWN = 0.02   # a build's mechanisms below this share are summed as the rest


def index_block(profile: Profile) -> list[str]:
    """The window's index build: its counts and its phases (--index-profile)."""
    b = profile.index_build
    if b is None:
        return []

    def n(x: float | None) -> str:
        return "not seen" if x is None else f"{x:,.0f}"

    wall = f", {b.wall_ns / 1e9:.3f}s" if b.wall_ns else ""
    seen = f"{n(b.builds)} index(es)" if b.builds is not None else "seen in the stacks, not probed"
    lines = ["", f"index build, {b.method or 'insert method not seen'}: {seen}{wall}",
             f"  rows scanned {n(b.rows_scanned)}, tuples inserted {n(b.tuples_inserted)}"
             + (f", node pointers {n(b.node_pointers)}, pages {n(b.pages)}" if b.pages is not None else "")]
    if b.runs is not None:
        passes = "" if b.merge_passes is None else f", {b.merge_passes} merge pass(es)"
        blocks = ", ".join(f"{v:,.0f} in the {k}" for k, v in b.blocks_written.items())
        if blocks and b.block_bytes:
            blocks += f" ({b.block_bytes / 2 ** 20:g} MiB each: innodb_sort_buffer_size)"
        lines.append(f"  sort runs {n(b.runs)}{passes}" + (f"; blocks written {blocks}" if blocks else ""))
    if b.compressions or b.server_compressions:
        server = ("" if b.server_compressions is None else
                  f"InnoDB's count over the window: {b.server_compressions:,}, {b.compression_failures:,} did not fit "
                  "and were compressed again")
        lines.append(f"  pages compressed ({server})" if b.compressions is None else
                     f"  pages compressed {n(b.compressions)}" + (f" ({server})" if server else ""))
    if b.phases:
        lines += textwrap.wrap(f"share of the build's wall time, from {b.share_source}:", 80,
                               initial_indent="  ", subsequent_indent="    ")
        lines.append(f"  {'phase':<36}{'share':>7}{'ns/row':>9}")
        for ph in b.phases:
            share = "-" if ph.share is None else f"{ph.share:.1%}"
            per_row = "-" if ph.ns_per_row is None else f"{ph.ns_per_row:,.0f}"
            lines.append(f"  {ph.name:<36}{share:>7}{per_row:>9}")
    if b.mechanisms:
        shown = [f"{name} {share:.0%}" for name, share in b.mechanisms if share >= MECHANISM_SHOWN]
        rest = sum(share for _, share in b.mechanisms if share < MECHANISM_SHOWN)
        lines += textwrap.wrap("by mechanism: " + ", ".join(shown + ([f"the rest {rest:.0%}"] if rest else [])),
                               80, initial_indent="  ", subsequent_indent="    ")
    if b.progress and b.progress.source:
        seen = ", ".join(f"{s.stage} {s.max_percent:.0f}%" for s in b.progress.stages) or "no build under way at a read"
        whose = (f"progress from the probes ({b.progress.reads} reads; the server reports none)"
                 if b.progress.source == "probes" else f"the server's progress ({b.progress.source}, "
                 f"{b.progress.reads} reads)")
        lines.append(f"  {whose}: {seen}")
    lines += [f"  note: {note}" for note in b.notes]
    return lines


def render_text(profile: Profile) -> str:
    doc, stages = profile.doc, profile.stages
    out = render_headline(headline(profile), digest_headlines(profile)) + [""] + header(profile) + [""]
    out += summary_table(profile)
    out.append("share: time in the stage / window length (above 100% with several threads)")
    out += textwrap.wrap(GLOSSARY, 80, subsequent_indent="  ")
    out += index_block(profile)
    block = process_block(profile.process)
    if block:
        out += [""] + block
    out += perf_schema_block(profile)
    out += attribution_block(profile)
    out += digest_block(profile)
    window_s = profile.window.duration_s
    out += samples_block(profile.cpu_summary, window_s)
    out += off_cpu_block(profile.off_cpu_summary, window_s)
    out += io_block(profile.io_summary, window_s)
    for s in stages:
        if s.calls:
            out += [""] + stage_detail(s, profile, profile.consistency)
    notes = []
    for u in doc.get("unavailable", []):
        notes.append(f"unavailable: {u['stage']}: {u['reason']}")
    counters = profile.engine.counters
    odd = {k: v for k, v in counters.items() if k not in ("entries", "returns") and v}
    if odd:
        notes.append("engine: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in odd.items()))
    notes += [f"warning: {w}" for w in profile.warnings]
    if notes:
        out.append("")
    for note in notes:
        out += textwrap.wrap(note, 80, subsequent_indent="  ")
    return "\n".join(out) + "\n"
