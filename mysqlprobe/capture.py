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
import sys
import time
from pathlib import Path

from mysqlprobe import __version__
from mysqlprobe.errors import CaptureError, OutputError
from mysqlprobe.files import CAPTURE_FILE_LIMIT, check_trusted_dir, move_in, read_bounded, read_bounded_text, write_new
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
    """The capture's pending files into out_dir; each section then names its file."""
    written = []
    for f in cap.files:
        if isinstance(f.content, Folded):
            text = io.StringIO()
            folded_io.write(f.content, text)
            target = write_new(out_dir, f.name, text.getvalue())
        else:
            import shutil  # a tenth of the start's imports; needed only here
            target = move_in(out_dir, f.name, f.content)
            shutil.rmtree(os.path.dirname(f.content), ignore_errors=True)
        cap.doc.setdefault(f.section, {})[f.field] = f.name
        written.append(target)
    cap.files = []
    return written


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


def read_profile(path: str) -> dict:
    """A capture's document from its directory or its profile.json."""
    p = Path(path)
    if p.is_dir():
        p = p / PROFILE_FILE
    try:
        doc = json.loads(read_bounded(str(p), CAPTURE_FILE_LIMIT, "capture"))
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such capture") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise CaptureError(f"{p}: not JSON (line {e.lineno}): is it a mysqlprobe capture?") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CaptureError(f"{p}: not a mysqlprobe profile (no schema {SCHEMA!r})")
    if doc.get("schema_version") not in READABLE_VERSIONS:
        raise CaptureError(f"{p}: schema version {doc.get('schema_version')}; this mysqlprobe reads "
                           f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    return doc



def read_stacks(path: str) -> Folded:
    """Folded stacks from a file, or from a capture directory's stacks.folded."""
    p = Path(path)
    if p.is_dir():
        p = p / STACKS_FILE
    try:
        stacks = folded_io.parse(io.StringIO(read_bounded_text(str(p), CAPTURE_FILE_LIMIT, "folded file")))
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such file (a capture recorded without CPU sampling has none)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    if not stacks.stacks:
        raise CaptureError(f"{p}: no folded stacks in it (lines of 'frame;frame;frame count')")
    if stacks.ignored:
        print(f"mysqlprobe: {p}: skipped {stacks.ignored} line(s) that are not 'frame;frame;frame count'",
              file=sys.stderr)
    return stacks
