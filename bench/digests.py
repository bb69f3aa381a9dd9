"""The per-digest figures against the server's own: sysbench oltp_insert (8
clients) and the seed bulk load on MariaDB 10.2.11, every call counted
(--exact) and sampled (the default).

  executions  the INSERT digests' executions the statement probe saw begin
              and end (exact) or their estimate (sampled), against the
              server's Com_insert (Com_insert_select for the seed)
  latency     the statement probe's mean per execution as measured (probes'
              cost in), against P_S's own timer for the same digests
              (SUM_TIMER_WAIT / COUNT_STAR over the window), which times the
              same executions, probes and all
  row inserts innodb.row_insert calls inside the INSERT statements (exact),
              against the server's Innodb_rows_inserted

    sudo .venv/bin/python bench/digests.py [--repeats 3] [--seconds 8]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import tempfile
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Load, SHAPES
from mysqlprobe.lab.benchkit import MYSQLPROBE, Tool, bench_parser, derived, log, machine, med, run_line, write_results
from mysqlprobe.lab import sandbox

CASES = ((SHAPES[0], True), (SHAPES[0], False), (SHAPES[1], True), (SHAPES[1], False))


def one_run(load: Load, pid: int, exact: bool, workdir: Path) -> dict:
    d = Path(tempfile.mkdtemp(dir=workdir))
    tool = Tool([MYSQLPROBE, "-p", str(pid), "--insert-profile", "-q", "-o", str(d)] + (["--exact"] if exact else []),
                "Tracing PID", "stderr")
    try:
        load.run()
    finally:
        tool.stop()
    doc = derived(d)
    status = doc["perf_schema"]["deltas"]["status"]
    inserts = [g for g in doc["attribution"]["by_digest"] if g["digest_text"].upper().startswith("INSERT")]
    row_insert = {p["id"] for p in doc["probes"] if p["stage"] == "innodb.row_insert"}
    keys = {g["text"] for g in inserts}
    calls_inside = sum(c["calls"] for s in doc["statements"]["shapes"] if s["text"] in keys
                       for c in s["calls"] if c["probe"] in row_insert)
    ps_rows = {r["name"].strip(): r for r in doc["perf_schema"]["deltas"]["digests"]}
    executions = sum(g["executions_probed"] if exact else g["executions"] for g in inserts)
    probed = sum(g["executions_probed"] for g in inserts)
    latency = sum(g["raw_mean_ns"] * g["executions_probed"] for g in inserts) / probed if probed else None
    ps = [ps_rows[g["digest_text"]] for g in inserts if g["digest_text"] in ps_rows]
    ps_latency = sum(r["timer_ps"] for r in ps) / 1000 / sum(r["count"] for r in ps) if ps else None
    return {"executions": executions, "com_insert": status.get("Com_insert", 0) + status.get("Com_insert_select", 0),
            "latency_ns": latency, "ps_latency_ns": ps_latency, "row_inserts_inside": calls_inside,
            "rows_inserted": status["Innodb_rows_inserted"], "digests": len(inserts)}


def main() -> None:
    args = bench_parser(__doc__, repeats=3, seconds=8).parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-digests-"))
    sb = sandbox.Sandbox("10.2.11")
    started = datetime.now(timezone.utc)
    results = []
    with sb.serving(log) as pid:
        for shape, exact in CASES:
            load = Load(sb, shape, args.seconds)
            try:
                load.prepare()
                runs = []
                for r in range(args.repeats):
                    runs.append(one_run(load, pid, exact, workdir))
                    log(f"{shape.name} {'exact' if exact else 'sampled'} {r + 1}/{args.repeats}: {runs[-1]}")
            finally:
                load.close()
            results.append({"shape": shape.name, "mode": "exact" if exact else "sampled", "runs": runs})
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "repeats": args.repeats,
              "seconds": args.seconds, "results": results}
    write_results(args.out, "digests", result, markdown)


def _pct(xs: list[float]) -> str:
    return f"{100 * med(xs):+.2f}% [{100 * min(xs):+.2f}, {100 * max(xs):+.2f}]"


def markdown(result: dict) -> str:
    lines = ["# Per-digest figures against the server's own", "",
             run_line(result, f"bench/digests.py --repeats {result['repeats']} --seconds {result['seconds']}"), "",
             "MariaDB 10.2.11. Each cell: median [min, max] over the repeats of the difference against the "
             "server's figure. Columns: see the docstring of bench/digests.py.", "",
             "| load | mode | INSERT executions vs Com_insert | mean latency vs P_S's timer | "
             "row inserts inside vs Innodb_rows_inserted |", "|---|---|---|---|---|"]
    for r in result["results"]:
        runs = r["runs"]
        ex = [x["executions"] / x["com_insert"] - 1 for x in runs if x["com_insert"]]
        lat = [x["latency_ns"] / x["ps_latency_ns"] - 1 for x in runs if x["latency_ns"] and x["ps_latency_ns"]]
        rows = [x["row_inserts_inside"] / x["rows_inserted"] - 1 for x in runs if x["rows_inserted"]]
        lines.append(f"| {r['shape']} | {r['mode']} | {_pct(ex) if ex else '-'} | {_pct(lat) if lat else '-'} | "
                     + (_pct(rows) if r["mode"] == "exact" and rows else "- (sampled: a share of them)") + " |")
    lines += ["", "Sampled, the seed's one long statement began before any on-phase, so no execution of it was "
              "seen whole: it has no digest row (its calls are in the per-thread view). Sampled OLTP: the "
              "executions probed ran while the probes were on, so their latency is above P_S's mean over the "
              "whole window, mostly unprobed; the report prints P_S's figure beside it (ps_mean_ns).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
