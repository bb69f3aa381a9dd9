"""compare's why from the sampled runs: the wall delta paired over
alternated runs, the mechanisms' deltas summing with the unattributed part
to it, and findings only where the interval leaves out zero."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from mysqlprobe.analysis.compare_account import WallRun, delta_of, detail, explain, headline
from mysqlprobe.analysis.sampling import t95

EXTENSION, INSERT, OTHER = "tablespace extension", "row insert into the clustered index", "other"


def run(pair: int, wall: float, mechanisms: dict[str, tuple[float, float]], interleaved: bool = True,
        settings: dict[str, str] | None = None) -> WallRun:
    functions = {name: {f"{name.split()[0]}_fn": on + off} for name, (on, off) in mechanisms.items()}
    return WallRun(f"r{pair}", None, pair, interleaved, 300_007, wall, 1.0, mechanisms, functions,
                   {"cpu_us_foreground": wall / 1000, "fsyncs": 0.001}, 3.0, settings or {}, "INSERT ... SELECT", None)


def sides(drift: list[float]) -> tuple[list[WallRun], list[WallRun]]:
    """A spends 560 ns more a row extending the tablespace (zero-filled writes, then
    fsync), the rest alike; the host drifts between repeats, on both sides alike."""
    a = [run(i + 1, 3000 + d, {EXTENSION: (200 + d * 0.1, 380), INSERT: (2300 + d * 0.9, 20), OTHER: (100, 0)},
             settings={"innodb_use_fallocate": "OFF"}) for i, d in enumerate(drift)]
    b = [run(i + 1, 2440 + d + (5 if i % 2 else -5),
             {EXTENSION: (20, 0), INSERT: (2300 + d * 0.9 + (5 if i % 2 else -5), 20), OTHER: (100 + d * 0.1, 0)})
         for i, d in enumerate(drift)]
    return a, b


def test_the_paired_delta_cancels_the_hosts_drift():
    drift = [0.0, 400.0, -300.0, 700.0, 100.0]
    a, b = sides(drift)
    x = explain(a, b)
    assert x is not None and x.paired and x.pairs == 5
    assert x.wall.delta == pytest.approx(-561.0)   # the pairs' +-5 ns: -5, +5, -5, +5, -5
    # the pairs' differences vary by +-5 ns: a tight interval, where the sides' own spread is +-400
    assert x.wall.high < -550 and x.wall.low > -570 and x.verdict == "finding"
    unpaired = explain([run(r.pair or 0, r.unprobed_ns_per_row, r.mechanisms, interleaved=False) for r in a], b)
    assert unpaired is not None and not unpaired.paired
    assert unpaired.wall.high - unpaired.wall.low > 10 * (x.wall.high - x.wall.low)
    assert any("not alternated" in w for w in unpaired.warnings)


def test_the_mechanisms_and_the_unattributed_part_sum_to_the_wall_delta():
    a, b = sides([0.0, 400.0, -300.0, 700.0, 100.0])
    x = explain(a, b)
    assert x is not None
    top = x.mechanisms[0]
    assert top.name == EXTENSION and top.finding
    # A's extension also took a tenth of the drift on CPU: 180 ns + 18 on CPU, 380 off
    assert top.total.delta == pytest.approx(-578.0, abs=0.5)
    assert top.on_cpu.delta == pytest.approx(-198.0, abs=0.5)
    assert top.off_cpu.delta == pytest.approx(-380.0)
    assert top.settings == (("innodb_use_fallocate", "OFF", "-"),)
    named = sum(m.total.delta for m in x.mechanisms if m.finding)
    assert named + x.unattributed.delta == pytest.approx(x.wall.delta)
    # the row insert moved by the pairs' +-5 ns only: its interval holds zero, no finding
    insert = next(m for m in x.mechanisms if m.name == INSERT)
    assert not insert.finding
    text = "\n".join(headline(x, "MariaDB 10.1.23", "MariaDB 10.2.11") + detail(x))
    assert "B (MariaDB 10.2.11) is 18% faster per row" in text and "tablespace extension: -578ns" in text
    assert "innodb_use_fallocate: A OFF, B -" in text and "A: tablespace_fn 598ns; B: tablespace_fn 20ns" in text
    doc = x.to_json()
    assert doc["wall"]["paired"] is True and doc["mechanisms"][0]["name"] == EXTENSION
    assert {"name", "delta_ns_per_row", "ci95", "on_cpu_delta_ns_per_row", "off_cpu_delta_ns_per_row",
            "settings"} <= set(doc["mechanisms"][0])
    assert doc["unattributed_ns_per_row"] == pytest.approx(x.unattributed.delta, abs=0.1)


def test_a_change_within_the_resolution_or_its_interval_is_no_finding():
    a = [run(i, 3000.0, {EXTENSION: (2.0 + i * 0.01, 0.0)}) for i in (1, 2, 3)]
    b = [run(i, 3000.0, {EXTENSION: (1.0 + i * 0.01, 0.0)}) for i in (1, 2, 3)]
    x = explain(a, b)
    assert x is not None
    # -1 ns a row, exactly paired: its interval leaves out zero, but it is under 3 samples' worth
    assert x.mechanisms[0].total.excludes_zero and not x.mechanisms[0].finding
    assert x.verdict == "noise" and "no finding" in "\n".join(headline(x, "A", "B"))


def test_delta_of_is_the_paired_t_interval_or_welchs():
    pairs = [(10.0, 13.0), (11.0, 13.5), (12.0, 15.5)]
    d = delta_of([p[0] for p in pairs], [p[1] for p in pairs], pairs)
    diffs = [3.0, 2.5, 3.5]
    half = t95(2) * statistics.stdev(diffs) / math.sqrt(3)
    assert d.delta == pytest.approx(3.0) and d.low == pytest.approx(3.0 - half)
    w = delta_of([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], None)
    assert w.delta == pytest.approx(1.0) and w.low < 0 < w.high
    one = delta_of([1.0], [2.0], None)
    assert one.delta == 1.0 and not one.excludes_zero


def test_an_index_builds_phases_are_compared_pair_by_pair_with_a_missing_phase_as_zero():
    """10.1 builds with no flush phase, 10.2 with one: the flush is 0 on A,
    and each phase's delta is paired as the wall's is."""
    drift = [0.0, 300.0, -200.0]
    a = [run(i + 1, 7000 + d, {"page re-compression": (4600 + d, 0)}) for i, d in enumerate(drift)]
    b = [run(i + 1, 1900 + d, {"page re-compression": (500 + d, 0)}) for i, d in enumerate(drift)]
    for i, d in enumerate(drift):
        a[i] = replace(a[i], phases={"scan": 350.0 + d * 0.1, "insert": 6650.0 + d * 0.9})
        b[i] = replace(b[i], phases={"scan": 400.0 + d * 0.1, "insert": 1250.0 + d * 0.9, "flush": 250.0})
    x = explain(a, b)
    assert x is not None
    phases = dict(x.phases)
    assert list(phases) == ["scan", "insert", "flush"]
    assert phases["insert"].delta == pytest.approx(-5400.0) and phases["insert"].high < 0
    assert phases["flush"].a == 0 and phases["flush"].delta == pytest.approx(250.0)
    assert phases["scan"].delta == pytest.approx(50.0) and phases["scan"].high - phases["scan"].low < 1e-6
    assert x.to_json()["index_build_phases"][1]["name"] == "insert"
    assert any("by phase" in line for line in detail(x))
    # a side without a build compares no phases
    assert explain(a, [replace(r, phases={}) for r in b]).phases == ()


def test_the_waterfall_walks_from_as_row_to_bs_by_the_findings_and_the_rest():
    import html
    import re

    from mysqlprobe.analysis.compare_html import waterfall_svg

    a, b = sides([0.0, 400.0, -300.0, 700.0, 100.0])
    x = explain(a, b)
    assert x is not None
    svg = waterfall_svg(x, "10.1.23", "10.2.11")
    bars = [(float(m[1]), float(m[1]) + float(m[2]), html.unescape(m[0])) for m in
            re.findall(r'<title>([^<]*)</title><text[^>]*>[^<]*</text><rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"',
                       svg)]
    findings = [m for m in x.mechanisms if m.finding]
    assert [t.split(":")[0] for *_, t in bars] == ["A's row", *(m.name for m in findings), "unattributed", "B's row"]
    at = bars[0][1]                                # A's row ends here; each step starts where the last one ended
    for left, right, title in bars[1:-1]:
        assert at == pytest.approx(left, abs=0.15) or at == pytest.approx(right, abs=0.15), (at, title)
        at = right if at == pytest.approx(left, abs=0.15) else left
    assert at == pytest.approx(bars[-1][1], abs=0.3)   # and the last one ends where B's row does
    assert svg.count("class=whisker") == len(findings) + 1
    assert "tablespace extension: -578ns per row (95% " in svg   # the headline's figure


def test_the_compare_page_is_tables_and_charts():
    from mysqlprobe.analysis.compare_html import explanation_headline_html

    a, b = sides([0.0, 400.0, -300.0, 700.0, 100.0])
    x = explain(a, b)
    assert x is not None
    page = explanation_headline_html(x, "MariaDB 10.1.23", "MariaDB 10.2.11")
    assert "<pre" not in page
    assert "<p class=answer>B (MariaDB 10.2.11) is 18% faster per row" in page
    assert "<li>" in page and "tablespace extension: -578ns" in page and "innodb_use_fallocate: A OFF, B -" in page
