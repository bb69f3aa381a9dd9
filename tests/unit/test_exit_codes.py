"""One exit-code table: docs/cli.md's is the one the code's constants
give (scripts/exit_codes.py writes it), and every error the tool raises
exits with a code that table explains."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from mysqlprobe import errors
from mysqlprobe.errors import EXIT_MEANINGS, MysqlprobeError, exit_table

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_table_is_the_one_the_code_gives():
    table = re.search(r"^\| code \| meaning \|\n(?:\|.*\|\n)+", CLI_DOC.read_text(), re.M)
    assert table is not None and table.group(0) == exit_table(), "run scripts/exit_codes.py"


def test_every_exit_constant_is_explained():
    constants = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert constants == set(EXIT_MEANINGS)


def test_every_error_class_exits_with_an_explained_code():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, MysqlprobeError)]
    assert len(classes) >= 10
    for c in classes:
        if c is not errors.Interrupted:     # 128 + the signal: 130 is its row, 129 and 143 named in it
            assert c.exit_code in EXIT_MEANINGS, c.__name__
    assert errors.Interrupted(2, "x").exit_code == errors.EXIT_INTERRUPTED
