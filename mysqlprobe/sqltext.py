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


# --full-sql keeps literals, but never credentials: what follows IDENTIFIED
# BY/AS/USING, PASSWORD('...'), PASSWORD = '...' (SET PASSWORD, CHANGE
# MASTER's MASTER_PASSWORD, CREATE SERVER's OPTIONS), the arguments of the
# SQL encryption functions, and digit runs that pass the Luhn check (cards)
REDACTED = "'<redacted>'"
_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'" + r'|"(?:[^"\\]|\\.|"")*"')
# what stands before a literal that is a credential (in the text outside literals)
_BEFORE_SECRET = re.compile(r"(?:\bIDENTIFIED\s+(?:(?:WITH|VIA)\s+\S+\s+)?(?:BY|AS|USING)(?:\s+PASSWORD)?"
                            r"|\b(?:OLD_)?PASSWORD\s*\(|\b(?:MASTER_)?PASSWORD\s*=?)\s*$", re.I)
_SET_PASSWORD = re.compile(r"^\s*SET\s+PASSWORD\b", re.I)
_AFTER_EQUALS = re.compile(r"=\s*$")
_CIPHER_CALLS = re.compile(r"\b((?:AES|DES)_(?:EN|DE)CRYPT|ENCODE|DECODE|ENCRYPT)\s*\([^()]*\)", re.I)
_DIGIT_RUNS = re.compile(r"(?<![\w.])\d(?:[ -]?\d){12,18}(?![\w.])")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _card(match: re.Match) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    return "<redacted>" if _luhn(digits) else match.group(0)


def redacted(sql: str) -> str:
    """A statement's whole text with its credentials and card numbers taken out."""
    out, at, set_password = [], 0, bool(_SET_PASSWORD.match(sql))
    for literal in _STRING.finditer(sql):
        before = sql[at:literal.start()]
        secret = _BEFORE_SECRET.search(before) or (set_password and _AFTER_EQUALS.search(before))
        out += [before, REDACTED if secret else literal.group(0)]
        at = literal.end()
    sql = "".join(out) + sql[at:]
    sql = _CIPHER_CALLS.sub(lambda m: f"{m.group(1)}(<redacted>)", sql)
    return _DIGIT_RUNS.sub(_card, sql)
