"""The window as time went: the load's rows per second in each duty-cycle
phase (probes on, off, or off with the other collectors quiet), and the
main stage's mean per call in each on-phase. Sampled mode only: with every
call counted there is one phase."""

from __future__ import annotations

from dataclasses import dataclass

from mysqlprobe.analysis.consistency import callers_of
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.profile import sampled_cycles

ON, OFF, QUIET = "on", "off", "quiet"
ROOT_PREFIX = "sql."   # the statement and its P_S stages hold the others: not the main stage


@dataclass(frozen=True)
class Phase:
    start_s: float
    seconds: float
    rows: int | None
    kind: str              # ON, OFF or QUIET

    @property
    def rows_per_s(self) -> float | None:
        return self.rows / self.seconds if self.rows is not None and self.seconds > 0 else None


@dataclass(frozen=True)
class Timeline:
    window_s: float
    phases: list[Phase]
    stage: str | None                        # whose latency is drawn
    latency: list[tuple[float, float, float]]  # (start_s, seconds, mean ns per call) per on-phase


def timeline(profile: Profile) -> Timeline | None:
    """From the capture's duty cycles; None in exact mode or without cycles."""
    stage, cycles = main_stage(profile), sampled_cycles(profile)
    if not cycles or any(c.at_s is None for c in cycles):   # captures from before cycles were timed
        return None
    phases, latency = [], []
    columns = [j for j, p in enumerate(profile.probes) if stage and p.stage == stage]
    per = inserted_per_counted(profile)

    def inserted(rows: float | None) -> int | None:
        return None if rows is None else round(rows * per)
    for c in cycles:
        at_s = c.at_s or 0.0
        # the rows were read over row_s inside the on-phase: their rate stands for it
        on_rows = c.rows * c.on_s / c.row_s if c.rows is not None and c.row_s else None
        phases.append(Phase(at_s, c.on_s, inserted(on_rows), ON))
        phases += [Phase(off.at_s, off.s, inserted(off.rows), QUIET if off.quiet else OFF) for off in c.off]
        if columns and c.ns is not None:
            calls = sum(c.calls[j] for j in columns)
            if calls:
                latency.append((at_s, c.on_s, sum(c.ns[j] for j in columns) / calls))
    return Timeline(profile.window.duration_s, phases, stage if latency else None, latency)


def inserted_per_counted(profile: Profile) -> float:
    """Rows inserted per row the duty cycles counted: they read the server's
    Handler_write (+ update, delete), which a partitioned table's row passes
    twice (the partitioning handler's and its partition's); the timeline's
    rows are the rows inserted (profile.rows_inserted), as every other figure's."""
    inserted, _ = profile.rows_inserted
    counted = profile.window.rows_changed
    if inserted and counted and not (profile.window.rows_counter or "").startswith("memory:"):
        return float(inserted / counted)
    return 1.0


def main_stage(profile: Profile) -> str | None:
    """The outermost stage below the statement (not nested in another probed
    stage) with the most time: the row's way in, whose latency per call
    holds the others'."""
    nested = {child for child, (parent, _) in callers_of(profile.probes).items() if not parent.startswith(ROOT_PREFIX)}
    inner = [f for f in profile.figures if f.calls and f.total_ns and not f.stage.startswith(ROOT_PREFIX)
             and f.stage not in nested]
    return max(inner, key=lambda f: f.total_ns).stage if inner else None
