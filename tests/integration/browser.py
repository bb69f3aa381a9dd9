"""Headless Chromium for the report tests: the DOM after the page's scripts
ran, and a screenshot whose pixels are counted (a small PNG reader, so no
imaging library is needed)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
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


def png_colours(png: Path) -> int:
    """Distinct RGB colours in an 8-bit RGB or RGBA PNG."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour_type in (2, 6), f"unexpected PNG format {depth}/{colour_type}"
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + b) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 4 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, channels * 4))
        prev = line
    return len(colours)
