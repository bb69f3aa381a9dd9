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


# the instruments whose time is spent in the load's threads: none of it is more than threads x window
THREAD_TIMED = ("stages", "thread_stages", "digests")


def ps_deltas(ps: PerfSchema, window: Window, sampling: Sampling, threads: int | None = None) -> dict[str, Any]:
    """perf_schema.deltas with the quieted instruments' rows scaled to the
    whole window (each such row gains `scaled_by`). A stage or statement
    that ran across the quiet phases is summed whole when it ends, so the
    scale could take it past what its threads had: a time scaled to more
    than threads x the window keeps what P_S measured (`scaled_by` null,
    `not_scaled` says why)."""
    deltas = ps.deltas
    scale = quiet_scale(ps, window, sampling)
    if scale is None:
        return deltas
    instruments = set(ps.quieted_instruments)
    prefixes = {p for n in instruments for p in (n.split("/")[0] + "/", "/".join(n.split("/")[:3]) + "/")}
    window_ps = window.duration_s * 1e12
    # the threads that ran each stage, where its events were kept; a thread's own row is one thread's
    ran: dict[str, set[int]] = {}
    for e in ps.stages:
        ran.setdefault(e.event_name, set()).add(e.thread_id)

    def limit_ps(kind: str, name: str) -> float:
        n = 1 if kind == "thread_stages" else len(ran.get(name, ())) or threads or 0
        return n * window_ps
    out = {}
    for kind, rows in deltas.items():
        if kind == "status":
            out[kind] = rows
            continue
        scaled = []
        for r in rows:
            if not _quieted(kind, r["name"], instruments, prefixes):
                scaled.append(r)
            elif kind in THREAD_TIMED and 0 < limit_ps(kind, r["name"]) < (r.get("timer_ps") or 0) * scale:
                scaled.append({**r, "scaled_by": None,
                               "not_scaled": f"scaled by {scale:.3g} it would take more than its threads had "
                                             "in the window: as P_S measured it"})
            else:
                scaled.append({**r, **{c: round(r[c] * scale) for c in SCALED_COLUMNS if r.get(c) is not None},
                               "scaled_by": round(scale, 4)})
        out[kind] = scaled
    return out
