"""README's sample output, from a real `make demo` capture kept in docs/demo/.

    .venv/bin/python scripts/readme_sample.py --demo   # as root: run the demo, keep its capture, write README
    .venv/bin/python scripts/readme_sample.py          # README's sample again from docs/demo/, as this code prints it

The sample is the report's headline and its stage table, as `mysqlprobe
report docs/demo` prints them. tests/unit/test_readme.py checks that the
README holds what this commit prints for that capture, so a change to the
report fails there until this script is run again.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "docs" / "demo"
README = ROOT / "README.md"
BEGIN, END = "<!-- sample: scripts/readme_sample.py -->", "<!-- end of sample -->"
KEPT = ("profile.json", "*.folded")   # what the report reads; the pictures are made from them


def sample(capture: Path = CAPTURE) -> list[str]:
    """The headline, then the stage table with its 'not called' lines."""
    from mysqlprobe.analysis.report import render_text
    from mysqlprobe.reports import load_profile

    lines = render_text(load_profile(str(capture))).splitlines()
    headline = lines[:lines.index("")]
    start = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    table = []
    for line in lines[start:]:
        if not line or line.startswith(("* ", "withheld", "share:")):
            break
        table.append(line)
    return headline + [""] + table


def block(capture: Path = CAPTURE) -> str:
    """The README's lines between the markers."""
    return "\n".join([BEGIN, "```", *sample(capture), "```", END])


def shown(readme: str) -> str:
    """What the README holds between the markers, markers included."""
    return readme[readme.index(BEGIN):readme.index(END) + len(END)]


def run_demo() -> None:
    """`mysqlprobe lab demo` into a scratch directory; its capture kept in docs/demo/."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo"
        subprocess.run([str(ROOT / ".venv" / "bin" / "mysqlprobe"), "lab", "demo", "-o", str(out)], check=True)
        shutil.rmtree(CAPTURE, ignore_errors=True)
        CAPTURE.mkdir(parents=True)
        for pattern in KEPT:
            for f in out.glob(pattern):
                shutil.copy(f, CAPTURE / f.name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", action="store_true", help="run the demo first (root, the sandbox server)")
    args = p.parse_args()
    if args.demo:
        run_demo()
    text = README.read_text()
    README.write_text(text.replace(shown(text), block()))
    print(f"README.md's sample written from {CAPTURE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
