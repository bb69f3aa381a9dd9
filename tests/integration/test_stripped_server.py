"""A stripped MariaDB 10.11.5 (its debug info split off, same build-id),
its debug file served by a real debuginfod: profiled with exact counts from
the fetched symbols, and again with debuginfod down (the cache serves)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import strip_with_debug_file
from helpers import Profiler, code_as_in_file, partition_calls, stage
from test_usdt_server import (INSERT_SHAPE, ROWS as USDT_ROWS, SELECT_SHAPE, STATEMENT_INSERTS, STATEMENT_SELECTS,
                              insert_rows, run_statements)
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.target.elf import read_elf

pytestmark = [pytest.mark.root, pytest.mark.server]
VERSION = "10.11.5"
ROWS = 10009  # prime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_served(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until debuginfod has indexed the file and answers for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"debuginfod exited ({proc.returncode})"
        try:
            with urllib.request.urlopen(url, timeout=5):  # it answers GET only; the body is left unread
                return
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    pytest.fail(f"debuginfod did not serve {url} within {timeout} s")


@pytest.fixture(scope="module")
def stripped_server(tmp_path_factory):
    """The sandbox's 10.11.5 run from a stripped copy; its PID, build-id and the split debug file."""
    inst = sandbox.install(VERSION, lambda m: print(m, file=sys.stderr))
    work = tmp_path_factory.mktemp("stripped-server")
    binary, debug = strip_with_debug_file(inst.mysqld, work, debuglink=False)
    served = work / "served"
    served.mkdir()
    debug.rename(served / "mariadbd.debug")
    sb = sandbox.Sandbox(VERSION, instance="stripped")
    pid = sb.start(lambda m: print(m, file=sys.stderr), mysqld=binary)
    try:
        yield sb, pid, read_elf(str(binary)).build_id, served
    finally:
        sb.stop()


def test_symbols_come_from_debuginfod_then_from_its_cache(stripped_server, tmp_path):
    sb, pid, build_id, served = stripped_server
    assert not read_elf(f"/proc/{pid}/exe").has_symtab
    debuginfod = shutil.which("debuginfod")
    assert debuginfod, "the test needs Debian's debuginfod package (scripts/setup-host.sh installs it)"
    port = free_port()
    log = open(tmp_path / "debuginfod.log", "w")  # not a pipe: a full one would stall the server
    server = subprocess.Popen([debuginfod, "-F", str(served), "-p", str(port), "-d", str(tmp_path / "index.sqlite"),
                               "-t", "0", "-g", "0"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    env = {"DEBUGINFOD_URLS": url, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    try:
        wait_served(f"{url}/buildid/{build_id}/debuginfo", server)
        first, progress = profile_rows(sb, pid, tmp_path / "first", env)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert first["target"]["symbols"].endswith(f"(debuginfod {url})")
    # a debug file of 250 MB or so: its download said how far it had got
    assert progress and all(line.startswith(f"fetching debug symbols from {url}: ") for line in progress)
    assert (tmp_path / "cache" / build_id / "debuginfo").is_file()
    # debuginfod down: the cache serves, offline
    again, progress = profile_rows(sb, pid, tmp_path / "again", env)
    assert again["target"]["symbols"].endswith("(debuginfod cache)") and not progress


def profile_rows(sb, pid: int, out, env: dict) -> tuple[dict, list[str]]:
    """--insert-profile --exact over ROWS rows into a fresh RANGE table: the
    counts checked against it; the capture and what mysqlprobe printed
    before it traced."""
    conn = workload.connect(sb.socket)
    try:
        t = workload.table("range", 5)
        workload.prepare_source(conn, ROWS)
        workload.create_target(conn, t)
        prof = Profiler(pid, out, "--insert-profile", "--exact", env=env)
        affected, _ = workload.insert_select(conn, t)
        code, _, err = prof.stop()
        assert code == 0, err
        assert affected == ROWS
        truth = workload.partition_counts(conn, t)
    finally:
        conn.close()
    doc = prof.profile()
    for s in ("partition.write_row", "innodb.row_insert"):
        assert stage(doc, s)["calls"] == ROWS, s
    assert partition_calls(stage(doc, "partition.write_row")) == truth
    return doc, prof.before


def test_usdt_stages_need_no_symbols(stripped_server, tmp_path):
    """No debug file anywhere (no debuginfod, an empty cache): the USDT notes
    the stripped copy kept still time every row."""
    sb, pid, _, _ = stripped_server
    env = {"DEBUGINFOD_URLS": "", "DEBUGINFOD_CACHE_PATH": str(tmp_path / "empty-cache")}
    doc = insert_rows(sb, pid, tmp_path / "usdt", None, env=env)
    assert doc["target"]["symbols"] == ".dynsym only (stripped)"
    assert stage(doc, "sql.insert_row")["calls"] == USDT_ROWS



def test_the_insert_profile_without_symbols_takes_the_rows_from_usdt(stripped_server, tmp_path):
    """--insert-profile on the stripped copy, no debug file: the engine's
    functions are lost (one line each), and sql.insert_row (USDT) stands
    in for them, every row counted; statements still come from the
    dispatcher, which .dynsym names."""
    sb, pid, _, _ = stripped_server
    env = {"DEBUGINFOD_URLS": "", "DEBUGINFOD_CACHE_PATH": str(tmp_path / "empty-cache")}
    doc = insert_rows(sb, pid, tmp_path / "profile", None, env=env, stages=("--insert-profile",))
    said = doc["warnings"]
    assert any("is stripped" in w for w in said)
    assert stage(doc, "sql.insert_row")["calls"] == USDT_ROWS
    assert stage(doc, "sql.statement")["calls"] >= 1
    assert {p["stage"] for p in doc["probes"]} == {"sql.statement", "sql.insert_row"}
    code_as_in_file(pid)


def test_statements_and_their_shapes_come_from_the_exec_probes(stripped_server, tmp_path):
    """No debug file: sql.query_exec (USDT) keeps the statements by shape,
    its text read through each site's own operand (8@104(%rdi),
    8@104(%r12), 8@104(%rbx): a pointer in the THD)."""
    sb, pid, _, _ = stripped_server
    env = {"DEBUGINFOD_URLS": "", "DEBUGINFOD_CACHE_PATH": str(tmp_path / "empty-cache")}
    doc, inserts = run_statements(sb, pid, tmp_path, ("--stage", "sql.query_exec"), env)
    assert doc["target"]["symbols"] == ".dynsym only (stripped)"
    (probe,) = doc["probes"]
    assert probe["symbol"] == "USDT mysql:query__exec__start" and doc["statements"]["probe"] == probe["id"]
    shapes = {s["text"]: s for s in doc["statements"]["shapes"]}
    assert shapes[INSERT_SHAPE]["executions"] == STATEMENT_INSERTS == inserts   # the server's own count agrees
    assert shapes[SELECT_SHAPE]["executions"] == STATEMENT_SELECTS
    assert shapes[INSERT_SHAPE]["text_complete"] and shapes[SELECT_SHAPE]["text_complete"]
    assert stage(doc, "sql.query_exec")["calls"] >= STATEMENT_INSERTS + STATEMENT_SELECTS
    code_as_in_file(pid)
