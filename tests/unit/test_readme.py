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


# the placeholders README and docs write, and what each stands for on a command line
PLACEHOLDERS = {"$(pidof mysqld)": "4242", "$(pidof mariadbd)": "4242", "$(pgrep -x mariadbd)": "4242",
                "$(pidof mysqld mariadbd)": "4242"}
WORDS = {"PID": "4242", "PA,PB": "4242,4243", "PID,PID": "4242,4243", "N": "3", "SECONDS": "5", "HZ": "99",
         "PCT": "5", "DIR": "/tmp/mp-out", "VERSION": "10.2.11", "NAME": "row_insert_for_mysql", "FILE": "/tmp/f",
         "PATH": "/tmp/f", "URL": "http://127.0.0.1:8002", "SOCK": "/tmp/s.sock", "STAGE": "innodb.row_insert",
         "CELL": "range-100", "A": "/tmp/a", "B": "/tmp/b", "F": "/tmp/f"}
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:\$ )?(?:sudo )?(?:[./\w-]*/)?mysqlprobe( .*)?$")


def command_lines() -> list[tuple[str, str]]:
    """(where, command) for each mysqlprobe command line in README and docs:
    a code block's line that starts with it, or a backquoted span that does."""
    from mysqlprobe import cli
    out = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        spans = [line.strip() for b in blocks for line in b.splitlines()]
        spans += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for span in spans:
            line = span.split(" | ")[0].split(" > ")[0].split("  #")[0].split(" # ")[0].strip()
            m = COMMAND.match(line)
            if not m:
                continue
            first = (m.group(1) or "").split()[:2]
            if (not first or first[0].startswith("-") or first[0] in cli.COMMANDS
                    or first[0] == "lab" and first[1:] and first[1] in cli.LAB_COMMANDS):
                out.append((doc.name, "mysqlprobe" + (m.group(1) or "")))
    return out


def parse(command: str):
    """The command parsed by the real argparse parser of its subcommand; a
    synopsis's [optional] parts taken, of a|b alternatives the first."""
    from mysqlprobe import cli
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    command = command.replace("…", " ").replace("...", " ").replace("[", " ").replace("]", " ")
    words = [WORDS.get(w, w) for w in shlex.split(command)[1:]]
    words = [w.split("|")[0] if "|" in w and not w.startswith("-") else w for w in words]
    if words[:1] == ["lab"]:
        name, rest = words[1], words[2:]
    elif words[:1] and words[0] in cli.COMMANDS:
        name, rest = words[0], words[1:]
    else:
        name, rest = "record", words
    return cli.build_parser(name, cli.command_module(name)).parse_args(rest)


def test_readme_and_docs_show_command_lines():
    found = command_lines()
    assert len(found) >= 20, found
    assert {doc for doc, _ in found} >= {"README.md", "cli.md"}


@pytest.mark.parametrize("where,command", command_lines())
def test_each_command_line_parses_with_the_real_parser(where, command, capsys):
    try:
        parse(command)
    except SystemExit as e:
        if e.code != 0:   # --help and --version exit 0
            pytest.fail(f"{where}: `{command}` does not parse: {capsys.readouterr().err.strip()} (exit {e.code})")


def test_a_wrong_option_fails_to_parse():
    with pytest.raises(SystemExit):
        parse("mysqlprobe -p 4242 --no-such-option")
    with pytest.raises(SystemExit):
        parse("mysqlprobe lab bench --server 9.9.9")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for heading in re.findall(r"^#+ (.*)$", path.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_link_and_anchor_resolves():
    missing = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (doc.parent / path).resolve() if path else doc
            if not resolved.exists():
                missing.append(f"{doc.name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                missing.append(f"{doc.name}: {target} (no such heading)")
    assert not missing, missing


def test_the_quick_start_is_the_two_commands():
    block = README.split("## Quick start", 1)[1].split("```")[1]
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]


def test_the_sample_output_is_what_this_commit_prints_for_the_demos_capture():
    """README's sample is the report of a real `make demo` capture kept in
    docs/demo/, as this code prints it: a change to the report fails here
    until `scripts/readme_sample.py` writes the sample again."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import readme_sample

    doc = json.loads((readme_sample.CAPTURE / "profile.json").read_text())
    assert doc["workload"]["rows"] == 4000037 and doc["workload"]["table"] == "emp_range_5"   # the demo's load
    assert readme_sample.shown(README) == readme_sample.block()
