"""The statement -> stage -> probed functions tree, on a saved capture (no root)."""

import copy

import pytest

from mysqlprobe.analysis.attribution import probe_tree
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.report import render_text
from mysqlprobe.collectors.perfschema.threads import merge_threads
from test_report import synthetic_run

MS = 1_000_000
PS = 1000  # P_S timer units per ns


def capture(thread_os_id=True):
    doc = copy.deepcopy(synthetic_run())
    ids = {p["stage"]: p["id"] for p in doc["probes"]}
    conn_tid, cleaner_tid = 4242, 4250
    # write_row 40 ms holding get_partition_id 1 ms and row_insert 19 ms; a background thread's row_insert 5 ms
    callers = {
        "partition.write_row": [(conn_tid, None, 40 * MS)],
        "partition.get_partition_id": [(conn_tid, ids["partition.write_row"], 1 * MS)],
        "innodb.row_insert": [(conn_tid, ids["partition.write_row"], 19 * MS), (cleaner_tid, None, 5 * MS)],
    }
    for p in doc["probes"]:
        p["callers"] = [{"tid": t, "parent": par, "calls": 10007, "total_ns": ns, "raw_total_ns": ns}
                        for t, par, ns in callers.get(p["stage"], [])]
        if p["callers"]:   # the stage's total is its callers' (the trees print the stage table's figures)
            p["total_ns"] = sum(c["total_ns"] for c in p["callers"])
    t0 = 1_000 * MS * PS
    doc["perf_schema"] = {
        "status": "collected", "thread_os_id": thread_os_id, "timer_start_ps": t0, "timer_end_ps": t0 + 200 * MS * PS,
        "threads": [{"thread_id": 20, "name": "thread/sql/one_connection", "processlist_id": 5,
                     "os_tid": conn_tid if thread_os_id else None}],
        "statements": [{"thread_id": 20, "event_id": 7, "timer_start": t0 + 10 * MS * PS,
                        "timer_end": t0 + 110 * MS * PS, "timer_wait": 100 * MS * PS,
                        "sql_text": "INSERT INTO emp_range_5 SELECT * FROM emp_src", "digest": "d",
                        "rows_affected": 10007, "rows_examined": 10007, "event_name": "statement/sql/insert_select"}],
        "stages": [{"thread_id": 20, "statement_event_id": 7, "event_name": "stage/sql/Sending data",
                    "timer_start": t0 + 12 * MS * PS, "timer_end": t0 + 108 * MS * PS, "timer_wait": 96 * MS * PS},
                   {"thread_id": 20, "statement_event_id": 7, "event_name": "stage/sql/init",
                    "timer_start": t0 + 10 * MS * PS, "timer_end": t0 + 12 * MS * PS, "timer_wait": 2 * MS * PS}],
        "deltas": {}, "connection": "root@/tmp/sock",
    }
    return doc


def printed(doc: dict, stage: str) -> int:
    """The stage table's total of a stage, as the reports print it."""
    return round(next(f.total_ns for f in Profile(doc).figures if f.stage == stage))


def test_tree_follows_the_recorded_nesting():
    (tree,) = [t.to_json() for t in Profile(capture()).attribution]
    assert tree["join"] == "thread" and tree["in_window_ns"] == 100 * MS
    sending = tree["stages"][0]
    assert sending["stage"] == "stage/sql/Sending data" and sending["ns"] == 96 * MS
    (root,) = sending["probed"]
    # its mean per call (4 us) is within the probes' doubt: the tree prints the table's bound, marked
    assert root["stage"] == "partition.write_row" and root["mark"] == "<"
    assert root["inclusive_ns"] == printed(capture(), "partition.write_row") >= 40 * MS
    assert [c["stage"] for c in root["children"]] == ["innodb.row_insert", "partition.get_partition_id"]
    assert root["exclusive_mark"] == "?"   # a bound less its callees is no figure
    assert root["children"][0]["inclusive_ns"] == 19 * MS and root["children"][0]["mark"] == ""
    # the partitions of partition.write_row, shared out to this node (5 partitions, about even)
    assert [p["id"] for p in root["partitions"]] == [0, 1, 2, 3, 4]
    assert sum(p["ns"] for p in root["partitions"]) == pytest.approx(root["inclusive_ns"], rel=1e-3)
    # the parts add up to the stage: probed + the probes' own cost + the rest
    assert root["inclusive_ns"] + sending["probe_cost_ns"] + sending["unexplained_ns"] == sending["ns"]
    assert sending["probe_cost_ns"] == 3 * 10007 * 1800
    # the other thread's row_insert is background work, not the statement's
    assert [b["stage"] for b in tree["background"]] == ["innodb.row_insert"]
    assert tree["background"][0]["inclusive_ns"] == 5 * MS


def test_stages_come_from_the_thread_summary_when_the_history_was_overrun():
    doc = capture()
    ps = doc["perf_schema"]
    ps["stages"] = []  # background threads pushed them out of events_stages_history_long
    ps["deltas"]["thread_stages"] = [
        {"name": "20 stage/sql/Sending data", "count": 1, "timer_ps": 96 * MS * PS},
        {"name": "20 stage/sql/init", "count": 1, "timer_ps": 2 * MS * PS},
        {"name": "8 stage/sql/closing tables", "count": 676, "timer_ps": 9 * MS * PS}]  # another thread's
    (tree,) = [t.to_json() for t in Profile(doc).attribution]
    assert tree["stages_from"] == "thread summary"
    assert [(s["stage"], s["ns"]) for s in tree["stages"]] == [("stage/sql/Sending data", 96 * MS),
                                                              ("stage/sql/init", 2 * MS)]
    assert tree["stages"][0]["probed"][0]["stage"] == "partition.write_row"
    assert "the stage history was overrun" in render_text(Profile(doc))
    assert Profile(capture()).attribution[0].stages_from == "history"


def test_without_a_linux_thread_id_the_window_goes_to_the_longest_write():
    (tree,) = [t.to_json() for t in Profile(capture(thread_os_id=False)).attribution]
    assert tree["join"].startswith("time window") and "the 0.20s window" in tree["join"]
    roots = {r["stage"]: r["inclusive_ns"] for r in tree["stages"][0]["probed"]}
    assert roots == {"partition.write_row": printed(capture(), "partition.write_row"), "innodb.row_insert": 5 * MS}
    assert tree["background"] == []


def test_only_calls_inside_the_partitioning_layer_show_partitions():
    edges = {("partition.write_row", None): {"ns": 30.0, "calls": 3},
             ("innodb.write_row", "partition.write_row"): {"ns": 20.0, "calls": 3},
             ("innodb.write_row", None): {"ns": 50.0, "calls": 7}}    # a table without partitions
    parts = {stage: [{"id": 0, "calls": 1, "total_ns": 10}, {"id": 1, "calls": 2, "total_ns": 10}]
             for stage in ("partition.write_row", "innodb.write_row")}
    roots = {r.stage: r for r in probe_tree(edges, parts)}
    assert [p.id for p in roots["partition.write_row"].partitions] == [0, 1]
    assert roots["partition.write_row"].children[0].partitions is not None
    assert roots["innodb.write_row"].partitions is None
    assert "partitions" not in roots["innodb.write_row"].to_json()      # nor in report --json


def test_shared_callees_are_shared_out_in_proportion():
    edges = {("a", None): {"ns": 30.0, "calls": 3}, ("b", None): {"ns": 10.0, "calls": 1},
             ("c", None): {"ns": 60.0, "calls": 6}, ("c", "a"): {"ns": 20.0, "calls": 2},
             ("d", "c"): {"ns": 40.0, "calls": 4}}
    roots = {r.stage: r for r in probe_tree(edges)}
    c_in_a = roots["a"].children[0]
    assert c_in_a.stage == "c" and c_in_a.children[0].inclusive_ns == 10  # 40 * 20 / 80
    assert roots["c"].children[0].inclusive_ns == 30
    assert roots["c"].per(10).children[0].inclusive_ns == 3 and roots["c"].per(10).calls == 0.6


def test_report_shows_the_tree_and_no_tree_without_perf_schema():
    text = render_text(Profile(capture()))
    assert "where the time went" in text and "the probes themselves (calibrated)" in text
    assert "by partition: p0 20.0% p1 20.0%" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    doc = capture()
    doc["perf_schema"] = {"status": "unavailable", "reason": "cannot connect"}
    assert Profile(doc).attribution == [] and "where the time went" not in render_text(Profile(doc))


@pytest.mark.parametrize("status", ["off", "not requested"])
def test_no_attribution_without_collected_perf_schema(status):
    doc = capture()
    doc["perf_schema"] = {"status": status}
    assert Profile(doc).attribution == []


def test_a_threads_statements_are_taken_together():
    doc = capture()
    ps = doc["perf_schema"]
    t0 = ps["timer_start_ps"]
    # the same connection ran a shorter insert before: the probes count per thread, not per statement
    ps["statements"].append({**ps["statements"][0], "event_id": 3, "timer_start": t0 + 1 * MS * PS,
                             "timer_end": t0 + 9 * MS * PS, "timer_wait": 8 * MS * PS,
                             "sql_text": "INSERT INTO emp_src SELECT 1"})
    ps["stages"].append({"thread_id": 20, "statement_event_id": 3, "event_name": "stage/sql/Sending data",
                         "timer_start": t0 + 2 * MS * PS, "timer_end": t0 + 8 * MS * PS, "timer_wait": 6 * MS * PS})
    (tree,) = [t.to_json() for t in Profile(doc).attribution]
    assert tree["statement"].startswith("INSERT INTO emp_range_5") and tree["statements"] == 2
    assert tree["join"] == "thread" and tree["in_window_ns"] == 108 * MS
    sending = tree["stages"][0]
    assert sending["stage"] == "stage/sql/Sending data" and sending["ns"] == 102 * MS
    assert sending["probed"][0]["inclusive_ns"] == printed(doc, "partition.write_row")
    assert "(and 1 other statement of its thread in the window" in render_text(Profile(doc))


def test_probed_time_stays_under_a_statement_whose_stages_were_all_lost():
    doc = capture()
    doc["perf_schema"]["stages"] = []   # history overrun, and the thread ended: no summary either
    (tree,) = [t.to_json() for t in Profile(doc).attribution]
    assert tree["stages_from"] == "none"
    (only,) = tree["stages"]
    assert only["stage"] == "(stages not kept by P_S)" and only["ns"] == 100 * MS
    assert only["probed"][0]["stage"] == "partition.write_row"
    assert only["probed"][0]["inclusive_ns"] == printed(doc, "partition.write_row")
    assert "P_S kept none of its stages" in " ".join(render_text(Profile(doc)).split())


def test_threads_that_ended_in_the_window_keep_their_linux_thread_id():
    start = [{"thread_id": 20, "name": "thread/sql/one_connection", "processlist_id": 5, "os_tid": 4242},
             {"thread_id": 21, "name": "thread/sql/one_connection", "processlist_id": 6, "os_tid": 4243}]
    end = [{"thread_id": 21, "name": "thread/sql/one_connection", "processlist_id": 6, "os_tid": 4243},
           {"thread_id": 22, "name": "thread/sql/one_connection", "processlist_id": 7, "os_tid": 4244}]
    assert [t["os_tid"] for t in merge_threads(start, end)] == [4242, 4243, 4244]


def test_the_tree_prints_each_stage_as_the_stage_table_does():
    text = render_text(Profile(capture()))
    rows = text[text.index("\nstage "):text.index("not called in the window")].splitlines()[2:]
    table = {line.split()[0].rstrip("*"): line.split()[3] for line in rows}
    tree = text[text.index("where the time went"):]
    write_row = next(line for line in tree.splitlines() if line.strip().startswith("partition.write_row"))
    assert table["partition.write_row"] == "<46ms" and write_row.split()[1] == "<46ms"
    assert "(self ?)" in write_row   # a bound less its callees: no figure
    # the statement's rest is no figure under a bound either
    rest = next(line for line in tree.splitlines() if "not in probed functions" in line)
    assert rest.split()[-2:] == ["?", "?"]


def test_the_statement_probe_leaves_the_tree_and_its_callees_go_to_its_caller():
    from mysqlprobe.analysis.attribution import without
    edges = {("sql.statement", None): {"ns": 900.0, "calls": 1}, ("partition.write_row", "sql.statement"):
             {"ns": 400.0, "calls": 10}, ("innodb.row_insert", "partition.write_row"): {"ns": 300.0, "calls": 10}}
    assert without(edges, {"sql.statement"}) == {
        ("partition.write_row", None): {"ns": 400.0, "calls": 10}, ("innodb.row_insert", "partition.write_row"):
        {"ns": 300.0, "calls": 10}}
    assert set(without(edges, {"partition.write_row"})) == {("sql.statement", None), ("innodb.row_insert", "sql.statement")}


def test_a_withheld_stage_stays_in_the_tree_with_its_calls_and_no_time():
    from mysqlprobe.analysis.attribution import attribute
    (tree,) = [t.to_json() for t in attribute(Profile(capture()), {}, figures={"partition.write_row": (None, "?")})]
    (root,) = tree["stages"][0]["probed"]
    assert root["stage"] == "partition.write_row" and root["mark"] == "?" and root["calls"] == 10007
    assert tree["stages"][0]["unexplained_mark"] == "?"
    text = render_text(Profile(capture()))
    assert "partition.write_row" in text
