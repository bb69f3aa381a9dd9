"""Write docs/cli.md's exit-code table from mysqlprobe/errors.py's
EXIT_MEANINGS (tests/unit/test_exit_codes.py checks the two agree):

    .venv/bin/python scripts/exit_codes.py"""

from __future__ import annotations

import re
from pathlib import Path

from mysqlprobe.errors import exit_table

CLI_DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
TABLE = re.compile(r"^\| code \| meaning \|\n(?:\|.*\|\n)+", re.M)


def main() -> None:
    text = CLI_DOC.read_text()
    new, n = TABLE.subn(exit_table(), text)
    if n != 1:
        raise SystemExit(f"{CLI_DOC}: no single exit-code table to replace")
    CLI_DOC.write_text(new)
    print(f"wrote {CLI_DOC}")


if __name__ == "__main__":
    main()
