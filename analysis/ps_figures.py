"""The Performance Schema summaries of a capture, for the whole window.

The stage and wait instruments and consumers mysqlprobe turns on for a
window are off again in the duty cycles' quiet phases (perf_schema.quieted;
the statements' stay on, and so do their digests), so that those
phases show the load's speed without any of mysqlprobe's cost. The
summaries of those instruments then cover the other phases only; they are
scaled here to the window by its rows (the server's rows changed) over the
rows outside the quiet phases, or by the time where rows are unknown.
Summaries of instruments that were on before the window stayed on all
along and are left as they are."""

from __future__ import annotations

from typing import Any

from mysqlprobe.analysis.views import PerfSchema, Sampling, Window

SCALED_COLUMNS = ("count", "timer_ps", "bytes_read", "bytes_written", "writes", "write_timer_ps",
                  "rows_affected", "rows_examined")


def quiet_scale(ps: PerfSchema, window: Window, sampling: Sampling) -> float | None:
    """What the summaries of quieted instruments are multiplied by to stand
    for the whole window; None where nothing was quieted."""
    if not ps.quieted_instruments:
        return None
    rows, quiet_rows = summaries_rows(ps, window), sampling.phase("quiet")[0]
    if rows and quiet_rows is not None and 0 <= quiet_rows < rows:
        return float(rows / (rows - quiet_rows))
    seconds, quiet_s = window.duration_s, ps.quiet_s
    return seconds / (seconds - quiet_s) if 0 <= quiet_s < seconds else None


def summaries_rows(ps: PerfSchema, window: Window) -> int | None:
    """The rows the server changed while the summaries were read: from
    before the window opened to after it closed, a little longer than the
    window, less the setup rows mysqlprobe itself changed (the window's own
    count where the capture lacks that)."""
    status = ps.server_status
    counters = (window.rows_counter or "").split("+")  # as the duty cycles count rows
    if all(status.get(n) is not None for n in counters):
        return int(sum(status[n] for n in counters) - ps.own_rows_changed)
    return window.rows_changed


def _quieted(kind: str, key: str, instruments: set[str], prefixes: set[str]) -> bool:
    """Whether a summary row's counts stopped in the quiet phases."""
    if kind in ("stages", "waits", "files"):
        return key in instruments
    if kind == "thread_stages":
        return key.split(" ", 1)[-1] in instruments
    if kind == "tables":
        return "wait/io/table/" in prefixes
    if kind == "digests":
        return "statement/" in prefixes
    return False


def ps_deltas(ps: PerfSchema, window: Window, sampling: Sampling) -> dict[str, Any]:
    """perf_schema.deltas with the quieted instruments' rows scaled to the
    whole window (each such row gains `scaled_by`)."""
    deltas = ps.deltas
    scale = quiet_scale(ps, window, sampling)
    if scale is None:
        return deltas
    instruments = set(ps.quieted_instruments)
    prefixes = {p for n in instruments for p in (n.split("/")[0] + "/", "/".join(n.split("/")[:3]) + "/")}
    out = {}
    for kind, rows in deltas.items():
        if kind == "status":
            out[kind] = rows
            continue
        out[kind] = [{**r, **{c: round(r[c] * scale) for c in SCALED_COLUMNS if r.get(c) is not None},
                      "scaled_by": round(scale, 4)}
                     if _quieted(kind, r["name"], instruments, prefixes) else r for r in rows]
    return out
