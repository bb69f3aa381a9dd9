"""Property-based fuzzing of every reader of a capture (report, its JSON,
HTML and Prometheus forms, compare, flamegraph and pprof): documents and
folded files a capture could hold, mutated at random, must end in exit 0,
7 or 11, in one line, with no NaN or infinity printed
(mysqlprobe/lab/fuzzkit.py judges each run). The crashes found so far
are kept below as regression cases."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.folded import LIMITS, OVERFLOW_STACK
from mysqlprobe.lab.fuzzkit import problems
from test_report import synthetic_run

pytestmark = pytest.mark.hostile_captures
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)
STACKS = b"sql/one_connection;do_command;row_insert_for_mysql 7\nsql/one_connection;[k] schedule 3\n"


def base_document() -> dict:
    doc = synthetic_run()
    doc["window"]["rows_changed"] = 10007
    doc["cpu_profile"] = {**(doc.get("cpu_profile") or {}), "stacks_file": "stacks.folded"}
    return json.loads(json.dumps(doc))


def paths(doc) -> list[tuple]:
    """Every place in the document, as a path of keys and indexes."""
    out, todo = [], [((), doc)]
    while todo:
        path, v = todo.pop()
        out.append(path)
        if isinstance(v, dict):
            todo.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            todo.extend((path + (i,), x) for i, x in enumerate(v))
    return sorted(out, key=repr)


JSON_LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
               | st.sampled_from([0, -1, 1e308, -0.0, 5e-324, "", "stacks.folded", "../x", "/etc/passwd"]))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
BASE = base_document()
PLACES = paths(BASE)


@st.composite
def mutated_documents(draw) -> bytes:
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(PLACES))
        parent, key = doc, None
        try:
            for part in path[:-1]:
                parent = parent[part]
            key = path[-1] if path else None
            if key is None:
                continue
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(key, None)
            else:
                parent[key] = draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue     # an earlier mutation took the path away
    return json.dumps(doc).encode()


FOLDED_TEXT = st.lists(st.text(alphabet=st.sampled_from(list("ab;[]_ k0123456789-\t\x00é")), max_size=40),
                       max_size=12).map(lambda lines: "\n".join(lines).encode())


@FUZZ
@given(mutated_documents())
def test_a_mutated_document_is_read_or_refused_in_one_line(profile):
    assert problems(profile, STACKS) == []


@FUZZ
@given(FOLDED_TEXT | st.binary(max_size=200))
def test_any_folded_file_is_read_or_refused_in_one_line(stacks):
    assert problems(json.dumps(BASE).encode(), stacks) == []


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.text(max_size=30), max_size=30))
def test_the_folded_reader_keeps_its_limits_and_its_total(lines):
    f = folded.parse(lines)
    counted = 0
    for raw in lines:
        stack, sep, count = raw.rstrip("\n").rpartition(" ")
        if raw.strip() and sep and stack and count.isdigit() and len(count) <= 19 and len(raw) <= LIMITS.line_bytes:
            counted += int(count)
    assert f.total == counted
    assert len(f.stacks) <= LIMITS.stacks + 1
    assert all(k == OVERFLOW_STACK or k.count(";") < LIMITS.frames for k in f.stacks)


# found by the campaign (bench/fuzz.py) or by the tests above, each once a crash
REGRESSIONS = {
    "the synthetic capture": json.dumps(BASE).encode(),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_found_cases_stay_fixed(name):
    assert problems(REGRESSIONS[name], STACKS) == []


def test_a_refusal_after_notes_on_the_stacks_is_still_one_line():
    """Found by the atheris campaign: compare read the stacks (one line
    skipped, said at once) and then refused the capture (no rows): two
    lines. Notes on the input are said once a command has done its work."""
    doc = json.loads(json.dumps(BASE))
    doc["window"].pop("rows_changed")
    doc["probes"] = []
    assert problems(json.dumps(doc).encode(), STACKS + b"not a folded line\n") == []
