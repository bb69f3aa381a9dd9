"""An index build's progress from the probes' live counts, for servers that
report none: MariaDB before 10.5 has no InnoDB alter stages in P_S, and its
PROCESSLIST.PROGRESS stays 0 through an online ADD INDEX (docs/watch.md).
Read once a second with --index-profile. The probes count a call as it
returns, so the phase under way is the first of the build's phase
functions that has not yet returned since the last build did; its
percentage is a count against the total it ends at:

- scan: rows made into tuples (row_build) against the table's estimated
  rows (information_schema.TABLES), held under 100% until the scan returns;
- merge sort: blocks written since the scan against runs x passes (each
  pass rewrites every block the scan wrote; passes = ceil(log2 runs));
- insert: leaf tuples put in the new index against the rows the scan made,
  an exact total; read once more as the insert or the build returns, so a
  build that put every row in reads 100% from its counts.

The flush after the insert (10.2 to 10.4) has no count to measure it by:
no reading is given while it runs."""

from __future__ import annotations

import math
from collections.abc import Callable

from mysqlprobe.collectors.perfschema.build_progress import ProgressReads, Reading
from mysqlprobe.collectors.perfschema.connection import Connection

BUILD, SCAN, ROW = "index.build", "index.scan", "index.row_build"
SORT, WRITE, INSERT = "index.merge_sort", "index.block_write", "index.insert"
BULK, TUPLE, SPLIT = "index.bulk_insert", "index.tuple_insert", "index.tuple_split"
LEAF = {BULK: 0}                        # BtrBulk::insert's partition key is the level: 0, the leaves
PHASE_STAGES = {BUILD, SCAN, ROW, INSERT}  # the least a reading needs probed
SCAN_CEILING = 99.0                     # the scan's estimate of rows is the table's; its end is its return


class ProbedBuildProgress(ProgressReads):
    """Readings of the build under way from the probes (source "probes")."""

    def __init__(self, conn: Connection, calls: Callable[[], dict[str, int]], table_rows: Callable[[], int | None]) -> None:
        super().__init__(conn, "probes")
        self.calls, self.table_rows = calls, table_rows
        self._base: dict[str, int] = {}      # counts as the build now running began: the last one's end
        self._scan_end: dict[str, int] | None = None   # counts at the first read after its scan returned
        self._rows_estimate: int | None = None
        self._insert_done = False

    def _reading(self, at_s: float) -> Reading | None:
        now = self.calls()
        if self._since(now, BUILD):     # a build ended: its insert's last count, then the next starts from here
            reading = self._inserted(now, at_s)
            self._base, self._scan_end, self._rows_estimate, self._insert_done = now, None, None, False
            return reading
        return self._phase(now, at_s)

    def _inserted(self, now: dict[str, int], at_s: float) -> Reading | None:
        """The insert's share of the rows scanned, counted: 100% when every tuple went in."""
        rows = self._since(now, ROW)
        if not rows or INSERT not in now or self._insert_done:
            return None
        self._insert_done = True
        return Reading(at_s, "insert", min(100.0, 100.0 * self._tuples(now) / rows))

    def _tuples(self, now: dict[str, int]) -> int:
        """Leaf tuples put in the new index since the build began: BtrBulk::insert at level 0;
        tuple by tuple, the optimistic inserts less one node pointer for each split."""
        if BULK in now:
            return self._since(now, BULK)
        return self._since(now, TUPLE) - self._since(now, SPLIT)

    def _since(self, now: dict[str, int], stage: str, base: dict[str, int] | None = None) -> int:
        return now.get(stage, 0) - (self._base if base is None else base).get(stage, 0)

    def _phase(self, now: dict[str, int], at_s: float) -> Reading | None:
        rows = self._since(now, ROW)
        if not rows:
            return None                  # no build under way (or not yet a row of one)
        if not self._since(now, SCAN):
            if self._rows_estimate is None:
                self._rows_estimate = self.table_rows()
            if not self._rows_estimate:
                return None
            return Reading(at_s, "scan", min(SCAN_CEILING, 100.0 * rows / self._rows_estimate))
        if self._scan_end is None:
            self._scan_end = now
        runs = self._since(self._scan_end, WRITE)
        if SORT in now and not self._since(now, SORT) and runs > 1:
            passes = math.ceil(math.log2(runs))
            written = self._since(now, WRITE, self._scan_end)
            return Reading(at_s, "merge sort", min(100.0, 100.0 * written / (runs * passes)))
        if INSERT in now and not self._since(now, INSERT):
            return Reading(at_s, "insert", min(100.0, 100.0 * self._tuples(now) / rows))
        return self._inserted(now, at_s)   # said once: the flush that follows has no measure
