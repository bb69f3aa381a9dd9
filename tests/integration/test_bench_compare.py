"""mysqlprobe bench on two real servers of different lines (10.1.23, the
5.6 line with ha_partition; 10.2.11, the 5.7 line), then compare: one
capture per run, results tables, the server left as it was."""

from __future__ import annotations

import json
import subprocess

import pytest

from browser import dom_after_load, screenshot
from conftest import MYSQLPROBE
from helpers import derived
from mysqlprobe.lab import sandbox, workload

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 20011       # prime
SINGLE_ROWS = 2003  # prime


def _file_format(sb) -> str:
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'innodb_file_format'")
        row = cur.fetchone()
    conn.close()
    return row[1] if row else ""


def _bench(version: str, cells: str, out) -> dict:
    sb = sandbox.Sandbox(version)
    with sb.serving(lambda m: None):
        before = _file_format(sb)
        done = subprocess.run([MYSQLPROBE, "lab", "bench", "--server", version, "--cells", cells, "--rows", str(ROWS),
                               "--single-rows", str(SINGLE_ROWS), "--repeats", "2", "-q",
                               "-o", str(out)], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        assert _file_format(sb) == before          # what the bench set for row formats is put back
    return json.loads((out / version / "results.json").read_text())


@pytest.fixture(scope="module")
def benches(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    return out, {"10.2.11": _bench("10.2.11", "range-5,none,compressed-8,concurrent-2", out),
                 "10.1.23": _bench("10.1.23", "range-5,dynamic", out)}


def _profile(out, version, cell, run=1) -> dict:
    return derived(out / version / cell / f"r{run}")


def _stage(doc, name) -> dict:
    (s,) = [s for s in doc["stages"] if s["stage"] == name]
    return s


def test_bench_runs_every_cell_and_keeps_a_capture_per_run(benches):
    out, results = benches
    cells = {c["cell"]: c for c in results["10.2.11"]["cells"]}
    assert list(cells) == ["range-5", "none", "compressed-8", "concurrent-2"]
    assert all(len(c["runs"]) == 2 and c["min_s"] <= c["median_s"] <= c["max_s"] for c in cells.values())
    assert cells["range-5"]["rows"] == ROWS and cells["concurrent-2"]["rows"] == SINGLE_ROWS
    for run in (1, 2):
        doc = _profile(out, "10.2.11", "range-5", run)
        assert _stage(doc, "partition.write_row")["calls"] == ROWS
        assert doc["workload"]["rows"] == ROWS and (out / "10.2.11" / "range-5" / f"r{run}" / "report.html").exists()
    assert _stage(_profile(out, "10.2.11", "compressed-8"), "innodb.page_compress")["calls"] > 0
    assert _stage(_profile(out, "10.2.11", "none"), "partition.write_row")["calls"] == 0
    concurrent = _profile(out, "10.2.11", "concurrent-2")
    assert _stage(concurrent, "innodb.row_insert")["calls"] == SINGLE_ROWS
    assert concurrent["workload"]["clients"] == 2
    md = (out / "10.2.11" / "results.md").read_text()
    assert "| range-5 |" in md and "Median seconds (less probes) by partitioning" in md
    assert (out / "10.2.11" / "chart.svg").read_text().count("<rect") == 4


def test_compare_lines_up_two_server_lines(benches, tmp_path, artefacts):
    out, _ = benches
    done = subprocess.run([MYSQLPROBE, "compare", str(out / "10.1.23" / "range-5"), str(out / "10.2.11" / "range-5"),
                           "-o", str(tmp_path / "cmp")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "A  MariaDB 10.1.23: 2 run(s)" in text.replace("mariadb", "MariaDB")
    assert "B  MariaDB 10.2.11: 2 run(s)" in text.replace("mariadb", "MariaDB")
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    # each stage is attributed, or said not to be and why (on short exact runs the probes' cost can
    # outweigh the calls: the figures break their bounds)
    stages = {c["name"] for c in result["ranked"]} | {w["stage"] for w in result["withheld"]}
    assert {"partition.write_row", "innodb.row_insert"} <= stages
    assert all(w["why"].startswith(("A run ", "B run ")) for w in result["withheld"])
    # calls per row line up through the catalog: one write_row and one row_insert per row on both lines
    detail = json.loads((tmp_path / "cmp" / "compare.json").read_text())["stages"]
    for side in ("a", "b"):
        assert detail["innodb.row_insert"][side]["calls_per_row"]["median"] == pytest.approx(1.0, abs=0.01)
    assert result["wall"]["a"]["runs"] == 2 and result["wall"]["verdict"] in ("finding", "noise")
    # the wall delta is the unprobed twins', not the profiled runs' (which carry the probes' own cost)
    assert result["wall"]["method"].startswith("unprobed runs")
    twins = {side: [_profile(out, version, "range-5", run)["workload"]["unprobed"] for run in (1, 2)]
             for side, version in (("a", "10.1.23"), ("b", "10.2.11"))}
    per_row = {side: sum(t["seconds"] * 1e9 / t["rows"] for t in ts) / 2 for side, ts in twins.items()}
    assert result["wall"]["delta"] == pytest.approx(per_row["b"] - per_row["a"], abs=0.01)
    low, high = result["wall"]["ci95"]
    assert low <= result["wall"]["delta"] <= high
    # separate benches, not alternated: compare says so (tests/integration/test_compare_ab.py holds the
    # alternated delta to a truth of its own)
    assert result["wall"]["paired"] is False and any("not alternated" in w for w in result["warnings"])
    assert not [c for c in result["functions"] if "[mysqlprobe]" in c["name"] or "bpf_prog" in c["name"]]
    assert (tmp_path / "cmp" / "diff.svg").exists() and (tmp_path / "cmp" / "compare.html").exists()
    # the page in a browser: each side's row drawn, the flame graphs' scripts ran, nothing failed
    page = tmp_path / "cmp" / "compare.html"
    dom = dom_after_load(page)
    assert 'data-errors="' not in dom
    assert dom.count('class="rowbar"') == 2 and 'id="headline"' in dom
    assert dom.count('class="mp-flame"') == dom.count('data-ready="1"') >= 1
    # what the page shows is compare.json's: the wall delta per row in the mechanisms' table
    assert f"<td>{result['wall']['delta']:+,.0f}</td>" in dom, result["wall"]
    assert all(f"<td>{m['name']}</td>" in dom for m in result["mechanisms"][:3])
    screenshot(page, artefacts / "compare.png", "1280,2400")   # kept for a person to look at
