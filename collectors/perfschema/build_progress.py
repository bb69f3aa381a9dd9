"""An index build's progress as the server reports it, read once a second
while the window is open: Performance Schema's InnoDB alter stages with
their WORK_COMPLETED / WORK_ESTIMATED (MySQL 5.7+, MariaDB 10.5+), else
MariaDB's own progress report (information_schema.PROCESSLIST's STAGE,
MAX_STAGE and PROGRESS: every MariaDB, InnoDB reporting its merge sort and
insert through thd_progress_report)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mysqlprobe.collectors.perfschema.connection import Connection
from mysqlprobe.collectors.perfschema.settings import has_column

MAX_SAMPLES = 3600   # an hour of once-a-second reads; after that, the last one is kept up to date
P_S_SQL = ("SELECT EVENT_NAME, WORK_COMPLETED, WORK_ESTIMATED FROM performance_schema.events_stages_current "
           "WHERE EVENT_NAME LIKE 'stage/innodb/alter%%' ORDER BY WORK_ESTIMATED DESC LIMIT 1")
PROCESSLIST_SQL = ("SELECT STAGE, MAX_STAGE, PROGRESS, STATE FROM information_schema.PROCESSLIST "
                   "WHERE PROGRESS > 0 AND ID != CONNECTION_ID() ORDER BY PROGRESS DESC LIMIT 1")
STAGE_PREFIX = "stage/innodb/"
ALTER_SQL = ("SELECT DB, INFO FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' AND ID != CONNECTION_ID() "
             "AND (INFO LIKE 'create%%index%%' OR INFO LIKE 'alter%%table%%') LIMIT 1")
ROWS_SQL = "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
# the table a CREATE INDEX or ALTER TABLE names: `db`.`t`, db.t or t
ALTERED = re.compile(r"^\s*(?:create\s+(?:unique\s+|fulltext\s+|spatial\s+)?index\s+(?:if\s+not\s+exists\s+)?\S+"
                     r"\s+on|alter\s+(?:online\s+)?(?:ignore\s+)?table)\s+((?:`[^`]+`|\w+)(?:\.(?:`[^`]+`|\w+))?)",
                     re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Reading:
    at_s: float            # seconds into the window
    stage: str             # the InnoDB phase (P_S), or "stage N of M: STATE" (MariaDB's report)
    percent: float         # of the stage's work (P_S) or of the whole statement (MariaDB's PROGRESS)

    def to_json(self) -> list[Any]:
        return [round(self.at_s, 3), self.stage, round(self.percent, 2)]


def source_of(conn: Connection) -> str | None:
    """Which progress this server reports: "performance_schema", "processlist" or None."""
    if has_column(conn, "performance_schema", "events_stages_current", "WORK_COMPLETED"):
        return "performance_schema"
    return "processlist" if has_column(conn, "information_schema", "PROCESSLIST", "PROGRESS") else None


class ProgressReads:
    """Reads of an index build's progress, once a second, kept for the
    capture: the server's report (BuildProgress) or, where it has none, the
    probes' counts (collectors/uprobes/build_progress.py)."""

    def __init__(self, conn: Connection, source: str) -> None:
        self.conn, self.source = conn, source   # conn: the server's, InnoDB's compression counts read on it too
        self.readings: list[Reading] = []
        self.reads = 0

    def read(self, at_s: float) -> Reading | None:
        """The build under way now, if any (counted, and kept when there is one)."""
        self.reads += 1
        reading = self._reading(at_s)
        if reading is not None:
            if len(self.readings) < MAX_SAMPLES:
                self.readings.append(reading)
            else:
                self.readings[-1] = reading
        return reading

    def _reading(self, at_s: float) -> Reading | None:
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        return {"source": self.source, "reads": self.reads,
                "readings": [r.to_json() for r in self.readings]}


class BuildProgress(ProgressReads):
    """The server's own report of the build under way."""

    def _reading(self, at_s: float) -> Reading | None:
        with self.conn.cursor() as cur:
            cur.execute(P_S_SQL if self.source == "performance_schema" else PROCESSLIST_SQL)
            row = cur.fetchone()
        if not row:
            return None
        if self.source == "performance_schema":
            name, done, estimated = row
            if not estimated:
                return None
            return Reading(at_s, name.removeprefix(STAGE_PREFIX), 100.0 * min(done or 0, estimated) / estimated)
        stage, stages, percent, state = row
        return Reading(at_s, f"stage {stage} of {stages}: {state or '?'}", float(percent))


def altered_table(db: str | None, statement: str) -> tuple[str, str] | None:
    """(schema, table) a CREATE INDEX or ALTER TABLE statement builds on; None: neither, or no schema."""
    m = ALTERED.match(statement or "")
    if not m:
        return None
    parts = [p.strip("`") for p in re.findall(r"`[^`]+`|\w+", m.group(1))]
    schema, table = (parts[0], parts[1]) if len(parts) == 2 else (db, parts[0])
    return (schema, table) if schema else None


def altered_table_rows(conn: Connection) -> int | None:
    """InnoDB's estimate of the rows of the table an index is being built on (None: no such statement)."""
    with conn.cursor() as cur:
        cur.execute(ALTER_SQL)
        row = cur.fetchone()
        found = altered_table(*row) if row else None
        if found is None:
            return None
        cur.execute(ROWS_SQL, found)
        rows = cur.fetchone()
    return int(rows[0]) if rows and rows[0] is not None else None


# InnoDB's own count of ROW_FORMAT=COMPRESSED page compressions per page size:
# compress_ops every page_zip_compress call, compress_ops_ok those that fit
CMP_SQL = "SELECT page_size, compress_ops, compress_ops_ok FROM information_schema.INNODB_CMP"


def compression_counts(conn: Connection) -> dict[int, tuple[int, int]]:
    """page size -> (compressions, those that succeeded) since the server started."""
    with conn.cursor() as cur:
        cur.execute(CMP_SQL)
        return {int(size): (int(ops), int(ok)) for size, ops, ok in cur.fetchall()}


def compression_deltas(before: dict[int, tuple[int, int]],
                       after: dict[int, tuple[int, int]]) -> list[dict[str, int]]:
    """The window's compressions per page size where there were any."""
    out = []
    for size, (ops, ok) in sorted(after.items()):
        ops0, ok0 = before.get(size, (0, 0))
        if ops - ops0:
            out.append({"page_size": size, "compress_ops": ops - ops0, "compress_ops_ok": ok - ok0})
    return out


def eta_s(readings: list[Reading]) -> float | None:
    """Seconds left in the stage now running, at the pace it has kept so far (None: not yet known)."""
    if not readings:
        return None
    last = readings[-1]
    first = next((r for r in readings if r.stage == last.stage), last)
    gained, spent = last.percent - first.percent, last.at_s - first.at_s
    if gained <= 0 or spent <= 0:
        return None
    return (100.0 - last.percent) * spent / gained
