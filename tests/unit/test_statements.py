"""Per statement digest, on saved captures (no root): the kernel's statement
shapes merged by normalized text, joined to P_S's digests, per execution;
and the per-thread tree's honesty where P_S's history fell short."""

import copy

import pytest

from mysqlprobe.analysis.headline import digest_headlines
from mysqlprobe.analysis.html_report import render_html
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.report import render_text
from mysqlprobe.analysis.statements import join_digest
from mysqlprobe.collectors.uprobes.latency import statement_text
from mysqlprobe.collectors.uprobes.session import StatementCounts
from mysqlprobe.probes.abi import COM_QUERY, COM_STMT_EXECUTE, STMT_KEY_NO_TEXT
from mysqlprobe.sqltext import join_key
from test_attribution import MS, capture

US = 1000


def test_normalized_texts_join_each_servers_digest_text():
    ours = "INSERT INTO sbtest1 (id, k, c, pad) VALUES (?, ...)"
    assert join_key(ours) == join_key("INSERT INTO `sbtest1` ( ID , `k` , `c` , `pad` ) VALUES (...) ")  # MariaDB
    assert join_key(ours) == join_key("INSERT INTO `sbtest1` ( `id` , `k` , `c` , `pad` ) VALUES (...) /* , ... */")
    assert join_key("SELECT c FROM t WHERE id IN (?, ...)") == join_key("SELECT `c` FROM `t` WHERE `id` IN (...)")
    assert join_key("SELECT c FROM t WHERE id = ?") != join_key("SELECT c FROM t WHERE k = ?")


def test_a_cut_text_joins_by_prefix_and_only_when_one_digest_fits():
    rows = [{"name": "UPDATE `sbtest1` SET `k` = `k` + ? WHERE `id` = ?", "count": 5},
            {"name": "UPDATE `sbtest1` SET `c` = ? WHERE `id` = ?", "count": 7}]
    assert join_digest("UPDATE sbtest1 SET k = k + ? \u2026", rows)["count"] == 5
    assert join_digest("UPDATE sbtest1 SET \u2026", rows) is None  # both fit: no guess


def counts(text: bytes, complete=True, command=COM_QUERY):
    return StatementCounts(command, text, complete, 1, 1000, [0] * 160, 0, 0)


def test_a_cut_text_keeps_no_literal():
    cut = counts(b"INSERT INTO t (id, c) VALUES (5, 'secret-value-that-was-c", complete=False)
    text = statement_text(cut, 0x1234, full_sql=False)
    assert text == "INSERT INTO t (id, c) VALUES (?, \u2026" and "secret" not in text
    assert statement_text(counts(b"SELECT 1"), 0x1, full_sql=True) == "SELECT 1"
    execute = counts(b"", command=COM_STMT_EXECUTE)
    assert statement_text(execute, STMT_KEY_NO_TEXT | (COM_STMT_EXECUTE << 32) | 42, False) == \
        "(Execute of prepared statement #42)"


def with_statements(probed_ns=(30 * US, 20 * US), latency_ns=100 * US, probe_cost_ns=4 * US):
    """Two kernel shapes of one INSERT digest (value lists of two lengths),
    100 executions each: write_row holding row_insert, P_S's summary of it."""
    doc = capture()
    ids = {p["stage"]: p["id"] for p in doc["probes"]}
    outer, inner = probed_ns
    n = 100
    shape = {"command": 3, "text_complete": True, "executions": n, "total_ns": latency_ns * n,
             "histogram": [{"low": 98304, "high": 114688, "count": n}], "probe_hits": 4 * n,
             "probe_cost_ns": probe_cost_ns * n,
             "calls": [{"probe": ids["partition.write_row"], "parent": None, "calls": n, "total_ns": outer * n,
                        "raw_total_ns": outer * n},
                       {"probe": ids["innodb.row_insert"], "parent": ids["partition.write_row"], "calls": n,
                        "total_ns": inner * n, "raw_total_ns": inner * n}]}
    doc["statements"] = {"probe": ids["partition.write_row"], "text": "normalized", "shapes": [
        {**copy.deepcopy(shape), "key": "0x1", "text": "INSERT INTO t VALUES (?, ...)"},
        {**copy.deepcopy(shape), "key": "0x2", "text": "INSERT INTO t VALUES (?, ...)"}]}
    doc["perf_schema"]["deltas"] = {"digests": [{"name": "INSERT INTO `t` VALUES (...) ", "count": 211,
                                                 "timer_ps": 211 * 90 * US * 1000, "rows_affected": 422,
                                                 "rows_examined": 0}]}
    return doc


def test_shapes_of_one_digest_merge_and_add_up_per_execution():
    (d,) = [d.to_json() for d in Profile(with_statements()).by_digest]
    own_probe = d["probe_cost_ns"] - 4 * US  # the statement probe's own part
    assert d["executions"] == 211 and d["executions_from"] == "P_S digest summary"
    assert d["executions_probed"] == 200 and d["rows_per_execution"] == 2.0
    assert d["ps_mean_ns"] == 90 * US  # the server's timer, beside the probes' own measure
    assert d["raw_mean_ns"] == 100 * US and d["mean_ns"] == 100 * US - 4 * US - own_probe
    assert [(f["stage"], f["inclusive_ns"], f["exclusive_ns"], f["calls"]) for f in d["functions"]] == [
        ("partition.write_row", 30 * US, 10 * US, 1.0), ("innodb.row_insert", 20 * US, 20 * US, 1.0)]
    assert d["unattributed_ns"] == d["mean_ns"] - 30 * US
    assert 30 * US + d["probe_cost_ns"] + d["unattributed_ns"] == d["raw_mean_ns"]
    text = render_text(Profile(with_statements()))
    assert "211 executions (P_S digest summary), 2 rows changed each" in " ".join(text.split())
    assert "P_S's timer over all of them: 90us" in " ".join(text.split())


def test_probed_calls_fall_under_the_stage_they_began_in():
    doc = with_statements()
    doc["perf_schema"]["stage_names"] = ["stage/sql/init", "stage/sql/update"]
    for shape in doc["statements"]["shapes"]:
        for c in shape["calls"]:
            c["stage"] = 2  # began in stage/sql/update
        # and a call before any stage began in the statement: 5 us a call
        shape["calls"].append({**shape["calls"][1], "parent": None, "stage": None, "total_ns": 5 * US * 100})
    (d,) = [d.to_json() for d in Profile(doc).by_digest]
    by_stage = {s["stage"]: [(n["stage"], n["inclusive_ns"]) for n in s["probed"]] for s in d["stages"]}
    assert by_stage == {"stage/sql/update": [("partition.write_row", 30 * US)],
                        "stage unknown": [("innodb.row_insert", 5 * US)]}
    assert [s["stage"] for s in d["stages"]][-1] == "stage unknown"
    text = " ".join(render_text(Profile(doc)).split())
    assert "stage/sql/update partition.write_row 30us" in text and "stage unknown innodb.row_insert 5us" in text


def test_more_probed_time_than_the_statement_is_said_not_printed_negative():
    (d,) = [d.to_json() for d in Profile(with_statements(probed_ns=(120 * US, 20 * US))).by_digest]
    assert d["unattributed_ns"] == 0 and "exceeds the statement's" in d["notes"][0]
    report = render_text(Profile(with_statements(probed_ns=(120 * US, 20 * US))))
    block = report[report.index("per statement digest"):]
    shares = [float(w[:-1]) for w in block.split() if w.endswith("%") and w[:-1].replace(".", "").isdigit()]
    assert shares and all(0 <= s <= 100 for s in shares)


def test_callees_longer_than_their_caller_are_said_not_printed_negative():
    # each probed time is corrected on its own: row_insert came to 3 us more than the write_row around it
    (d,) = [d.to_json() for d in Profile(with_statements(probed_ns=(20 * US, 23 * US))).by_digest]
    (write_row,) = d["tree"]
    assert write_row["exclusive_ns"] == 0 and write_row["callees_exceed_ns"] == 3 * US
    assert all(f["exclusive_ns"] >= 0 for f in d["functions"])
    report = render_text(Profile(with_statements(probed_ns=(20 * US, 23 * US))))
    assert "(self n/a)" in report and "self -" not in report
    assert "(its probed callees come to 3us more than it" in " ".join(report.split())


def test_a_statement_shorter_than_its_probes_cost_is_said_not_printed_negative():
    # COM_QUIT under sysbench: 4.0 us measured, 4.2 us of calibrated probe cost
    (d,) = [d.to_json() for d in Profile(with_statements(probed_ns=(0, 0), latency_ns=2 * US, probe_cost_ns=3 * US)).by_digest]
    assert d["mean_ns"] == 0 and d["unattributed_ns"] == 0
    assert "calibrated cost exceeds the statement's measured time" in d["notes"][0]
    text = " ".join(render_text(Profile(with_statements(probed_ns=(0, 0), latency_ns=2 * US,
                                                        probe_cost_ns=3 * US))).split())
    assert "0ns each without the probes" not in text and "? each without the probes" in text
    assert "? below 0 once the probes' calibrated cost was taken off" in text


def test_a_probed_time_below_zero_is_shown_withheld():
    # the probes' calibrated cost taken off more than write_row took: -5 us
    text = render_text(Profile(with_statements(probed_ns=(-5 * US, 0))))
    block = text[text.index("per statement digest"):]
    line = next(x for x in block.splitlines() if x.strip().startswith("partition.write_row"))
    assert line.split()[1:3] == ["?", "?"] and "-" not in line.split()[1]
    assert "? below 0 once the probes' calibrated cost was taken off" in " ".join(block.split())


def test_a_thread_with_more_statements_than_the_history_kept_gets_no_probed_tree():
    doc = capture()
    for p in doc["probes"]:  # ten times the statement's 100 ms in probed calls
        for c in p["callers"]:
            c["total_ns"] = c["raw_total_ns"] = c["total_ns"] * 50
    (tree,) = [t.to_json() for t in Profile(doc).attribution]
    assert tree["history_short"] and all(not st["probed"] for st in tree["stages"])
    assert "more statements than P_S's history kept" in " ".join(render_text(Profile(doc)).split())


def test_background_is_what_p_s_calls_background():
    doc = copy.deepcopy(capture())
    ps = doc["perf_schema"]
    ps["threads"][0]["type"] = "FOREGROUND"
    ps["threads"] += [{"thread_id": 21, "name": "thread/sql/one_connection", "processlist_id": 6,
                       "os_tid": 4250, "type": "FOREGROUND"},
                      {"thread_id": 2, "name": "thread/innodb/page_cleaner_thread", "processlist_id": None,
                       "os_tid": 4260, "type": "BACKGROUND"}]
    for p in doc["probes"]:
        if p["stage"] == "innodb.row_insert":
            p["callers"].append({"tid": 4260, "parent": None, "calls": 3, "total_ns": 2 * MS, "raw_total_ns": 2 * MS})
            p["total_ns"] += 2 * MS
    (tree,) = [t.to_json() for t in Profile(doc).attribution]
    # 4250 (another connection, 5 ms) is not background; the page cleaner (2 ms) is
    assert tree["background_from"] == "P_S threads.TYPE"
    assert [(n["stage"], n["inclusive_ns"]) for n in tree["background"]] == [("innodb.row_insert", 2 * MS)]


def two_digests(update_probed_ns=(10 * US, 4 * US)):
    """with_statements' INSERT (2 rows each, 30 us probed of 96 us), and an
    UPDATE of one row (write_row holding row_insert as update_probed_ns)."""
    doc = with_statements()
    update = copy.deepcopy(doc["statements"]["shapes"][0])
    outer, inner = update_probed_ns
    update.update(key="0x3", text="UPDATE t SET c = ? WHERE id = ?", total_ns=50 * US * 100)
    update["calls"][0]["total_ns"] = update["calls"][0]["raw_total_ns"] = outer * 100
    update["calls"][1]["total_ns"] = update["calls"][1]["raw_total_ns"] = inner * 100
    doc["statements"]["shapes"].append(update)
    doc["perf_schema"]["deltas"]["digests"].append(
        {"name": "UPDATE `t` SET `c` = ? WHERE `id` = ? ", "count": 100, "timer_ps": 100 * 45 * US * 1000,
         "rows_affected": 100, "rows_examined": 100})
    return doc


def test_a_mixed_load_gets_a_headline_block_per_digest_that_adds_up():
    profile = Profile(two_digests())
    insert, update = digest_headlines(profile)
    assert insert.text.startswith("INSERT") and insert.per == "row" and insert.rows_each == 2.0
    by_insert = {p.stage: p.ns_per_row for p in insert.parts}
    # per row: the execution's exclusive times over its two rows
    assert by_insert == {"innodb.row_insert": 10 * US, "partition.write_row (self)": 5 * US}
    assert update.rows_each == 1.0 and {p.stage: p.ns_per_row for p in update.parts} == {
        "partition.write_row (self)": 6 * US, "innodb.row_insert": 4 * US}
    for d in (insert, update):   # the parts and the rest are the statement's time without the probes, per row
        assert sum(p.ns_per_row for p in d.parts) + d.not_probed.ns_per_row == \
            pytest.approx(d.unprobed_ns / d.rows_each)
        assert sum(p.share for p in d.parts) + d.not_probed.share == pytest.approx(1.0)
    text = render_text(profile)
    head = text[:text.index("mysqlprobe insert profile")]
    assert "per statement digest" in head and "UPDATE `t` SET `c` = ? WHERE `id` = ?" in head
    assert "100 executions (P_S digest summary), 1 row each" in " ".join(head.split())
    html = render_html(profile)
    assert html.count("class='card digest'") == 2


def test_one_digest_is_the_windows_block_and_gets_none_of_its_own():
    assert digest_headlines(Profile(with_statements())) == []


def test_a_digest_whose_parts_pass_its_time_shows_none_of_them():
    # the UPDATE's probed functions (70 us) exceed its 50 us less the probes' cost
    _, update = digest_headlines(Profile(two_digests(update_probed_ns=(70 * US, 4 * US))))
    assert update.not_probed is None
    head = render_text(Profile(two_digests(update_probed_ns=(70 * US, 4 * US))))
    block = " ".join(head[head.index("UPDATE `t`"):head.index("mysqlprobe insert profile")].split())
    assert "came to more than the statement's: not shown" in block and "70us" not in block


@pytest.mark.parametrize("text, admin", [
    ("USE `mysqlprobe_load`", True), ("SET autocommit = ?", True), ("SHOW GLOBAL STATUS", True),
    ("SELECT @@version_comment LIMIT ?", True), ("(Ping)", True), ("(Quit)", True),
    ("INSERT INTO emp_range_5 SELECT * FROM emp_src", False), ("COMMIT", False),
    ("SELECT c FROM sbtest1 WHERE id = ?", False), ("UPDATE sbtest1 SET k = k + ? WHERE id = ?", False),
])
def test_a_sessions_own_setup_is_not_the_loads_statement(text, admin):
    """The demo's only digest block was its session's USE: the subject is the load's statements."""
    from mysqlprobe.analysis.statements import administrative
    assert administrative(text) is admin
