"""The capture: DIR/profile.json, a versioned document every report is made
from. See docs/profile-schema.md for the fields."""

from __future__ import annotations

import json
import os
import platform
import socket
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe import __version__
from mysqlprobe.analysis import histogram as H
from mysqlprobe.analysis.profile import histogram_record, partition_record, PartitionSummary
from mysqlprobe.analysis.profile import stage_record, stage_summaries, window_ns
from mysqlprobe.errors import CaptureError

SCHEMA = "mysqlprobe.profile"
SCHEMA_VERSION = 1
PROFILE_FILE = "profile.json"


def host_record() -> dict:
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count()}


def probe_record(spec, counts) -> dict:
    """One probed function: what it is and what the kernel counted."""
    sym = spec.symbol
    calls = counts.calls if counts else 0
    total = counts.total_ns if counts else 0
    hist = counts.hist if counts else [0] * H.NUM_SLOTS
    parts = counts.partitions if counts else {}
    threads = counts.threads if counts else {}
    return {
        "id": spec.index,
        "stage": spec.stage,
        "symbol": sym.demangled,
        "name": sym.name,
        "mangled": sym.mangled,
        "address": f"{sym.address:#x}",
        "offset": f"{sym.offset:#x}",
        "partition_source": spec.partition.describe() if spec.partition else None,
        "calls": calls,
        "total_ns": total,
        "mean_ns": total / calls if calls else None,
        "nested_probe_hits": counts.nested_hits if counts else 0,
        "percentiles_ns": H.percentiles(hist),
        "histogram": histogram_record(hist),
        "partitions": [partition_record(PartitionSummary(pid, p.calls, p.total_ns, p.hist))
                       for pid, p in sorted(parts.items())],
        "threads": [{"tid": tid, "calls": t.calls, "total_ns": t.total_ns}
                    for tid, t in sorted(threads.items(), key=lambda kv: -kv[1].total_ns)],
    }


def build_profile(*, argv: list[str], target: dict, window: dict, specs, snapshot,
                  unavailable: list[dict], warnings: list[str], attached: int) -> dict:
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "mysqlprobe", "version": __version__, "command": argv},
        "host": host_record(),
        "target": target,
        "window": window,
        "histogram_scheme": {"name": H.SCHEME, "unit": "ns",
                             "note": "buckets are [low, high) ns; percentiles interpolate inside a bucket"},
        "probes": [probe_record(s, snapshot.probes.get(s.index)) for s in specs],
        "unavailable": unavailable,
        "engine": {"probes_attached": attached, "counters": snapshot.counters},
        "warnings": warnings,
    }
    doc["stages"] = [stage_record(s, window_ns(doc)) for s in stage_summaries(doc)]
    return doc


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_profile(out_dir: str, doc: dict) -> str:
    path = Path(out_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        target = path / PROFILE_FILE
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(target)
    except OSError as e:
        raise CaptureError(f"cannot write {path / PROFILE_FILE}: {e.strerror}") from None
    return str(target)


def read_profile(path: str) -> dict:
    """A capture from its directory or its profile.json."""
    p = Path(path)
    if p.is_dir():
        p = p / PROFILE_FILE
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such capture") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise CaptureError(f"{p}: not JSON (line {e.lineno}): is it a mysqlprobe capture?") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CaptureError(f"{p}: not a mysqlprobe profile (no schema {SCHEMA!r})")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise CaptureError(f"{p}: schema version {doc.get('schema_version')}; this mysqlprobe reads "
                           f"version {SCHEMA_VERSION}")
    return doc
