"""The fields every reader of a capture relies on, checked once as the
Profile is built: a document with the right schema marker but fields of
the wrong shape is one CaptureError (exit 7) naming the field, never a
reporter's KeyError later."""

from __future__ import annotations

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
POSITIVE = {("window", "duration_s")}


def _where(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def check_numbers(doc: dict[str, Any]) -> None:
    """Every number in the document finite and within its physical range:
    one CaptureError naming the first field that is not (walked without
    recursion, so no depth of input can exhaust the stack)."""
    todo: list[tuple[Any, tuple[str | int, ...]]] = [(doc, ())]
    while todo:
        value, path = todo.pop()
        if isinstance(value, dict):
            todo.extend((v, path + (str(k),)) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((v, path + (i,)) for i, v in enumerate(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
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


def check_document(doc: dict[str, Any]) -> None:
    """Raise CaptureError for the first field a reader cannot use."""
    check_numbers(doc)
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
