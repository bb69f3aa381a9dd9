"""The text report's blocks of stacks: where the CPU went (CPU samples),
where the threads waited (off-CPU) and the I/O system calls."""

from __future__ import annotations

from typing import Any, Iterable

import textwrap

from mysqlprobe.analysis.histogram import format_ns as fmt
from mysqlprobe.analysis.textfit import pct, size

ASYNC_COMPLETIONS = "(async completions)"   # io_getevents: AIO threads waiting, not a file's I/O

def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def _sampler(perf: dict[str, Any]) -> str:
    return "its BPF program" if perf.get("sampler") == "bpf" else "perf"


def samples_block(perf: dict[str, Any], window_s: float, top: int = 10) -> list[str]:
    """Where the CPU went by the CPU samples (the capture's cpu_profile
    section): per thread, and the functions most often on CPU themselves
    (self) or below on the stack (total)."""
    if perf.get("status") != "collected":
        return []
    n = perf["samples"]
    cost = perf.get("perf_cpu_share")
    lines = [""] + textwrap.wrap(f"CPU samples: {n} ({perf['event']} {perf['frequency_hz']} Hz, "
                                 f"{perf['unwinding']['describe']}"
                                 + (f"; {_sampler(perf)} used {pct(cost)} of a CPU)" if cost is not None else ")")
                                 + _on_phases(perf, window_s), 80, subsequent_indent="  ")
    if not n:
        return lines
    lines += _threads_line(f"{t['thread']} {pct(t['samples'] / n)}" for t in perf["threads"][:4])
    lines.append(f"  {'self':>6} {'total':>6}  function")
    for r in perf["top_self"][:top]:
        lines.append(f"  {pct(r['share']):>6} {pct(r.get('total_share')):>6}  {_clip(r['function'], 62)}")
    if perf.get("stacks_file"):
        lines.append(f"  folded stacks: {perf['stacks_file']} (flamegraph.svg, report.html)")
    return lines


def _on_phases(section: dict[str, Any], window: float) -> str:
    """Sampled mode: a collector that ran with the probes saw the on-phases
    only; one quieted saw all but the quiet phases."""
    on, quiet = section.get("on_s"), section.get("quiet_s")
    if not window:
        return ""
    if on is not None:
        return f", taken in the on-phases ({pct(on / window)} of the window)"
    return f", off in the quiet phases ({pct(quiet / window)} of the window)" if quiet else ""


def _threads_line(items: Iterable[str]) -> list[str]:
    return textwrap.wrap("threads: " + ", ".join(items), 80, subsequent_indent="  ")


def off_cpu_block(off: dict[str, Any], window: float, top: int = 8) -> list[str]:
    """Where the threads waited (the capture's off_cpu section): blocked
    (I/O, locks, sleeps) and runnable without a CPU, per thread, and the
    functions they waited in."""
    if off.get("status") != "collected":
        return []
    total = sum(t["us"] for t in off["threads"]) or 1
    load = off.get("load_us")
    if load is None:   # a capture from before load_us: the connection threads by name
        load = sum(t["us"] for t in off["threads"] if "one_connection" in t["thread"])
    # the load's threads first: the background threads' idle waits are no part of the statements' time
    every = (f"blocked {fmt(off['blocked_s'] * 1e9)}, waiting for a CPU {fmt(off['waiting_for_cpu_s'] * 1e9)}"
             f"{'' if load else ' over all threads'}, {off['switches']} switches (window {window:.2f}s)")
    text = (f"off-CPU of the load's threads (client connections): {fmt(load * 1e3)}; all threads: {every}, the "
            "rest the server's background threads, idle or waiting on their own (offcpu.svg shows the load's "
            "threads)" if load else f"off-CPU: {every}")
    lines = [""] + textwrap.wrap(text + _on_phases(off, window), 80, subsequent_indent="  ")
    if off["threads"]:
        lines += _threads_line(f"{t['thread']} {fmt(t['us'] * 1e3)}" for t in off["threads"][:4])
        lines.append(f"  {'time':>7} {'share':>6}  waiting in (all threads)")
        for r in off["top_self"][:top]:
            lines.append(f"  {fmt(r['us'] * 1e3):>7} {pct(r['us'] / total):>6}  {_clip(r['function'], 61)}")
    if off.get("dropped"):
        lines.append("  incomplete: " + ", ".join(f"{k} ({v})" for k, v in off["dropped"].items()))
    if off.get("stacks_file"):
        lines.append(f"  folded stacks (us): {off['stacks_file']} (offcpu.svg, report.html)")
    return lines


def io_block(io: dict[str, Any], window_s: float, top: int = 8) -> list[str]:
    """The I/O system calls of the load's threads (the client connections),
    where the capture holds them apart: how many, how much and how long, per
    call and for the files that took the most time; all threads' totals beside."""
    if io.get("status") != "collected":
        return []
    scoped = io.get("load") if (io.get("load") or {}).get("calls") else None   # none: all threads, as before
    shown = scoped if scoped is not None else io
    waits = [f for f in shown["by_file"] if f["file"] == ASYNC_COMPLETIONS]
    waited = f" ({fmt(waits[0]['s'] * 1e9)} of it waiting for async completions)" if waits else ""
    whose = "of the load's threads (client connections)" if scoped is not None else ""
    lines = [""] + textwrap.wrap(
        f"I/O system calls{' ' + whose if whose else ''}: {shown['calls']} calls, {size(shown['bytes'])}, "
        f"{fmt(shown['s'] * 1e9)} in them{'' if whose else ' over all threads'}{waited}"
        + (f", {shown['errors']} failed" if shown["errors"] else "")
        + (f"; all threads: {io['calls']} calls, {size(io['bytes'])}, {fmt(io['s'] * 1e9)}, the rest the server's "
           "background threads (io.svg shows the load's threads)" if scoped is not None else "")
        + _on_phases(io, window_s), 80, subsequent_indent="  ")
    if shown["by_call"]:
        lines += textwrap.wrap("calls: " + ", ".join(
            f"{c['call']} {c['calls']}" + (f" {size(c['bytes'])}" if c["bytes"] else "") + f" {fmt(c['s'] * 1e9)}"
            for c in shown["by_call"][:6]), 80, initial_indent="  ", subsequent_indent="    ")
        lines.append(f"  {'time':>7} {'calls':>8} {'read':>9} {'written':>9} {'syncs':>6}  file")
        for f in [f for f in shown["by_file"] if f["file"] != ASYNC_COMPLETIONS][:top]:
            lines.append(f"  {fmt(f['s'] * 1e9):>7} {f['calls']:>8} {size(f['read_bytes']):>9} "
                         f"{size(f['write_bytes']):>9} {f['syncs']:>6}  {_clip(f['file'], 36)}")
    if io.get("dropped"):
        lines.append("  incomplete: " + ", ".join(f"{k} ({v})" for k, v in io["dropped"].items()))
    if io.get("stacks_file"):
        lines.append(f"  folded stacks: {io['stacks_file']} (us), {io.get('bytes_file', '-')} (bytes), "
                     f"{io.get('calls_file', '-')} (calls); io.svg, report.html")
    return lines
