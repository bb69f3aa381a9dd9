"""bench/ as a tool: every script starts (its imports resolve through the
installed library, none through another script) and says its options; the
one results page keeps each script's section in place and in order; the
page and its figures file hold a section for every script."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mysqlprobe.lab import benchkit

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "phase_log.py")


def subcommands(help_text: str) -> list[str]:
    """The subcommands a script's --help lists (none: a script of one measurement)."""
    listed = help_text.partition("\nsubcommands:\n")[2]
    return re.findall(r"^  ([a-z][a-z-]*) ", listed, re.M)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_starts_and_says_its_options(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    for sub in subcommands(done.stdout):     # and each measurement a script holds
        each = subprocess.run([sys.executable, str(script), sub, "--help"], capture_output=True, text=True,
                              timeout=60)
        assert each.returncode == 0 and f"{script.name} {sub}" in each.stdout, (sub, each.stderr)


def test_about_ten_scripts_each_a_question():
    # the measurements of one kind are one script's subcommands; phase_log.py is a helper phases.py runs
    assert len(SCRIPTS) <= 12, [p.name for p in SCRIPTS]
    listed = (BENCH / "README.md").read_text()
    assert all(f"| {p.name} |" in listed for p in SCRIPTS)


def test_no_script_imports_another():
    names = {p.stem for p in BENCH.glob("*.py")}
    for script in SCRIPTS:
        imported = set(re.findall(r"^\s*(?:from|import) (\w+)", script.read_text(), re.M))
        assert not imported & names, f"{script.name} imports {imported & names}"


def test_a_section_is_replaced_in_place_and_new_ones_keep_the_order(tmp_path):
    benchkit.publish("per_call", {"x": 1}, "# Short functions\n\nold figures\n## a table\n", tmp_path)
    benchkit.publish("overhead", {"x": 2}, "# Seed load\n\nfigures\n", tmp_path)
    benchkit.publish("soak", None, "# Soak\n\nan hour\n", tmp_path)
    benchkit.publish("per_call", {"x": 3}, "# Short functions\n\nnew figures\n", tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.startswith(benchkit.RESULTS_HEAD)
    titles = re.findall(r"^## .*$", text, re.M)
    assert titles == ["## 1. Seed load (bench/overhead.py)", "## 3. Short functions (bench/per_call.py)",
                      "## 19. Soak (bench/lifecycle.py soak)"]
    assert "new figures" in text and "old figures" not in text and "### a table" not in text
    assert json.loads((tmp_path / "results.json").read_text()) == {"per_call": {"x": 3}, "overhead": {"x": 2}}


def test_the_page_has_a_section_for_every_script_and_its_figures():
    text = (BENCH / "RESULTS.md").read_text()
    keys = re.findall(r"^<!-- section: (\S+) -->$", text, re.M)
    assert keys == [k for k, _ in benchkit.SECTIONS]
    figures = json.loads((BENCH / "results.json").read_text())
    assert set(figures) == set(keys)
    for _key, script in benchkit.SECTIONS:
        path, *sub = script.split()
        assert (BENCH / path.removeprefix("bench/")).exists(), script
    # one page: no other results file beside it
    assert sorted(p.name for p in BENCH.iterdir() if p.suffix in (".md", ".json")) == \
        ["README.md", "RESULTS.md", "results.json"]


def test_a_build_phase_is_the_innermost_open_one_on_its_thread():
    """PhaseTimer's arithmetic: the build (label 0) holds the scan, which holds an
    insert (a build whose tuples fit one buffer inserts from inside the scan);
    another thread's events stay its own."""
    from mysqlprobe.lab.benchkit.truth import innermost_shares
    labels = ["rest", "scan", "insert"]
    events = [("E", 0, 7, 0), ("E", 1, 7, 10), ("E", 2, 7, 40), ("R", 2, 7, 60), ("R", 1, 7, 90),
              ("R", 0, 7, 100),
              ("E", 0, 8, 1000), ("R", 0, 8, 1100)]      # another build, on another thread
    shares = innermost_shares(list(reversed(events)), labels)   # bpftrace's order is not time's
    assert shares == pytest.approx({"rest": (10 + 10 + 100) / 200, "scan": (30 + 30) / 200, "insert": 20 / 200})
    assert innermost_shares([], labels) == {}
