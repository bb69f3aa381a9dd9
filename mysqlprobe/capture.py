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
from mysqlprobe.analysis.profile import latency_record, stage_record, stage_summaries, window_ns
from mysqlprobe.analysis.attribution import attribute
from mysqlprobe.analysis.sampling import estimate_total
from mysqlprobe.collectors.uprobe import ProbeCounts
from mysqlprobe.errors import CaptureError

SCHEMA = "mysqlprobe.profile"
SCHEMA_VERSION = 1
PROFILE_FILE = "profile.json"
STACKS_FILE = "stacks.folded"
FLAMEGRAPH_FILE = "flamegraph.svg"
OFFCPU_FILE = "offcpu.folded"
OFFCPU_SVG = "offcpu.svg"
HTML_FILE = "report.html"


def host_record() -> dict:
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count()}


def thread_totals(callers: dict, corrected: bool) -> list[dict]:
    """Per thread: the caller edges summed over the callers, largest first."""
    per: dict[int, list[int]] = {}
    for (tid, _parent), (calls, total, cor) in callers.items():
        t = per.setdefault(tid, [0, 0, 0])
        t[0] += calls
        t[1] += total
        t[2] += cor
    return [{"tid": tid, "calls": c, "total_ns": cor if corrected else tot, "raw_total_ns": tot}
            for tid, (c, tot, cor) in sorted(per.items(), key=lambda kv: -kv[1][2])]


def probe_record(spec, counts, calibration=None, corrected: bool = True) -> dict:
    """One probed function: what it is and what the kernel counted. Latencies
    are corrected for the probes' own cost; `raw` has them as measured."""
    sym = spec.symbol
    counts = counts or ProbeCounts()
    own = calibration.own(spec.entry_class) if calibration else 0.0
    pair = calibration.pair(spec.entry_class) if calibration else 0.0
    calls = counts.calls
    return {
        "id": spec.index,
        "stage": spec.stage,
        "symbol": sym.demangled,
        "name": sym.name,
        "mangled": sym.mangled,
        "address": f"{sym.address:#x}",
        "offset": f"{sym.offset:#x}",
        "entry": {"class": spec.entry_class, "skipped_endbr64": bool(spec.skip),
                  "own_cost_ns": round(own, 1), "pair_cost_ns": round(pair, 1)},
        "partition_source": spec.partition.describe() if spec.partition else None,
        "calls": calls,
        **(latency_record(counts.corrected_ns, calls, counts.chist) if corrected
           else latency_record(counts.total_ns, calls, counts.hist)),
        "raw": latency_record(counts.total_ns, calls, counts.hist),
        "nested_probe_hits": counts.nested_hits,
        "overhead_ns": round(calls * pair),
        "partitions": [{"id": pid, "calls": p.calls,
                        **(latency_record(p.corrected_ns, p.calls, p.chist) if corrected
                           else latency_record(p.total_ns, p.calls, p.hist)),
                        "raw": latency_record(p.total_ns, p.calls, p.hist)}
                       for pid, p in sorted(counts.partitions.items())],
        "callers": [{"tid": tid, "parent": parent, "calls": c, "total_ns": cor if corrected else tot,
                     "raw_total_ns": tot}
                    for (tid, parent), (c, tot, cor) in sorted(counts.callers.items(), key=lambda kv: (
                        kv[0][0], -1 if kv[0][1] is None else kv[0][1]))],
        "threads": thread_totals(counts.callers, corrected),
    }


def build_profile(*, argv: list[str], target: dict, window: dict, specs, snapshot,
                  unavailable: list[dict], warnings: list[str], attached: int, calibration=None,
                  links: str = "perf_event", sampling: dict | None = None, corrected: bool = True,
                  timings: dict | None = None, process: dict | None = None,
                  perf_schema: dict | None = None, perf: dict | None = None,
                  off_cpu: dict | None = None) -> dict:
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "mysqlprobe", "version": __version__, "command": argv},
        "host": host_record(),
        "target": target,
        "window": window,
        "histogram_scheme": {"name": H.SCHEME, "unit": "ns",
                             "note": "buckets are [low, high) ns; percentiles interpolate inside a bucket"},
        "calibration": calibration.to_json() if calibration else None,
        "latencies": "corrected" if calibration and corrected else "raw",
        "sampling": sampling or {"mode": "exact"},
        "probes": [probe_record(s, snapshot.probes.get(s.index), calibration, corrected) for s in specs],
        "process": process,
        "perf_schema": perf_schema or {"status": "not requested"},
        "perf": perf or {"status": "not requested"},
        "off_cpu": off_cpu or {"status": "not requested"},
        "unavailable": unavailable,
        "engine": {"probes_attached": attached, "links": links, "counters": snapshot.counters,
                   "timings": timings or {}},
        "warnings": warnings,
    }
    if doc["sampling"]["mode"] == "sampled":
        for j, p in enumerate(doc["probes"]):
            cycles = [(c["on_s"], c["probe_s"], c["calls"][j]) for c in doc["sampling"]["calls_per_cycle"]]
            p["estimated_calls"] = estimate_total(cycles, window["duration_s"],
                                                  doc["sampling"].get("cost_uncertainty", 0.0)).to_json()
    overhead = sum(p["overhead_ns"] for p in doc["probes"])
    doc["overhead"] = {"estimated_ns": overhead,
                       "share_of_window": round(overhead / window_ns(doc), 6) if window_ns(doc) else None,
                       "note": "probe hits x calibrated cost per hit: thread time the probes added"}
    doc["stages"] = [stage_record(s, doc) for s in stage_summaries(doc)]
    doc["attribution"] = attribute(doc)
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


def read_stacks(path: str):
    """Folded stacks from a file, or from a capture directory's stacks.folded."""
    from mysqlprobe.flamegraphs import folded

    p = Path(path)
    if p.is_dir():
        p = p / STACKS_FILE
    try:
        with p.open() as f:
            stacks = folded.parse(f)
    except FileNotFoundError:
        raise CaptureError(f"{p}: no such file (a capture recorded without CPU sampling has none)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CaptureError(f"{p}: cannot read: {e}") from None
    if not stacks.stacks:
        raise CaptureError(f"{p}: no folded stacks in it (lines of 'frame;frame;frame count')")
    return stacks


def _server(doc: dict) -> str:
    srv = doc["target"].get("server", {})
    return f"{srv.get('family', '?')} {srv.get('version', '?')}"


def flamegraph_title(doc: dict) -> tuple[str, str]:
    perf = doc.get("perf") or {}
    sub = (f"PID {doc['target']['pid']}, {doc['window']['start']}, {perf.get('samples', '?')} samples "
           f"({perf.get('event', '?')} {perf.get('frequency_hz', '?')} Hz, "
           f"{(perf.get('unwinding') or {}).get('describe', '?')})")
    return f"{_server(doc)}: CPU flame graph", sub


def offcpu_title(doc: dict) -> tuple[str, str]:
    off = doc["off_cpu"]
    sub = (f"PID {doc['target']['pid']}, {doc['window']['start']}: blocked {off['blocked_s']:.3f}s, "
           f"waiting for a CPU {off['waiting_for_cpu_s']:.3f}s (widths in us)")
    return f"{_server(doc)}: off-CPU flame graph", sub


def write_stacks(out_dir: str, name: str, folded) -> str:
    """DIR/name with the folded stacks; returns name, for the capture's stacks_file."""
    from mysqlprobe.flamegraphs import folded as folded_io

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name), "w") as f:
        folded_io.write(folded, f)
    return name


def write_capture(out_dir: str, doc: dict) -> list[str]:
    """DIR/profile.json, then the pictures made from it; the paths written."""
    return [write_profile(out_dir, doc)] + write_visuals(out_dir, doc)


def write_visuals(out_dir: str, doc: dict) -> list[str]:
    """DIR/flamegraph.svg and DIR/offcpu.svg (when the capture has their
    stacks) and DIR/report.html."""
    from mysqlprobe.analysis.html_report import render_html
    from mysqlprobe.flamegraphs.svg import render

    path = Path(out_dir)
    written = []

    def picture(section: str, svg_file: str, titles, **style) -> str | None:
        stacks = (doc.get(section) or {}).get("stacks_file")
        if not stacks or not (path / stacks).exists():
            return None
        svg = render(read_stacks(str(path / stacks)), *titles(doc), **style)
        (path / svg_file).write_text(svg)
        written.append(str(path / svg_file))
        return svg

    try:
        cpu = picture("perf", FLAMEGRAPH_FILE, flamegraph_title)
        waits = picture("off_cpu", OFFCPU_SVG, offcpu_title, unit="us", element_id="offcpu")
        (path / HTML_FILE).write_text(render_html(doc, cpu, waits))
        written.append(str(path / HTML_FILE))
    except OSError as e:
        raise CaptureError(f"cannot write into {path}: {e.strerror}") from None
    return written
