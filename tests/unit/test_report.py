"""Capture building and the text report, on a synthetic run with known
counts; the report is compared with a golden file, checked by eye when
the report's format changes and rewritten then by hand, never by the run
that checks it."""

import json
from pathlib import Path

import pytest

from mysqlprobe import capture
from mysqlprobe.analysis import histogram as H
from mysqlprobe.probes.histogram import Histogram
from mysqlprobe.analysis.html_report import render_html
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.prometheus import exposition
from mysqlprobe.analysis.per_call import sampled_per_call
from mysqlprobe.analysis.report import render_text
from mysqlprobe.analysis.sampling import Estimate
from mysqlprobe.catalog import PartitionSource
from mysqlprobe.collectors.base import Cost, Section
from mysqlprobe.collectors.uprobes.calibration import Calibration, ClassCost
from mysqlprobe.collectors.uprobes.latency import probe_record
from mysqlprobe.collectors.kernel.process import ProcessSnapshot, window_record
from mysqlprobe.collectors.target.symbols import ResolvedSymbol
from mysqlprobe.collectors.uprobes.session import PartCounts, ProbeCounts, ProbeSpec, Snapshot
from mysqlprobe.errors import CaptureError
from mysqlprobe.recorder.recorder import assemble

GOLDEN = Path(__file__).parents[1] / "golden" / "report_insert_profile.txt"
ROWS = 10007


def _hist(*values_counts):
    return Histogram.of_values([v for v, n in values_counts for _ in range(n)])


def _sym(name, sig, addr):
    return ResolvedSymbol(name, sig, "_Z" + name, addr, addr - 0x400000, "local")


def process_window():
    start = ProcessSnapshot(10.0, 1.0, 0.5, 100, 5, 0, 4096, 512 << 20, 3, {4242: 1.0, 4243: 0.5, 4244: 0.0},
                            {"user": 100.0, "system": 50.0, "idle": 800.0, "iowait": 10.0, "steal": 0.0}, {})
    end = ProcessSnapshot(11.5, 2.2, 0.8, 160, 9, 0, 4096 + (12 << 20), 520 << 20, 3,
                          {4242: 2.3, 4243: 0.5, 4244: 0.0},
                          {"user": 101.5, "system": 50.3, "idle": 801.0, "iowait": 10.2, "steal": 0.0},
                          {4242: "one_connection", 4243: "ib_pg_cleaner", 4244: "mysqld"})
    return window_record(start, end)


def synthetic_run(sampling=None):
    parts = [2002, 2001, 2002, 2001, 2001]
    cal = Calibration({"emulated": ClassCost(800, 1000, 700, 50), "single-step": ClassCost(10000, 1000, 9900, 300)},
                      5, 1.0, 3)
    costs = dict(entry_class="emulated", cost_class=1)
    specs = [
        ProbeSpec(0, _sym("ha_partition::write_row", "ha_partition::write_row(unsigned char*)", 0x500000),
                  "partition.write_row", **costs),
        ProbeSpec(1, _sym("get_partition_id_range", "get_partition_id_range(partition_info*, unsigned int*, "
                          "long long*)", 0x510000), "partition.get_partition_id", PartitionSource("out", 1), **costs),
        ProbeSpec(2, _sym("row_insert_for_mysql", "row_insert_for_mysql(unsigned char const*, row_prebuilt_t*)",
                          0x520000), "innodb.row_insert", **costs),
        ProbeSpec(3, _sym("page_zip_compress", "page_zip_compress(...)", 0x530000), "innodb.page_compress",
                  **costs),
    ]

    def counts(ns, corrected_ns, calls, slow=0, slow_ns=0):
        return dict(calls=calls, total_ns=calls * ns + slow * slow_ns, hist=_hist((ns, calls - slow), (slow_ns, slow)),
                    corrected_ns=calls * corrected_ns, chist=_hist((corrected_ns, calls)))

    def per_part(ns, corrected_ns):
        return {i: PartCounts(**counts(ns, corrected_ns, n)) for i, n in enumerate(parts)}
    probes = {
        0: ProbeCounts(nested_hits=ROWS * 8, partitions=per_part(9000, 4000),
                       callers={(4242, None): (ROWS, ROWS * 9000, ROWS * 4000)},
                       **counts(9000, 4000, ROWS, 7, 150_000)),
        1: ProbeCounts(partitions=per_part(800, 100), **counts(800, 100, ROWS)),
        2: ProbeCounts(partitions=per_part(2600, 1900), **counts(2600, 1900, ROWS, 100, 40_000)),
        3: ProbeCounts(),
    }
    snap = Snapshot(probes, {"entries": 4 * ROWS, "returns": 4 * ROWS, "unmatched_returns": 0,
                             "lost_frames": 2, "depth_overflow": 0, "no_stack": 0, "partition_read_errors": 0})
    target = {"pid": 4242, "comm": "mysqld", "binary": "/opt/mariadb-10.2.11/bin/mysqld", "binary_deleted": False,
              "build_id": None, "pie": False, "symbols": ".symtab",
              "server": {"family": "mariadb", "version": "10.2.11", "line": "mariadb"}}
    window = {"start": "2026-11-22T03:00:00.000Z", "duration_s": 1.5, "requested_s": None, "ended_by": "interrupt"}
    return recorded(target, window, specs, snap, cal, sampling)


def recorded(target, window, specs, snap, cal, sampling=None, process=None, attached=8) -> dict:
    """The document the recorder assembles from these collectors' sections."""
    probes = [probe_record(s, snap.probes.get(s.index), cal, True) for s in specs]
    engine = {"probes_attached": attached, "links": "perf_event", "counters": snap.counters, "timings": {}}
    sections = [Section("latency", {"probes": probes, "engine": engine, "latencies": "corrected" if cal else "raw"},
                        cost=Cost(target_s=0.054, method="probe hits x their calibrated cost per hit")),
                Section("process", {"process": process or process_window()})]
    if cal:
        sections.append(Section("calibration", {"calibration": cal.to_json()}))
    head = {"target": target, "window": window, "sampling": sampling or {"mode": "exact"},
            "unavailable": [{"stage": "innodb.page_verify", "reason": "inlined"}]}
    return assemble(["mysqlprobe"], head, sections, {}, []).doc


def test_report_matches_golden_file():
    text = render_text(Profile(synthetic_run()))
    assert text == GOLDEN.read_text()
    assert max(len(line) for line in text.splitlines()) <= 80


def test_profile_document_fields():
    doc = synthetic_run()
    assert doc["schema"] == "mysqlprobe.profile" and doc["schema_version"] == 3
    # what was recorded, nothing derived from it
    assert not {"stages", "attribution", "overhead"} & set(doc)
    assert not {"mean_ns", "percentiles_ns", "overhead_ns", "threads"} & set(doc["probes"][0])
    assert doc["collectors"]["latency"]["cost"]["target_s"] == 0.054
    profile = Profile(doc)
    typed = profile.probes[0]
    assert (typed.stage, typed.calls, typed.latency.histogram.calls) == ("partition.write_row", ROWS, ROWS)
    assert typed.raw.total_ns == ROWS * 9000 + 7 * 150_000 and typed.top_level and typed.entry_class == "emulated"
    wr = profile.to_json()["probes"][0]
    assert wr["symbol"] == "ha_partition::write_row(unsigned char*)" and wr["calls"] == ROWS
    assert sum(b["count"] for b in wr["histogram"]) == ROWS
    assert all(b["low"] < b["high"] for b in wr["histogram"])
    assert sum(p["calls"] for p in wr["partitions"]) == ROWS
    assert wr["threads"] == [{"tid": 4242, "calls": ROWS, "total_ns": ROWS * 4000, "raw_total_ns": ROWS * 9000}]
    assert wr["mean_ns"] == 4000 and wr["raw"]["mean_ns"] > 9000
    assert wr["overhead_ns"] == ROWS * 1800
    # the probes' cost is one figure: the latency collector's own measure (probe hits x calibrated cost,
    # with the in-situ factor and the switch program where it has them), not the probes' sum beside it
    assert profile.overhead.estimated_ns == pytest.approx(0.054e9)
    assert sum(p.overhead_ns for p in profile.probes) == 3 * ROWS * 1800
    assert profile.overhead.by_collector["latency"]["target_s"] == 0.054
    assert doc["calibration"]["classes"]["single-step"]["entry_ns"] == 10000
    stages = {s["stage"]: s for s in profile.stage_records}
    assert stages["partition.get_partition_id"]["partition_source"] == "*argument 1 at return"
    assert stages["innodb.row_insert"]["calls_per_s"] == pytest.approx(ROWS / 1.5, rel=1e-3)
    assert stages["innodb.page_compress"]["calls"] == 0
    gpi = stages["partition.get_partition_id"]        # 100 ns under 1.8 us of probes: a bound
    assert gpi["mean_ns_ci95"][0] == 0 and gpi["mean_ns_ci95"][1] > gpi["mean_ns"] >= 0
    assert "calibrated cost" in gpi["mean_method"] and gpi["mean_resolved"] is False
    assert stages["partition.write_row"]["raw"]["total_ns"] == ROWS * 9000 + 7 * 150_000
    assert stages["partition.write_row"]["total_ns"] == ROWS * 4000
    proc = doc["process"]
    assert proc["cpu_user_s"] == pytest.approx(1.2) and proc["cpu_cores"] == pytest.approx(1.0)
    assert proc["ctx_switches_voluntary"] == 60 and proc["write_bytes"] == 12 << 20
    assert proc["busiest_threads"][0]["tid"] == 4242 and proc["busiest_threads"][0]["cpu_s"] == pytest.approx(1.3)
    assert proc["host_cpu_share"]["user"] == pytest.approx(0.5)


FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize("name", ["exact", "sampled"])
def test_a_schema_1_capture_reports_as_it_did(name):
    """Captures written before schema 2 (fixtures saved by that version) report
    as a capture of today does (the goldens follow the report's format), their
    stored derived fields unused."""
    doc = capture.read_profile(str(FIXTURES / f"profile_v1_{name}.json"))
    assert doc["schema_version"] == 1 and "stages" in doc
    golden = GOLDEN.with_name(f"report_v1_{name}.txt")
    assert render_text(Profile(doc)) == golden.read_text()
    doc["stages"], doc["attribution"], doc["overhead"] = [], [{"bogus": 1}], {"estimated_ns": 1}
    assert render_text(Profile(doc)) == golden.read_text()   # derived again, not read
    if name == "exact":
        assert render_html(Profile(doc)) == GOLDEN.with_name("report_v1_exact.html").read_text()


def sampled_run() -> dict:
    """The synthetic capture in sampled mode: three duty cycles, rows counted."""
    third = [ROWS // 3, ROWS // 3, ROWS - 2 * (ROWS // 3)]
    cycles = [{"on_s": 0.1, "probe_s": 0.001, "calls": [n, n, n, 0], "rows": 3000 + i,
               "row_calls": [n - 5.5, n - 5, n - 5, 0], "row_s": 0.09, "lost_s": 0.01, "unprobed_rows_per_s": 3e4}
              for i, n in enumerate(third)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3, "lost_s": 0.03,
                         "cost_uncertainty": 0.1, "calls_per_cycle": cycles})
    doc["window"]["rows_changed"] = 50021
    return doc


def test_report_of_a_saved_capture_prints_what_the_live_run_printed(tmp_path):
    doc = sampled_run()
    live = render_text(Profile(capture.as_json(doc)))
    capture.write_capture(str(tmp_path), capture.Capture(doc))
    assert render_text(Profile(capture.read_profile(str(tmp_path)))) == live
    assert "~ = estimate scaled by the server's rows changed" in live


def test_a_cycle_whose_rows_were_read_far_from_its_calls_is_left_out_of_calls_per_row():
    """Each cycle's calls per row sets the calls read around a status query
    against the rows it read; a read 0.3 s wide (the query held up, or this
    process waiting for a CPU) leaves those rows anywhere in it. Such a
    cycle once made a window's estimate 2.64 times the server's count."""
    third = [ROWS // 3, ROWS // 3, ROWS - 2 * (ROWS // 3)]
    tight, wide = [0.001, 0.001], [0.3, 0.01]
    cycles = [{"on_s": 0.1, "probe_s": 0.001, "calls": [n, n, n, 0], "rows": rows, "row_calls": [r] * 3 + [0],
               "row_s": row_s, "read_s": read_s, "lost_s": 0.01, "unprobed_rows_per_s": 3e4}
              for n, rows, r, row_s, read_s in zip(third, (3000, 3000, 1000), (3000, 3000, 2640),
                                                   (0.09, 0.09, 0.35), (tight, tight, wide))]
    sampling = {"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3, "lost_s": 0.03,
                "cost_uncertainty": 0.1, "calls_per_cycle": cycles}
    doc = synthetic_run(sampling)
    doc["window"]["rows_changed"] = 100_000

    def row_insert(d):
        profile = Profile(capture.as_json(d))
        return {s["stage"]: s for s in profile.stage_records}["innodb.row_insert"], render_text(profile)
    stage, text = row_insert(doc)
    assert stage["estimated_calls"]["value"] == pytest.approx(100_000)  # one call per row, as in the tight cycles
    assert "1 of 3 cycles left out of calls per row" in text and "scaled by the server's rows changed" in text
    cycles = doc["sampling"]["calls_per_cycle"]
    cycles[2]["read_s"] = [0.03, 0.01]                                    # within a quarter of its span: kept
    stage, text = row_insert(doc)
    assert stage["estimated_calls"]["value"] == pytest.approx(100_000 * 8640 / 7000)
    assert "left out" not in text
    for c in cycles:                                                      # every cycle misread: by time
        c["read_s"] = [0.1, 0.1]
    stage, text = row_insert(doc)
    assert "3 of 3 cycles left out" in text and "~ = estimate scaled by time" in text
    doc["window"]["rows_changed"] = None                                  # as a window without a row counter
    assert stage["estimated_calls"] == row_insert(doc)[0]["estimated_calls"]


def test_capture_round_trip_and_errors(tmp_path):
    doc = synthetic_run()
    (path, *_) = capture.write_capture(str(tmp_path / "run"), capture.Capture(doc))
    assert capture.read_profile(str(tmp_path / "run")) == json.loads(Path(path).read_text())
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(CaptureError, match="not JSON"):
        capture.read_profile(str(tmp_path / "bad.json"))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "mysqlprobe.profile", "schema_version": 99}))
    with pytest.raises(CaptureError, match="schema version 99"):
        capture.read_profile(str(tmp_path / "other.json"))
    with pytest.raises(CaptureError, match="no such capture"):
        capture.read_profile(str(tmp_path / "missing"))


def test_sampled_run_reports_estimates():
    # 3 cycles of 0.1 s in a 1.5 s window, each counting a third of the calls
    third = [ROWS // 3, ROWS // 3, ROWS - 2 * (ROWS // 3)]
    cycles = [{"on_s": 0.1, "probe_s": 0.0, "calls": [n, n, n, 0]} for n in third]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3,
                         "calls_per_cycle": cycles})
    stages = {s["stage"]: s for s in Profile(doc).stage_records}
    est = stages["innodb.row_insert"]["estimated_calls"]
    assert est["value"] == pytest.approx(ROWS * 5, rel=1e-6)  # counted in a fifth of the window
    assert est["ci95"][0] <= est["value"] <= est["ci95"][1]
    assert Profile(doc).probe_calls(2).value == pytest.approx(ROWS * 5, rel=1e-6)
    assert Profile(doc).to_json()["probes"][2]["estimated_calls"]["value"] == pytest.approx(ROWS * 5, rel=1e-6)
    assert stages["innodb.row_insert"]["share_of_window"] == pytest.approx(5 * ROWS * 1900 / 1.5e9, rel=1e-3)
    text = render_text(Profile(doc))
    assert "sampling probes on 20.0% of the window (3 cycles" in text and "95% intervals below" in text
    # no row counter, so no in-situ factor: its percentiles are within the probes' doubt (*)
    row = next(line for line in text.splitlines() if line.startswith("innodb.row_insert* "))
    assert row.split()[1] == "~50k"                                   # estimates to three figures
    low, high = (f"{x:,.0f}" for x in est["ci95"])
    assert f"  ~50,035 calls in the window, 95% interval {low} to {high} (+-0%)" in text
    assert "--exact counts every call" not in text                    # the cycles agree: no advice
    page = render_html(Profile(doc))
    assert "<th>95% interval</th>" in page and f"<td>{low} to {high}</td>" in page
    assert "95% interval" not in render_html(Profile(synthetic_run()))        # exact: every call counted


def test_the_timeline_draws_each_phases_rate_and_the_main_stages_latency():
    from html.parser import HTMLParser
    from mysqlprobe.analysis.timeline import ON, QUIET, timeline

    # 3 cycles of 0.1 s on, each followed by 0.4 s off (the second quiet); rows read over the whole on-phase
    cycles = [{"at_s": 0.5 * i, "on_s": 0.1, "row_s": 0.1, "rows": rows, "probe_s": 0.0,
               "calls": [rows, rows, rows, 0], "ns": [rows * 4000, rows * 100, rows * us, 0],
               "off": [{"at_s": 0.5 * i + 0.1, "s": 0.4, "rows": 4 * rows * 2, "quiet": i == 1}]}
              for i, (rows, us) in enumerate(((1009, 1900), (1013, 2100), (1019, 2000)))]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3,
                         "calls_per_cycle": cycles})
    profile = Profile(doc)
    t = timeline(profile)
    assert t is not None and [p.kind for p in t.phases] == [ON, "off", ON, QUIET, ON, "off"]
    assert t.phases[0].rows_per_s == pytest.approx(10090) and t.phases[1].rows_per_s == pytest.approx(20180)
    assert t.stage == "innodb.row_insert"   # the most time (write_row's figure is only a bound, lower)
    assert [round(ns) for _, _, ns in t.latency] == [1900, 2100, 2000]

    class Marks(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found: list[tuple[str, dict]] = []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if (a.get("class") or "").split(" ")[0] in ("phase", "rate", "latency"):
                self.found.append((a["class"], a))

    page = Marks()
    page.feed(render_html(profile))
    kinds = [c for c, _ in page.found]
    assert kinds.count("phase on") == 3 and kinds.count("phase quiet") == 1
    assert kinds.count("rate") == 6 and kinds.count("latency") == 3
    rates = [float(a["y1"]) for c, a in page.found if c == "rate"]
    assert rates[1] < rates[0]                         # the off-phase ran faster: drawn higher
    assert "no timeline" not in render_text(profile)
    assert timeline(Profile(synthetic_run())) is None      # every call counted: one phase
    # the cycles count Handler_write, which a partitioned table's row passes twice: the timeline's
    # rows are the rows inserted, as the headline's
    doc["window"]["rows_changed"] = 20_000
    doc["perf_schema"] = {"status": "collected", "deltas": {"status": {"Innodb_rows_inserted": 10_000}}}
    halved = timeline(Profile(doc))
    assert halved is not None and halved.phases[0].rows_per_s == pytest.approx(10090 / 2, abs=5)


def test_calls_scaled_by_time_from_phases_the_load_missed_are_withheld():
    # 1.5 s window, 50,000 rows; the three on-phases saw 10 rows each: the load ran while the probes were off
    cycles = [{"at_s": 0.5 * i, "on_s": 0.1, "row_s": 0.1, "rows": 10, "probe_s": 0.0, "calls": [10, 10, 10, 0],
               "row_calls": [10, 10, 10, 0]} for i in range(3)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.05, "cycles": 3, "on_s": 0.3,
                         "calls_per_cycle": cycles})
    doc["window"]["rows_changed"] = 50_000
    profile = Profile(doc)
    withheld = {(v.stage, v.figure) for v in profile.consistency}
    assert ("innodb.row_insert", "calls") in withheld and ("innodb.row_insert", "total") in withheld
    text = render_text(profile)
    row = next(line for line in text.splitlines() if line.startswith("innodb.row_insert"))
    assert row.split()[1:3] == ["?", "?"]
    assert "the load ran mostly while the probes were off" in " ".join(text.split())
    assert "? calls in the window: withheld" in text
    # the same phases where the load filled the window: the counts stand
    doc["window"]["rows_changed"] = 200   # the window's rate about the on-phases'
    assert not any(v.figure == "calls" for v in Profile(doc).consistency)


def test_a_single_cycle_says_it_gives_no_interval():
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 1, "on_s": 0.3,
                         "calls_per_cycle": [{"on_s": 0.3, "probe_s": 0.0, "calls": [ROWS, ROWS, ROWS, 0]}]})
    assert Profile(doc).stage_records[0]["estimated_calls"]["ci95"] is None
    text = render_text(Profile(doc))
    assert "one cycle: its intervals are where its rows sit in their reads" in " ".join(text.split())
    assert "95% CI" not in text


def test_latency_line_gives_the_cost_the_on_phases_measured():
    doc = synthetic_run()
    assert "cost the load" not in render_text(Profile(doc))                 # exact mode: unmeasured
    doc["calibration"]["in_situ_factor"] = 1.25
    lines = render_text(Profile(doc)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("latency"))
    assert lines[at + 1] == "         in the on-phases the probes cost the load 1.25x their calibrated cost"


def test_a_stage_whose_calls_waited_for_a_cpu_says_how_long_and_that_it_is_left_out():
    doc = synthetic_run()
    assert "waited for a CPU" not in render_text(Profile(doc))
    probe = next(p for p in doc["probes"] if p["stage"] == "innodb.row_insert")
    probe["cpu_waits"] = {"calls": 7, "total_ns": 3_500_000}
    profile = Profile(doc)
    text = " ".join(render_text(profile).split())
    assert "7 of the calls waited for a CPU (3.5ms in all, runnable but switched out): left out of these times" \
        in text
    stage = next(s for s in profile.to_json()["stages"] if s["stage"] == "innodb.row_insert")
    assert stage["cpu_waits"] == {"calls": 7, "total_ns": 3_500_000}
    assert "7 of the calls waited for a CPU (3.5ms in all" in render_html(profile)


def test_a_wide_interval_says_how_to_narrow_it():
    # one cycle caught twice the calls of the other two: the estimate is uncertain
    cycles = [{"on_s": 0.1, "probe_s": 0.0, "calls": [n, n, n, 0]} for n in (2000, 2000, 6007)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3,
                         "calls_per_cycle": cycles})
    text = " ".join(render_text(Profile(doc)).split())
    assert "a longer window narrows it, --exact counts every call" in text


def test_long_lines_are_wrapped_not_cut():
    doc = synthetic_run()
    doc["perf_schema"] = {"status": "collected", "connection": "root@/var/lib/a/very/long/path/to/the/server/"
                          "socket/mysqld.sock", "statements": [], "deltas": {"status": {
                              "Handler_write": 4500021, "Innodb_data_written": 473444864,
                              "Innodb_pages_written": 4682, "Innodb_rows_inserted": 3000014, "Questions": 135}}}
    text = render_text(Profile(doc))
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert "Innodb_rows_inserted +3000014, Questions +135" in flat
    assert "root@/var/lib/a/very/long/path/to/the/server/socket/mysqld.sock, 0 statements in the window" in flat


def test_off_cpu_block_names_where_the_threads_waited():
    doc = synthetic_run()
    assert "off-CPU" not in render_text(Profile(doc))                      # not requested
    doc["off_cpu"] = {"status": "collected", "unit": "us", "blocked_s": 2.5, "waiting_for_cpu_s": 0.004,
                      "switches": 1201, "threads": [{"thread": "mysqld/srv_master_thread", "us": 2_000_000},
                                                    {"thread": "thread/sql/one_connection", "us": 504_000}],
                      "top_self": [{"function": "do_fsync_[k]", "us": 1_500_000, "share": 0.6},
                                   {"function": "[waiting for a CPU]", "us": 4_000, "share": 0.0016}],
                      "dropped": {"stack map full": 3}, "stacks_file": "offcpu.folded"}
    block = render_text(Profile(doc)).split("\noff-CPU of ")[1].split("\n\n")[0].splitlines()
    # the load's threads lead; the background threads' idle waits come after, as all threads'
    head = " ".join(" ".join(block[:4]).split())
    assert head.startswith("the load's threads (client connections): 504ms; all threads: blocked 2.5s, "
                           "waiting for a CPU 4ms, 1201 switches")
    assert "waiting in (all threads)" in "\n".join(block)
    threads = next(line for line in block if line.startswith("threads: "))
    assert "mysqld/srv_master_thread 2s" in threads and "thread/sql/one_connection 504ms" in threads
    assert "1.5s  59.9%  do_fsync_[k]" in "\n".join(block)     # of all the time off CPU
    assert "incomplete: stack map full (3)" in block[-2]
    # the capture's own pick of the connections (their stacks, as offcpu.svg's) over the thread names:
    # a thread pool's workers are not named one_connection
    doc["off_cpu"]["load_us"] = 731_000
    head = " ".join(render_text(Profile(doc)).split("\noff-CPU of ")[1].split())
    assert head.startswith("the load's threads (client connections): 731ms; all threads")


def test_overhead_line_gives_the_measured_slowdown_and_each_collectors_cost():
    cycles = [{"on_s": 0.1, "probe_s": 0.001, "calls": [n, n, n, 0], "rows": 3000, "row_calls": [n, n, n, 0],
               "row_s": 0.09, "lost_s": 0.01, "unprobed_rows_per_s": 3e4} for n in (3335, 3336, 3336)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3, "lost_s": 0.03,
                         "cost_uncertainty": 0.1, "calls_per_cycle": cycles})
    doc["window"]["rows_changed"] = 50021
    doc["collectors"]["cpu_profile"] = {"status": "collected", "cost": {"target_s": None, "cpu_s": 0.21, "method": "m"}}
    profile = Profile(doc)
    assert profile.overhead.measured_slowdown == pytest.approx(1.5 / 1.47)
    text = " ".join(render_text(profile).split())
    assert "overhead load ran 1.02x slower (its row rate with the collectors on and off)" in text
    assert "in the target: latency 54ms; CPU of their own: cpu_profile 210ms" in text
    assert "budget 10.0%, load slowed" not in text                    # said once, on the overhead line
    doc["sampling"]["lost_s"] = None                                  # no row counter
    text = " ".join(render_text(Profile(doc)).split())
    assert ("overhead slowdown not measured (no row counter from the server); the probes' calibrated cost "
            "alone: ~1.00x") in text


def sampled_with_off_phases(**sampling):
    """A sampled run of three cycles whose off-phases went at 36,000 rows/s,
    50,000 rows in the window."""
    cycles = [{"on_s": 0.1, "probe_s": 0.001, "calls": [n, n, n, 0], "rows": 3000, "row_calls": [n, n, n, 0],
               "row_s": 0.09, "lost_s": 0.0, "unprobed_rows_per_s": 3e4} for n in (3335, 3336, 3336)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3, "lost_s": 0.0,
                         "off_s": 1.0, "off_rows": 36000, "cost_uncertainty": 0.1, "calls_per_cycle": cycles,
                         **sampling})
    doc["window"]["rows_changed"] = 50000
    return doc


def test_measured_slowdown_is_the_off_phase_row_rate_over_the_windows():
    doc = sampled_with_off_phases()
    window_rate = 50000 / doc["window"]["duration_s"]
    # the whole window, transitions included, not the cycles' clamped losses (0 here)
    assert Profile(doc).overhead.measured_slowdown == pytest.approx(36000 / window_rate, abs=1e-4)
    doc["sampling"]["off_rows"] = 30000
    o = Profile(doc).overhead
    # below 1.0 the load's own variation outweighed the cost: not a slowdown, and not printed as one
    assert o.measured_slowdown is None and o.slowdown_estimate == pytest.approx(0.9, abs=1e-3)
    text = " ".join(render_text(Profile(doc)).split())
    assert "overhead slowdown not measurable (±0.10) (its row rate" in text
    assert "0.90x" not in text
    doc["sampling"]["off_rows"] = 150                                 # too few rows to know the speed
    assert Profile(doc).overhead.measured_slowdown is None


def test_the_window_rate_is_taken_over_the_span_the_load_ran():
    """A window opened well before the load: its idle lead-in is no slowdown."""
    doc = sampled_with_off_phases()
    idle = Profile(doc).overhead.slowdown_estimate
    doc["sampling"]["load_s"] = doc["window"]["duration_s"] / 2
    doc["sampling"]["load_rows"] = 50000
    assert Profile(doc).overhead.slowdown_estimate == pytest.approx(idle / 2, abs=1e-4)
    doc["sampling"]["load_s"] = doc["sampling"]["load_rows"] = None     # no change seen: the whole window
    assert Profile(doc).overhead.slowdown_estimate == pytest.approx(idle, abs=1e-4)


def test_cpu_mysqlprobe_takes_in_every_phase_counts_by_how_busy_the_host_was():
    doc = sampled_with_off_phases()
    phases = 36000 / (50000 / doc["window"]["duration_s"])
    assert Profile(doc).overhead.standing_slowdown is None        # an older capture: the phases alone
    doc["host"]["cpus"] = 2
    doc["window"]["own_cpu_s"] = 0.1
    doc["collectors"]["calibration"] = {"status": "collected", "cost": {"target_s": None, "cpu_s": 0.02}}
    doc["perf_schema"]["own_connections_cpu_s"] = 0.03
    capacity = 2 * doc["window"]["duration_s"]
    # every CPU busy: the 0.15 s mysqlprobe took are what the others lost
    doc["process"]["host_cpu_share"] = {"user": 0.6, "system": 0.4, "idle": 0.0, "iowait": 0.0, "steal": 0.0}
    o = Profile(doc).overhead
    assert o.standing_cpu_s == pytest.approx(0.15)
    # the sched_switch program runs in every phase too, in the threads that switch
    engine = doc["engine"]
    doc["engine"] = {**engine, "switch_program": {"s": 0.02, "runs": 100000}}
    assert Profile(doc).overhead.standing_cpu_s == pytest.approx(0.17)
    doc["engine"] = engine
    assert o.standing_slowdown == pytest.approx(1 + 0.15 / (capacity - 0.15), abs=1e-4)
    assert o.phase_slowdown == pytest.approx(phases, abs=1e-4)
    assert o.slowdown_estimate == pytest.approx(phases * o.standing_slowdown, abs=1e-3)
    text = " ".join(render_text(Profile(doc)).split())
    assert (f"in parts: collectors on against off {phases:.2f}x; mysqlprobe's CPU in every phase (150ms) "
            f"{o.standing_slowdown:.3f}x") in text
    # half the host idle: half of it was anyone's to lose; steal is nobody's
    doc["process"]["host_cpu_share"] = {"user": 0.3, "system": 0.1, "idle": 0.4, "iowait": 0.0, "steal": 0.2}
    busy = 0.5 * capacity * 0.8
    assert Profile(doc).overhead.standing_slowdown == pytest.approx(1 + 0.15 * 0.5 / (busy - 0.15), abs=1e-4)
    doc["process"]["host_cpu_share"] = {"user": 0.0, "system": 0.0, "idle": 1.0, "iowait": 0.0, "steal": 0.0}
    assert Profile(doc).overhead.standing_slowdown is None        # nothing else ran: nothing to lose
    assert Profile(doc).overhead.slowdown_estimate == pytest.approx(phases, abs=1e-4)


def test_the_quiet_phases_second_halves_are_the_reference_where_they_have_enough_rows():
    """The load is still getting over the on-phase early in a quiet phase:
    that slowness is the on-phase's, and only the second halves say how
    fast the load goes with nothing of mysqlprobe on."""
    doc = sampled_with_off_phases(quiet_s=2.5, quiet_rows=100000, quiet_tail_s=1.25, quiet_tail_rows=52500,
                                  quieted=["perf", "perf_schema"])
    window_rate = 50000 / doc["window"]["duration_s"]
    o = Profile(doc).overhead
    assert o.measured_against == "quiet_tail"
    assert o.measured_slowdown == pytest.approx(42000 / window_rate, abs=1e-4)
    assert o.always_on_slowdown == pytest.approx(40000 / 36000, abs=1e-4)  # whole phases against whole
    doc["sampling"].update(quiet_tail_s=0.9, quiet_tail_rows=37800)           # under a second: the whole phases
    assert Profile(doc).overhead.measured_against == "quiet"
    doc["sampling"].update(quiet_tail_s=1.25, quiet_tail_rows=52500)
    text = " ".join(render_text(Profile(doc)).split())
    assert "against its rate with the collectors off (their second halves)" in text
    assert o.measured_slowdown == pytest.approx(42000 / window_rate, abs=1e-4)
    doc["sampling"]["quiet_tail_rows"] = 150                                  # too few rows: the same
    assert Profile(doc).overhead.measured_against == "quiet"


def test_measured_slowdown_is_set_against_the_quiet_off_phases_where_there_are_enough():
    doc = sampled_with_off_phases(quiet_s=0.5, quiet_rows=20000, quieted=["cpu_profile"])
    doc["cpu_profile"] = {"status": "collected", "samples": 0, "event": "cpu-clock", "frequency_hz": 99,
                   "unwinding": {"describe": "frame pointers"}, "quiet_s": 0.5}
    window_rate = 50000 / doc["window"]["duration_s"]
    o = Profile(doc).overhead
    # nothing of mysqlprobe on (40,000 rows/s), not the off-phases with CPU sampling on (36,000)
    assert o.measured_slowdown == pytest.approx(40000 / window_rate, abs=1e-4)
    assert o.measured_against == "quiet"
    assert o.always_on_slowdown == pytest.approx(40000 / 36000, abs=1e-4)
    text = " ".join(render_text(Profile(doc)).split())
    assert "load ran 1.20x slower (its row rate in the window against its rate with the collectors off)" in text
    assert "in parts: CPU sampling 1.11x" in text
    assert "CPU samples: 0 (cpu-clock 99 Hz, frame pointers), off in the quiet phases (33.3% of the window)" in text
    doc["sampling"]["quiet_rows"] = 150                               # too few rows: the ordinary ones stand in
    o = Profile(doc).overhead
    assert o.measured_slowdown == pytest.approx(36000 / window_rate, abs=1e-4)
    assert o.measured_against == "off" and o.always_on_slowdown is None
    text = " ".join(render_text(Profile(doc)).split())
    assert "CPU sampling ran all along and is not in this figure" in text


def with_cpu_bursts(doc: dict, samples: dict[str, int], period_ns: int = 200_000, rows: int = 1_800_000) -> dict:
    """The CPU bursts' samples per stage (each worth period_ns) over `rows`
    changed in the off-phases they sampled."""
    mangled = {p["stage"]: p["mangled"] for p in doc["probes"]}
    doc["sampling"].update(burst_s=0.5, burst_rows=rows, bursts=["cpu_bursts"])
    doc["cpu_bursts"] = {"status": "collected", "frequency_hz": round(1e9 / period_ns), "functions": {
        mangled[stage]: {"samples": n, "self_ns": n * period_ns} for stage, n in samples.items()}}
    return doc


def test_a_short_function_the_probes_cannot_resolve_takes_its_mean_from_cpu_samples():
    doc = with_cpu_bursts(sampled_with_off_phases(), {"partition.get_partition_id": 400, "partition.write_row": 50})
    calls = 1_800_000 * (3335 + 3336 + 3336) / 9000            # calls per row in the on-phases x burst rows
    stages = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}
    lookup = stages["partition.get_partition_id"]
    assert lookup["mean_method"].startswith("CPU samples") and lookup["mean_resolved"]
    assert lookup["mean_ns"] == pytest.approx(400 * 200_000 / calls, abs=0.1)          # 40 ns
    low, high = lookup["mean_ns_ci95"]
    assert low < lookup["mean_ns"] < high and high - low < 0.25 * lookup["mean_ns"]
    assert lookup["off_phase_cpu"]["used"] and lookup["off_phase_cpu"]["samples"] == 400
    # write_row has probed callees: its own CPU (callees left out) is not what a call costs
    write = stages["partition.write_row"]
    assert write["mean_method"].startswith("probe timestamps") and not write["off_phase_cpu"]["used"]
    text = " ".join(render_text(Profile(doc)).split())
    assert "mean 40ns (95% interval" in text and "400 samples of the CPU bursts (5000 Hz) over ~2,001,400 calls" in text


def test_with_their_stacks_the_bursts_count_a_stages_callees_too():
    doc = with_cpu_bursts(sampled_with_off_phases(), {"partition.get_partition_id": 400, "partition.write_row": 50})
    # the same functions' own samples, and those with them anywhere on the stack
    doc["cpu_bursts"].update(stacks="frame pointers", stages={
        "partition.get_partition_id": {"samples": 440, "ns": 440 * 200_000},
        "partition.write_row": {"samples": 9000, "ns": 9000 * 200_000}})
    calls = 1_800_000 * (3335 + 3336 + 3336) / 9000
    stages = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}
    lookup, write = stages["partition.get_partition_id"], stages["partition.write_row"]
    assert lookup["mean_ns"] == pytest.approx(440 * 200_000 / calls, abs=0.1)          # 44 ns, not 40
    assert lookup["mean_method"].startswith("CPU samples with the function on the stack")
    # write_row's probed callees are in its samples now: 900 ns a call, its callees' time included
    figures = write["off_phase_cpu"]
    assert figures["callees_included"] and figures["cpu_ns"] == 9000 * 200_000
    assert figures["mean_ns"] == pytest.approx(9000 * 200_000 / calls, abs=0.1)
    assert write["mean_method"].startswith("probe timestamps") == (not figures["used"])
    text = " ".join(render_text(Profile(doc)).split())
    assert "the mean is the function's CPU with its callees': 440 samples of the CPU" in text


def test_counts_scaled_by_a_counter_in_memory_say_so():
    doc = sampled_with_off_phases()
    doc["window"]["rows_counter"] = "memory:global_query_id"
    text = " ".join(render_text(Profile(doc)).split())
    assert "~ = estimate scaled by the counter global_query_id in its memory" in text


def test_bursts_that_sampled_nothing_of_the_target_give_no_figure():
    doc = with_cpu_bursts(sampled_with_off_phases(), {"partition.get_partition_id": 0})
    doc["cpu_bursts"]["samples"] = 0
    lookup = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}["partition.get_partition_id"]
    assert lookup["off_phase_cpu"] is None and lookup["mean_method"].startswith("probe timestamps")


def test_too_few_cpu_samples_give_a_bound_where_it_is_the_tighter_one():
    doc = with_cpu_bursts(sampled_with_off_phases(), {"partition.get_partition_id": 3}, rows=18_000)
    lookup = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}["partition.get_partition_id"]
    samples = lookup["off_phase_cpu"]
    assert not samples["resolved"] and samples["mean_ns_ci95"][0] < samples["mean_ns"] / 2
    # 3 samples of 200 us over ~20,000 calls: at most ~80 ns a call, tighter than the probes' bound
    assert lookup["mean_method"].startswith("CPU samples") and not lookup["mean_resolved"]
    assert lookup["mean_ns_ci95"][1] == samples["mean_ns_ci95"][1] < 100
    # a bound from 3 samples: how many would give a mean (16 with the calls known exactly, more
    # with their doubt: the fewest that sampled_per_call resolves), and the window they come in
    calls = Estimate(samples["calls"]["value"], *samples["calls"]["ci95"])
    needed = samples["samples_to_resolve"]
    assert needed > 16 and sampled_per_call(needed, needed, 1, calls).resolved
    assert not sampled_per_call(needed - 1, needed - 1, 1, calls).resolved
    seconds = doc["window"]["duration_s"] * needed / 3
    text = " ".join(render_text(Profile(doc)).split())
    assert f"about {needed} would give a mean: a window of about {H.upper_ns(seconds * 1e9)}" in text
    doc = with_cpu_bursts(sampled_with_off_phases(), {"partition.get_partition_id": 3}, rows=180)
    lookup = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}["partition.get_partition_id"]
    assert lookup["mean_method"].startswith("probe timestamps")       # 8 us a call at most: the probes' is tighter


def test_no_cpu_bursts_no_off_phase_figure():
    stages = Profile(sampled_with_off_phases()).to_json()["stages"]
    assert all(s["off_phase_cpu"] is None for s in stages)


def test_without_a_row_counter_the_bursts_calls_come_from_the_time():
    # the calls per unprobed second of three steady cycles (ROWS * 5 in the 1.5 s window)
    third = [ROWS // 3, ROWS // 3, ROWS - 2 * (ROWS // 3)]
    doc = synthetic_run({"mode": "sampled", "overhead_budget": 0.1, "cycles": 3, "on_s": 0.3,
                         "calls_per_cycle": [{"on_s": 0.1, "probe_s": 0.0, "calls": [n, n, n, 0]} for n in third]})
    doc = with_cpu_bursts(doc, {"partition.get_partition_id": 100}, rows=None)
    doc["sampling"]["burst_s"] = 0.6
    lookup = {s["stage"]: s for s in Profile(doc).to_json()["stages"]}["partition.get_partition_id"]
    calls = ROWS * 5 * 0.6 / 1.5
    assert lookup["off_phase_cpu"]["calls"]["value"] == pytest.approx(calls, rel=1e-3)
    assert lookup["off_phase_cpu"]["mean_ns"] == pytest.approx(100 * 200_000 / calls, rel=1e-3)


@pytest.mark.parametrize("name", ["profile_v1_exact.json", "profile_v1_sampled.json"])
def test_the_reports_leave_the_document_as_they_found_it(name):
    """A live run hands the capture's own document to the reports, not a
    copy (a window's document is megabytes): nothing they derive may be
    written into it."""
    doc = json.loads((Path(__file__).parents[1] / "fixtures" / name).read_text())
    before = json.loads(json.dumps(doc))
    profile = Profile(doc)
    render_text(profile), render_html(profile), json.dumps(profile.to_json()), exposition(profile)
    assert doc == before


def test_a_document_is_made_plain_as_json_would_make_it():
    doc = {"a": (1, 2.5, None), 3: {"t": [(True, "x")]}, None: -0.0, 2.5: {}}
    assert capture.as_json(doc) == json.loads(json.dumps(doc))
    with pytest.raises(TypeError):
        capture.as_json({"x": object()})


def test_a_schema_1_captures_cpu_stacks_are_found_under_their_old_name(tmp_path):
    """Schema 1 did not name its CPU stacks file: stacks.folded beside it is
    its, for report and compare alike (the upgrade to schema 3 must not
    lose which schema wrote it); a capture of today names its files."""
    from mysqlprobe.analysis.stage_trees import CPU_NS, read_capture_stacks
    doc = capture.read_profile(str(FIXTURES / "profile_v1_exact.json"))
    doc["perf"] = {"status": "collected", "frequency_hz": 499, "on_s": 0.5}
    (tmp_path / "stacks.folded").write_text("conn;main;row_insert_for_mysql 7\n")
    profile = Profile(doc)
    cpu = profile.stacks["cpu_profile"]
    assert cpu.collected and cpu.files == {"stacks_file": "stacks.folded"} and cpu.scale(1.5) == 3.0
    assert read_capture_stacks(tmp_path, profile, capture.read_member_stacks)[CPU_NS].total == 7
    today = synthetic_run()
    today["cpu_profile"] = {"status": "collected", "frequency_hz": 499}
    assert read_capture_stacks(tmp_path, Profile(today), capture.read_member_stacks) == {}
