"""Every input bounded: a folded file's lines, frames and stacks; a
capture's JSON depth, containers and numbers; its files read only as the
regular files in it; no recursion over how deep a stack goes. A bad input
is exit 7 (or 11) in one line that names what is wrong, never exit 1."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from conftest import MYSQLPROBE
from mysqlprobe import capture
from mysqlprobe.analysis.model import Profile
from mysqlprobe.errors import EXIT_CAPTURE, EXIT_INPUT_FILE, CaptureError, InputFileError
from mysqlprobe.files import read_lines_bounded
from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.folded import OVERFLOW_STACK, Limits
from mysqlprobe.flamegraphs.svg import render
from test_report import synthetic_run

# the memory any reader may take, whatever it is given (docs/faults.md)
CEILING_BYTES = 512 << 20


def test_a_line_over_the_limit_is_skipped_and_counted():
    f = folded.parse(["a;b 2\n", "x" * 100 + " 1\n", "a;c 1\n"], Limits(line_bytes=50))
    assert dict(f.stacks) == {"a;b": 2, "a;c": 1} and f.cut.long_lines == 1
    assert f.cut.describe(Limits(line_bytes=50 << 10)) == ["1 line(s) over 50 KiB skipped"]


def test_a_deep_stack_keeps_its_innermost_frames_under_one_cut_root():
    f = folded.parse([";".join(f"f{i}" for i in range(10)) + " 3"], Limits(frames=4))
    assert dict(f.stacks) == {"[7 frames cut];f7;f8;f9": 3} and f.cut.deep_stacks == 1


def test_stacks_past_the_limits_keep_their_samples_in_one_stack():
    lines = [f"s{i};leaf {i + 1}" for i in range(10)]
    for limits, kept in ((Limits(stacks=4), 4), (Limits(total_frames=6), 3), (Limits(total_bytes=20), 2)):
        f = folded.parse(lines, limits)
        assert len(f.stacks) == kept + 1 and f.total == sum(range(1, 11))    # the total stays whole
        assert f.stacks[OVERFLOW_STACK] == sum(range(kept + 1, 11)) == f.cut.overflow_samples


def test_a_count_that_is_no_sample_count_is_a_malformed_line():
    f = folded.parse(["a;b 1", "a;c " + "9" * 30, "a;d 99999999999999999999"])
    assert dict(f.stacks) == {"a;b": 1} and f.ignored == 2


def test_a_huge_line_is_read_without_holding_it(tmp_path):
    path = tmp_path / "one.folded"
    with open(path, "wb") as out:
        out.write(b"a;b 1\n" + b"x;" * (8 << 20) + b" 5\n" + b"c;d 2")
    lines = list(read_lines_bounded(str(path), 1 << 30, 1000, "folded file"))
    assert lines == ["a;b 1", lines[1], "c;d 2"] and len(lines[1]) == 1001
    assert dict(folded.parse(lines, Limits(line_bytes=1000)).stacks) == {"a;b": 1, "c;d": 2}


def test_no_walk_over_a_stack_recurses():
    deep = folded.Folded()
    deep.add([f"f{i}" for i in range(3000)], 2)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)    # far under the stack's depth: any recursion over it fails
    try:
        svg = render(deep, before=deep)
    finally:
        sys.setrecursionlimit(limit)
    assert svg.count('class="f"') > 2000


def _capture(tmp_path, doc=None, text=None):
    (tmp_path / "profile.json").write_text(text if text is not None else json.dumps(doc or synthetic_run()))
    (tmp_path / "stacks.folded").write_text("a;b 1\n")
    return tmp_path


# (what is in profile.json, the one line that must name it)
BAD_JSON = {
    "NaN": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": NaN'), "refused: NaN is not a number"),
    "Infinity": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": -Infinity'), "refused: -Infinity is not"),
    "1e400": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": 1e400'), "refused: the number 1e400 is out of range"),
    "1e308": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": 1e308'),
              "field window.duration_s is 1e+308: beyond any figure a capture holds"),
    "100,000 digits": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": 1' + "0" * 100_000),
                       "refused: an integer of 100001 digits"),
    "nested 200,000 deep": (lambda t: t[:-1] + ', "deep": ' + "[" * 200_000 + "]" * 200_000 + "}",
                            "nested deeper than any capture"),
    "nested 40 deep": (lambda t: t[:-1] + ', "deep": ' + "[" * 40 + "]" * 40 + "}", "nested more than 32 levels"),
    "negative duration": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": -2'),
                          "field window.duration_s is -2: negative, and it counts or measures"),
    "zero duration": (lambda t: t.replace('"duration_s": 1.5', '"duration_s": 0'),
                      "field window.duration_s is 0: not above zero"),
    "negative calls": (lambda t: t.replace('"calls": 10007', '"calls": -10007', 1),
                       "field probes[0].calls is -10007: negative"),
    "NaN rows": (lambda t: t.replace('"rows_changed": 10007', '"rows_changed": NaN'), "refused: NaN"),
}


@pytest.mark.hostile_captures
@pytest.mark.parametrize("name", sorted(BAD_JSON))
@pytest.mark.parametrize("command", ["report", "report --prometheus", "report --json=all", "compare"])
def test_a_number_or_nesting_no_capture_has_is_exit_7_naming_it(tmp_path, name, command):
    doc = synthetic_run()
    doc["window"]["rows_changed"] = 10007
    text = json.dumps(doc, indent=None)
    assert '"duration_s": 1.5' in text and '"calls": 10007' in text and '"rows_changed": 10007' in text
    make, message = BAD_JSON[name]
    cap = _capture(tmp_path, text=make(text))
    verb, *opts = command.split()
    args = [str(cap)] * (2 if verb == "compare" else 1)
    p = subprocess.run([MYSQLPROBE, verb, *args, *opts], capture_output=True, text=True, timeout=60)
    assert p.returncode == EXIT_CAPTURE, p.stderr[-2000:]
    assert p.stderr.count("\n") == 1 and message in p.stderr and "Traceback" not in p.stderr


def test_the_synthetic_capture_carries_the_fields_the_cases_change():
    Profile(json.loads(json.dumps(synthetic_run())))    # and it is accepted as it is


@pytest.mark.hostile_captures
def test_a_symlink_in_a_capture_is_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's own;secret 1\n")
    os.chmod(secret, 0o600)
    cap = tmp_path / "cap"
    cap.mkdir()
    doc = synthetic_run()
    doc["cpu_profile"] = {**(doc.get("cpu_profile") or {}), "stacks_file": "stacks.folded"}
    (cap / "profile.json").write_text(json.dumps(doc))
    (cap / "stacks.folded").symlink_to(secret)
    for args in (["flamegraph", str(cap)], ["report", str(cap), "--html", "-o", str(tmp_path / "pages")]):
        p = subprocess.run([MYSQLPROBE, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == EXIT_INPUT_FILE and "a symbolic link" in p.stderr, p.stderr
        assert "secret" not in p.stdout
    with pytest.raises(InputFileError):
        capture.read_stacks(str(cap))
    assert capture.read_stacks(str(secret)).total == 1    # a file the user names is theirs to name


@pytest.mark.parametrize("name", ["../secret", "/etc/shadow", "..", "a/b"])
def test_a_file_name_reaching_out_of_the_capture_is_refused(tmp_path, name):
    with pytest.raises(CaptureError, match="plain names in its directory"):
        capture.read_member_stacks(tmp_path, name)


def test_report_html_goes_where_o_says_and_leaves_the_capture_as_it_was(tmp_path):
    (tmp_path / "cap").mkdir()
    cap = _capture(tmp_path / "cap")
    before = sorted(os.listdir(cap))
    p = subprocess.run([MYSQLPROBE, "report", str(cap), "--html", "-o", str(tmp_path / "pages")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(cap)) == before and "report.html" in os.listdir(tmp_path / "pages")
    p = subprocess.run([MYSQLPROBE, "report", str(cap), "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert p.returncode == 2 and "-o goes with --html" in p.stderr


def _worst_folded(path, kind: str) -> None:
    with open(path, "w") as out:
        if kind == "many stacks":
            for i in range(150_000):
                out.write(";".join(f"fn_{i}_{j}" for j in range(12)) + " 1\n")
        elif kind == "long frames":
            for i in range(1500):
                out.write(f"{i}{'x' * 30000};{'y' * 30000}{i} 1\n")
        else:   # one line of 200 MB
            out.write("a;" * (100 << 20) + " 1\n")


@pytest.mark.hostile_captures
@pytest.mark.parametrize("kind", ["many stacks", "long frames", "one huge line"])
def test_the_worst_folded_input_stays_under_the_memory_ceiling(tmp_path, kind):
    """Under ulimit -v (the address space, which bounds the resident size):
    the flame graph and the capture's reports of the worst inputs the
    limits let through end in exit 0 or 7, never out of memory."""
    _worst_folded(tmp_path / "stacks.folded", kind)
    (tmp_path / "profile.json").write_text(json.dumps(synthetic_run()))
    doc = json.loads((tmp_path / "profile.json").read_text())
    doc["cpu_profile"] = {**(doc.get("cpu_profile") or {}), "stacks_file": "stacks.folded"}
    (tmp_path / "profile.json").write_text(json.dumps(doc))

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (CEILING_BYTES, CEILING_BYTES))
    for args in (["flamegraph", str(tmp_path / "stacks.folded"), "-o", str(tmp_path / "f.svg")],
                 ["report", str(tmp_path)], ["flamegraph", str(tmp_path), "--pprof", "-o", str(tmp_path / "p.gz")],
                 ["compare", str(tmp_path), str(tmp_path)]):
        p = subprocess.run([MYSQLPROBE, *args], capture_output=True, text=True, timeout=300, preexec_fn=capped)
        assert p.returncode in (0, EXIT_CAPTURE), (args, p.stderr[-3000:])
        assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr


def test_a_type_no_capture_had_is_refused_when_read_but_not_when_just_recorded():
    doc = json.loads(json.dumps(synthetic_run()))
    doc["window"]["ended_by"] = 42          # a string in every capture of the corpus
    with pytest.raises(CaptureError, match=r"field window.ended_by is 42, where a capture has a string"):
        Profile(doc)
    assert Profile(doc, recorded_here=True).window.duration_s == 1.5   # a recording is not lost at its end
