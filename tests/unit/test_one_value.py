"""One value per figure: every output of one capture (the text report,
report --json, Prometheus, the HTML page) prints the same figure for the
same quantity, because each reads it from the Profile's one source.

Prometheus once counted a function's calls by the time the probes were
on while the text scaled them by the server's rows: 736,321 against
~4,013,687 calls of the same function in the same capture."""

from __future__ import annotations

import html
import json
import re

import pytest

from mysqlprobe import capture
from mysqlprobe.analysis.histogram import format_ns
from mysqlprobe.analysis.html_report import render_html
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.prometheus import exposition
from mysqlprobe.analysis.report import render_text
from test_account import capture as account_capture
from test_report import sampled_run, synthetic_run


def sampled() -> Profile:
    return Profile(capture.as_json(sampled_run()))


def text_calls(text: str) -> dict[str, int]:
    """Each stage's calls as its block in the text report prints them."""
    out, stage = {}, None
    for line in text.splitlines():
        m = re.match(r"^([a-z]+\.[a-z_]+): ", line)
        if m:
            stage = m.group(1)
            continue
        m = re.match(r"^  ~([\d,]+) calls in the window", line)
        if m and stage and stage not in out:
            out[stage] = int(m.group(1).replace(",", ""))
    return out


def prometheus_calls(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in re.finditer(r'^mysqlprobe_stage_calls_total\{stage="([^"]+)",function="[^"]+"\} (\d+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


def test_a_stages_calls_are_one_figure_in_every_output():
    profile = sampled()
    json_calls = {s["stage"]: round(s["estimated_calls"]["value"]) for s in profile.to_json()["stages"]
                  if s["calls"]}
    printed = text_calls(render_text(profile))
    scraped = prometheus_calls(exposition(profile))
    assert json_calls and printed
    for stage, n in json_calls.items():
        assert printed[stage] == n, (stage, printed, json_calls)
        assert scraped[stage] == pytest.approx(n, abs=1), (stage, scraped, json_calls)


def test_the_rows_time_is_one_figure_in_the_text_and_the_json():
    doc, stacks = account_capture()
    profile = Profile(doc, stacks)
    account = profile.to_json()["account"]
    text = " ".join(render_text(profile).split())
    row_ns = account["wall_ns_per_row"]
    assert f"{format_ns(row_ns)} of the load's thread time a row" in text, (row_ns, text[:400])
    for m in account["mechanisms"][:3]:
        assert m["name"] in text
    # the same account whatever reads the capture: saved and read back, it is the same figure
    again = Profile(json.loads(json.dumps(capture.as_json(doc))), stacks).to_json()["account"]
    assert again == account


def test_the_html_page_and_the_text_print_the_same_stage_figures():
    profile = Profile(capture.as_json(synthetic_run()))
    page, text = render_html(profile), render_text(profile)
    shown = [f for f in profile.figures if f.counted and f.mean not in ("-", "?")]
    assert shown
    for f in shown:
        row = next(line for line in text.splitlines() if line.startswith(f.stage))
        cells = re.search(rf"<td>{re.escape(f.stage)}[*]?</td>(.*?)</tr>", page).group(1)
        for figure in (f.p50, f.p99):
            assert figure in row.split(), (f.stage, figure, row)
            assert f"<td>{html.escape(figure)}</td>" in cells, (f.stage, figure, cells)
        assert f"mean {f.mean}" in text and f"<td>{html.escape(f.mean)}</td>" in cells, (f.stage, f.mean)


@pytest.mark.parametrize("counts", ["server", "load", "calls"])
def test_the_rows_inserted_are_one_figure_for_every_per_row_output(counts):
    """The headline, the account, compare and the timeline divide by one
    count of rows: the server's Innodb_rows_inserted, else the load's own,
    else InnoDB's row-insert calls; never the Handler_* rows changed where
    any of those is there (a partitioned row passes Handler_write twice)."""
    from mysqlprobe.analysis.compare import rows_of
    from mysqlprobe.analysis.headline import headline
    from mysqlprobe.analysis.timeline import inserted_per_counted
    doc = capture.as_json(synthetic_run())
    doc["window"]["rows_changed"] = 20014                    # Handler_write of a partitioned table: twice
    if counts == "server":
        doc["perf_schema"] = {"status": "collected", "server_status": {"Innodb_rows_inserted": 10007}}
    elif counts == "load":
        doc["workload"] = {"table": "t", "ddl": "CREATE TABLE t (id int) ENGINE=InnoDB", "rows": 10007}
    profile = Profile(doc)
    rows, source = profile.rows_inserted
    assert rows == 10007 and source
    assert headline(profile).rows == rows and rows_of(profile)[0] == rows
    assert inserted_per_counted(profile) == pytest.approx(10007 / 20014 if counts == "server" else 0.5, rel=1e-9) \
        or counts != "server"
