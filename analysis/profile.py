"""Stage summaries of an insert profile capture (profile.json): pure
functions of the document, so `mysqlprobe report` gives the same answer
later, without root, as the live run did."""

from __future__ import annotations

from dataclasses import dataclass, field

from mysqlprobe.analysis import histogram as H


@dataclass
class PartitionSummary:
    id: int
    calls: int
    total_ns: int
    counts: list[int]

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.calls if self.calls else None


@dataclass
class StageSummary:
    stage: str
    title: str
    symbols: list[str]
    calls: int = 0
    total_ns: int = 0
    counts: list[int] = field(default_factory=lambda: [0] * H.NUM_SLOTS)
    partitions: dict[int, PartitionSummary] = field(default_factory=dict)
    partition_source: str | None = None

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.calls if self.calls else None

    def percentiles(self) -> dict[str, float | None]:
        return H.percentiles(self.counts)


def probe_counts(probe: dict) -> list[int]:
    return H.counts_from_buckets(probe.get("histogram", []))


def stage_summaries(doc: dict) -> list[StageSummary]:
    """One summary per stage that was probed, in catalog order, summing the
    stage's functions (e.g. every get_partition_id_* variant)."""
    from mysqlprobe.catalog import BY_NAME

    out: dict[str, StageSummary] = {}
    for p in doc.get("probes", []):
        name = p.get("stage") or f"probe:{p['name']}"
        st = BY_NAME.get(name)
        s = out.get(name)
        if s is None:
            s = out[name] = StageSummary(name, st.title if st else p["symbol"], [])
        s.symbols.append(p["symbol"])
        s.calls += p["calls"]
        s.total_ns += p["total_ns"]
        s.counts = H.merge(s.counts, probe_counts(p))
        if p.get("partition_source"):
            s.partition_source = p["partition_source"]
        for part in p.get("partitions", []):
            ps = s.partitions.get(part["id"])
            if ps is None:
                ps = s.partitions[part["id"]] = PartitionSummary(part["id"], 0, 0, [0] * H.NUM_SLOTS)
            ps.calls += part["calls"]
            ps.total_ns += part["total_ns"]
            ps.counts = H.merge(ps.counts, H.counts_from_buckets(part.get("histogram", [])))
    order = {n: i for i, n in enumerate(BY_NAME)}
    return sorted(out.values(), key=lambda s: (order.get(s.stage, len(order)), s.stage))


def window_ns(doc: dict) -> int:
    return int(doc["window"]["duration_s"] * 1e9)


def stage_record(s: StageSummary, window: int) -> dict:
    """A stage summary as it is stored in profile.json."""
    seconds = window / 1e9 if window else 0
    return {
        "stage": s.stage,
        "title": s.title,
        "symbols": s.symbols,
        "calls": s.calls,
        "calls_per_s": round(s.calls / seconds, 3) if seconds else None,
        "total_ns": s.total_ns,
        "mean_ns": s.mean_ns,
        "share_of_window": round(s.total_ns / window, 6) if window else None,
        "percentiles_ns": s.percentiles(),
        "histogram": histogram_record(s.counts),
        "partition_source": s.partition_source,
        "partitions": [partition_record(p) for _, p in sorted(s.partitions.items())],
    }


def histogram_record(counts: list[int]) -> list[dict]:
    return [{"low": b.low, "high": b.high, "count": b.count} for b in H.nonzero_buckets(counts)]


def partition_record(p: PartitionSummary) -> dict:
    return {"id": p.id, "calls": p.calls, "total_ns": p.total_ns, "mean_ns": p.mean_ns,
            "percentiles_ns": H.percentiles(p.counts), "histogram": histogram_record(p.counts)}
