"""The compare's drill-down on the known-cost target: the same rows twice,
insert_row() probed, the second time each row also goes through
fsp_try_extend_data_file() (a page written and synced, named as InnoDB's
tablespace extension). The whole difference per row
lies in that deeper path: the drill-down must name it, with most of the
wall-time difference and the pwrite64/fdatasync calls that explain it, one
call each per row."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MYSQLPROBE
from helpers import Profiler

pytestmark = pytest.mark.root

ROWS = 997  # prime


def _capture(known_cost, tmp_path, name: str, slow: int):
    out = tmp_path / name
    prof = Profiler(known_cost.pid, out, "--probe", "insert_row", "--exact", "-F", "997")
    known_cost.stdin.write(f"rows {tmp_path / (name + '.dat')} {ROWS} {slow}\n")
    known_cost.stdin.flush()
    done = json.loads(known_cost.stdout.readline())
    code, _, err = prof.stop()
    assert code == 0, err
    assert done["rows"] == ROWS
    return out, done["ns_per_row"]


def test_the_slow_variants_deeper_path_is_found_with_its_share(known_cost, tmp_path):
    a, a_ns = _capture(known_cost, tmp_path, "fast", 0)
    b, b_ns = _capture(known_cost, tmp_path, "slow", 1)
    done = subprocess.run([MYSQLPROBE, "compare", str(a), str(b), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["a"]["rows_source"] == "calls of insert_row" and result["a"]["rows"]["median"] == ROWS
    wall = result["wall"]["delta"]
    assert wall == pytest.approx(b_ns - a_ns, rel=0.2)            # the fixture's own clock agrees
    top = result["drilldown"][0]
    assert top["path"] == ["probe:insert_row", "fsp_try_extend_data_file"]
    assert 0.8 <= top["share"] <= 1.1                            # all of it is there, measured within 20%
    calls = {c["call"]: c for c in top["b"]["syscalls"]}
    assert calls["pwrite64"]["calls"] == pytest.approx(1.0) and calls["pwrite64"]["bytes"] == pytest.approx(4096)
    assert calls["fdatasync"]["calls"] == pytest.approx(1.0)
    assert top["a"]["syscalls"] == [] and top["a"]["io"]["calls"] == 0
    assert top["b"]["offcpu_ns"] > 0
    # the path's deepest function is in the mechanism catalog: the compare says what it is
    (why,) = [w for w in result["why"] if w["stage"] == "probe:insert_row"]
    assert why["mechanism"] == "tablespace extension" and why["path"][-1] == "fsp_try_extend_data_file"
    text = subprocess.run([MYSQLPROBE, "compare", str(a), str(b)], capture_output=True, text=True).stdout
    assert "probe:insert_row: tablespace extension" in text
    page = (b / "report.html").read_text()                      # the capture's own stage-rooted graph
    assert "<summary>probe:insert_row</summary>" in page and "below probe:insert_row" in page
