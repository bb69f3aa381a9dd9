"""The uprobe engine on the MySQL stand-ins: exact counts per stage and per
partition, nested calls, SIGTERM, and kill -9 leaving no probe behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import MYSQLPROBE, strip_with_debug_file
from helpers import Profiler, code_as_in_file, kill9_leaves_no_probe, partition_calls, stage, wait_until
from mysqlprobe.collectors.safety.codecheck import code_changes
from mysqlprobe.collectors.target.elf import entry_offset
from mysqlprobe.recorder.priority import descendants_tasks

pytestmark = pytest.mark.root
ROWS = 10007  # prime: a count cannot match by accident


class Fixture:
    def __init__(self, path):
        self.proc = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        assert ready["ready"]
        self.version = ready["version"]   # the MySQL version it stands in for

    @property
    def pid(self):
        return self.proc.pid

    def command(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)


@pytest.fixture
def fixture_process(mysql_fixtures, request):
    fx = Fixture(mysql_fixtures[request.param])
    yield fx
    fx.close()


@pytest.mark.parametrize("fixture_process", ["5.6", "5.7", "8.0"], indirect=True)
@pytest.mark.parametrize("kind", ["range", "hash"])
def test_exact_counts_per_stage_and_partition(fixture_process, tmp_path, kind):
    # one kind of link each way: per-probe perf links (kernels before 6.6) for hash
    prof = Profiler(fixture_process.pid, tmp_path, "--insert-profile", "--exact",
                    env={"MYSQLPROBE_LINKS": "perf" if kind == "hash" else "uprobe_multi"})
    truth = fixture_process.command(f"run {ROWS} 5 {kind}")
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    assert doc["window"]["ended_by"] == "interrupt"
    for name in ("partition.write_row", "partition.get_partition_id", "innodb.write_row", "innodb.row_insert"):
        s = stage(doc, name)
        assert s["calls"] == ROWS, name
        assert partition_calls(s) == truth["partitions"], name
        assert sum(b["count"] for b in s["histogram"]) == ROWS
    if doc["target"]["server"]["line"] != "mysql-5.6":
        assert partition_calls(stage(doc, "partition.write_row_in_part")) == truth["partitions"]
    assert stage(doc, "innodb.page_verify")["calls"] == truth["pages"]
    counters = doc["engine"]["counters"]
    assert counters["entries"] == counters["returns"]
    assert counters["unmatched_returns"] == counters["lost_frames"] == 0
    assert "partition.write_row" in out and "per partition" in out
    # the process collector sees the thread the probes timed
    proc = doc["process"]
    assert proc["cpu_user_s"] + proc["cpu_system_s"] > 0 and proc["threads"] == 1
    timed = {t["tid"] for p in doc["probes"] if p["stage"] == "partition.write_row" for t in p["threads"]}
    assert timed == {fixture_process.pid} == {proc["busiest_threads"][0]["tid"]}


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
def test_nested_and_recursive_calls_are_timed_per_call(fixture_process, tmp_path):
    prof = Profiler(fixture_process.pid, tmp_path, "--exact", "--probe", "recurse", "--probe", "row_insert_for_mysql")
    fixture_process.command("recurse 5")
    code, _, err = prof.stop()
    assert code == 0, err
    probes = {p["name"]: p for p in prof.profile()["probes"]}
    assert probes["recurse"]["calls"] == 6            # depth 5 .. 0
    assert probes["row_insert_for_mysql"]["calls"] == 5
    # recurse(d) holds 4*d probe hits: its row_insert and recurse(d-1), entry and return each
    assert probes["recurse"]["nested_probe_hits"] == 4 * (5 + 4 + 3 + 2 + 1)
    # the outermost call contains all the others: as measured (before the nested
    # probes' cost is taken off, which can leave calls this short at 0 on a busy
    # host), the slowest bucket is above the fastest; taken off, no call grew
    raw = probes["recurse"]["raw"]
    assert raw["histogram"][-1]["low"] > raw["histogram"][0]["low"]
    assert probes["recurse"]["total_ns"] <= raw["total_ns"]


@pytest.mark.parametrize("fixture_process", ["8.0"], indirect=True)
def test_sigterm_ends_the_window_and_writes_the_capture(fixture_process, tmp_path):
    prof = Profiler(fixture_process.pid, tmp_path, "--insert-profile", "--exact", "-q")
    truth = fixture_process.command(f"run {ROWS} 7")
    code, _, err = prof.stop(signal.SIGTERM)
    assert code == 0, err
    doc = prof.profile()
    assert doc["window"]["ended_by"] == "sigterm"
    assert partition_calls(stage(doc, "partition.get_partition_id")) == truth["partitions"]


@pytest.mark.parametrize("fixture_process", ["5.6"], indirect=True)
def test_duration_and_target_exit(fixture_process, tmp_path):
    prof = Profiler(fixture_process.pid, tmp_path, "--insert-profile", "--exact", "-d", "30")
    fixture_process.close()
    code, _, err = prof.proc.wait(timeout=20), None, prof.proc.stderr.read()
    assert code == 0, err
    assert prof.profile()["window"]["ended_by"] == "target exited"


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
@pytest.mark.parametrize("links", ["uprobe_multi", "perf"])
def test_kill_9_leaves_no_uprobe_and_the_target_runs_on(fixture_process, tmp_path, links):
    prof = Profiler(fixture_process.pid, tmp_path, "--insert-profile", "--exact", env={"MYSQLPROBE_LINKS": links})
    kill9_leaves_no_probe(prof, f"/proc/{fixture_process.pid}/", fixture_process.pid)
    truth = fixture_process.command(f"run {ROWS} 5")
    assert sum(truth["partitions"]) == ROWS


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
def test_a_sentinel_stays_at_the_entry_point_while_the_duty_cycles_probes_come_and_go(fixture_process, tmp_path):
    """The kernel clears a process's mark of having uprobes once none is left
    in its code, and a breakpoint trap without the mark is a SIGTRAP: the
    sentinel keeps one probe in place from the first attach to the last
    detach, and the code is the file's again once mysqlprobe is done."""
    pid = fixture_process.pid
    entry = entry_offset(os.readlink(f"/proc/{pid}/exe"))
    prof = Profiler(pid, tmp_path, "--insert-profile", "-d", "5")
    load = threading.Thread(target=fixture_process.command, args=(f"run {ROWS * 30} 5 range",))
    load.start()
    changed, t0 = [], time.monotonic()  # the code's int3s, sampled inside the window
    while time.monotonic() - t0 < 3.5:
        changed.append(set(code_changes(pid).int3))
    load.join()
    code, _, err = prof.proc.wait(timeout=30), None, prof.proc.stderr.read()
    assert code == 0, err
    doc = prof.profile()
    assert doc["engine"]["sentinel_offset"] == entry and doc["sampling"]["cycles"] >= 2
    assert all(entry in c for c in changed)
    assert {entry} in changed                                     # probes off, the sentinel on
    assert any(len(c) > 1 for c in changed)                       # probes on too
    assert stage(doc, "partition.write_row")["calls"] > 0
    code_as_in_file(pid)


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
def test_window_ending_mid_load_cuts_every_stage_at_the_same_moment(fixture_process, tmp_path):
    # the probes come off one by one; counting must stop for all of them at once
    prof = Profiler(fixture_process.pid, tmp_path, "--insert-profile", "--exact", "-d", "1.5")
    fixture_process.proc.stdin.write("run 3000017 5\n")
    fixture_process.proc.stdin.flush()
    code = prof.proc.wait(timeout=60)
    assert code == 0, prof.proc.stderr.read()
    assert sum(json.loads(fixture_process.proc.stdout.readline())["partitions"]) == 3000017
    doc = prof.profile()
    calls = [stage(doc, n)["calls"] for n in ("partition.write_row", "partition.write_row_in_part",
                                              "partition.get_partition_id", "innodb.write_row",
                                              "innodb.row_insert")]
    assert calls[0] > 1000, calls              # the load ran inside the window
    assert max(calls) - min(calls) <= 1, calls  # one row may straddle each edge


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
@pytest.mark.parametrize("where", ["/proc/1/x", "{file}/sub"])
def test_an_unwritable_output_is_refused_before_anything_is_attached(fixture_process, tmp_path, where):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    done = subprocess.run([MYSQLPROBE, "-p", str(fixture_process.pid), "--insert-profile", "-d", "30",
                           "-o", where.format(file=a_file)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 10, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot write there" in done.stderr   # one line, no window opened
    assert "Tracing PID" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("fixture_process", ["5.6", "5.7", "8.0"], indirect=True)
def test_statements_keep_the_calls_inside_them(fixture_process, tmp_path):
    # each line's dispatcher signature: the text from the packet (5.6) or COM_DATA (5.7, 8.0)
    prof = Profiler(fixture_process.pid, tmp_path, "--stage", "sql.statement", "--stage", "innodb.row_insert",
                    "--exact")
    for line in ("query 7 5 INSERT INTO t VALUES (1, 'a')", "query 11 5 INSERT INTO t VALUES (22, 'it\\'s')",
                 "query 13 5 SELECT * FROM t WHERE id = 5", "execute 3 5 42", "execute 5 5 42", "run 17 5"):
        fixture_process.command(line)
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    row_insert = stage(doc, "innodb.row_insert")
    assert row_insert["calls"] == 7 + 11 + 13 + 3 + 5 + 17
    assert stage(doc, "sql.statement")["calls"] == 5
    (probe,) = [p["id"] for p in doc["probes"] if p["stage"] == "innodb.row_insert"]
    shapes = {s["text"]: s for s in doc["statements"]["shapes"]}
    calls = {text: sum(c["calls"] for c in s["calls"] if c["probe"] == probe) for text, s in shapes.items()}
    executions = {text: s["executions"] for text, s in shapes.items()}
    # literals are ?, the packet's bytes past its length are not the statement's
    assert executions == {"INSERT INTO t VALUES (?, ...)": 2, "SELECT * FROM t WHERE id = ?": 1,
                          "(Execute of prepared statement #42)": 2}
    assert calls == {"INSERT INTO t VALUES (?, ...)": 18, "SELECT * FROM t WHERE id = ?": 13,
                     "(Execute of prepared statement #42)": 8}
    assert all(s["text_complete"] for s in shapes.values())
    (insert,) = [d for d in doc["attribution"]["by_digest"] if d["text"].startswith("INSERT")]
    assert insert["executions"] == 2 and insert["functions"][0]["calls"] == 9


@pytest.mark.parametrize("fixture_process", ["5.7"], indirect=True)
def test_a_second_start_begins_from_the_first_ones_calibration(fixture_process, tmp_path):
    """The first run calibrates with five bursts and keeps them; the next on
    this kernel and CPU takes one burst that agrees with them and starts from
    theirs; --recalibrate takes five again. The cache lives in its own root."""
    env = {"MYSQLPROBE_CACHE": str(tmp_path / "cache")}

    def calibration(name: str, *args: str) -> dict:
        done = subprocess.run([MYSQLPROBE, "-p", str(fixture_process.pid), "--insert-profile", "-q", "-d", "1",
                               "-o", str(tmp_path / name), *args],
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / name / "profile.json").read_text())["calibration"]

    first = calibration("first")
    assert first["reused"] is None and first["bursts"] - first["bursts_in_window"] == 5
    assert list((tmp_path / "cache" / "calibration").glob("*.json"))
    # a busy machine may make both check bursts disagree: then five are taken, as they must be;
    # of three back-to-back starts, one agrees
    later = [calibration(f"later{i}") for i in range(3)]
    for cal in later:
        first_bursts = cal["bursts"] - cal["bursts_in_window"]
        assert (first_bursts, cal["reused"] is None) in ((1, False), (2, False), (5, True))
    second = next((c for c in later if c["reused"]), None)
    assert second is not None, later
    assert second["reused"]["bursts"] >= 4 and second["reused"]["taken"] > 0
    fresh = calibration("fresh", "--recalibrate")
    assert fresh["reused"] is None and fresh["bursts"] - fresh["bursts_in_window"] == 5


@pytest.mark.parametrize("fixture_process", ["8.0"], indirect=True)
def test_the_start_runs_ahead_and_the_window_at_the_callers_niceness(fixture_process, tmp_path):
    """Held before the attach: mysqlprobe and the helpers it started (the
    calibration's) at -10; once tracing, every thread of it and of its
    helpers at the caller's. --start-nice 0 leaves the start as the caller's."""
    caller = os.getpriority(os.PRIO_PROCESS, 0)

    def niceness(start_nice: str) -> tuple[dict, dict, dict]:
        proc = subprocess.Popen([MYSQLPROBE, "-p", str(fixture_process.pid), "--insert-profile", "-d", "30",
                                 "-o", str(tmp_path / start_nice), "--start-nice", start_nice],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "MYSQLPROBE_PAUSE_AT": "attach:2"})
        try:
            held = next((comms_nice(proc.pid) for line in proc.stderr if "paused at attach" in line), None)
            assert held, "never held at the attach"
            assert any(line.startswith("Tracing PID") for line in proc.stderr)
            assert wait_until(lambda: set(comms_nice(proc.pid).values()) == {caller}, timeout=5), \
                comms_nice(proc.pid)
            tracing = comms_nice(proc.pid)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
        assert proc.returncode == 0
        timings = json.loads((tmp_path / start_nice / "profile.json").read_text())["engine"]["timings"]
        return held, tracing, timings

    held, tracing, timings = niceness("-10")
    assert held[("mysqlprobe", "main")] == held[("calibrate", "main")] == -10, held
    assert timings["start_nice"] == -10 and len(tracing) >= len(held) - 2
    held, _, timings = niceness("0")
    assert set(held.values()) == {caller} and timings["start_nice"] is None


def comms_nice(pid: int) -> dict:
    """(command, 'main' or the thread's id) -> niceness, over pid's threads and its descendants'."""
    out = {}
    for tid in descendants_tasks(pid):
        try:
            with open(f"/proc/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{tid}/status") as f:
                tgid = next(int(line.split()[1]) for line in f if line.startswith("Tgid:"))
        except OSError:  # ended meanwhile
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        out[(comm, "main" if tid == tgid else tid)] = int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice
    return out


def test_without_symbols_statements_come_from_the_query_probes(mysql_fixtures, tmp_path):
    """A stripped stand-in keeps its USDT notes and loses dispatch_command:
    sql.statement is then query__start to query__done, the text read
    through the site's operand (8@320(%rsp) here: a pointer in memory)."""
    stripped, _ = strip_with_debug_file(mysql_fixtures["5.6"], tmp_path, debuglink=False)
    fx = Fixture(stripped)
    try:
        prof = Profiler(fx.pid, tmp_path / "out", "--stage", "sql.statement", "--exact")
        for line in ("query 7 5 INSERT INTO t VALUES (1, 'a')", "query 11 5 INSERT INTO t VALUES (22, 'it\\'s')",
                     "query 13 5 SELECT * FROM t WHERE id = 5", "execute 3 5 42"):
            fx.command(line)
        code, out, err = prof.stop()
        assert code == 0, err
        doc = prof.profile()
        (probe,) = doc["probes"]
        assert probe["symbol"] == "USDT mysql:query__start" and doc["target"]["symbols"] == ".dynsym only (stripped)"
        shapes = {s["text"]: s for s in doc["statements"]["shapes"]}
        # an execute passes no query probe; the texts end at their NUL and are whole
        assert {text: s["executions"] for text, s in shapes.items()} == {
            "INSERT INTO t VALUES (?, ...)": 2, "SELECT * FROM t WHERE id = ?": 1}
        assert all(s["text_complete"] and s["command"] == 3 for s in shapes.values())
        assert stage(doc, "sql.statement")["calls"] == 3
        code_as_in_file(fx.pid)
    finally:
        fx.close()


@pytest.mark.parametrize("fixture_process", ["5.6", "5.7"], indirect=True)
def test_index_profile_counts_a_build_of_known_shape(fixture_process, tmp_path):
    """The MySQL lines' index build names (5.6: tuple by tuple, 5.7:
    bottom-up), each count the stand-in's own."""
    from mysqlprobe.analysis.index_build import SORTED, TUPLE_BY_TUPLE

    prof = Profiler(fixture_process.pid, tmp_path, "--index-profile", "--exact", "--no-ps")
    truth = fixture_process.command(f"index {ROWS} 997")
    code, out, err = prof.stop()
    assert code == 0, err
    b = prof.profile()["index_build"]
    sorted_build = fixture_process.version.startswith("5.7")
    assert b["method"] == (SORTED if sorted_build else TUPLE_BY_TUPLE)
    assert b["rows_scanned"] == b["tuples_inserted"] == truth["rows"] == ROWS
    assert b["runs"] == truth["runs"] and b["merge_passes"] == truth["passes"]
    assert b["blocks_written"]["merge sort"] == truth["passes"] * truth["runs"]
    # a node pointer per leaf page bottom-up; per split (all leaves but the first) one by one
    assert b["node_pointers"] == truth["leaf_pages"] - (0 if sorted_build else 1)
    assert [p["name"] for p in b["phases"]][:3] == ["scan", "merge sort", "insert"]
