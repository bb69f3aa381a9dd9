"""Separate debug files of a stripped binary: where gdb looks for them
(by build-id under /usr/lib/debug, or by .gnu_debuglink) and which one
belongs to the binary."""

from __future__ import annotations

from collections.abc import Callable

import os
import zlib

from mysqlprobe.errors import TargetError

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mysqlprobe.collectors.target.elf import ElfImage


def _crc32_file(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


def debug_file_candidates(image: ElfImage, exe_path: str, root: str = "/") -> list[str]:
    """Where gdb would look for the separate debug file, under root."""
    roots = [root] if root in ("/", "") else [root, "/"]
    out = []
    for r in roots:
        debug = os.path.join(r, "usr/lib/debug")
        if image.build_id:
            out.append(os.path.join(debug, ".build-id", image.build_id[:2], image.build_id[2:] + ".debug"))
        if image.debuglink:
            d = os.path.dirname(exe_path).lstrip("/")
            name = image.debuglink[0]
            out += [os.path.join(r, d, name), os.path.join(r, d, ".debug", name),
                    os.path.join(debug, d, name)]
    return list(dict.fromkeys(out))


def find_debug_file(image: ElfImage, exe_path: str, root: str, read_elf: Callable[[str], ElfImage]) -> str | None:
    """The debug file that belongs to image (same build-id, or the debuglink's CRC); read_elf reads a candidate."""
    for cand in debug_file_candidates(image, exe_path, root):
        if not os.path.isfile(cand) or os.path.realpath(cand) == os.path.realpath(image.path):
            continue
        if image.build_id:
            try:
                other = read_elf(cand)
            except TargetError:
                continue
            if other.build_id == image.build_id:
                return cand
        elif image.debuglink and _crc32_file(cand) == image.debuglink[1]:
            return cand
    return None
