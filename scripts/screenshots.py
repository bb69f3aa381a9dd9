"""docs/images/report.png and compare.png: report.html of the demo's capture
(docs/demo/, scripts/readme_sample.py --demo keeps a fresh one) and
compare.html of a small A/B bench, each opened in headless Chromium. As root:

    .venv/bin/python scripts/screenshots.py [--rows 300007] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MYSQLPROBE = ROOT / ".venv" / "bin" / "mysqlprobe"
IMAGES = ROOT / "docs" / "images"
CAPTURE = ROOT / "docs" / "demo"


def screenshot(page: Path, png: Path, size: str) -> None:
    """The page as Chromium draws it once its scripts have run."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        sys.exit("screenshots.py: Chromium is needed (scripts/setup-host.sh test installs it)")
    subprocess.run([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                    "--virtual-time-budget=3000", f"--screenshot={png}", f"--window-size={size}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=300007, help="rows per run of the A/B bench")
    p.add_argument("--repeats", type=int, default=3, help="alternated repeats of the A/B bench")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        subprocess.run([str(MYSQLPROBE), "report", str(CAPTURE), "--html", "-o", str(out / "report")], check=True)
        screenshot(out / "report" / "report.html", IMAGES / "report.png", "1280,1500")
        subprocess.run([str(MYSQLPROBE), "lab", "bench", "--server", "10.1.23,10.2.11", "--cells", "range-5",
                        "--rows", str(args.rows), "--repeats", str(args.repeats), "-q", "-o", str(out / "ab")],
                       check=True)
        subprocess.run([str(MYSQLPROBE), "compare", str(out / "ab" / "10.1.23" / "range-5"),
                        str(out / "ab" / "10.2.11" / "range-5"), "-o", str(out / "cmp")],
                       check=True, stdout=subprocess.DEVNULL)
        screenshot(out / "cmp" / "compare.html", IMAGES / "compare.png", "1280,1300")
    print(f"wrote {IMAGES.relative_to(ROOT)}/report.png and compare.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
