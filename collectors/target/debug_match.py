"""Whether a debug file given with --debug-file describes the binary it is
given for. A wrong one puts probes mid-function, where the int3 splits an
instruction and the server dies: so it is checked twice over.

1. The layout, never overridden: .text at the same address with the same
   size in both, and an even sample of the debug file's function starts
   are function starts in the binary's own .eh_frame_hdr (kept by strip:
   the unwinder needs it), which lists where every function with unwind
   information begins.
2. The build-id: present in both and equal. --force-debug-file overrides
   this one only, once the layout holds."""

from __future__ import annotations

import struct

from mysqlprobe.collectors.target.elf import ElfImage, elf_file
from mysqlprobe.errors import NoSymbolsError
from dataclasses import dataclass

START_SAMPLE = 64        # function starts checked against the binary's unwind table
MIN_STARTS_FOUND = 0.9   # share of the sample that must be function starts there
DW_EH_PE_UDATA4, DW_EH_PE_SDATA4 = 0x03, 0x0B
DW_EH_PE_PCREL, DW_EH_PE_DATAREL = 0x10, 0x30


@dataclass(frozen=True)
class Layout:
    """What a debug file is checked against: .text's place, and the function starts the unwinder knows."""

    text: tuple[int, int] | None           # (address, size)
    function_starts: frozenset[int] | None


def _eh_frame_starts(header: bytes, address: int) -> frozenset[int] | None:
    """Function starts from .eh_frame_hdr's search table; None for encodings other than the usual ones."""
    if len(header) < 12 or header[0] != 1:
        return None
    ptr_enc, count_enc, table_enc = header[1], header[2], header[3]
    if ptr_enc & 0x0F != DW_EH_PE_SDATA4 or count_enc != DW_EH_PE_UDATA4 \
            or table_enc != (DW_EH_PE_DATAREL | DW_EH_PE_SDATA4):
        return None
    count = struct.unpack_from("<I", header, 8)[0]
    if 12 + count * 8 > len(header):
        return None
    return frozenset(address + initial for initial, _fde in struct.iter_unpack("<ii", header[12:12 + count * 8]))


def read_layout(path: str) -> Layout:
    with elf_file(path) as elf:
        text = elf.section(".text")
        hdr = elf.section(".eh_frame_hdr")
        starts = _eh_frame_starts(elf.data(hdr), hdr.addr) if hdr and hdr.type != 8 else None
        return Layout((text.addr, text.size) if text else None, starts)


def sample_starts(image: ElfImage, text: tuple[int, int]) -> list[int]:
    """An even sample of the function starts the debug file names inside .text."""
    low, high = text[0], text[0] + text[1]
    starts = sorted({f.address for f in image.functions if f.size > 0 and low <= f.address < high})
    step = max(len(starts) // START_SAMPLE, 1)
    return starts[::step][:START_SAMPLE]


def layout_mismatch(binary: Layout, debug: ElfImage, debug_layout: Layout) -> str | None:
    """Why the debug file's layout is not the binary's, or None."""
    if binary.text is None or debug_layout.text is None:
        return "one of them has no .text section"
    if binary.text != debug_layout.text:
        return (f".text is at {debug_layout.text[0]:#x}, {debug_layout.text[1]} bytes in it, but at "
                f"{binary.text[0]:#x}, {binary.text[1]} bytes in the binary")
    sample = sample_starts(debug, binary.text)
    if not sample:
        return "it names no function inside the binary's .text"
    if binary.function_starts is not None:
        found = sum(a in binary.function_starts for a in sample)
        if found < MIN_STARTS_FOUND * len(sample):
            return (f"only {found} of {len(sample)} of its function starts begin a function in the binary "
                    "(its unwind table)")
    return None


def check_debug_file(binary_path: str, image: ElfImage, debug_path: str, debug: ElfImage, force: bool,
                     shown_as: str | None = None) -> None:
    """Refuse, with exit code 5, a debug file that may not be the binary's."""
    fix = "give the debug file of this very build (same build-id)"
    why = layout_mismatch(read_layout(binary_path), debug, read_layout(debug_path))
    if why:
        raise NoSymbolsError(f"--debug-file {debug_path} does not describe {shown_as or binary_path}: {why}; probes placed from "
                             "it would land mid-function", fix=fix)
    if force:
        return
    if not image.build_id or not debug.build_id:
        which = "the binary" if not image.build_id else "the debug file"
        raise NoSymbolsError(f"--debug-file {debug_path}: {which} has no build-id, so it cannot be shown to be "
                             "the binary's; its layout matches: --force-debug-file to use it anyway", fix=fix)
    if image.build_id != debug.build_id:
        raise NoSymbolsError(f"--debug-file {debug_path} belongs to build-id {debug.build_id}, not "
                             f"{image.build_id}; its layout matches: --force-debug-file to use it anyway", fix=fix)
