"""Prometheus exposition and pprof profiles of a capture, read by the real
tools: promtool and go tool pprof."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import MYSQLPROBE
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.prometheus import LADDER_NS, PARTITIONS_SHOWN, Totals, _top_partitions, exposition
from mysqlprobe.capture import read_profile

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = Path(__file__).parent.parent / "golden"


def tool(name: str, *elsewhere: str) -> str:
    found = shutil.which(name) or next((p for p in elsewhere if os.path.exists(p)), None)
    assert found, f"{name} is not installed (scripts/setup-host.sh installs it)"
    return found


def capture_with_stacks(tmp_path: Path) -> Path:
    """The exact fixture capture with the golden CPU stacks (99 Hz) beside it."""
    tmp_path.mkdir()
    doc = json.loads((FIXTURES / "profile_v1_exact.json").read_text())
    doc["cpu_profile"] = {"status": "collected", "frequency_hz": 99, "stacks_file": "stacks.folded"}
    doc["target"]["build_id"] = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    shutil.copy(GOLDEN / "stacks.folded", tmp_path / "stacks.folded")
    return tmp_path


def test_the_exposition_passes_promtool_and_holds_the_counts():
    text = exposition(Profile(read_profile(str(FIXTURES / "profile_v1_exact.json"))))
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    row_insert = '{stage="innodb.row_insert",function="row_insert_for_mysql"'
    assert f'mysqlprobe_stage_latency_seconds_count{row_insert}}} 10007' in text
    assert f'mysqlprobe_stage_latency_seconds_bucket{row_insert},le="+Inf"}} 10007' in text
    assert f'mysqlprobe_stage_calls_total{row_insert}}} 10007' in text
    buckets = [int(v) for v in re.findall(r'seconds_bucket\{stage="innodb.row_insert".*?\} (\d+)', text)]
    assert buckets == sorted(buckets)  # cumulative


def test_a_progress_counter_is_exported_as_itself_not_as_rows():
    doc = read_profile(str(FIXTURES / "profile_v1_exact.json"))
    doc["window"].update(rows_counter="memory:global_query_id", rows_changed=4242)
    text = Totals().add(Profile(doc)).add(Profile(doc)).exposition()
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'mysqlprobe_progress_total{counter="global_query_id"} 8484' in text
    assert "mysqlprobe_rows_changed_total" not in text


def test_partitions_beyond_the_top_ones_are_summed_as_other():
    parts = Counter({i: 100 + i for i in range(PARTITIONS_SHOWN + 3)})
    shown = _top_partitions(parts)
    assert len(shown) == PARTITIONS_SHOWN + 1 and shown[0] == (f"p{PARTITIONS_SHOWN + 2}", 112)
    assert shown[-1] == ("other", 100 + 101 + 102)
    assert sum(c for _, c in shown) == sum(parts.values())


def test_profiles_add_up_and_histograms_keep_their_bounds():
    profile = Profile(read_profile(str(FIXTURES / "profile_v1_exact.json")))
    one, two = exposition(profile), Totals().add(profile).add(profile).exposition()
    row_insert = '{stage="innodb.row_insert",function="row_insert_for_mysql"'
    assert f"mysqlprobe_stage_calls_total{row_insert}}} 20014" in two
    assert f'mysqlprobe_stage_latency_seconds_count{row_insert}}} 20014' in two
    bounds = lambda text: re.findall(r'row_insert_for_mysql",le="([^"]+)"', text)  # noqa: E731
    assert bounds(one) == bounds(two) and len(bounds(one)) == len(LADDER_NS) + 1


def test_waits_for_a_cpu_left_out_of_the_latencies_are_a_counter_of_their_own():
    doc = read_profile(str(FIXTURES / "profile_v1_exact.json"))
    (probe,) = [p for p in doc["probes"] if p["name"] == "row_insert_for_mysql"]
    probe["cpu_waits"] = {"calls": 3, "total_ns": 1_250_000}
    text = Totals().add(Profile(doc)).add(Profile(doc)).exposition()
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    row_insert = '{stage="innodb.row_insert",function="row_insert_for_mysql"'
    assert f"mysqlprobe_stage_cpu_wait_seconds_total{row_insert}}} 0.0025" in text
    assert 'mysqlprobe_stage_cpu_wait_seconds_total{stage="partition.write_row"' in text  # 0 where none waited


def test_go_tool_pprof_reads_the_cpu_profile_of_a_capture(tmp_path):
    capture = capture_with_stacks(tmp_path / "cap")
    out = tmp_path / "cpu.pb.gz"
    run = subprocess.run([MYSQLPROBE, "flamegraph", str(capture), "--pprof", "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    go = tool("go", "/usr/local/go/bin/go")
    raw = subprocess.run([go, "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert raw.returncode == 0, raw.stderr
    counts = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\d+: ", raw.stdout, re.M)]
    assert sum(counts) == 23 and len(counts) == 3   # the folded file's samples and stacks
    assert "thread:[page_cleaner]" in raw.stdout and "10101010" in raw.stdout  # 99 Hz period, in ns
    assert "0123456789abcdef0123456789abcdef01234567" in raw.stdout              # the mapping's build-id
    top = subprocess.run([go, "tool", "pprof", "-top", "-nodecount=3", str(out)], capture_output=True, text=True,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert re.search(r"row_insert_for_mysql\s*$", top.stdout, re.M), top.stdout


def test_a_probe_function_without_a_stage_is_exported_under_its_probe_name():
    doc = read_profile(str(FIXTURES / "profile_v1_exact.json"))
    extra = dict(doc["probes"][0], id=max(p["id"] for p in doc["probes"]) + 1, stage=None, name="row_upd_step")
    doc["probes"].append(extra)
    text = exposition(Profile(doc))
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'mysqlprobe_stage_calls_total{stage="probe:row_upd_step",function="row_upd_step"}' in text


def test_watch_serves_the_probes_its_last_window_attached():
    from mysqlprobe.commands.watch import Metrics
    doc = read_profile(str(FIXTURES / "profile_v1_exact.json"))
    metrics = Metrics()
    metrics.add(Profile(doc))
    text = metrics.text()
    assert f"mysqlprobe_probes {doc['engine']['probes_attached']}\n" in text
    assert f"mysqlprobe_functions {len(doc['probes'])}\n" in text
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_index_builds_phases_are_counters_read_from_its_one_figure():
    from test_account import build_capture
    doc, stacks = build_capture()
    doc["perf_schema"]["compressions"] = [{"page_size": 8192, "compress_ops": 421, "compress_ops_ok": 338}]
    profile = Profile(doc, stacks)
    b = profile.index_build
    assert b is not None and b.wall_ns
    text = Totals().add(profile).add(profile).exposition()
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    for ph in b.phases:   # twice the window's phase, as the text report gives it
        got = float(re.search(rf'mysqlprobe_index_build_phase_seconds_total{{phase="{ph.name}"}} (\S+)', text)[1])
        assert got == pytest.approx(2 * ph.share * b.wall_ns / 1e9, rel=1e-6)
    assert f"mysqlprobe_index_build_rows_total {2 * b.rows_scanned:.0f}\n" in text
    # probed, the build's span holds the probes' time too: the phases stay the stacks' wall, as the text's
    from dataclasses import replace
    profile.__dict__["index_build"] = replace(b, wall_ns=3 * b.wall_ns, stacks_wall_ns=b.wall_ns)
    probed = Totals().add(profile).exposition()
    insert = next(ph for ph in b.phases if ph.name == "insert")
    got = float(re.search(r'mysqlprobe_index_build_phase_seconds_total{phase="insert"} (\S+)', probed)[1])
    assert got == pytest.approx(insert.ns_per_row * b.rows_scanned / 1e9, rel=1e-6)
    assert "mysqlprobe_page_compressions_total 842\n" in text
    assert "mysqlprobe_page_compression_failures_total 166\n" in text
    # a profile without a build adds no index family
    plain = exposition(Profile(read_profile(str(FIXTURES / "profile_v1_exact.json"))))
    assert "index_build" not in plain


def test_watch_gauges_the_build_under_way_and_drops_it_once_no_read_sees_one(monkeypatch):
    from mysqlprobe.commands import watch
    now = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: now[0])
    metrics = watch.Metrics()
    assert "index_build_progress" not in metrics.text()
    metrics.build_progress("stage 2 of 3: merge sort", 42.5, 7.0)
    text = metrics.text()
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'mysqlprobe_index_build_progress_ratio{stage="stage 2 of 3: merge sort"} 0.425\n' in text
    assert 'mysqlprobe_index_build_seconds_left{stage="stage 2 of 3: merge sort"} 7\n' in text
    now[0] += watch.PROGRESS_FRESH_S + 0.5   # the build ended: the reads see none
    assert "index_build_progress" not in metrics.text()
