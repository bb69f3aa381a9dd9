"""The capture: DIR/profile.json, a versioned document of what was recorded,
and the files beside it (folded stacks). Reports are made from it by
analysis/ (see docs/profile-schema.md for the fields).

Schema 2 holds only what the collectors recorded; schema 1 also stored
derived stages, attribution and estimates, which readers now recompute.
Schema 3 names two collectors after what they collect: the CPU profile's
section is `cpu_profile` (was `perf`, whichever sampler took it), the
probes' latency collector `latency` (was `uprobe`); older captures are
read with their names upgraded (analysis/schema_check.py upgraded)."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from mysqlprobe import __version__
from mysqlprobe.errors import CaptureError, OutputError, note
from mysqlprobe.files import CAPTURE_FILE_LIMIT, check_trusted_dir, link_in, read_bounded, read_lines_bounded, write_new
from mysqlprobe.flamegraphs import folded as folded_io
from mysqlprobe.flamegraphs.folded import Folded
from dataclasses import dataclass, field

SCHEMA = "mysqlprobe.profile"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
PROFILE_FILE = "profile.json"
STACKS_FILE = "stacks.folded"
OFFCPU_FILE = "offcpu.folded"


@dataclass
class PendingFile:
    """A file of the capture not written yet: `content` (folded stacks, or
    the path of a file to move in) becomes DIR/name, and the section's
    `field` then names it."""

    section: str
    field: str
    name: str
    content: Folded | str


@dataclass
class Capture:
    """The capture's document (profile.json) and the files to be written beside it."""

    doc: dict
    files: list[PendingFile] = field(default_factory=list)


def host_record() -> dict:
    uname = os.uname()  # what socket.gethostname() and platform tell, without their imports
    return {"hostname": uname.nodename, "kernel": uname.release, "machine": uname.machine, "cpus": os.cpu_count()}


def new_document(argv) -> dict:
    """The head every capture starts with."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "tool": {"name": "mysqlprobe", "version": __version__, "command": list(argv)},
            "host": host_record()}


def now_utc() -> str:
    """ISO 8601 in UTC to the millisecond: 2026-11-25T19:17:14.123Z."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def as_json(doc: dict) -> dict:
    """The document as profile.json will hold it (tuples become lists, keys
    strings), so what a live run reports is what `report` reads back.
    Built container by container, the values shared: a round trip through
    a JSON string held the string and a copy of every value besides (for a
    1.2 MB capture, 11.6 MB at its peak against the document's 3.7)."""
    return _plain(doc)


def _plain(value):
    if isinstance(value, dict):
        return {k if isinstance(k, str) else _key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float)) or value is None:   # bool is an int
        return value
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _key(key) -> str:
    """A dict key as json.dumps writes it (1 -> "1", True -> "true", None -> "null")."""
    if isinstance(key, (int, float)) or key is None:
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def write_files(out_dir: str, cap: Capture) -> list[str]:
    """The capture's pending files into out_dir; each section then names its
    file. The pending files are kept (and a file made elsewhere stays
    where it is) until discard_sources: a capture that could not be
    written whole is written again, elsewhere, from them."""
    written = []
    for f in cap.files:
        if isinstance(f.content, Folded):
            text = io.StringIO()
            folded_io.write(f.content, text)
            target = write_new(out_dir, f.name, text.getvalue())
        else:
            target = link_in(out_dir, f.name, f.content)
        cap.doc.setdefault(f.section, {})[f.field] = f.name
        written.append(target)
    return written


def discard_sources(cap: Capture) -> None:
    """Once the capture is written: the files made elsewhere (perf.data's
    temporary directory) are removed, and nothing is pending."""
    import shutil  # a tenth of the start's imports; needed only here
    for f in cap.files:
        if isinstance(f.content, str):
            shutil.rmtree(os.path.dirname(f.content), ignore_errors=True)
    cap.files = []


def write_profile(out_dir: str, doc: dict) -> str:
    return write_new(out_dir, PROFILE_FILE, json.dumps(doc, indent=1) + "\n")


def write_capture(out_dir: str, cap: Capture) -> list[str]:
    """DIR/profile.json and the files beside it; the paths written."""
    try:
        check_trusted_dir(out_dir)
    except OutputError as e:
        raise CaptureError(f"cannot write into {out_dir}: {e}") from None
    try:
        os.makedirs(out_dir, exist_ok=True)
        written = write_files(out_dir, cap)
        return [write_profile(out_dir, cap.doc)] + written
    except OSError as e:
        raise CaptureError(f"cannot write into {out_dir}: {e.strerror}") from None


PROFILE_FILE_LIMIT = 64 << 20   # profile.json: a real one is 1-4 MB
JSON_DEPTH_LIMIT = 32            # a real one nests 8 deep
JSON_CONTAINER_LIMIT = 2_000_000  # objects and arrays in all (a real one: 16,000)
JSON_INT_DIGITS = 20             # an integer of a capture fits in 64 bits


class _JSONRefused(ValueError):
    pass


def _int(text: str) -> int:
    if len(text.lstrip("-")) > JSON_INT_DIGITS:
        raise _JSONRefused(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _JSONRefused(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> float:
    raise _JSONRefused(f"{name} is not a number a capture holds")


def _containers(data: bytes) -> int:
    """Objects and arrays outside strings, counted without parsing."""
    bare = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', data)
    return bare.count(b"[") + bare.count(b"{")


def parse_json(data: bytes, where: str) -> Any:
    """JSON with limits on size, nesting, containers and numbers: NaN,
    Infinity and out-of-range numbers are refused, as is an integer of
    more digits than 64 bits hold; anything else is one CaptureError."""
    try:
        if _containers(data) > JSON_CONTAINER_LIMIT:
            raise _JSONRefused(f"more than {JSON_CONTAINER_LIMIT:,} objects and arrays")
        doc = json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise CaptureError(f"{where}: nested deeper than any capture (over {JSON_DEPTH_LIMIT} levels)") from None
    except _JSONRefused as e:
        raise CaptureError(f"{where}: refused: {e}") from None
    except json.JSONDecodeError as e:
        raise CaptureError(f"{where}: not JSON (line {e.lineno}): is it a mysqlprobe capture?") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CaptureError(f"{where}: not JSON: {str(e)[:120]}") from None
    if _deeper_than(doc, JSON_DEPTH_LIMIT):
        raise CaptureError(f"{where}: nested more than {JSON_DEPTH_LIMIT} levels, deeper than any capture")
    return doc


def _deeper_than(doc: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` deep, walked without recursion."""
    todo = [(doc, 0)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth + 1 > limit:
                return True
            todo.extend((v, depth + 1) for v in value)
    return False


def _in_capture(path: str, name: str) -> tuple[Path, bool]:
    """The file `name` (of a capture directory, or `path` itself when it is a
    file) and whether to follow a symlink there: a file the user named is
    followed; a file found in a capture is not."""
    p = Path(path)
    if p.is_dir():
        return p / name, False
    return p, True


def read_profile(path: str) -> dict:
    """A capture's document from its directory or its profile.json."""
    p, follow = _in_capture(path, PROFILE_FILE)
    try:
        doc = parse_json(read_bounded(str(p), PROFILE_FILE_LIMIT, "capture", follow), str(p))
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such capture") from None
    except OSError as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CaptureError(f"{p}: not a mysqlprobe profile (no schema {SCHEMA!r})")
    if doc.get("schema_version") not in READABLE_VERSIONS:
        raise CaptureError(f"{p}: schema version {doc.get('schema_version')}; this mysqlprobe reads "
                           f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    return doc


def member(directory: str | Path, name: object) -> Path | None:
    """A capture's file named by its document: a plain name in the
    directory, or None when the document names none. A name with a '/'
    or one that is '..' would reach out of the capture: refused."""
    if name is None or name == "":
        return None
    if not isinstance(name, str) or "/" in name or name in (".", "..") or "\0" in name:
        raise CaptureError(f"{directory}: the capture names {str(name)[:60]!r} as a file of its own; "
                           "a capture's files are plain names in its directory")
    return Path(directory) / name


def read_stacks(path: str, follow: bool | None = None) -> Folded:
    """Folded stacks from a file, or from a capture directory's stacks.folded.
    Read bounded (flamegraphs/folded.py's LIMITS); what was cut is said on
    stderr. follow: whether a symlink is read through (by default only when
    `path` names the file itself)."""
    p, follows = _in_capture(path, STACKS_FILE)
    try:
        stacks = folded_io.parse(read_lines_bounded(str(p), CAPTURE_FILE_LIMIT, folded_io.LIMITS.line_bytes,
                                                    "folded file", follows if follow is None else follow))
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such file (a capture recorded without CPU sampling has none)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    cut = stacks.cut.describe()
    if not stacks.stacks:
        raise CaptureError(f"{p}: no folded stacks in it (lines of 'frame;frame;frame count')"
                           + "".join(f"; {what}" for what in cut))
    if stacks.ignored:
        note(f"{p}: skipped {stacks.ignored} line(s) that are not 'frame;frame;frame count'")
    for what in cut:
        note(f"{p}: {what}")
    return stacks


def read_member_stacks(directory: str | Path, name: object) -> Folded | None:
    """The folded stacks a capture's document names, from its directory
    (never through a symlink); None when it names none or the file is not
    there (a capture copied without it)."""
    p = member(directory, name)
    if p is None or not os.path.lexists(p):
        return None
    return read_stacks(str(p), follow=False)
