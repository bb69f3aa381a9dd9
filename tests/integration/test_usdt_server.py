"""USDT stages on MariaDB 10.11.5 (built with the server's SDT probes):
exact counts from insert__row__start/done against the rows written, through
the probes' semaphores, with the symbols or without them; and the default
mode's estimate, the probes and their semaphores coming and going with
the duty cycles."""

from __future__ import annotations

import os
import sys

import pytest

from helpers import Profiler, code_as_in_file, stage
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.target.elf import read_elf

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 10037  # prime
SAMPLED_ROWS = 2500009  # prime; 4-7 s of load: two duty cycles or more at a 10% budget


@pytest.fixture(scope="module")
def server():
    sb = sandbox.Sandbox("10.11.5")
    with sb.serving(lambda m: print(m, file=sys.stderr)) as pid:
        yield sb, pid


EXACT = ("--exact", "--no-ps")  # no P_S connection: its own queries write temporary
                                        # rows, which pass ha_write_row too


def insert_rows(sb, pid: int, out, table: workload.Table | None, env: dict | None = None,
                rows: int = ROWS, options: tuple[str, ...] = EXACT,
                stages: tuple[str, ...] = ("--stage", "sql.insert_row")) -> dict:
    """rows rows by INSERT ... SELECT, into a plain table (None) or a
    partitioned one, under stages and options: the capture."""
    conn = workload.connect(sb.socket)
    try:
        workload.prepare_source(conn, rows)
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS usdt_plain")
            cur.execute(f"CREATE TABLE usdt_plain LIKE {workload.SOURCE}")
        if table:
            workload.create_target(conn, table)
        prof = Profiler(pid, out, *stages, *options, env=env)
        with conn.cursor() as cur:
            if table:
                affected, _ = workload.insert_select(conn, table)
            else:
                affected = cur.execute(f"INSERT INTO usdt_plain SELECT * FROM {workload.SOURCE}")
        code, _, err = prof.stop()
        assert code == 0, err
        assert affected == rows
    finally:
        conn.close()
    return prof.profile()


STATEMENT_INSERTS, STATEMENT_SELECTS = 101, 53  # primes
INSERT_SHAPE = "INSERT INTO usdt_statements VALUES (?, ...)"
SELECT_SHAPE = "SELECT note FROM usdt_statements WHERE id = ?"


def run_statements(sb, pid: int, out, stages: tuple[str, ...], env: dict | None = None) -> tuple[dict, int]:
    """STATEMENT_INSERTS single-row INSERTs then STATEMENT_SELECTS SELECTs,
    one statement each, profiled with stages (--exact): the capture, and
    the INSERTs the server counted (Com_insert) meanwhile."""
    conn = workload.connect(sb.socket)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {workload.SCHEMA}")
            cur.execute(f"USE {workload.SCHEMA}")
            cur.execute("DROP TABLE IF EXISTS usdt_statements")
            cur.execute("CREATE TABLE usdt_statements (id INT PRIMARY KEY, note VARCHAR(20))")
            cur.execute("SHOW GLOBAL STATUS LIKE 'Com_insert'")
            before = int(cur.fetchone()[1])
        prof = Profiler(pid, out, *stages, *EXACT, env=env)
        with conn.cursor() as cur:
            for i in range(STATEMENT_INSERTS):
                cur.execute(f"INSERT INTO usdt_statements VALUES ({i}, 'row {i}')")
            for i in range(STATEMENT_SELECTS):
                cur.execute(f"SELECT note FROM usdt_statements WHERE id = {i}")
            # the client has a result before the server's dispatcher returns:
            # once the server reads one more command the last SELECT's has
            cur.execute("DO 0")
        code, _, err = prof.stop()
        assert code == 0, err
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Com_insert'")
            inserts = int(cur.fetchone()[1]) - before
    finally:
        conn.close()
    return prof.profile(), inserts


def test_a_row_into_a_plain_table_is_one_span(server, tmp_path):
    sb, pid = server
    doc = insert_rows(sb, pid, tmp_path, None)
    s = stage(doc, "sql.insert_row")
    assert s["calls"] == ROWS
    (p,) = [p for p in doc["probes"] if p["stage"] == "sql.insert_row"]
    assert p["entry"]["class"] == "emulated"                     # the sites are nops
    assert 0 < s["mean_ns"] < 1e6


def test_a_partitioned_row_passes_ha_write_row_twice(server, tmp_path):
    """ha_partition::write_row hands the row to its partition's handler, and
    both writes go through handler::ha_write_row, where the probes sit."""
    sb, pid = server
    doc = insert_rows(sb, pid, tmp_path, workload.table("range", 5))
    assert stage(doc, "sql.insert_row")["calls"] == 2 * ROWS


def load_base(pid: int) -> int:
    """Where the server's PIE binary is mapped (its mapping at file offset 0)."""
    exe = os.readlink(f"/proc/{pid}/exe")
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == exe and int(fields[2], 16) == 0:
                return int(fields[0].split("-")[0], 16)
    raise AssertionError(f"{exe} is not mapped in {pid}")


def semaphore(pid: int, probe: str) -> int:
    """The USDT probe's semaphore, read from the server's memory."""
    (sem,) = {p.semaphore for p in read_elf(f"/proc/{pid}/exe").usdt if p.name == probe}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(load_base(pid) + sem)
        return int.from_bytes(mem.read(2), "little")


def test_the_semaphore_is_raised_only_while_the_probes_are_on(server, tmp_path):
    """The kernel raises the probe's semaphore for as long as it is attached:
    the server skips the probe's argument set-up the rest of the time."""
    sb, pid = server
    assert semaphore(pid, "insert__row__start") == 0
    prof = Profiler(pid, tmp_path, "--stage", "sql.insert_row", "--exact", "--no-ps")
    try:
        assert semaphore(pid, "insert__row__start") >= 1
    finally:
        code, _, err = prof.stop()
    assert code == 0, err
    assert semaphore(pid, "insert__row__start") == 0


def test_the_default_mode_estimates_the_rows_from_its_duty_cycles(server, tmp_path):
    """Sampled: the USDT probes count only in the on-phases, and the rows
    estimated from them and the server's rows changed are the rows written.
    After it the semaphore is down and the server's code is its file's."""
    sb, pid = server
    doc = insert_rows(sb, pid, tmp_path, None, rows=SAMPLED_ROWS, options=("--budget", "10"))
    assert doc["sampling"]["mode"] == "sampled" and doc["sampling"]["cycles"] >= 2
    s = stage(doc, "sql.insert_row")
    assert 0 < s["calls"] < SAMPLED_ROWS                          # the probes were off part of the time
    est = s["estimated_calls"]
    low, high = est["ci95"]
    assert abs(est["value"] - SAMPLED_ROWS) < 0.05 * SAMPLED_ROWS, est
    assert low <= SAMPLED_ROWS <= high or abs(est["value"] - SAMPLED_ROWS) < 0.01 * SAMPLED_ROWS, est
    assert semaphore(pid, "insert__row__start") == 0
    code_as_in_file(pid)


def test_with_the_dispatcher_probed_the_exec_probes_only_time(server, tmp_path):
    """sql.statement (dispatch_command, symbols) and sql.query_exec (USDT)
    together: statements are kept under the dispatcher alone, once each;
    the exec probes time their spans."""
    sb, pid = server
    doc, inserts = run_statements(sb, pid, tmp_path, ("--stage", "sql.statement", "--stage", "sql.query_exec"))
    (boundary,) = [p for p in doc["probes"] if p["stage"] == "sql.statement"]
    assert boundary["symbol"].startswith("dispatch_command") and doc["statements"]["probe"] == boundary["id"]
    shapes = {s["text"]: s["executions"] for s in doc["statements"]["shapes"]}
    assert shapes[INSERT_SHAPE] == STATEMENT_INSERTS == inserts and shapes[SELECT_SHAPE] == STATEMENT_SELECTS
    assert stage(doc, "sql.query_exec")["calls"] >= STATEMENT_INSERTS + STATEMENT_SELECTS
    code_as_in_file(pid)
