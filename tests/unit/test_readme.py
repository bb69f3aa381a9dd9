"""The README is a front door that must stay true: every command it shows
parses (its --help), and every link it holds resolves in the checkout."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import MYSQLPROBE

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PRODUCT = ("record", "report", "compare", "flamegraph", "watch")
LAB = ("sandbox", "load", "demo", "bench")


def shown_commands() -> set[tuple[str, ...]]:
    """(command,) or ("lab", command) for each mysqlprobe command line the README shows."""
    found = set()
    for line in README.splitlines():
        for m in re.finditer(r"(?:sudo )?(?:\.venv/bin/)?mysqlprobe((?: [^\s`#|]+)*)", line):
            try:
                words = shlex.split(m.group(1).replace("$(", "").replace(")", ""))
            except ValueError:  # prose around the command: its first word is what counts
                words = m.group(1).split()
            if words and words[0] == "lab" and len(words) > 1 and words[1] in LAB:
                found.add(("lab", words[1]))
            elif words and words[0] in PRODUCT:
                found.add((words[0],))
            elif not words or words[0].startswith("-"):
                found.add(("record",))
    return found


def test_the_readme_shows_the_product_and_the_lab():
    commands = shown_commands()
    assert {("record",), ("report",), ("compare",), ("flamegraph",), ("watch",), ("lab", "demo"),
            ("lab", "bench")} <= commands


@pytest.mark.parametrize("command", sorted(shown_commands()))
def test_each_command_the_readme_shows_parses(command):
    args = [] if command == ("record",) else list(command)
    p = subprocess.run([MYSQLPROBE, *args, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("usage: mysqlprobe"), p.stderr


def test_the_options_the_readme_names_exist():
    p = subprocess.run([MYSQLPROBE, "--help"], capture_output=True, text=True, timeout=60)
    for option in ("-d", "-o", "--json", "--exact", "--list", "--probe", "--stage", "--budget", "-F",
                   "--debug-file", "--debuginfod", "--raw", "--full-sql", "--shared-output"):
        assert re.search(rf"(^|[\s,]){re.escape(option)}[\s,=]", p.stdout, re.M), option


def test_every_link_resolves():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing


def test_the_quick_start_is_the_two_commands():
    block = README.split("## Quick start", 1)[1].split("```")[1]
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
