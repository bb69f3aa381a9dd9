"""Flame graph SVG, differential colours, stack summaries and the HTML
report, on fixed stacks (no root, no server)."""

import html
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from mysqlprobe.analysis.html_report import render_html
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.report import render_text
from mysqlprobe.flamegraphs.stacks import stacks_summary
from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.svg import render
from test_report import synthetic_run

SVG = "{http://www.w3.org/2000/svg}"


def _stacks(text: str) -> folded.Folded:
    return folded.parse(text.strip().splitlines())


BEFORE = _stacks("""
sql/one_connection;do_command;ha_partition::write_row;get_partition_id_range 10
sql/one_connection;do_command;ha_partition::write_row;row_insert_for_mysql 80
innodb/page_cleaner_thread;buf_flush_page_cleaner;buf_calc_page_crc32 10
""")
AFTER = _stacks("""
sql/one_connection;do_command;ha_partition::write_row;get_partition_id_range 10
sql/one_connection;do_command;ha_partition::write_row;row_insert_for_mysql 40
sql/one_connection;do_command;ha_partition::write_row;ha_partition::start_part_bulk_insert 40
innodb/page_cleaner_thread;buf_flush_page_cleaner;buf_calc_page_crc32 10
""")


def _frames(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    out = {}
    for g in root.iter(f"{SVG}g"):
        name = g.find(f"{SVG}title").text.split(" (")[0]
        out[name] = g
    return out


def test_widths_follow_samples_and_every_frame_has_details():
    svg = render(AFTER, "t", "s")
    frames = _frames(svg)
    width = lambda n: float(frames[n].find(f"{SVG}rect").get("width"))  # noqa: E731
    assert width("all") == pytest.approx(1200)
    assert width("sql/one_connection") == pytest.approx(1200 * 0.9)
    assert width("row_insert_for_mysql") == pytest.approx(width("ha_partition::start_part_bulk_insert"))
    assert "40 samples, 40.00%" in frames["row_insert_for_mysql"].find(f"{SVG}title").text
    # children sit on their parent, side by side and inside it
    parent = frames["ha_partition::write_row"].find(f"{SVG}rect")
    kids = [frames[n].find(f"{SVG}rect") for n in ("get_partition_id_range", "row_insert_for_mysql")]
    assert all(float(k.get("y")) == float(parent.get("y")) - 16 for k in kids)
    assert sum(float(frames[n].find(f"{SVG}rect").get("width")) for n in
               ("get_partition_id_range", "row_insert_for_mysql", "ha_partition::start_part_bulk_insert")) \
        == pytest.approx(float(parent.get("width")))
    assert "mpSearch" in svg and "http://" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_differential_graph_colours_growth_red_and_shrinkage_blue():
    svg = render(AFTER, before=BEFORE, scale_after=1 / AFTER.total, scale_before=1 / BEFORE.total, unit="of samples")
    frames = _frames(svg)
    fill = lambda n: frames[n].find(f"{SVG}rect").get("fill")  # noqa: E731
    r, g, b = map(int, re.findall(r"\d+", fill("ha_partition::start_part_bulk_insert")))
    assert r == 250 and g < 100 and b < 100                  # new: strongly red
    r, g, b = map(int, re.findall(r"\d+", fill("row_insert_for_mysql")))
    assert b == 250 and r < 250                              # halved: blue
    assert fill("buf_calc_page_crc32") == "rgb(250,250,250)"  # unchanged
    assert "-0.4 of samples vs before" in frames["row_insert_for_mysql"].find(f"{SVG}title").text


def test_frames_too_narrow_to_see_are_left_out_but_their_samples_stay():
    stacks = _stacks("t;a;big 100000\nt;a;tiny 1")
    frames = _frames(render(stacks))
    assert "tiny" not in frames and "big" in frames
    assert "100,001 samples" in frames["a"].find(f"{SVG}title").text


def test_stack_summary_self_total_and_threads():
    s = stacks_summary(AFTER)
    assert s["threads"] == [{"thread": "sql/one_connection", "samples": 90},
                            {"thread": "innodb/page_cleaner_thread", "samples": 10}]
    top_self = {r["function"]: r["samples"] for r in s["top_self"]}
    top_total = {r["function"]: r["samples"] for r in s["top_total"]}
    assert top_self["row_insert_for_mysql"] == 40 and "ha_partition::write_row" not in top_self
    assert top_total["ha_partition::write_row"] == 90 and top_total["do_command"] == 90
    assert "sql/one_connection" not in top_total              # the thread is no function
    recursive = stacks_summary(_stacks("t;f;f;f 5"))
    assert recursive["top_total"][0] == {"function": "f", "samples": 5, "share": 1.0, "self_samples": 5,
                                         "self_share": 1.0}
    assert s["top_self"][0]["total_samples"] == 40


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.urls = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href") and v:
                self.urls.append(v)


def test_html_report_is_one_file_with_every_part(report_doc):
    svg = render(AFTER, "flame", "sub")
    page = render_html(Profile(report_doc), svg)
    p = _Collect()
    p.feed(page)
    assert p.urls == []                                       # nothing fetched: works offline
    for part in ("Stages", "Latency per stage", "Flame graph", "Run", 'id="flamegraph"',
                 "per partition", "partition.write_row"):
        assert part in page, part
    # these probes' doubt per call is wider than the calls' histograms resolve: withheld, not drawn
    assert 'class="hist"' not in page and page.count("histogram withheld with the percentiles") == 3
    assert p.tags.count("svg") >= 1
    from mysqlprobe.analysis.html_report import histogram_chart
    chart = histogram_chart(Profile(report_doc).stages[0])     # drawn where they are resolved
    assert chart.startswith("<svg class=\"hist\"") or 'class="hist"' in chart
    without = render_html(Profile({**report_doc, "cpu_profile": {"status": "unavailable", "reason": "no perf here"}}), None)
    assert "no CPU samples: no perf here" in without


def test_the_html_report_draws_its_blocks_as_tables_with_the_texts_figures(report_doc):
    """No text dumps: the CPU samples' block is a table whose rows are the
    text report's (each function whole, where the text clips it)."""
    from mysqlprobe.analysis.textfit import pct

    profile = Profile(report_doc)
    page, text = render_html(profile, render(AFTER, "flame", "sub")), render_text(profile)
    assert "<pre" not in page
    top = report_doc["cpu_profile"]["top_self"][:10]
    assert top
    for r in top:
        cells = f"<td class=num>{pct(r['share'])}</td><td class=num>{pct(r.get('total_share'))}</td>"
        assert f"<tr>{cells}<td>{html.escape(r['function'])}</td></tr>" in page, r
        assert f"  {pct(r['share']):>6} {pct(r.get('total_share')):>6}  {r['function'][:61]}" in text, r


@pytest.fixture
def report_doc():
    doc = synthetic_run()
    doc["cpu_profile"] = {"status": "collected", "event": "cpu-clock", "frequency_hz": 99, "samples": AFTER.total,
                   "unwinding": {"mode": "dwarf", "describe": "DWARF (8192-byte stacks)", "reason": "test"},
                   "perf_cpu_share": 0.012, "stacks_file": "stacks.folded", **stacks_summary(AFTER)}
    return doc


def test_text_report_lists_the_hottest_functions(report_doc):
    text = render_text(Profile(report_doc))
    block = text[text.index("CPU samples: 100"):]
    assert "perf used 1.2% of a CPU" in " ".join(block.split())
    assert "threads: sql/one_connection 90.0%, innodb/page_cleaner_thread 10.0%" in block
    assert re.search(r"40\.0% +40\.0%  row_insert_for_mysql", block)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_off_cpu_and_io_pictures_show_the_load_threads_unless_asked(tmp_path):
    from mysqlprobe.flamegraphs import folded as F
    from mysqlprobe.reports import scoped
    stacks = F.parse(["sql/one_connection;do_command;row_insert_for_mysql;io_schedule_[k] 300",
                      "mysqld/io_handler_thread;fil_aio_wait;io_getevents_[k] 9000",
                      "mysqld;do_handle_one_connection;do_command;futex_wait_[k] 7"])
    mine, scope = scoped(stacks, all_threads=False)
    assert mine.total == 307 and "client connections" in scope
    every, scope = scoped(stacks, all_threads=True)
    assert every.total == 9307 and scope == "all threads"
    background = F.parse(["mysqld/io_handler_thread;fil_aio_wait;io_getevents_[k] 9000"])
    shown, scope = scoped(background, all_threads=False)
    assert shown.total == 9000 and "none is a client connection's" in scope


def test_the_timeline_has_axes_gridlines_and_on_phases_one_can_see():
    """A 9.6-s window whose two on-phases last 40 ms (under a pixel at its
    scale) and whose quiet phase is 4 s: the on-phases are drawn 2 px wide
    at least, the time axis and the rows/s axis carry round ticks."""
    from mysqlprobe.analysis.html_report import TL_LEFT, TL_RIGHT, TL_W, axis_ticks, timeline_chart
    from mysqlprobe.analysis.timeline import OFF, ON, QUIET, Phase, Timeline

    phases = [Phase(0.0, 0.02, 9_000, ON), Phase(0.02, 4.0, 2_000_000, QUIET), Phase(4.02, 5.0, 2_600_000, OFF),
              Phase(9.02, 0.02, 8_000, ON)]
    svg = timeline_chart(Timeline(9.6, phases, "partition.write_row", [(0.0, 0.02, 1500.0), (9.02, 0.02, 1400.0)]))
    widths = [float(w) for w in re.findall(r'class="phase on" x="[\d.]+" y="10" width="([\d.]+)"', svg)]
    assert len(widths) == 2 and min(widths) >= 2
    assert axis_ticks(9.6) == [0, 2, 4, 6, 8] and axis_ticks(520_000 * 1.05)[-1] == 500_000
    labels = re.findall(r'text-anchor="middle">([^<]+)</text>', svg)
    assert labels == ["0s", "2s", "4s", "6s", "8s"]
    assert svg.count("class=grid") == 5 + len(axis_ticks(520_000 * 1.05))
    # the quiet phase under the on-phases, drawn first
    assert svg.index('class="phase quiet"') < svg.index('class="phase on"')
    assert TL_LEFT < TL_W - TL_RIGHT
    # a window in which no row changed: the axis stands at 0, nothing divides by it
    idle = timeline_chart(Timeline(2.0, [Phase(0.0, 0.05, 0, ON), Phase(0.05, 1.9, 0, OFF)], None, []))
    assert "class=rate" in idle and "NaN" not in idle

