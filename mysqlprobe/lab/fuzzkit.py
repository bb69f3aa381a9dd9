"""The readers' fuzzing harness, shared by the property tests
(tests/unit/test_fuzz_readers.py, Hypothesis) and the coverage-guided
campaign (bench/fuzz.py, atheris): a capture made of the bytes given is
put through every command that reads one, in-process, through the CLI's
own front door, and each run's outcome is judged.

A run may end in 0, 7 (a capture that cannot be read) or 11 (a file that
is not a regular one), nothing else: exit 1 is a crash. What a run that
succeeded printed must hold no NaN or infinity."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mysqlprobe.errors import EXIT_CAPTURE, EXIT_INPUT_FILE, EXIT_OK

ALLOWED_EXITS = (EXIT_OK, EXIT_CAPTURE, EXIT_INPUT_FILE)
# the commands that read a capture (DIR stands for it, OUT for a new directory of output)
READERS: tuple[tuple[str, ...], ...] = (
    ("report", "DIR"), ("report", "DIR", "--json=all"), ("report", "DIR", "--prometheus"),
    ("report", "DIR", "--html", "-o", "OUT"), ("compare", "DIR", "DIR"),
    ("flamegraph", "DIR", "-o", "OUT/f.svg"), ("flamegraph", "DIR", "--pprof", "-o", "OUT/p.pb.gz"),
)


@dataclass(frozen=True)
class Outcome:
    command: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def problem(self) -> str | None:
        """What is wrong with this run, if anything."""
        if self.exit_code not in ALLOWED_EXITS:
            return f"exit {self.exit_code}: {self.stderr.strip()[-300:]}"
        if self.exit_code != EXIT_OK and (self.stderr.count("\n") != 1 or "Traceback" in self.stderr):
            return f"exit {self.exit_code} without one line: {self.stderr[-300:]!r}"
        if self.exit_code == EXIT_OK and "--prometheus" in self.command:
            for line in self.stdout.splitlines():
                if line and not line.startswith("#") and not _finite_sample(line):
                    return f"a sample that is not a finite number: {line[:200]}"
        if self.exit_code == EXIT_OK and "--json=all" in self.command and not _finite_json(self.stdout):
            return "JSON with a number that is not finite"
        return None


def _finite_sample(line: str) -> bool:
    """A line of the exposition format: its value (after the labels) a finite number."""
    value = line.rsplit("}", 1)[-1].split()[-1] if "}" in line else line.split()[-1]
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def _finite_json(text: str) -> bool:
    def refuse(name: str) -> float:
        raise ValueError(name)
    try:
        doc = json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    todo = [doc]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            return False
    return True


def run_readers(profile: bytes, stacks: bytes, commands: tuple[tuple[str, ...], ...] = READERS) -> list[Outcome]:
    """Each reader command on a capture of these two files; the outcomes."""
    from mysqlprobe.cli import main
    work = tempfile.mkdtemp(prefix="mysqlprobe-fuzz-")
    try:
        capture = os.path.join(work, "cap")
        os.mkdir(capture)
        Path(capture, "profile.json").write_bytes(profile)
        Path(capture, "stacks.folded").write_bytes(stacks)
        out = []
        for i, command in enumerate(commands):
            where = os.path.join(work, f"out{i}")
            os.mkdir(where)
            argv = [a.replace("DIR", capture).replace("OUT", where) for a in command]
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(argv)
            out.append(Outcome(command, code, stdout.getvalue(), stderr.getvalue()))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def problems(profile: bytes, stacks: bytes) -> list[str]:
    return [f"{' '.join(o.command)}: {o.problem}" for o in run_readers(profile, stacks) if o.problem]
