"""A capture with the right schema marker but fields of the wrong shape is
refused by the Profile, in one line naming the field, with exit code 7."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest

from conftest import MYSQLPROBE
from mysqlprobe.analysis.model import Profile
from mysqlprobe.errors import EXIT_CAPTURE, CaptureError
from test_report import synthetic_run

BREAKS = {
    "no target": (lambda d: d.pop("target"), "field target is missing"),
    "target a list": (lambda d: d.__setitem__("target", []), "field target is list, not an object"),
    "pid a string": (lambda d: d["target"].__setitem__("pid", "42"), "field target.pid is str, not an integer"),
    "duration null": (lambda d: d["window"].__setitem__("duration_s", None),
                      "field window.duration_s is null, not a number"),
    "probes an object": (lambda d: d.__setitem__("probes", {}), "field probes is dict, not a list"),
    "calls a float": (lambda d: d["probes"][0].__setitem__("calls", 1.5), "field probes[0].calls is float, not an integer"),
    "raw missing": (lambda d: d["probes"][1].pop("raw"), "field probes[1].raw is missing"),
    "bucket count a bool": (lambda d: d["probes"][0]["histogram"][0].__setitem__("count", True),
                            "field probes[0].histogram[0].count is bool, not an integer"),
    "perf a string": (lambda d: d.__setitem__("cpu_profile", "collected"), "field cpu_profile is str, not an object"),
}


def test_the_synthetic_capture_is_accepted():
    profile = Profile(json.loads(json.dumps(synthetic_run())))
    assert len(profile.probes) == 4 and profile.window.duration_s == 1.5
    assert [s.stage for s in profile.stages][:1] == ["partition.write_row"]


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_broken_field_is_named(name):
    doc = copy.deepcopy(json.loads(json.dumps(synthetic_run())))
    breaker, message = BREAKS[name]
    breaker(doc)
    with pytest.raises(CaptureError) as e:
        Profile(doc)
    assert str(e.value) == message and e.value.exit_code == EXIT_CAPTURE


@pytest.mark.hostile_captures
@pytest.mark.parametrize("command", ["report", "compare", "flamegraph"])
def test_report_and_compare_exit_7_on_a_wrong_field(tmp_path, command):
    doc = json.loads(json.dumps(synthetic_run()))
    doc.pop("target")
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    (tmp_path / "stacks.folded").write_text("a;b 1\n")
    args = {"report": [str(tmp_path)], "compare": [str(tmp_path)] * 2,
            "flamegraph": [str(tmp_path), "--pprof"]}[command]
    p = subprocess.run([MYSQLPROBE, command, *args], capture_output=True, text=True)
    assert p.returncode == EXIT_CAPTURE, p.stderr
    assert p.stderr == f"mysqlprobe: {tmp_path}: field target is missing\n"


def test_a_schema_2_capture_is_read_with_the_collectors_renamed():
    doc = synthetic_run()
    old = {**{k: v for k, v in doc.items() if k != "cpu_profile"}, "schema_version": 2,
           "perf": {"status": "collected", "frequency_hz": 99, "samples": 7},
           "collectors": {"perf": {"status": "collected"}, "uprobe": {"status": "collected"}},
           "sampling": {**(doc.get("sampling") or {}), "quieted": ["calibration", "perf"]}}
    profile = Profile(old)
    assert profile.doc["schema_version"] == 3 and "perf" not in profile.doc
    assert profile.doc["cpu_profile"]["samples"] == 7
    assert set(profile.doc["collectors"]) == {"cpu_profile", "latency"}
    assert profile.doc["sampling"]["quieted"] == ["calibration", "cpu_profile"]
    assert old["perf"]["samples"] == 7 and "cpu_profile" not in old   # the document read is left as it was
