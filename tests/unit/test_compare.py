"""mysqlprobe compare on saved captures, without root: stages line up
through the catalog although the two versions' functions differ, the
difference per row is shared out to stages, functions and a remainder, and
differences within the run-to-run spread are called noise."""

import json
from dataclasses import replace
import subprocess

import pytest

from mysqlprobe import capture
from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis.model import Profile
from mysqlprobe.probes.histogram import Histogram
from mysqlprobe.collectors.target.symbols import ResolvedSymbol
from mysqlprobe.collectors.uprobes.session import ProbeCounts, ProbeSpec, Snapshot
from mysqlprobe.flamegraphs import folded
from test_report import recorded
from conftest import MYSQLPROBE

ROWS = 1009  # prime
US = 1000


def make_capture(version: str, write_row_symbol: str, wall_us: float, write_row_us: float, row_insert_us: float,
                 stacks: str = "") -> tuple[dict, folded.Folded]:
    """A capture of ROWS rows: write_row (inclusive write_row_us per row) with
    row_insert (row_insert_us) nested in it, on one thread."""
    def sym(name, addr):
        return ResolvedSymbol(name, name + "(unsigned char*)", "_Z" + name, addr, addr - 0x400000, "local")

    specs = [ProbeSpec(0, sym(write_row_symbol, 0x500000), "partition.write_row"),
             ProbeSpec(1, sym("row_insert_for_mysql", 0x520000), "innodb.row_insert")]

    def counts(per_row_us, parent):
        total = int(per_row_us * US * ROWS)
        hist = Histogram.of_values([int(per_row_us * US)] * ROWS)
        return ProbeCounts(calls=ROWS, total_ns=total, hist=hist, corrected_ns=total, chist=hist,
                           callers={(7, parent): (ROWS, total, total)})
    snap = Snapshot({0: counts(write_row_us, None), 1: counts(row_insert_us, 0)},
                    {"entries": 2 * ROWS, "returns": 2 * ROWS})
    target = {"pid": 7, "comm": "mysqld", "binary": f"/opt/{version}/mysqld", "symbols": ".symtab",
              "server": {"family": "mariadb", "version": version, "line": "mariadb"}}
    window = {"start": "2026-11-22T03:00:00.000Z", "duration_s": 2 * wall_us * ROWS / 1e6, "requested_s": None,
              "ended_by": "load finished"}
    ps = {"status": "collected", "statements": [{"thread_id": 20, "event_id": 7, "timer_start": 0,
                                                 "timer_end": int(wall_us * ROWS * 1e6),
                                                 "timer_wait": int(wall_us * ROWS * 1e6), "sql_text": "INSERT",
                                                 "event_name": "statement/sql/insert_select"}],
          "stages": [], "threads": [], "timer_start_ps": 0, "timer_end_ps": int(2 * wall_us * ROWS * 1e6),
          "deltas": {"status": {"Innodb_rows_inserted": ROWS},
                     "stages": [{"name": "stage/sql/Sending data", "count": 1, "timer_ps": int(wall_us * ROWS * 1e6)}],
                     "waits": []}}
    perf = {"status": "collected", "frequency_hz": 1000, "samples": 0}
    doc = recorded(target, window, specs, snap, cal=None, attached=4)
    doc.update({"perf_schema": ps, "cpu_profile": perf, "unavailable": []})
    return doc, folded.parse(stacks.split("\n")) if stacks else None


A = dict(version="10.1.23", write_row_symbol="ha_partition::write_row", wall_us=10, write_row_us=6, row_insert_us=4,
         stacks=f"sql/one_connection;ha_partition::write_row;row_insert_for_mysql {2 * ROWS}\nsql/one_connection;do_select;copy {3 * ROWS}")
B = dict(version="10.2.11", write_row_symbol="ha_innopart::write_row", wall_us=6, write_row_us=3, row_insert_us=2.5,
         stacks=f"sql/one_connection;ha_innopart::write_row;row_insert_for_mysql {2 * ROWS}\nsql/one_connection;do_select;copy {1 * ROWS}")


def run(spec, label="x", **change):
    doc, stacks = make_capture(**{**spec, **change})
    return C.run_of(Profile(doc), label, stacks)


def test_stages_line_up_and_the_difference_is_shared_out():
    result = C.compare([run(A)], [run(B)])
    wall = result.wall
    assert wall.a.median == pytest.approx(10 * US) and wall.b.median == pytest.approx(6 * US)
    changes = {c.name: c.delta for c in result.ranked}
    # exclusive: write_row 6-4=2us -> 3-2.5=0.5us; row_insert 4 -> 2.5
    assert changes["partition.write_row"] == pytest.approx(-1.5 * US)
    assert changes["innodb.row_insert"] == pytest.approx(-1.5 * US)
    assert result.attributed_ns == pytest.approx(-3 * US)
    assert result.unattributed_ns == pytest.approx(-1 * US)
    # the samples place the rest: `copy` went from 3 to 1 sample per row at 1 kHz (1 ms a sample)
    fn = {c.name: c.delta for c in result.functions}
    assert fn["copy"] == pytest.approx(-2 * 1e6)
    detail = result.stages["partition.write_row"]
    assert detail["a"]["symbols"] != detail["b"]["symbols"]
    assert detail["a"]["calls_per_row"]["median"] == pytest.approx(1.0)
    assert all(c.verdict == "single run" for c in result.ranked)


def test_repeats_give_spread_and_noise_is_not_a_finding():
    a = [run(A, wall_us=w) for w in (9.8, 10.0, 10.2)]
    b = [run(B, wall_us=w, row_insert_us=r) for w, r in ((5.9, 2.45), (6.0, 2.5), (6.1, 2.55))]
    result = C.compare(a, b)
    assert result.wall.a.spread == pytest.approx(0.2 * US) and result.wall.verdict == "finding"
    assert {c.name: c.verdict for c in result.ranked}["innodb.row_insert"] == "finding"
    same = C.compare(a, [run(A, wall_us=w) for w in (9.9, 10.1, 10.05)])
    assert same.wall.verdict == "noise"
    assert "within the runs' own spread" in C.render_text(same)


def test_text_names_both_versions_symbols_and_fits_80_columns():
    text = C.render_text(C.compare([run(A)], [run(B)]))
    assert "A: ha_partition::write_row(unsigned char*)" in text
    assert "B: ha_innopart::write_row(unsigned char*)" in text
    assert "75% of B - A" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_runs_that_differ_in_leaving_waits_for_a_cpu_out_are_flagged():
    def recorded(label, left_out):
        doc, stacks = make_capture(**A)
        doc.setdefault("engine", {})["cpu_waits_left_out"] = left_out
        return C.run_of(Profile(doc), label, stacks)

    assert C.compare([recorded("old", True)], [recorded("new", True)]).caveats == []
    result = C.compare([recorded("old", False)], [recorded("new", True)])
    (caveat,) = result.caveats
    assert caveat.startswith("the stage times of old keep the calls' waits for a CPU in")
    text = C.render_text(result)
    assert "note: the stage times of old keep" in text and max(len(line) for line in text.splitlines()) <= 80
    assert result.to_json()["caveats"] == [caveat]


def _save(tmp_path, name, spec, **change):
    doc, stacks = make_capture(**{**spec, **change})
    doc["cpu_profile"].update(samples=stacks.total, stacks_file="stacks.folded")   # as a capture with samples names its file
    d = tmp_path / name
    capture.write_capture(str(d), capture.Capture(doc))
    with open(d / "stacks.folded", "w") as f:
        folded.write(stacks, f)
    return d


def test_command_on_saved_captures_and_repeat_directories(tmp_path):
    a = _save(tmp_path, "a", A)
    for i, w in enumerate((5.9, 6.0, 6.1)):
        _save(tmp_path / "b-cell", f"r{i}", B, wall_us=w)
    out = tmp_path / "cmp"
    done = subprocess.run([MYSQLPROBE, "compare", str(a), str(tmp_path / "b-cell"), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "B  MariaDB 10.2.11: 3 run(s)" in done.stdout
    for name in ("compare.txt", "compare.json", "compare.html", "diff.svg"):
        assert (out / name).stat().st_size > 0
    doc = json.loads((out / "compare.json").read_text())
    assert doc["wall"]["delta"] == pytest.approx(-4 * US)
    assert "samples/row" in (out / "diff.svg").read_text()


def test_command_rejects_what_is_not_a_capture(tmp_path):
    done = subprocess.run([MYSQLPROBE, "compare", str(tmp_path), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 7
    assert done.stderr.count("\n") == 1 and "no capture in it" in done.stderr


def test_a_stage_withheld_on_one_side_is_not_attributed_on_either():
    # B's write_row: 6 us a row in a window of 5.6 us a row on one thread, more than the thread had
    b = run(B, label="b1", wall_us=2.8, write_row_us=6, row_insert_us=2.5)
    assert "partition.write_row" in b.withheld and "innodb.row_insert" in b.exclusive_ns
    result = C.compare([run(A)], [b])
    assert [c.name for c in result.ranked] == ["innodb.row_insert"]
    assert result.withheld[0]["stage"] == "partition.write_row"
    assert result.withheld[0]["why"].startswith("B run 1: withheld: 6.05ms in the stage, more than 1 thread")
    assert result.attributed_ns == pytest.approx(-1.5 * US)
    text = C.render_text(result)
    assert "partition.write_row: not attributed" in text
    assert json.loads(json.dumps(result.to_json()))["withheld"] == result.withheld


def test_stages_that_take_more_than_the_rows_wall_time_are_not_attributed():
    # 6 us of stages a row on one thread, for rows that took 3.5 us each: no share of it is told
    b = run(B, label="b1", wall_us=3.5, write_row_us=6, row_insert_us=2.5)
    assert b.exclusive_ns == {} and set(b.withheld) == {"partition.write_row", "innodb.row_insert"}
    assert "more than the row's 3.5us wall time on 1 thread" in b.withheld["innodb.row_insert"]
    result = C.compare([run(A)], [b])
    assert result.ranked == [] and result.attributed_ns == 0
    assert result.unattributed_ns == pytest.approx(result.wall.delta)


def test_the_html_page_draws_each_sides_row_to_one_scale():
    from html.parser import HTMLParser
    from mysqlprobe.analysis.compare_html import render_html

    class Bars(HTMLParser):
        def __init__(self):
            super().__init__()
            self.bars: list[list[tuple[float, str]]] = []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if a.get("class") == "rowbar":
                self.bars.append([])
            elif a.get("class") == "seg":
                width = float(a["style"].split("width:")[1].split("%")[0])
                self.bars[-1].append((width, a["title"]))

    result = C.compare([run(A)], [run(B)])
    page = Bars()
    page.feed(render_html(result, None))
    a, b = page.bars
    # A's row is 10 us (the widest: the whole scale), B's 6 us; each split into its stages and the rest
    assert sum(w for w, _ in a) == pytest.approx(100, abs=0.1)
    assert sum(w for w, _ in b) == pytest.approx(60, abs=0.1)
    assert [t.split(":")[0] for _, t in a][-1] == "not attributed to a stage"
    assert sorted(t.split(":")[0] for _, t in a[:-1]) == ["innodb.row_insert", "partition.write_row"]
    assert (pytest.approx(25, abs=0.01), "innodb.row_insert: 2.5us per row (42%)") in b


def test_an_upper_bound_above_the_rows_wall_time_is_held_to_the_wall():
    b = run(B, label="b1")
    b.exclusive_ns, b.withheld = C.stage_bounds(Profile(make_capture(**B)[0]), ROWS, b.wall_ns_per_row)
    assert "partition.write_row" in b.exclusive_ns            # measured figures below the wall stand
    # the same run with write_row's figure only an upper bound, 10 us a row (7.5 us its own) for rows of 6 us
    profile = Profile(make_capture(**B)[0])
    for i, f in enumerate(profile.figures):
        if f.stage == "partition.write_row":
            profile.figures[i] = replace(f, total_bound=True, total_ns=10 * US * ROWS)
    exclusive, withheld = C.stage_bounds(profile, ROWS, 6 * US)
    # the wall bounds it tighter: at most what of the row's 6 us (and the 2% rounding the bounds allow)
    # row_insert's measured 2.5 us leaves
    assert exclusive["innodb.row_insert"] == pytest.approx(2.5 * US)
    assert exclusive["partition.write_row"] == pytest.approx(6 * US * 1.02 - 2.5 * US)
    assert sum(exclusive.values()) <= 6 * US * 1.02 + 1 and "partition.write_row" not in withheld
