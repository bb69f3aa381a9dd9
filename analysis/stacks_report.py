"""The text report's blocks of stacks: where the CPU went (CPU samples),
where the threads waited (off-CPU) and the I/O system calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import textwrap

from mysqlprobe.analysis.histogram import format_ns as fmt
from mysqlprobe.analysis.stack_summaries import CpuSummary, IoSummary, OffCpuSummary
from mysqlprobe.analysis.textfit import pct, size
from mysqlprobe.analysis.views import StackSection

ASYNC_COMPLETIONS = "(async completions)"   # io_getevents: AIO threads waiting, not a file's I/O

def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


@dataclass(frozen=True, slots=True)
class Block:
    """One block of the report, as the text and the HTML page both draw it:
    sentences, indented details, a table (numbers, then a name), notes."""

    lead: tuple[str, ...]                        # sentences: wrapped to 80 columns in the text
    details: tuple[str, ...] = ()                # indented under them
    header: tuple[str, ...] = ()                 # the table's columns: numbers right-aligned, then the name
    widths: tuple[int, ...] = ()                 # the numbers' widths in the text
    rows: tuple[tuple[str, ...], ...] = ()
    clip: int = 62                               # the name's width in the text (whole on the page)
    notes: tuple[str, ...] = ()                  # lines after the table

    def lines(self) -> list[str]:
        """The text report's lines: a blank line first."""
        out = [""]
        for sentence in self.lead:
            out += textwrap.wrap(sentence, 80, subsequent_indent="  ")
        for detail in self.details:
            out += textwrap.wrap(detail, 80, initial_indent="  ", subsequent_indent="    ")
        if self.header:
            def row(cells: tuple[str, ...], clip: bool) -> str:
                numbers = " ".join(f"{c:>{w}}" for c, w in zip(cells, self.widths))
                return f"  {numbers}  {_clip(cells[-1], self.clip) if clip else cells[-1]}"
            out.append(row(self.header, False))
            out += [row(r, True) for r in self.rows]
        return out + ["  " + n for n in self.notes]


def samples_block(perf: CpuSummary, window_s: float, top: int = 10) -> list[str]:
    b = samples(perf, window_s, top)
    return b.lines() if b else []


def samples(perf: CpuSummary, window_s: float, top: int = 10) -> Block | None:
    """Where the CPU went by the CPU samples (the capture's cpu_profile
    section): per thread, and the functions most often on CPU themselves
    (self) or below on the stack (total)."""
    if not perf.collected:
        return None
    n = perf.samples
    sampler = "its BPF program" if perf.sampler == "bpf" else "perf"
    lead = (f"CPU samples: {n} ({perf.event} {perf.section.frequency_hz} Hz, {perf.unwinding}"
            + (f"; {sampler} used {pct(perf.cpu_share)} of a CPU)" if perf.cpu_share is not None else ")")
            + _on_phases(perf.section, window_s))
    if not n:
        return Block((lead,))
    return Block((lead, _threads(f"{thread} {pct(count / n)}" for thread, count in perf.threads[:4])),
                 header=("self", "total", "function"), widths=(6, 6),
                 rows=tuple((pct(r.share), pct(r.total_share), r.function) for r in perf.top_self[:top]),
                 notes=(f"folded stacks: {perf.stacks_file} (flamegraph.svg, report.html)",)
                 if perf.stacks_file else ())


def _on_phases(seen: StackSection, window: float) -> str:
    """Sampled mode: a collector that ran with the probes saw the on-phases
    only; one quieted saw all but the quiet phases."""
    if not window:
        return ""
    if seen.on_s is not None:
        return f", taken in the on-phases ({pct(seen.on_s / window)} of the window)"
    return f", off in the quiet phases ({pct(seen.quiet_s / window)} of the window)" if seen.quiet_s else ""


def _threads(items: Iterable[str]) -> str:
    return "threads: " + ", ".join(items)


def _incomplete(dropped: tuple[tuple[str, int], ...]) -> list[str]:
    return ["incomplete: " + ", ".join(f"{k} ({v})" for k, v in dropped)] if dropped else []


def off_cpu_block(off: OffCpuSummary, window: float, top: int = 8) -> list[str]:
    b = off_cpu(off, window, top)
    return b.lines() if b else []


def off_cpu(off: OffCpuSummary, window: float, top: int = 8) -> Block | None:
    """Where the threads waited (the capture's off_cpu section): blocked
    (I/O, locks, sleeps) and runnable without a CPU, per thread, and the
    functions they waited in."""
    if not off.collected:
        return None
    total = sum(us for _, us in off.threads) or 1
    load = off.load_us
    if load is None:   # a capture from before load_us: the connection threads by name
        load = sum(us for thread, us in off.threads if "one_connection" in thread)
    # the load's threads first: the background threads' idle waits are no part of the statements' time
    every = (f"blocked {fmt(off.blocked_s * 1e9)}, waiting for a CPU {fmt(off.waiting_for_cpu_s * 1e9)}"
             f"{'' if load else ' over all threads'}, {off.switches} switches (window {window:.2f}s)")
    text = (f"off-CPU of the load's threads (client connections): {fmt(load * 1e3)}; all threads: {every}, the "
            "rest the server's background threads, idle or waiting on their own (offcpu.svg shows the load's "
            "threads)" if load else f"off-CPU: {every}")
    notes = _incomplete(off.dropped) + ([f"folded stacks (us): {off.stacks_file} (offcpu.svg, report.html)"]
                                        if off.stacks_file else [])
    if not off.threads:
        return Block((text + _on_phases(off.section, window),), notes=tuple(notes))
    return Block((text + _on_phases(off.section, window), _threads(f"{thread} {fmt(us * 1e3)}"
                                                                for thread, us in off.threads[:4])),
                 header=("time", "share", "waiting in (all threads)"), widths=(7, 6), clip=61,
                 rows=tuple((fmt(us * 1e3), pct(us / total), function) for function, us in off.top_self[:top]),
                 notes=tuple(notes))


def io_block(io: IoSummary, window_s: float, top: int = 8) -> list[str]:
    b = io_calls(io, window_s, top)
    return b.lines() if b else []


def io_calls(io: IoSummary, window_s: float, top: int = 8) -> Block | None:
    """The I/O system calls of the load's threads (the client connections),
    where the capture holds them apart: how many, how much and how long, per
    call and for the files that took the most time; all threads' totals beside."""
    if not io.collected:
        return None
    scoped = io.load if io.load is not None and io.load.calls else None   # none: all threads, as before
    shown = scoped if scoped is not None else io.every
    waits = [f for f in shown.by_file if f.file == ASYNC_COMPLETIONS]
    waited = f" ({fmt(waits[0].s * 1e9)} of it waiting for async completions)" if waits else ""
    whose = "of the load's threads (client connections)" if scoped is not None else ""
    every = io.every
    lead = (f"I/O system calls{' ' + whose if whose else ''}: {shown.calls} calls, {size(shown.bytes)}, "
            f"{fmt(shown.s * 1e9)} in them{'' if whose else ' over all threads'}{waited}"
            + (f", {shown.errors} failed" if shown.errors else "")
            + (f"; all threads: {every.calls} calls, {size(every.bytes)}, {fmt(every.s * 1e9)}, the rest the "
               "server's background threads (io.svg shows the load's threads)" if scoped is not None else "")
            + _on_phases(io.section, window_s))
    notes = _incomplete(io.dropped) + ([f"folded stacks: {io.stacks_file} (us), {io.bytes_file or '-'} (bytes), "
                                        f"{io.calls_file or '-'} (calls); io.svg, report.html"]
                                       if io.stacks_file else [])
    if not shown.by_call:
        return Block((lead,), notes=tuple(notes))
    calls = "calls: " + ", ".join(f"{c.call} {c.calls}" + (f" {size(c.bytes)}" if c.bytes else "")
                                  + f" {fmt(c.s * 1e9)}" for c in shown.by_call[:6])
    return Block((lead,), (calls,), ("time", "calls", "read", "written", "syncs", "file"), (7, 8, 9, 9, 6),
                 tuple((fmt(f.s * 1e9), str(f.calls), size(f.read_bytes), size(f.write_bytes), str(f.syncs), f.file)
                       for f in [f for f in shown.by_file if f.file != ASYNC_COMPLETIONS][:top]),
                 clip=36, notes=tuple(notes))
