"""Run the fault suite and write docs/faults.md: one row per fault, with what
must hold and what this run saw. As root, from the checkout:

    .venv/bin/python scripts/faults_table.py [--out docs/faults.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "integration" / "test_faults.py"

HEADER = """# Faults and bad input

Every row is a fault or a bad input that `tests/integration/test_faults.py`
tries on a real server (MariaDB 10.2.11 from the sandbox), on the MySQL
stand-in, or on a capture given to the commands that read one. Besides its
own expectation, each run that reaches the server is checked for:

- one clear line on stderr with the exit code of its class, no traceback;
- no probe left: the BPF programs and links mysqlprobe held are gone from the
  kernel, no uprobe is on the binary, no helper process (calibration, perf,
  P_S guard) runs on;
- Performance Schema's setup exactly as before; the server answers;
- a load running through the fault (the window phase) changed exactly its
  20,011 rows.

Exit codes (docs/cli.md has the table): 0 done, 2 bad usage, 3 no such
server process, 4 no privileges to attach, 5 no symbols (or a debug file that
is not the binary's), 7 unreadable capture (or one whose fields, numbers or
nesting no capture has), 10 output cannot be written (or is refused: another
user could change it), 11 an input that is no regular file (a symbolic link
inside a capture) or is over its size bound, 128+N stopped by signal N before
the window opened (129 SIGHUP, 130 SIGINT, 143 SIGTERM).

Written by `scripts/faults_table.py` from the run below; do not edit by hand.

"""


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def run_suite(junit: Path) -> int:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # the pytest script, not `python -m pytest`: the checkout must not shadow the installed package
    return subprocess.run([str(Path(sys.executable).parent / "pytest"), "-q", "-p", "no:cacheprovider",
                           "-o", "junit_family=xunit1", str(SUITE),
                           f"--junitxml={junit}"], cwd=ROOT, env=env).returncode


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """fault key -> (passed or failed, what the test saw)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "fault" not in props:
            continue
        failed = case.find("failure") is not None or case.find("error") is not None
        out[props["fault"]] = ("FAILED" if failed else "held", props.get("observed", ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "faults.md"))
    args = ap.parse_args()
    sys.path[:0] = [str(SUITE.parent), str(SUITE.parent.parent)]
    from test_faults import FAULTS  # the table itself lives with the tests

    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "faults.xml"
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        rc = run_suite(junit)
        seen = outcomes(junit) if junit.exists() else {}
    rows = ["| # | fault | must hold | this run saw | |", "|---|---|---|---|---|"]
    for i, (key, fault) in enumerate(FAULTS.items(), 1):
        result, saw = seen.get(key, ("not run", ""))
        rows.append(f"| {i} | {cell(fault.fault)} `{key}` | {cell(fault.expect)} | {cell(saw)} | {result} |")
    held = sum(1 for key in FAULTS if seen.get(key, ("",))[0] == "held")
    run_line = (f"Run: {started}, {platform.node()} ({os.cpu_count()} CPUs, Linux {platform.release()}), "
                f"`python scripts/faults_table.py`: {held} of {len(FAULTS)} held.\n\n")
    Path(args.out).write_text(HEADER + run_line + "\n".join(rows) + "\n")
    print(f"wrote {args.out}: {held} of {len(FAULTS)} faults held", file=sys.stderr)
    return 0 if rc == 0 and held == len(FAULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
