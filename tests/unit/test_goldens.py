"""Goldens are compared by the tests and written only by
scripts/update_goldens.py, which a person runs and reviews: a test that
wrote its own golden could never fail."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parents[1]
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wa]")


def test_no_test_writes_a_golden():
    offenders = []
    for path in TESTS.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "golden" in line.lower() and WRITES.search(line):
                offenders.append(f"{path.relative_to(TESTS)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_script_makes_every_golden_as_it_is():
    import sys
    sys.path.insert(0, str(TESTS.parent / "scripts"))
    import update_goldens
    made = update_goldens.goldens()
    assert set(made) == {p.name for p in (TESTS / "golden").iterdir()}
    for name, text in made.items():
        assert (TESTS / "golden" / name).read_text() == text, name
