"""Duty cycles: the probes on for short phases, off long enough that the
load slows down by at most the budget, paced on the server's own progress
(rows changed) read inside each on-phase."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from mysqlprobe.collectors.uprobes.calibration import Calibration
    from mysqlprobe.collectors.uprobes.session import ProbeSpec

import math
import time

from mysqlprobe.collectors.uprobes.calibration import CalibrationCollector
from mysqlprobe.errors import BpfError
from mysqlprobe.recorder.pacing import Pacer, in_situ_factor, paired_lead
from mysqlprobe.recorder.reads import TIGHT_READ_S, rows_and_calls
from mysqlprobe.collectors.kernel.process import alive
from mysqlprobe.recorder.window import Window
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

ON_PHASE_S = 0.05    # probes on, per duty cycle
MAX_OFF_S = 2.0      # longest gap between two on-phases
MIN_ON_S = 0.01
MEASURE_OFF_S = 0.1  # probes off, to learn the load's speed before pacing on it
# CPU sampling at most this long in one off-phase, the rest of it unsampled:
# a burst slows the load (4999 Hz: about 1.12x) and the pacer does not count it (a
# first cycle slowed by its attach once asked for 5.6 s off, all of it sampled)
BURST_MAX_S = 1.0
ORDINARY_FIRST_S = 0.5  # seconds of ordinary off-phases the load ran in, before any quiet one
MIN_SPLIT_S = 0.25      # the least of each part of an ordinary off-phase split into ordinary and quiet
# probes slow a load down a few times at most (--exact: 4.5x on the seed load); an
# on-phase whose rows came this many times slower than the off-phase's was a load
# getting under way (a statement opening its tables), not one the probes held up
MAX_PROBE_SLOWDOWN = 20
# the quiet phases' share of the off-time: half, or more where what stays on
# outside them (P_S's window setup, CPU sampling) costs more than its part of
# the budget; at most this, so that their data covers a tenth of it still
MAX_QUIET_SHARE = 0.9
# the bursts' share of the off-time at least, where the quiet phases take more
# than half of it (the ordinary phases alone gave one 40-s window 2.4 s of
# bursts against 7-9 s at an even share, 16 samples of a partition lookup,
# and a figure 1.7x the truth): the rest at the start of quiet phases
BURST_FLOOR_SHARE = 0.2
MIN_QUIET_ROWS = 200  # rows in quiet and ordinary off-phases before their speeds are compared
# the first on-phase that sees the load, and any while the on-phases have counted
# fewer than HOLD_ROWS, is held on HOLD_S at a time and its calls per row taken over
# the hold: a 1-s statement's one on-phase caught its first 1 ms, and a row read off
# by tens of us put calls per row 3% out (the count with it). Without it, 8 sysbench
# clients that the probes slow 9x gave a 4-s window two cycles of 24-150 rows: too
# few for calls per row, the count went by time and came 60-79% short (issue 59 asks
# for no hold: the server's counters for calls per row have to stand in first)
HOLD_S = 0.03
HOLD_ROWS = 2000
MAX_HOLDS = 2
HOLD_READ_SHARE = 0.04   # the reads' mean width over the hold's span, at most (else held on)
MAX_HOLD_S = 0.15


def difference(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


class Probes(Protocol):
    """What the duty cycles drive of the probes (collectors/uprobes/session.py's
    session): attach and detach them, count with them on or off, read their
    calls and corrected time."""

    def attach_target(self) -> None: ...

    def detach_target(self) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def calls(self, indices: Iterable[int]) -> dict[int, int]: ...

    def calls_and_time(self, indices: Iterable[int]) -> dict[int, tuple[int, int]]: ...


@dataclass(frozen=True)
class SpanEdge:
    """The reads on either side of the row counter's first (or last) change:
    the seconds between them, the rows changed, and whether the probes were
    on in between. The load ran for part of those seconds only: at its
    unprobed rate, rows / rate of them (analysis trims the rest)."""

    seconds: float
    rows: int
    probed: bool

    def to_json(self) -> dict[str, Any]:
        return {"s": round(self.seconds, 6), "rows": self.rows, "probed": self.probed}


@dataclass(frozen=True)
class LoadSpan:
    """The load's span: the read (monotonic time, row counter) before the
    counter's first change and the read after its last; a window opened
    before the load started, or left open after it ended, is idle outside it.
    Its edges: the reads around the first change and around the last."""

    first: tuple[float, int]
    last: tuple[float, int]
    start_edge: SpanEdge | None = None
    end_edge: SpanEdge | None = None

    @property
    def seconds(self) -> float:
        return self.last[0] - self.first[0]

    @property
    def rows(self) -> int:
        return self.last[1] - self.first[1]


@dataclass
class Bursts:
    """Collectors on in every other ordinary off-phase (they sample the code
    unprobed), once one of the probes `wanted_by` has been called: those of
    short functions, which the bursts are worth their cost for (None: any)."""

    collectors: list[Any]
    wanted_by: set[int] | None = None


class DutyCycles:
    """Runs the cycles of one window. The first on-phase is already open
    when run() is called. cycles: per cycle its on-time, calls per probe,
    the rows the server changed and the time the load lost."""

    def __init__(self, probes: Probes, specs: Sequence[ProbeSpec], calibration: CalibrationCollector, window: Window,
                 budget: float, rows_changed: Callable[[], int | None], paced: list[Any] | None = None, quieted: list[Any] | None = None,
                 bursts: Bursts | None = None):
        self.probes, self.specs = probes, specs
        self.paced = paced or []  # on with the probes, so their cost is in what each cycle measures
        # on all along but off in every other off-phase (quiet), whose speed is the load's own
        self.quieted = quieted or []
        self.bursts = bursts.collectors if bursts else []
        self.burst_for = bursts.wanted_by if bursts else None
        self._burst_wanted = self.burst_for is None
        self.calibration, self.window = calibration, window
        self.rows_changed = self._tracking(rows_changed)
        self.load_span: LoadSpan | None = None
        self._last_read: tuple[float, int] | None = None
        # the probes attached now, and at any time since the last read of the rows
        self._attached = self._probed_since_read = True   # run() is called in the first on-phase
        self._idle_after = False  # a read after the counter's last change saw none
        self._idle_phases: list[tuple[float, float, bool]] = []  # zero-row off-phases: (end, seconds, quiet)
        self.pacer = Pacer(budget, on_s=ON_PHASE_S, min_on_s=MIN_ON_S, max_off_s=MAX_OFF_S)
        self.cycles: list[dict[str, Any]] = []
        self.holds = 0  # on-phases held on (HOLD_S) for their rows
        self.opened = time.monotonic()  # the window's opening (run() is given it): phases are timed from it
        self.off_rows, self.off_s = 0, 0.0  # every clean off-phase, summed: the load's speed unprobed
        self.quiet_rows, self.quiet_s = 0, 0.0  # the quiet ones, summed: its speed with nothing of ours on
        self._tails: list[tuple[float, float, int]] = []  # their second halves: (end, seconds, rows)
        # the off-phases the bursts were on in, summed (rows None: not all known)
        self.burst_rows: int | None = 0
        self.burst_s = 0.0
        self.quiet_share = 0.5  # of the off-time, aimed at
        self.quiet_phase_s = self.ordinary_phase_s = 0.0  # off-phases the load ran in (rows changed)
        self._speeds: list[tuple[bool, float]] = []  # (quiet, rows/s) of each such phase, in order
        self._ordinary_phases = 0
        self._last = {s.index: 0 for s in self.specs}
        self._last_ns = {s.index: 0 for s in self.specs}
        self._indices = [s.index for s in self.specs]

    def _tracking(self, read: Callable[[], int | None]) -> Callable[[], int | None]:
        """read, noting when the row counter first and last moved."""
        def rows() -> int | None:
            value, now = read(), time.monotonic()
            if value is None:
                return None
            probed, self._probed_since_read = self._probed_since_read, self._attached
            if self._last_read is not None and value > self._last_read[1]:
                span, before = self.load_span, self._last_read
                edge = SpanEdge(now - before[0], value - before[1], probed)
                self.load_span = LoadSpan(span.first if span else before, (now, value),
                                          span.start_edge if span else edge, edge)
                self._idle_after = False
            elif self.load_span is not None:
                self._idle_after = True
            self._last_read = (now, value)
            return value
        return rows

    def _load_seen(self) -> bool:
        """The row counter moved by a load's worth (min_rows), not by a few rows of
        the server's own (10.11.5 idle changes some): an idle server's quiet
        phases come as ever."""
        return self.load_span is not None and self.load_span.rows >= self.pacer.min_rows

    def _hold_wanted(self, rows: int | None) -> bool:
        """Whether an on-phase that counted `rows` stays on HOLD_S longer:
        the load moved in it, and it is the first to see the load (which
        started in it, or a moment before: its first read saw the rows at
        another rate than its second) or the on-phases so far counted too
        few rows for calls per row to stand on."""
        counted = sum(c["rows"] or 0 for c in self.cycles)
        return bool(rows) and self.holds < MAX_HOLDS and (not counted or counted + rows < HOLD_ROWS)

    def _counts(self) -> dict[int, int]:
        return self.probes.calls(self._indices)

    def run(self, started: tuple[float, int | None]) -> int | None:
        """Until the window ends; the server's rows counter then."""
        self.opened, rows0 = started
        if rows0 is not None:
            self._last_read = (self.opened, rows0)
        on_s, on_t0 = self.pacer.longest_on_s(), started[0]
        cycle_t0, cycle_rows0 = started  # a cycle: attach, on-phase, detach
        while True:
            cycle, rows_at_end = self._on_phase(on_s, on_t0)
            if rows_at_end is not False:
                return rows_at_end
            self.probes.detach_target()
            self._attached = False
            phases = self._pace(cycle, cycle_t0, cycle_rows0, started[0])
            if phases is None:
                return self.rows_changed()
            on_s, off_s, off_t0, speed_from = phases
            quiet = self._quiet_due() and self._quiet(True)
            if not quiet:
                self._ordinary_phases += 1
            burst = not quiet and self._burst_due() and self._burst(True)
            ended = False
            cap = BURST_MAX_S if self._burst_wanted else max(ORDINARY_FIRST_S - self.burst_s, 0.0)
            if burst and off_s - (time.monotonic() - off_t0) > cap:
                ended, speed_from = self._burst_for(cap, speed_from)
                burst = False
            tail, compared = None, True
            if not ended and quiet:
                ended, tail, speed_from, compared = self._quiet_tail(off_s, off_t0, speed_from)
            elif not ended:
                ended, quiet, speed_from, tail, compared = self._ordinary(off_s, off_t0, speed_from, burst)
            cycle_t0, cycle_rows0 = time.monotonic(), self.rows_changed()
            if tail is not None:
                self._tail(tail, cycle_t0, cycle_rows0)
            if burst:
                self._burst(False)
            self._off_phase(difference(cycle_rows0, speed_from[1]), cycle_t0 - speed_from[0], quiet, burst,
                            compared, ended=cycle_t0)
            if quiet:
                self._quiet(False)
            if ended:
                return cycle_rows0
            if not self._attach():
                return cycle_rows0
            self._attached = self._probed_since_read = True
            for c in self.paced:
                c.resume()
            on_t0 = time.monotonic()
            self.probes.start()

    def _ordinary(self, off_s: float, off_t0: float, speed_from: tuple[Any, ...],
                  burst: bool) -> tuple[bool, bool, tuple[Any, ...], tuple[Any, ...] | None, bool]:
        """Wait out an ordinary off-phase. One long enough (a short window's,
        its one or two cycles having paid for most of it) is ordinary for
        its first part only, then quiet for the rest where a quiet phase is
        due: else a window of a few seconds had no quiet phase to set the
        load's speed against. (Whether the window ended, whether the phase
        ended quiet, where its speed is measured from, its second half's
        start, whether it is compared: as _quiet_tail.)"""
        remaining = off_s - (time.monotonic() - off_t0)
        first = max(ORDINARY_FIRST_S - self.ordinary_phase_s, MIN_SPLIT_S)
        if burst or not self.quieted or not self._load_seen() or remaining < first + 2 * MIN_SPLIT_S:
            return self.window.wait(max(remaining, 0.0)), False, speed_from, None, True
        if self.window.wait(first):
            return True, False, speed_from, None, True
        speed_from = self._part_ended(speed_from)
        if not (self._quiet_due() and self._quiet(True)):
            return self.window.wait(max(off_s - (speed_from[0] - off_t0), 0.0)), False, speed_from, None, True
        ended, tail, speed_from, compared = self._quiet_tail(off_s, off_t0, speed_from)
        return ended, True, speed_from, tail, compared

    def _quiet_tail(self, off_s: float, off_t0: float,
                    speed_from: tuple[Any, ...]) -> tuple[bool, tuple[Any, ...] | None, tuple[Any, ...], bool]:
        """Wait out a quiet phase, reading the rows at its middle: its second
        half is the load's speed once it has got over the on-phase before.
        With the bursts short of their floor, the first half opens with one.
        (Whether the window ended, where the second half began, where the
        phase's speed is measured from, whether it is set against the
        ordinary phases': not after a burst, the rest having run over less
        of the on-phase's wake than a whole phase.)"""
        start = time.monotonic()
        half = max(off_s - (start - off_t0), 0.0) / 2
        compared = True
        if self._burst_floor_due() and self._burst(True):
            ended, speed_from = self._burst_for(min(BURST_MAX_S, half), speed_from, quiet=True)
            if ended:
                return True, None, speed_from, False
            compared = False
        if self.window.wait(max(start + half - time.monotonic(), 0.0)):
            return True, None, speed_from, compared
        middle = (time.monotonic(), self.rows_changed())
        return self.window.wait(max(off_s - (time.monotonic() - off_t0), 0.0)), middle, speed_from, compared

    def _tail(self, middle: tuple[Any, ...], end_t: float, end_rows: int | None) -> None:
        rows = difference(end_rows, middle[1])
        if rows is not None and end_t > middle[0]:
            self._tails.append((end_t, end_t - middle[0], rows))

    def _tails_in_load(self) -> tuple[float, int]:
        """Seconds and rows of the quiet phases' second halves that began at
        the load's first row or after, and ended before its last: the one it
        ended in ran partly idle, and those before it wholly (a window
        opened 8 s before a 0.5-s statement took 1.7 s of idle halves for
        the load's unprobed speed, and printed a slowdown of 0.07)."""
        if self.load_span is None:
            return 0.0, 0
        first, last = self.load_span.first[0], self.load_span.last[0]
        kept = [(s, rows) for end, s, rows in self._tails if end - s >= first and end < last]
        return round(sum(s for s, _ in kept), 6), sum(rows for _, rows in kept)

    def _quiet_due(self) -> bool:
        """Whether the next off-phase is to be quiet: the quiet ones behind
        their share of the off-time so far. The first ones after the probes
        saw the load are ordinary (and burst): a short window may have no
        others, and the bursts are what its figures per call rest on where
        the probes had too few cycles (a statement of a second gets one or
        two: their attach cost, 30 ms or so, is paid for by 1.2 s of window
        each at a 5% budget)."""
        if not self.quieted or not self._ordinary_phases:
            return False
        if self._load_seen() and self.ordinary_phase_s < ORDINARY_FIRST_S:
            return False  # the load has been seen: its first half second goes to the bursts
        self.quiet_share = self._wanted_quiet_share()
        spent = self.quiet_phase_s + self.ordinary_phase_s
        return self.quiet_phase_s <= self.quiet_share * spent

    def _burst_due(self) -> bool:
        """Whether the next ordinary off-phase is to burst: while the bursts
        have seen no more rows than the other ordinary off-phases (seconds
        without a row counter). About every other one under a steady load,
        from the first; one that saw the load before it got going (few rows,
        hence few samples) is made up by the next. Not all: a CPU sample
        costs this kind of host about 20 us (4999 Hz slowed one thread
        1.12x), so burst phases are no speed to pace against."""
        if not self._burst_wanted:
            # whatever the probes saw called, the first half second of ordinary
            # off-time bursts: a window of a second or two has no other off-time,
            # and its figures per call rest on the bursts where its cycles are few
            return self.burst_s < ORDINARY_FIRST_S and self.ordinary_phase_s < ORDINARY_FIRST_S
        if self.burst_rows is None:
            return self.burst_s <= self.ordinary_phase_s - self.burst_s
        return self.burst_rows <= self.off_rows

    def _burst_floor_due(self) -> bool:
        """Whether a quiet phase is to open with a burst: where the quiet
        phases take more than half the off-time, while the bursts are short
        of BURST_FLOOR_SHARE of it. Only its first half: the second is the
        load's speed with nothing of ours on, as in every quiet phase. A
        burst costs the load less than an ordinary phase would (only the
        sampler is on)."""
        if not self._burst_wanted or not self.bursts or self.quiet_share <= 0.5:
            return False
        return self.burst_s < BURST_FLOOR_SHARE * (self.quiet_phase_s + self.ordinary_phase_s)

    def _wanted_quiet_share(self) -> float:
        """Half the off-time, or the share that keeps what stays on in the
        ordinary off-phases within its part of the budget (the part the
        pacer leaves the probes' cycles): with the load that much faster in
        the quiet phases than in the ordinary ones, it is on for (1 - share)
        of the off-time."""
        lead = paired_lead(self._speeds)
        if self.quiet_rows < MIN_QUIET_ROWS or self.off_rows < MIN_QUIET_ROWS or lead is None:
            return self.quiet_share
        mean, error, _ = lead
        allowed = self.pacer.budget * (1 - self.pacer.margin)
        # only a lead the pairs' spread cannot explain (at 95%): a load with
        # gaps between its statements shows one by chance
        if math.exp(mean - 2 * error) - 1 <= allowed * 2:
            return 0.5
        return min(MAX_QUIET_SHARE, 1 - allowed / (math.exp(mean) - 1))

    def _attach(self) -> bool:
        """Attach the probes for the next on-phase; False if the target has
        exited meanwhile (the window ends there, as it would have seen)."""
        try:
            self.probes.attach_target()
            return True
        except BpfError:
            if alive(self.window.pid):
                raise
            self.window.ended_by = "target exited"
            return False

    def _quiet(self, on: bool) -> bool:
        """Every quieted collector off (on=True) or back on; whether all went
        off (a phase with one of them still on is not quiet)."""
        if not self.quieted:
            return False
        done = [c.quiet(on) for c in self.quieted]
        if on and not all(done):
            for c, went in zip(self.quieted, done):
                if went:
                    c.quiet(False)
            return False
        return on

    def _burst(self, on: bool) -> bool:
        """The bursting collectors on (for an ordinary off-phase) or off; whether there are any."""
        for c in self.bursts:
            c.resume() if on else c.pause()
        return bool(self.bursts)

    def _burst_for(self, seconds: float, speed_from: tuple[Any, ...], quiet: bool = False) -> tuple[bool, tuple[Any, ...]]:
        """Sample the first seconds of an off-phase and stop: that part is a
        burst phase of its own, the rest an ordinary (or quiet) one. (Whether
        the window ended, where the rest's speed is measured from.)"""
        ended = self.window.wait(seconds)
        speed_from = self._part_ended(speed_from, quiet=quiet, burst=True)
        self._burst(False)
        return ended, speed_from

    def _part_ended(self, since: tuple[Any, ...], quiet: bool = False, burst: bool = False) -> tuple[float, int | None]:
        """Account the part of an off-phase since `since` (when, rows) as an
        off-phase of its own, ending now; where the next part is measured from."""
        now, rows = time.monotonic(), self.rows_changed()
        self._off_phase(difference(rows, since[1]), now - since[0], quiet=quiet, burst=burst, ended=now)
        return now, rows

    def _off_phase(self, rows: int | None, seconds: float, quiet: bool = False, burst: bool = False,
                   compared: bool = True, ended: float | None = None) -> None:
        """Account for an off-phase that ended at `ended` (monotonic; now if
        None); compared=False: a quiet phase's rest after a burst, whose
        speed is not set against the ordinary phases' (it ran over less of
        the on-phase's wake than a whole one)."""
        if seconds <= 0:
            return
        if rows != 0:  # a phase the load changed no row in cost it nothing: no share of the off-time
            if quiet:  # (a burst at a quiet phase's start too: the share is what the pacer aims at)
                self.quiet_phase_s += seconds
            else:
                self.ordinary_phase_s += seconds
        if burst:  # without a row counter the bursts' calls come from the time
            self.burst_s += seconds
            self.burst_rows = None if rows is None or self.burst_rows is None else self.burst_rows + rows
        if rows is None:
            return
        began = (time.monotonic() if ended is None else ended) - seconds
        if self.cycles:  # the off-phase after the cycle's on-phase
            part = {"at_s": round(began - self.opened, 6), "s": round(seconds, 6), "rows": rows, "quiet": quiet}
            if burst:
                part["burst"] = True
                if quiet:  # the share it was opened at (the pacer may lower it again later)
                    part["quiet_share"] = round(self.quiet_share, 3)
            self.cycles[-1].setdefault("off", []).append(part)
        if burst and not quiet:  # slower by the sampling: not the speed the cycles are held against either
            return
        if rows == 0:  # idle, or a gap in the load: which one is known at the end (record)
            self._idle_phases.append((time.monotonic(), seconds, quiet))
            if not quiet:
                self.pacer.off_phase(rows, seconds)
            return
        if self.load_span is not None and self.load_span.first[0] >= began:
            # the load started in this phase: idle for part of it, not the load's speed (a
            # third of it, paced on, measured the next cycles' losses at 0 and cost 4% of a load)
            return
        if compared and not burst:
            self._speeds.append((quiet, rows / seconds))
        # faster than the others by what stays on: not the speed the cycles are held against; a
        # burst at its start too, the quieted collectors off there: their figures scale by these rows
        if quiet:
            self.quiet_rows += rows
            self.quiet_s += seconds
            return
        self.pacer.off_phase(rows, seconds)
        self.off_rows += rows
        self.off_s += seconds

    def _on_phase(self, on_s: float, on_t0: float) -> tuple[dict[str, Any], int | None | bool]:
        """Keep the probes on for on_s; the cycle's record, and the rows
        counter if the window ended in it (else False)."""
        # rows and calls read together inside the on-phase (rows read between
        # a switch and a status query would be at unprobed speed); the calls
        # on either side of the query, averaged, are those as it read the rows
        calls0, rows0, read0, width0 = rows_and_calls(self.rows_changed, self._counts)
        ended = self.window.wait(on_s)
        calls1, rows1, read1, width1 = rows_and_calls(self.rows_changed, self._counts)
        held = not ended and self._hold_wanted(difference(rows1, rows0))
        if held:
            # the load started in this on-phase: its calls per row (and what it cost)
            # are taken over the hold, the load running through it. Set against a
            # read made before the load, one read's offset from its calls is no
            # longer one both reads share, and put calls per row 2-3% out
            self.holds += 1
            hold_t0 = time.monotonic()
            calls0, rows0, read0, width0 = calls1, rows1, read1, width1
            # the rows sit somewhere in each read: held until that doubt is a small share
            # of the span (a read 6 ms wide in a 30-ms hold could put calls per row 10% out);
            # a wide first read (13 ms, as 8 clients connected) is dropped for a narrower later one
            while True:
                ended = self.window.wait(HOLD_S)
                calls1, rows1, read1, width1 = rows_and_calls(self.rows_changed, self._counts)
                if (ended or (width0 + width1) / 2 <= HOLD_READ_SHARE * (read1 - read0)
                        or time.monotonic() - hold_t0 >= MAX_HOLD_S):
                    break
                if width0 > max(width1, TIGHT_READ_S):
                    calls0, rows0, read0, width0 = calls1, rows1, read1, width1
        self.probes.stop()
        for c in self.paced:
            c.pause()
        t_on = time.monotonic() - on_t0
        read = self.probes.calls_and_time(self._indices)
        now = {i: c for i, (c, _) in read.items()}
        delta = {i: now[i] - self._last[i] for i in now}
        spent = {i: ns - self._last_ns[i] for i, (_, ns) in read.items()}
        self._last, self._last_ns = now, {i: ns for i, (_, ns) in read.items()}
        if not self._burst_wanted and self.burst_for and any(delta.get(i) for i in self.burst_for):
            self._burst_wanted = True
        cal = self.calibration.current()
        probe_s = sum(delta[s.index] * cal.pair_of(s) for s in self.specs) / 1e9
        # the probes that were called only: a window of 581 probes kept every one's count per
        # cycle, and grew by 13 KB a second; record() writes the zeros out again
        cycle = {"at_s": round(on_t0 - self.opened, 6), "on_s": round(t_on, 6), "probe_s": round(probe_s, 6),
                 "calls": {i: n for i, n in delta.items() if n}, "rows": difference(rows1, rows0),
                 "ns": {i: spent[i] for i, n in delta.items() if n},  # their corrected time, this cycle
                 "row_s": round(read1 - read0, 6),
                 # the calls read around each rows query this far apart: the rows sit at their middle
                 "read_s": [round(width0, 6), round(width1, 6)],
                 "row_calls": {i: calls1[i] - calls0[i] for i in now if calls1[i] != calls0[i]},  # may end in .5
                 **({"held": True} if held else {})}
        self.cycles.append(cycle)
        return cycle, rows1 if ended else False

    def _pace(self, cycle: dict[str, Any], cycle_t0: float, cycle_rows0: int | None,
              window_t0: float) -> tuple[float, float, float, tuple[Any, ...]] | None:
        """What the cycle cost the load, and the next phases: (on-phase,
        off-phase, when the off-phase began, where its speed is measured
        from); None if the window ended meanwhile."""
        off_t0, off_rows0 = time.monotonic(), self.rows_changed()
        cycle_s, cycle_rows = off_t0 - cycle_t0, difference(off_rows0, cycle_rows0)
        lost = self.pacer.lost(cycle_s, cycle_rows)
        speed_from = (off_t0, off_rows0)
        if lost is None and off_rows0 is not None:
            # the load's unprobed speed is not known yet (the first cycle):
            # measure it before pacing on a guess
            if self.window.wait(MEASURE_OFF_S):
                return None
            speed_from = self._part_ended(speed_from)
            lost = self.pacer.lost(cycle_s, cycle_rows)
        speed = self.pacer.speed()
        held = cycle.get("held") and cycle["rows"] and cycle["row_s"] > 0
        hold_lost = self.pacer.lost(cycle["row_s"], cycle["rows"], signed=True) if lost is not None and held else None
        if hold_lost is not None:
            # held in a load that started in it: the cycle's rows before the hold were
            # the statement getting under way, so its loss per second is the hold's
            lost = max(hold_lost / cycle["row_s"], 0.0) * cycle_s
        if cycle["rows"] == 0 or (speed and cycle["rows"] is not None and cycle["row_s"] > 0 and not held
                                  and cycle["rows"] / cycle["row_s"] * MAX_PROBE_SLOWDOWN < speed):
            # (next to) no row changed while the probes were on (a load that starts
            # with the window, or a statement opening its tables): rows of the attach
            # or detach around it are a load getting under way, not one the probes
            # held up. Paced on that, one cycle at a statement's start (1 row in
            # its 53-ms on-phase, 800k a second after) kept the probes off for the rest
            lost = None
        cycle["lost_s"] = None if lost is None else round(lost, 6)
        unprobed = self.pacer.speed()
        cycle["unprobed_rows_per_s"] = None if lost is None or unprobed is None else round(unprobed, 1)
        # a held cycle's loss is its hold's already (see above), and kept as it is
        signed = None if lost is None else lost if held else self.pacer.lost(cycle_s, cycle_rows, signed=True)
        in_phase_lost = None if lost is None or not cycle["rows"] else self.pacer.lost(cycle["row_s"], cycle["rows"],
                                                                                      signed=True)
        in_phase = None if in_phase_lost is None else (in_phase_lost, cycle["row_s"])
        # the window rule repays the losses over the time the load ran: a window opened a
        # second before it, cycling idle, let its first seconds lose 2.5% of the whole window
        began = self.load_span.first[0] if self.load_span else window_t0
        on_s, off_s = self.pacer.next_phases(cycle["on_s"], cycle_s, lost, cycle["probe_s"],
                                             elapsed_s=off_t0 - began, signed_lost_s=signed, in_phase=in_phase)
        if cycle_rows == 0:
            # no row changed through the cycle (a window opened before its statement, or a gap
            # between statements): the probes poll for the load with short on-phases, on for the
            # budget's share of the time at most. Cycled at max_coverage, a window opened 8 s
            # before a 0.5-s statement had its probes on for a fifth of it
            on_s = min(on_s, self.pacer.opening_on_s)
            taken = max(on_s, cycle["on_s"])   # an on-phase runs past its length by its row reads
            off_s = max(off_s, taken / self.pacer.budget - taken - max(cycle_s - cycle["on_s"], 0.0))
        return on_s, off_s, off_t0, speed_from

    def in_situ_factor(self) -> float | None:
        """What the on-phases show the probes cost the target, against their
        calibration (None: the cycles cannot tell)."""
        cal = self.calibration.current()
        return in_situ_factor([{**c, "row_calls": [c["row_calls"].get(s.index, 0) for s in self.specs]}
                               for c in self.cycles], [cal.pair_of(s) for s in self.specs])

    def _gap_s(self, quiet: bool) -> float:
        """Zero-row off-phases of a kind inside the load's span: gaps in
        the load, its time as much as the rest (before and after it, idle)."""
        if self.load_span is None:
            return 0.0
        first, last = self.load_span.first[0], self.load_span.last[0]
        return sum(s for end, s, q in self._idle_phases if q == quiet and first < end - s and end <= last)

    def record(self, budget: float) -> dict[str, Any]:
        """The capture's `sampling` section."""
        cal = self.calibration.current()
        known = [c["lost_s"] for c in self.cycles if c.get("lost_s") is not None]
        span = self.load_span
        return {"mode": "sampled", "overhead_budget": budget, "cycles": len(self.cycles),
                "cost_uncertainty": round(cost_uncertainty(cal, self.specs), 3),
                "on_s": round(sum(c["on_s"] for c in self.cycles), 6),
                "lost_s": round(sum(known), 6) if known else None,
                **({"load_s": round(span.seconds, 6), "load_rows": span.rows,
                    # the edge reads: the load ran for part of them (the end's only where reads after it saw idle)
                    "load_edges": {"start": span.start_edge.to_json() if span.start_edge else None,
                                   "end": span.end_edge.to_json() if span.end_edge and self._idle_after else None}}
                   if span else {"load_s": None, "load_rows": None}),
                "off_s": round(self.off_s + self._gap_s(False), 6), "off_rows": self.off_rows,
                **({"quiet_s": round(self.quiet_s + self._gap_s(True), 6), "quiet_rows": self.quiet_rows,
                    **dict(zip(("quiet_tail_s", "quiet_tail_rows"), self._tails_in_load())),
                    "quieted": [c.name for c in self.quieted], "quiet_share": round(self.quiet_share, 3)}
                   if self.quieted else {}),
                **({"burst_s": round(self.burst_s, 6), "burst_rows": self.burst_rows,
                    "bursts": [c.name for c in self.bursts]} if self.bursts else {}),
                "calls_per_cycle": [{**c, **{k: [c[k].get(s.index, 0) for s in self.specs] for k in ("calls", "row_calls", "ns")}}
                                    for c in self.cycles]}


def cost_uncertainty(cal: Calibration, specs: Iterable[ProbeSpec]) -> float:
    """Relative doubt on the probes' calibrated cost: the spread of the
    bursts, at least 10%."""
    rel = [c.spread_ns / c.pair_ns for k, c in cal.classes.items()
           if c.pair_ns > 0 and any(s.entry_class == k for s in specs)]
    return float(max([0.10] + rel))
