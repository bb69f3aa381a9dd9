"""Text helpers the text reports share: shares as percentages, and lines
wrapped at 80 columns without cutting anything off."""

from __future__ import annotations

import textwrap


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def size(n: float) -> str:
    """Bytes, in the largest binary unit that keeps a digit before the point."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


def fit(lines: list[str], indent: int | None = None) -> list[str]:
    """Lines over 80 columns wrapped, their rest indented (by default two
    more than the line); nothing is cut off."""
    out = []
    for line in lines:
        if len(line) <= 80:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        out += textwrap.wrap(line.lstrip(" "), 80, initial_indent=" " * lead, subsequent_indent=" " * (
            lead + 2 if indent is None else indent), break_long_words=True, break_on_hyphens=False)
    return out

