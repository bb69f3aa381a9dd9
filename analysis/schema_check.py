"""The fields every reader of a capture relies on, checked once as the
Profile is built: a document with the right schema marker but fields of
the wrong shape is one CaptureError (exit 7) naming the field, never a
reporter's KeyError later."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from mysqlprobe.errors import CaptureError

NUMBER = (int, float)
# field -> the type it must have; a dict is a nested section checked the same way
REQUIRED: dict[str, Any] = {
    "target": {"pid": int, "binary": str, "server": dict},
    "window": {"duration_s": NUMBER},
    "probes": list,
}
PROBE: dict[str, Any] = {"id": int, "calls": int, "total_ns": NUMBER, "histogram": list,
               "raw": {"total_ns": NUMBER, "histogram": list}}
BUCKET: dict[str, Any] = {"low": NUMBER, "high": NUMBER, "count": int}
# sections that may be missing (or null), but are of this type when present
OPTIONAL: dict[str, Any] = {name: dict for name in ("tool", "host", "sampling", "calibration", "engine", "process", "cpu_profile",
                                          "off_cpu", "io", "perf_schema", "statements", "collectors", "cpu_bursts")}
OPTIONAL.update(warnings=list, unavailable=list)
# collector (and section) names of schemas 1 and 2 -> schema 3's
RENAMED_IN_SCHEMA_3 = {"perf": "cpu_profile", "uprobe": "latency"}


def _type_name(kind: Any) -> str:
    if isinstance(kind, tuple):
        return "a number"
    names: dict[Any, str] = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
    return names.get(kind) or str(kind.__name__)


def _check(value: Any, spec: Any, where: str) -> None:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise CaptureError(f"field {where} is {_shown(value)}, not an object")
        for key, kind in spec.items():
            if key not in value:
                raise CaptureError(f"field {where}.{key} is missing")
            _check(value[key], kind, f"{where}.{key}")
        return
    if isinstance(value, bool) and spec is not bool or not isinstance(value, spec):
        raise CaptureError(f"field {where} is {_shown(value)}, not {_type_name(spec)}")


def _shown(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# the largest magnitude any figure of a capture has: nanoseconds over 31 years, or bytes to an exabyte
NUMBER_CEILING = 1e18
# fields that count or measure and so are never negative (by key, wherever they are)
NON_NEGATIVE_KEYS = frozenset(("calls", "count", "samples", "rows", "rows_changed", "duration_s", "requested_s",
                               "frequency_hz", "cpus", "pid", "tid", "bytes", "cycles"))
NON_NEGATIVE_SUFFIXES = ("_calls", "_count", "_samples", "_bytes", "_s")
# ... and those that must be above zero (a window of no time has no rates)
POSITIVE = {("window", "duration_s"), ("cpu_profile", "slice_s")}


def _where(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def check_numbers(doc: dict[str, Any]) -> None:
    """Every number in the document finite and within its physical range:
    one CaptureError naming the first field that is not (walked without
    recursion, so no depth of input can exhaust the stack)."""
    for path, value in walk(recorded(doc)):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            why = _out_of_range(value, path)
            if why:
                raise CaptureError(f"field {_where(path)} is {value!r:.40}: {why}")


def _out_of_range(value: float, path: tuple[str | int, ...]) -> str | None:
    if value != value or value in (float("inf"), float("-inf")):
        return "not a finite number"
    if abs(value) > NUMBER_CEILING:
        return f"beyond any figure a capture holds (|x| > {NUMBER_CEILING:g})"
    key = next((p for p in reversed(path) if isinstance(p, str)), "")
    if value < 0 and (key in NON_NEGATIVE_KEYS or key.endswith(NON_NEGATIVE_SUFFIXES)):
        return "negative, and it counts or measures"
    if value <= 0 and tuple(p for p in path if isinstance(p, str)) in POSITIVE:
        return "not above zero"
    return None


def check_document(doc: dict[str, Any], shape_only: bool = False) -> None:
    """Raise CaptureError for the first field a reader cannot use (with
    shape_only, of the fields every reader relies on; not the numbers'
    ranges nor the types of capture_types.json)."""
    for key, spec in REQUIRED.items():
        if key not in doc:
            raise CaptureError(f"field {key} is missing")
        _check(doc[key], spec, key)
    for key, kind in OPTIONAL.items():
        if doc.get(key) is not None:
            _check(doc[key], kind, key)
    for i, probe in enumerate(doc["probes"]):
        _check(probe, PROBE, f"probes[{i}]")
        for j, bucket in enumerate(probe["histogram"]):
            _check(bucket, BUCKET, f"probes[{i}].histogram[{j}]")
    if not shape_only:
        check_numbers(doc)
        check_types(doc)


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """A document of an older schema with schema 3's collector names (the
    same document where it has them already)."""
    if not isinstance(doc.get("schema_version"), int) or doc["schema_version"] >= 3:
        return doc
    def name(n: str) -> str:
        return RENAMED_IN_SCHEMA_3.get(n, n)
    out = {name(k) if k == "perf" else k: v for k, v in doc.items()}
    out["schema_version"] = 3
    if isinstance(doc.get("collectors"), dict):
        out["collectors"] = {name(k): v for k, v in doc["collectors"].items()}
    sampling = doc.get("sampling")
    if isinstance(sampling, dict) and isinstance(sampling.get("quieted"), list):
        out["sampling"] = {**sampling, "quieted": [name(n) for n in sampling["quieted"]]}
    return out


# sections a reader recomputes and drops where a document has them (schema 1 stored them; --json=all prints them)
DERIVED_SECTIONS = frozenset(("stages", "attribution", "overhead", "consistency", "index_build"))

# the fields of a capture and their JSON types, from a corpus of real captures (scripts/capture_schema.py)
TYPES_FILE = Path(__file__).with_name("capture_types.json")
FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str", list: "list", dict: "dict"}.get(type(value), type(value).__name__)


def recorded(doc: dict[str, Any]) -> dict[str, Any]:
    """The document less the sections a reader recomputes: what the gates check."""
    return {k: v for k, v in doc.items() if k not in DERIVED_SECTIONS}


def walk(doc: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every value of a document with its path, without recursion."""
    todo: list[tuple[tuple[str | int, ...], Any]] = [((), doc)]
    while todo:
        path, value = todo.pop()
        yield path, value
        if isinstance(value, dict):
            todo.extend((path + (str(k),), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((path + (i,), v) for i, v in enumerate(value))


def field_of(path: tuple[str | int, ...]) -> str:
    """A path as the field it is an instance of: list indexes as [], keys
    that are data (thread ids, stage and function names) as *."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[]"
        else:
            out += ("." if out else "") + (part if FIELD_NAME.match(part) else "*")
    return out


def parent_of(field: str) -> str:
    if field.endswith("[]"):
        return field[:-2]
    return field.rpartition(".")[0]


@lru_cache(maxsize=1)
def _known() -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    known = json.loads(TYPES_FILE.read_text())
    return {f: frozenset(t) for f, t in known["types"].items()}, frozenset(known["required"])


def check_types(doc: dict[str, Any]) -> None:
    """Each field of a type some real capture had it in (an integral float
    where integers were seen, an integer where floats were), and the
    fields the readers index present: else one CaptureError naming the
    first field that is not. Fields no capture had are let be."""
    types, required = _known()
    for path, value in walk(recorded(doc)):
        field = field_of(path)
        seen = types.get(field)
        if seen is None:
            continue
        kind = json_type(value)
        if seen == {"null"} and kind not in ("list", "dict"):
            continue   # only ever null in the corpus: its type is not known, so no scalar is refused
        if kind not in seen and not (kind == "int" and "float" in seen) \
                and not (kind == "float" and "int" in seen and float(value).is_integer()):
            raise CaptureError(f"field {_where(path)} is {_shown_value(value)}, where a capture has "
                               f"{' or '.join(_TYPE_WORDS.get(t, t) for t in sorted(seen))}")
        if isinstance(value, dict):
            for key in (r for r in _children(field) if r in required):
                if key.rpartition(".")[2] not in value:
                    raise CaptureError(f"field {_where(path + (key.rpartition('.')[2],))} is missing")


_TYPE_WORDS = {"null": "null", "bool": "true/false", "int": "an integer", "float": "a number", "str": "a string",
               "list": "a list", "dict": "an object"}


@lru_cache(maxsize=None)
def _children(field: str) -> tuple[str, ...]:
    _, required = _known()
    return tuple(r for r in required if parent_of(r) == field)


def _shown_value(value: Any) -> str:
    kind = json_type(value)
    if kind in ("list", "dict", "null"):
        return {"list": "a list", "dict": "an object", "null": "null"}[kind]
    return f"{value!r:.40}"
