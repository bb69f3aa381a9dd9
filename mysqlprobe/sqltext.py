"""Statement texts as Performance Schema's digests see them: literals made
?, runs of them shortened (normalized), and a looser form of either that
joins a normalized text, or a prefix of one, to a server's DIGEST_TEXT
(join_key), whose quoting and spacing vary by version."""

from __future__ import annotations

import re

LITERALS = re.compile(r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|\b0x[0-9a-f]+\b|\bx'[0-9a-f]*'"""
                      r"""|(?<![\w`.])[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?\b""", re.I)
VALUE_LISTS = re.compile(r"\?(?:\s*,\s*\?)+")
TRUNCATED = "\u2026"
_PLACEHOLDERS = re.compile(r"[?,()]*\?[?,()]*")


def normalized(sql: str) -> str:
    """A statement with its literals made ? and runs of them shortened, as
    the server's digests do: for servers whose digests are off."""
    return VALUE_LISTS.sub("?, ...", LITERALS.sub("?", " ".join(sql.split())))


def join_key(text: str) -> str:
    """Case, spaces, quoting of names and the spelling of value lists
    ("(?, ...)", "(...)", "(...) /* , ... */") left out: what a normalized
    text and a DIGEST_TEXT of the same statement have in common."""
    key = re.sub(r"/\*.*?\*/", "", text.replace(TRUNCATED, "")).lower()
    key = re.sub(r"[\s`]+", "", key).replace("...", "?")
    return _PLACEHOLDERS.sub("?", key)
