"""The server's row counter read against the probes' calls: the pair each
duty cycle's calls per row is made of."""

from __future__ import annotations

from collections.abc import Callable

import time

TIGHT_READ_S = 0.002  # calls read on either side of a row-counter query at most this far apart
READ_TRIES = 3


def rows_and_calls(rows_changed: Callable[[], int | None],
                   counts: Callable[[], dict[int, int]]) -> tuple[dict[int, float], int | None, float, float]:
    """The server's rows counter, the calls as it was read (the calls on
    either side of the query, averaged), when, and how far apart the two
    reads of the calls were. A read that took long (this process
    preempted, a slow reply) would misplace the rows against the calls; it
    is taken again, and the tightest of a few kept (analysis leaves out a
    cycle whose reads were still wide against its span: `misread`)."""
    best: tuple[float, dict[int, int], int | None, dict[int, int]] | None = None
    best_t0 = 0.0
    for _ in range(READ_TRIES):
        t0 = time.monotonic()
        before = counts()
        rows = rows_changed()
        after = counts()
        width = time.monotonic() - t0
        if best is None or width < best[0]:
            best, best_t0 = (width, before, rows, after), t0
        if width <= TIGHT_READ_S or rows is None:
            break
    assert best is not None   # READ_TRIES > 0
    width, before, rows, after = best
    return {i: (before[i] + after[i]) / 2 for i in before}, rows, best_t0 + width / 2, width
