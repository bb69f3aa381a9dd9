"""Headless Chromium for the report tests: the DOM after the page's scripts
ran (what the tests assert on), and a screenshot kept for a person."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Chromium is not installed (make deps installs Debian's chromium)"
    return exe


def _run(args: list[str], timeout: float = 90) -> str:
    cmd = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--virtual-time-budget=3000", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom_after_load(path: Path, fragment: str = "") -> str:
    return _run(["--dump-dom", path.resolve().as_uri() + fragment])


def screenshot(path: Path, png: Path, size: str = "1280,1600") -> Path:
    _run([f"--screenshot={png}", f"--window-size={size}", path.resolve().as_uri()])
    assert png.exists(), "Chromium wrote no screenshot"
    return png
