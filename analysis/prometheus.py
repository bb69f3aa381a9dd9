"""A profile in the Prometheus text exposition format (version 0.0.4):
what `mysqlprobe report DIR --prometheus` prints, checked by `promtool
check metrics`.

Names follow Prometheus's conventions: the `mysqlprobe_` prefix, seconds,
`_total` on counters. Counters hold the window's totals (the estimate for
the whole window in sampled mode); the latency histograms hold the calls
the probes timed, with the probes' own cost taken off. Partitions are the
top PARTITIONS_SHOWN by calls and `other`, so a table of 8,192 partitions
does not make 8,192 series."""

from __future__ import annotations

import math

from mysqlprobe import __version__
from mysqlprobe.analysis.model import Profile

PARTITIONS_SHOWN = 10


def _label_value(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items()) + "}"


def _number(x: float) -> str:
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return repr(float(x))


class Exposition:
    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _histogram(out: Exposition, name: str, buckets: list[dict], total_ns: float, **labels) -> None:
    cumulative = 0
    for b in sorted(buckets, key=lambda b: b["low"]):
        cumulative += b["count"]
        out.sample(f"{name}_bucket", cumulative, **labels, le=_number(b["high"] / 1e9))
    out.sample(f"{name}_bucket", cumulative, **labels, le="+Inf")
    out.sample(f"{name}_sum", max(total_ns, 0) / 1e9, **labels)
    out.sample(f"{name}_count", cumulative, **labels)


def _top_partitions(partitions: list[dict]) -> list[tuple[str, float]]:
    ranked = sorted(partitions, key=lambda p: -p["calls"])
    shown = [(f"p{p['id']}", p["calls"]) for p in ranked[:PARTITIONS_SHOWN]]
    rest = sum(p["calls"] for p in ranked[PARTITIONS_SHOWN:])
    return shown + ([("other", rest)] if len(ranked) > PARTITIONS_SHOWN else [])


def exposition(profile: Profile) -> str:
    doc, out = profile.doc, Exposition()
    out.family("mysqlprobe_build_info", "gauge", "mysqlprobe's version and the server it profiled.")
    server = doc["target"].get("server") or {}
    out.sample("mysqlprobe_build_info", 1, version=__version__, server_family=server.get("family", ""),
               server_version=server.get("version", ""))
    out.family("mysqlprobe_window_seconds", "gauge", "Length of the profiled window.")
    out.sample("mysqlprobe_window_seconds", doc["window"]["duration_s"])

    probes = profile.probes
    out.family("mysqlprobe_stage_calls_total", "counter",
               "Calls of each probed function in the window (sampled mode: the estimate for the whole window).")
    for p in probes:
        calls = (p.get("estimated_calls") or {}).get("value", p["calls"])
        out.sample("mysqlprobe_stage_calls_total", round(calls), stage=p["stage"], function=p["name"])
    out.family("mysqlprobe_stage_latency_seconds", "histogram",
               "Latency of the calls the probes timed, their own cost taken off.")
    for p in probes:
        if p["histogram"]:
            _histogram(out, "mysqlprobe_stage_latency_seconds", p["histogram"], p["total_ns"],
                       stage=p["stage"], function=p["name"])

    partitioned = [s for s in profile.stage_records if s.get("partitions")]
    if partitioned:
        out.family("mysqlprobe_partition_calls_total", "counter",
                   f"Calls counted per partition (the top {PARTITIONS_SHOWN} by calls, the rest as other).")
        for s in partitioned:
            for name, calls in _top_partitions(s["partitions"]):
                out.sample("mysqlprobe_partition_calls_total", calls, stage=s["stage"], partition=name)

    rows = doc["window"].get("rows_changed")
    if rows is not None:
        out.family("mysqlprobe_rows_changed_total", "counter", "Rows the server changed in the window.")
        out.sample("mysqlprobe_rows_changed_total", rows)
    ps_stages = ((doc.get("perf_schema") or {}).get("deltas") or {}).get("stages") or []
    if ps_stages:
        out.family("mysqlprobe_ps_stage_seconds_total", "counter",
                   "Time Performance Schema timed in each statement stage in the window.")
        for st in ps_stages:
            out.sample("mysqlprobe_ps_stage_seconds_total", st["timer_ps"] / 1e12, ps_stage=st["name"])

    overhead, sampling = profile.overhead, doc.get("sampling") or {}
    slowdown = overhead.get("measured_slowdown")
    if slowdown is not None and math.isfinite(slowdown):
        out.family("mysqlprobe_overhead_slowdown_ratio", "gauge",
                   "How much slower the load ran over the window, from the server's own progress.")
        out.sample("mysqlprobe_overhead_slowdown_ratio", slowdown)
    if sampling.get("overhead_budget") is not None:
        out.family("mysqlprobe_overhead_budget_ratio", "gauge", "The slowdown the duty cycles may cost.")
        out.sample("mysqlprobe_overhead_budget_ratio", sampling["overhead_budget"])
    out.family("mysqlprobe_probes_on_seconds_total", "counter", "Time the probes were attached in the window.")
    out.sample("mysqlprobe_probes_on_seconds_total",
               sampling["on_s"] if sampling.get("mode") == "sampled" else doc["window"]["duration_s"])
    return out.text()
