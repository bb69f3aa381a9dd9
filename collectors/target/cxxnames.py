"""C++ function names: demangled as c++filt prints them, reduced to the
qualified name mysqlprobe matches on (signatures drift between versions),
and compiler clones (.isra, .constprop, .part, .cold) told apart."""

from __future__ import annotations

from typing import Any

import ctypes
import functools
import re

CLONE = re.compile(r"\.(isra|constprop|part|cold|lto_priv|localalias)(\.\d+)*")
DEMANGLED_CLONE = re.compile(r"( \[clone [^\]]*\])+$")
_SPECIAL_PREFIXES = ("non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ",
                     "transaction clone for ")


@functools.lru_cache(maxsize=None)
def _cxa_demangle() -> tuple[Any, Any]:
    import ctypes.util  # the first name demangled, not every start

    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


@functools.lru_cache(maxsize=1 << 18)
def demangle(name: str) -> str:
    """C++ name as c++filt prints it; other names unchanged."""
    if not name.startswith("_Z"):
        return name
    fn, free = _cxa_demangle()
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)


def _matching_open(text: str, close: int) -> int:
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return -1


def qualified_name(demangled: str) -> str:
    """'ha_partition::write_row(unsigned char*) const' -> 'ha_partition::write_row'.

    Plain C names lose a compiler clone suffix ('deflate.isra.0' -> 'deflate')."""
    text = DEMANGLED_CLONE.sub("", demangled)
    for prefix in _SPECIAL_PREFIXES:
        if text.startswith(prefix):  # a thunk is not the function it jumps to
            return prefix + qualified_name(text[len(prefix):])
    if "(" not in text:
        return CLONE.sub("", text)
    close = text.rfind(")")
    open_ = _matching_open(text, close)
    if open_ <= 0:
        return text
    name = text[:open_]
    # a template function's demangled form starts with its return type
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch in ">)":
            depth += 1
        elif ch in "<(":
            depth -= 1
        elif ch == " " and depth == 0 and not name[:i].endswith("operator"):
            return name[i + 1:]
    return name


def clone_kind(mangled: str) -> str | None:
    m = CLONE.search(mangled)
    return m.group(1) if m else None
