"""Where the row's time went, and where a regression's went, against perf:
mysqlprobe's wall-time account and compare's mechanisms against unprobed runs.

    sudo .venv/bin/python bench/wall.py account [--repeats 3] [--seconds 1,10] [--shapes ...]
    sudo .venv/bin/python bench/wall.py compare [--repeats 3] [--pairs ...] [--rows 300007]
    sudo .venv/bin/python bench/wall.py index-build [--repeats 3] [--servers ...] [--formats ...]

The truth of both: the load unprobed beside two CPU-wide perf records read
for the server's threads, `perf record -g -e cpu-clock -F 999 -a` (the
threads' CPU by stack, each sample its period) and `perf record -g -e
sched:sched_switch -c N --no-period --switch-events -a` (every switch of a
server thread timed from perf's switch-out record to its switch-in: blocked,
or waiting for a CPU; the stack of every Nth switch of a CPU, a thread's
waits of each kind spread over its sampled stacks; N is 1 but for
sysbench's clients, whose switches are many: mysqlprobe/lab/benchkit/truth.py).
Sections written before 2026-11-28 20:00 recorded per task (-p PID) and
every switch's stack, which slowed 8 sysbench clients by a third; before
10:20 that day sched_switch CPU-wide alone, which on this VM loses the
switch-ins of threads woken onto an idle CPU. The load's threads are those
whose stacks run a client connection's loop; each stack is charged to the
innermost mechanism of analysis/mechanisms.py, the catalog the tool uses; a
connection waiting for its client is not the row's time. Writes sections of bench/RESULTS.md."""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.account import NOT_TRACED
from mysqlprobe.analysis.profile import t95
from mysqlprobe.analysis.index_build import OTHER_PHASE, PHASES, mechanism_shares, phase_shares
from mysqlprobe.collectors.target.symbols import load_target_binary, resolve_target
from mysqlprobe.lab.commands.bench import WALL_FREQUENCY
from mysqlprobe.lab.commands.profiled_load import profile_load
from mysqlprobe.recorder.plan import Plan
from mysqlprobe.reports import capture_profile
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import (bench_parser, derived, log, machine, machine_line, profiled_run, span,
                                     rendered_again, run_subcommand, write_results)
from mysqlprobe.lab.benchkit.loads import SYSBENCH_SHAPE, ShapeRun, shape_runs, unprobed_ns_per_row
from mysqlprobe.lab.benchkit.truth import (CPU_RECORD, PHASE_TIMER, SWITCH_TIMING, PhaseTimer, WallRecorder, tied_with_top,
                                          bench_timed_by_servers, cpu_truth, switch_record,
                                          switch_truth)

SHARE = 0.10        # a mechanism the truth gives this much of the row or more is held to BOUND
BOUND = 0.25
UNATTRIBUTED = 0.15
LEAD_S = 1.0
# how a result's truth was taken
SWITCHES = {"cpu_record": CPU_RECORD, "switch_record": switch_record(), "switch_timing": SWITCH_TIMING}
# the truth's stacks from every Nth switch of a CPU under sysbench's clients (about 70,000 switches a
# second on this VM). Rows inserted in 10 s against interleaved runs with nothing attached: every
# switch's stack 0.6x (per task) or 0.8x (CPU-wide); every 11th or 31st 0.75-0.90x, as the switch
# records alone (0.84-0.90x): the stacks add nothing measurable. Unwound by DWARF (16 KB of stack a
# switch), as the account's switch stacks all are: through glibc's futex and cond-var waits, where
# frame pointers end (the tool recovers them); 31 keeps the record near 45 MB a second
SYSBENCH_STACK_EVERY = 31
ACCOUNT_SWITCH_STACKS = "dwarf"
ACCOUNT_SWITCHES = {**SWITCHES, "switch_record": switch_record(ACCOUNT_SWITCH_STACKS)}


def stack_every(shape: str) -> int:
    """N of the truth's switch record for a shape: one stack each N switches of a CPU."""
    return SYSBENCH_STACK_EVERY if shape == SYSBENCH_SHAPE else 1


def truth_run(pid: int, load: ShapeRun, workdir: Path) -> dict:
    load.prepare()
    every = stack_every(load.shape)
    recorder = WallRecorder(pid, workdir, switch_stacks=ACCOUNT_SWITCH_STACKS, every=every)
    time.sleep(0.5)  # perf's events open
    rows, seconds = load.run()
    truth = recorder.stop()
    ns = truth.mechanisms()
    row_ns = sum(v for k, v in ns.items() if k not in (M.IDLE, M.PROBES_MECHANISM))
    return {"rows": rows, "seconds": seconds, "row_ns": row_ns / rows if rows else None, "stack_every": every,
            "unsampled_ns": truth.unsampled_ns() / rows if rows else None,
            "mechanisms": {k: v / rows for k, v in ns.items() if k not in (M.IDLE, M.PROBES_MECHANISM)}
            if rows else {}}


def tool_run(pid: int, load: ShapeRun, workdir: Path) -> dict:
    load.prepare()
    out = Path(tempfile.mkdtemp(dir=workdir))
    rows, seconds = profiled_run(pid, out, load.run, LEAD_S, "-q")
    a = derived(out)["account"] or {}
    return {"rows": rows, "seconds": seconds, "row_ns": a.get("wall_ns_per_row"),
            "unattributed_ns": a.get("unattributed_ns_per_row"), "coverage": a.get("coverage"),
            "mechanisms": {m["name"]: m["ns_per_row"] for m in a.get("mechanisms") or []}}


def bench_shape(sb, pid: int, shape: str, lengths: list[float], repeats: int, workdir: Path) -> list[dict]:
    conn = workload.connect(sb.socket)
    out = []
    for length, load in shape_runs(sb, conn, shape, lengths):
        for r in range(repeats):
            # each side first in turn, the disk quiet before each: the side after a run paid
            # for its writeback (perf's data, the capture) in its fsyncs
            runs = {}
            for side in (("truth", "tool") if r % 2 == 0 else ("tool", "truth")):
                os.sync()
                runs[side] = (truth_run if side == "truth" else tool_run)(pid, load, workdir)
            truth, tool = runs["truth"], runs["tool"]
            out.append({"shape": shape, "seconds": length, "repeat": r + 1, "truth": truth, "tool": tool})
            log(f"{shape} {length:g}s #{r + 1}: truth {truth['row_ns']:.0f} ns/row, tool "
                f"{tool['row_ns'] or 0:.0f} ns/row, unattributed {tool['unattributed_ns'] or 0:.0f}")
    conn.close()
    return out


def every_text(result: dict) -> str:
    """How many switches a stack of the truth stands for, per shape, in words (none before it was sampled)."""
    every = {r["shape"]: r["truth"]["stack_every"] for r in result["runs"] if "stack_every" in r["truth"]}
    if not every:
        return ""
    unsampled = [r["truth"]["unsampled_ns"] for r in result["runs"] if r["truth"].get("unsampled_ns") is not None]
    return (" (N: " + ", ".join(f"{n} for {shape}" for shape, n in every.items()) + "; a thread's waits of "
            "each kind, blocked or waiting for a CPU, spread over the stacks of its sampled switches of that kind; "
            f"waits of a kind with no switch sampled, {span(unsampled)} ns a row, in no mechanism)")


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def verdicts(runs: list[dict]) -> list[dict]:
    """Per mechanism the truth gives SHARE of the row or more: both sides' ns
    per row over the repeats, the error of the medians, met or not."""
    truth_row = med([r["truth"]["row_ns"] for r in runs if r["truth"]["row_ns"]]) or 0.0
    names = {n for r in runs for n in r["truth"]["mechanisms"]}
    out = []
    for name in names:
        truth = [r["truth"]["mechanisms"].get(name, 0.0) for r in runs]
        if not truth_row or (med(truth) or 0) < SHARE * truth_row or name in (M.OTHER,):
            continue
        tool = [r["tool"]["mechanisms"].get(name, 0.0) for r in runs]
        t, g = med(truth), med(tool)
        err = g / t - 1 if t and g is not None else None
        out.append({"mechanism": name, "truth": truth, "tool": tool, "error": err,
                    "met": err is not None and abs(err) <= BOUND})
    return sorted(out, key=lambda v: -(med(v["truth"]) or 0))


def markdown(result: dict) -> str:
    lines = ["# Where the row's time went, against perf", "",
             f"- date: {result['date']}", f"- command: `{result['command']}`", f"- commit: {result['commit']}",
             f"- machine: {machine_line(result['machine'])}",
             f"- truth: the load unprobed beside {cpu_truth(result)} (CPU by stack) and "
             f"{switch_truth(result)}{every_text(result)}; the load's threads (a connection's loop on their "
             "stacks), each stack charged to the "
             "innermost mechanism of analysis/mechanisms.py; waits for the client left out; per "
             "Innodb_rows_inserted",
             f"- tool: mysqlprobe -p PID (default mode) started {LEAD_S:g} s before the load, its account's "
             "mechanisms per row",
             f"- bound: each mechanism at {SHARE:.0%} or more of the truth's row within {BOUND:.0%} (medians "
             f"[min, max] over repeats), unattributed at most {UNATTRIBUTED:.0%} of the tool's row", "",
             "| shape | load | rows/s: truth | rows/s: tool | row ns: truth | row ns: tool | unattributed | mechanism "
             "| truth ns/row | tool ns/row | error of medians | met |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for run in result["runs"]:
        groups.setdefault((run["shape"], run["seconds"]), []).append(run)
    met = total = 0
    for (shape, length), runs in groups.items():
        truth_row = [r["truth"]["row_ns"] for r in runs if r["truth"]["row_ns"]]
        tool_row = [r["tool"]["row_ns"] for r in runs if r["tool"]["row_ns"]]
        unattributed = [r["tool"]["unattributed_ns"] / r["tool"]["row_ns"] for r in runs if r["tool"]["row_ns"]]
        rates = [[r[side]["rows"] / r[side]["seconds"] for r in runs if r[side]["seconds"]] for side in ("truth", "tool")]
        head = (f"| {shape} | {length:g}s | {span(rates[0])} | {span(rates[1])} | {span(truth_row)} | {span(tool_row)} | "
                f"{span(unattributed, '{:.1%}')} ")
        unattributed_met = bool(unattributed) and (med(unattributed) or 0) <= UNATTRIBUTED
        for i, v in enumerate(verdicts(runs) or [None]):
            prefix = head if i == 0 else "| | | | | | | "
            if v is None:
                lines.append(prefix + "| - | - | - | - | " + ("yes" if unattributed_met else "NO") + " |")
                continue
            ok = v["met"] and unattributed_met
            met, total = met + ok, total + 1
            err = "-" if v["error"] is None else f"{v['error']:+.0%}"
            lines.append(prefix + f"| {v['mechanism']} | {span(v['truth'])} | {span(v['tool'])} | {err} | "
                         f"{'yes' if ok else 'NO'} |")
    lines += ["", f"{met} of {total} rows met."]
    return "\n".join(lines) + "\n"


DOC_ACCOUNT = """The account's mechanisms per row against perf in unprobed runs.

On MariaDB 10.2.11 (sandbox). Per shape and length, interleaved runs: the
truth (above), then `mysqlprobe -p PID -o DIR` (default mode) started a
second before the load and stopped as it ends, its account's mechanisms
per row (`report --json=all`, `account`). A table shape is one INSERT ...
SELECT sized from the server's rate for the length; sysbench-8 is
oltp_insert from 8 clients for the length. Bound (the account issue):
every mechanism at 10% or more of the truth's row time within 25% of it
(medians of the repeats), and unattributed at most 15% of the tool's."""


def main_account() -> int:
    ap = bench_parser(DOC_ACCOUNT, repeats=3)
    ap.add_argument("--seconds", default="1,10")
    ap.add_argument("--shapes", default=f"range-5,range-100,list-5,list-100,hash-5,hash-100,{SYSBENCH_SHAPE}")
    ap.add_argument("--render", action="store_true", help="write its RESULTS.md section again from results.json")
    args = ap.parse_args()
    if rendered_again(args, "account", markdown):
        return 0
    host = machine()
    sb = sandbox.Sandbox("10.2.11", instance="bench")
    pid = sb.start(log)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for shape in args.shapes.split(","):
                runs += bench_shape(sb, pid, shape, [float(s) for s in args.seconds.split(",")], args.repeats,
                                    Path(tmp))
    finally:
        sb.stop()
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": host["commit"],
              "command": f"bench/wall.py account --repeats {args.repeats} --seconds {args.seconds} --shapes {args.shapes}",
              "machine": host, "runs": runs, **ACCOUNT_SWITCHES}
    write_results(args.out, "account", result, markdown)
    return 0



# --- compare: a regression's delta by mechanism ----------------------------------

DOC_COMPARE = """compare's delta and its mechanisms against a truth taken here.

Per pair of servers (sandboxes: two versions, or one version with a setting
changed on B), each repeat of the whole comparison: the truth, the cell's
load alternated A, B, B, A... unprobed (the wall delta: the mean of each
pair's B - A, with its paired 95% interval) and under perf (above: each
mechanism's share of the row, times that run's unprobed time per row),
half its pairs before the tool's runs and half after; between them
`mysqlprobe lab bench --pid A,B` (5 repeats, alternated) and `mysqlprobe
compare --json` on the two sides, each server timing those runs in its
slow query log. Bounds (the compare issue): the delta within 15% of the
same runs' as the servers timed them, and within the two 95% intervals
of the independent truth's (its error against that shown); the top
mechanism the truth's and within 25% of it; at least 80% of the delta
attributed to mechanisms."""

UNNAMED = (M.OTHER, NOT_TRACED)
PAIRS = "10.1.23/10.2.11,10.2.11/10.11.5,10.2.11/10.2.11+innodb_buffer_pool_size=32M"
TRUTH_PAIRS = 6   # half before the tool's runs, half after
TOOL_REPEATS = 5
DELTA_BOUND, TOP_BOUND, ATTRIBUTED = 0.15, 0.25, 0.80


def side_spec(text: str) -> tuple[str, list[str]]:
    """'10.2.11+innodb_buffer_pool_size=32M' -> ('10.2.11', ['--innodb-buffer-pool-size=32M'])."""
    version, *settings = text.split("+")
    return version, [f"--{k.replace('_', '-')}={v}" for k, v in (x.split("=", 1) for x in settings)]


def perf_shares(pid: int, conn, table, workdir: Path) -> dict[str, float]:
    """Each mechanism's share of the row's time, from an unprobed run under perf
    (a run perf saw nothing of is an error, not an empty truth); its switch
    stacks unwound by DWARF, as the account bench's: with frame pointers they
    end in glibc's futex and cond-var waits, and a 32 MB buffer pool's waits
    in InnoDB were 'other' in the truth."""
    workload.create_target(conn, table)
    time.sleep(0.5)
    recorder = WallRecorder(pid, workdir, switch_stacks=ACCOUNT_SWITCH_STACKS)
    time.sleep(0.5)
    workload.insert_select(conn, table)
    ns = recorder.stop().mechanisms()
    row = sum(v for k, v in ns.items() if k not in (M.IDLE, M.PROBES_MECHANISM))
    if not row:
        raise RuntimeError(f"perf recorded none of the load's threads' time (its data in {workdir})")
    return {k: v / row for k, v in ns.items() if k not in (M.IDLE, M.PROBES_MECHANISM)}


def truth_pairs(servers: list[tuple], table, workdir: Path, numbers: range) -> dict:
    """Alternated unprobed runs, pairs `numbers` of the repeat's: each side's
    ns a row, and each mechanism's ns a row under perf."""
    walls: list[list[float]] = [[], []]
    mech: list[list[dict[str, float]]] = [[], []]
    for n in numbers:
        # A first, then B first (as lab bench alternates): neither side's unprobed run always
        # follows the other's perf'd run and the pages it left to flush
        order = [0, 1] if n % 2 == 0 else [1, 0]
        for i in order:
            walls[i].append(unprobed_ns_per_row(servers[i][1], table))
        for i in order:
            pid, conn = servers[i]
            shares = perf_shares(pid, conn, table, workdir)
            mech[i].append({k: v * walls[i][-1] for k, v in shares.items()})
    return {"walls": walls, "mech": mech}


def truth_of(before: dict, after: dict) -> dict:
    """The repeat's truth from its pairs before the tool's runs and after
    them (the host's drift over the repeat falls on both alike): the wall
    delta with its paired 95% interval, and each mechanism's delta per row."""
    walls = [before["walls"][i] + after["walls"][i] for i in (0, 1)]
    mech = [before["mech"][i] + after["mech"][i] for i in (0, 1)]
    deltas = [b - a for a, b in zip(*walls)]
    delta = statistics.fmean(deltas)
    half = t95(len(deltas) - 1) * statistics.stdev(deltas) / len(deltas) ** 0.5
    names = {n for side in mech for run in side for n in run}
    # each mechanism's B - A per pair (the perf'd runs of a pair run one after the other)
    mech_pairs = [{n: b.get(n, 0.0) - a.get(n, 0.0) for n in names} for a, b in zip(*mech, strict=True)]
    per = {n: statistics.fmean(p[n] for p in mech_pairs) for n in names}
    return {"a_ns": statistics.fmean(walls[0]), "b_ns": statistics.fmean(walls[1]), "delta": delta,
            "ci95": [delta - half, delta + half], "pairs": deltas, "mechanisms": per,
            "mechanism_pairs": mech_pairs, "top_tied": tied_with_top(mech_pairs, per, UNNAMED)}


def tool_of(servers: list[tuple], sockets: list[str], cell: str, table, rows: int, out: Path) -> dict:
    """lab bench and compare on the two servers, each timing the statements
    in its slow log: compare's answer, and the delta of the same unprobed
    runs as the servers timed them (`same_runs`)."""
    doc, (a_ns, b_ns) = bench_timed_by_servers([(pid, sock, conn) for (pid, conn), sock in zip(servers, sockets)],
                                               cell, rows, TOOL_REPEATS, out, f"INSERT INTO {table.name} SELECT")
    same = statistics.fmean(b - a for a, b in zip(a_ns, b_ns, strict=True))
    return {"delta": doc["wall"]["delta"], "ci95": doc["wall"]["ci95"], "paired": doc["wall"].get("paired"),
            "same_runs": same, "unattributed": doc.get("unattributed_ns_per_row"),
            "mechanisms": [{"name": m["name"], "delta": m["delta_ns_per_row"], "ci95": m["ci95"],
                            "finding": m.get("finding"), "on_cpu": m["on_cpu_delta_ns_per_row"],
                            "off_cpu": m["off_cpu_delta_ns_per_row"], "settings": m["settings"]}
                           for m in doc.get("mechanisms") or []]}


def compare_verdict(truth: dict, tool: dict) -> dict:
    """The bounds of one repeat. The delta is held to the same runs as the
    servers timed them (the tool's arithmetic and clock), and to the
    independent truth's pairs within the two intervals' combined 95% (both
    are a few pairs of a noisy host's runs); its error against the
    independent truth is shown beside."""
    named = {k: v for k, v in truth["mechanisms"].items() if k not in UNNAMED}
    t_top = max(named.items(), key=lambda kv: abs(kv[1]))
    tied = truth.get("top_tied") or [t_top[0]]   # results before per-pair mechanisms: the top alone
    findings = [m for m in tool["mechanisms"] if m["finding"]]
    top = findings[0] if findings else None
    # the tool's top judged against the truth's figure for it, where the truth cannot rank it below its own
    judged = top["name"] if top and top["name"] in tied else None
    attributed = sum(m["delta"] for m in findings) / tool["delta"] if tool["delta"] else None
    halves = [(ci[1] - ci[0]) / 2 for ci in (truth["ci95"], tool["ci95"])]
    return {"delta_error": tool["delta"] / truth["delta"] - 1 if truth["delta"] else None,
            "same_runs_error": tool["delta"] / tool["same_runs"] - 1 if tool["same_runs"] else None,
            "consistent": abs(tool["delta"] - truth["delta"]) <= math.hypot(*halves),
            "truth_top": t_top[0], "truth_top_ns": t_top[1], "tool_top": top["name"] if top else None,
            "tool_top_ns": top["delta"] if top else None, "truth_tied": tied[1:],
            "top_error": top["delta"] / named[judged] - 1 if top and judged and named[judged] else None,
            "attributed": attributed}


def main_compare() -> int:
    ap = bench_parser(DOC_COMPARE, repeats=3, rows=300007)
    ap.add_argument("--pairs", default=PAIRS, help="A/B,A/B...: versions, B's settings after '+'")
    ap.add_argument("--cell", default="range-100")
    ap.add_argument("--keep", metavar="DIR", help="keep the lab bench captures under DIR")
    ap.add_argument("--render", action="store_true", help="write its RESULTS.md section again from results.json")
    args = ap.parse_args()
    if rendered_again(args, "regression", compare_markdown):
        return 0
    host = machine()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)   # perf writes its data there before lab bench makes it
        for spec in args.pairs.split(","):
            a_text, b_text = spec.split("/")
            boxes = []
            try:
                servers, sockets = [], []
                for name, text in (("wa", a_text), ("wb", b_text)):
                    version, extra = side_spec(text)
                    sb = sandbox.Sandbox(version, instance=name)
                    pid = sb.start(log, extra_args=extra)
                    boxes.append(sb)
                    conn = workload.connect(sb.socket)
                    workload.prepare_source(conn, args.rows)
                    servers.append((pid, conn))
                    sockets.append(sb.socket)
                kind, parts = args.cell.split("-")
                table = workload.table(kind, int(parts))
                for r in range(args.repeats):
                    before = truth_pairs(servers, table, work, range(TRUTH_PAIRS - TRUTH_PAIRS // 2))
                    tool = tool_of(servers, sockets, args.cell, table, args.rows,
                                   work / f"{spec.replace('/', '-vs-')}-{r + 1}")
                    after = truth_pairs(servers, table, work, range(TRUTH_PAIRS - TRUTH_PAIRS // 2, TRUTH_PAIRS))
                    truth = truth_of(before, after)
                    verdict = compare_verdict(truth, tool)
                    runs.append({"pair": spec, "repeat": r + 1, "truth": truth, "tool": tool, "verdict": verdict})
                    log(f"{spec} #{r + 1}: truth {truth['delta']:+.0f} ns/row, tool {tool['delta']:+.0f}; top "
                        f"{verdict['truth_top']} {verdict['truth_top_ns']:+.0f} / {verdict['tool_top']} "
                        f"{verdict['tool_top_ns'] or 0:+.0f}; attributed {verdict['attributed'] or 0:.0%}")
                for _, conn in servers:
                    conn.close()
            finally:
                for sb in boxes:
                    sb.stop()
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": host["commit"],
              "command": f"bench/wall.py compare --repeats {args.repeats} --rows {args.rows} --cell {args.cell} "
                         f"--pairs {args.pairs}", "machine": host, "runs": runs, **SWITCHES,
              "switch_record": switch_record(ACCOUNT_SWITCH_STACKS, every=1)}
    write_results(args.out, "regression", result, compare_markdown)
    return 0


def signed_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def compare_met(v: dict) -> bool:
    return (v["same_runs_error"] is not None and abs(v["same_runs_error"]) <= DELTA_BOUND and v["consistent"]
            and v["top_error"] is not None and abs(v["top_error"]) <= TOP_BOUND
            and (v["attributed"] or 0) >= ATTRIBUTED)


def tied_text(v: dict, truth: dict) -> str:
    tied = v.get("truth_tied") or []
    return "; tied: " + ", ".join(f"{n} {truth['mechanisms'][n]:+.0f}" for n in tied) if tied else ""


def compare_markdown(result: dict) -> str:
    lines = ["# Regressions explained: compare's delta and mechanisms against perf", "",
             f"- date: {result['date']}", f"- command: `{result['command']}`", f"- commit: {result['commit']}",
             f"- machine: {machine_line(result['machine'])}",
             f"- truth: the cell's load alternated A, B unprobed, {TRUTH_PAIRS // 2} pairs before the tool's runs "
             f"and {TRUTH_PAIRS - TRUTH_PAIRS // 2} after, the mean of the pairs' B - A with its paired 95% "
             f"interval; under perf ({cpu_truth(result)} and {switch_truth(result)}), each mechanism's share of "
             "the row times its unprobed time per row; and the tool's own unprobed runs as each server timed "
             "them (its slow query log at long_query_time 0: 'same runs')",
             f"- tool: `mysqlprobe lab bench --pid A,B` ({TOOL_REPEATS} repeats alternated: unprobed, sampled "
             "without probes, profiled), then `mysqlprobe compare --json`",
             f"- bounds: the delta within {DELTA_BOUND:.0%} of the same runs' and, against the independent "
             "truth, within the two 95% intervals combined (the error against it is shown; the host's pairs "
             f"vary too much for {TRUTH_PAIRS} pairs to pin it to {DELTA_BOUND:.0%}); the top mechanism the "
             f"truth's, or one the truth's pairs cannot rank below it ('tied': their paired difference's 95% "
             f"interval holds 0), and within {TOP_BOUND:.0%} of the truth's figure for it; at least "
             f"{ATTRIBUTED:.0%} of the delta attributed", "",
             "| pair | repeat | truth: A -> B ns/row | truth delta (95%) | tool delta (95%) | same runs | error: "
             "same runs / truth | within the intervals | truth top mechanism | tool top mechanism | top error | "
             "tool on the truth's top (95%) | attributed | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    met = within_truth = 0
    for run in result["runs"]:
        t, g, v = run["truth"], run["tool"], run["verdict"]
        ok = compare_met(v)
        met += ok
        within_truth += v["delta_error"] is not None and abs(v["delta_error"]) <= DELTA_BOUND
        tool_top = "-" if v["tool_top"] is None else f"{v['tool_top']} {v['tool_top_ns']:+.0f}"
        attributed = "-" if v["attributed"] is None else f"{v['attributed']:.0%}"
        # where the two name different tops: the tool's figure for the truth's, and its error
        theirs = next((m for m in g["mechanisms"] if m["name"] == v["truth_top"]), None)
        on_truths = "-" if theirs is None else (
            f"{theirs['delta']:+.0f} [{theirs['ci95'][0]:+.0f}, {theirs['ci95'][1]:+.0f}], "
            f"{signed_pct(theirs['delta'] / v['truth_top_ns'] - 1 if v['truth_top_ns'] else None)}")
        lines.append(f"| {run['pair']} | {run['repeat']} | {t['a_ns']:.0f} -> {t['b_ns']:.0f} | {t['delta']:+.0f} "
                     f"[{t['ci95'][0]:+.0f}, {t['ci95'][1]:+.0f}] | "
                     f"{g['delta']:+.0f} [{g['ci95'][0]:+.0f}, {g['ci95'][1]:+.0f}] | {g['same_runs']:+.0f} | "
                     f"{signed_pct(v['same_runs_error'])} / {signed_pct(v['delta_error'])} | "
                     f"{'yes' if v['consistent'] else 'NO'} "
                     f"| {v['truth_top']} {v['truth_top_ns']:+.0f}{tied_text(v, t)} | {tool_top} | "
                     f"{signed_pct(v['top_error'])} | "
                     f"{on_truths} | {attributed} | {'yes' if ok else 'NO'} |")
    lines += ["", f"{met} of {len(result['runs'])} repeats met every bound; the delta within {DELTA_BOUND:.0%} "
                  f"of the independent truth's in {within_truth}."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- index build

DOC_INDEX_BUILD = """The index build by row format: CREATE INDEX k on the row-format study's
table, unprobed, sampled by the tool without probes, and under
--index-profile, against perf's picture of it.

    sudo .venv/bin/python bench/wall.py index-build [--repeats 3] [--rows 300007]
        [--servers 10.1.23,10.2.11] [--formats compact,dynamic,compressed-8,compressed-4,compressed-2]

Per server and row format (sandbox servers; the table id, k, c char(120),
pad char(60), PK on id, filled with a prime number of rows, k shuffled),
per repeat, interleaved:

- unprobed: the build's seconds (DROP INDEX, then CREATE INDEX timed by the
  client);
- truth: an unprobed build beside `perf record -g` of the server's CPU and
  of every context switch (its threads' wall time by stack, on CPU and off);
  the stacks inside row_merge_build_indexes by their innermost phase
  function, and by mechanism, as the tool classifies its own;
- sampled: the build under the tool with no probe attached (CPU samples at
  999 Hz and traced switches: lab bench's sampled run), its index_build's
  phases and mechanisms: where the tool's shares come from;
- profiled: the build under mysqlprobe --index-profile: its seconds and
  counts (rows, tuples, runs, passes, pages compressed).

Reported: the build's ns per row unprobed, the tool's slowdown of it in
each mode, its counts, each phase's and each mechanism's share by the tool
against perf's (medians over the repeats); a share is held to within 25%
of perf's where perf gives it at least 10% of the build. Writes its
section of bench/RESULTS.md."""

INDEX_FORMATS = ("compact", "dynamic", "compressed-8", "compressed-4", "compressed-2")
INDEX_WITHIN = BOUND  # a phase's share against perf's
INDEX_MIN_SHARE = SHARE  # perf's share of a phase held to the bound: smaller ones are shown, not judged


def index_table_of(fmt: str) -> workload.IndexTable:
    row_format, _, kb = fmt.partition("-")
    return workload.index_table(row_format, int(kb) if kb else 0)


def index_truth_run(pid: int, conn, t: workload.IndexTable, workdir: Path) -> dict:
    """An unprobed build under perf: its seconds and its phases' and mechanisms' shares of the build's wall time."""
    workload.drop_index(conn, t)
    rec = WallRecorder(pid, workdir, switch_stacks="dwarf")
    time.sleep(0.5)  # perf's events open
    seconds = workload.build_index(conn, t)
    wall = rec.stop()
    stacks = [(["thread"] + stack.split(";"), ns) for threads in (wall.on_cpu, wall.off_cpu)
              for per_thread in threads.values() for stack, ns in per_thread.items()]
    return {"seconds": seconds, "shares": phase_shares(stacks) or {}, "mechanisms": dict(mechanism_shares(stacks))}


def phase_timer(pid: int) -> PhaseTimer:
    """bpftrace timing the build's phase functions of this server (about ten probe hits a build)."""
    return PhaseTimer(pid, os.readlink(f"/proc/{pid}/exe"), M.BUILD_FUNCTION,
                      {function: name for name, _, function in PHASES}, OTHER_PHASE)


def index_timed_run(pid: int, conn, t: workload.IndexTable) -> dict:
    """An unprobed build with its phase functions timed at their edges."""
    workload.drop_index(conn, t)
    timer = phase_timer(pid)
    seconds = workload.build_index(conn, t)
    return {"seconds": seconds, "shares": timer.stop()}


def index_sampled_run(target, binary, conn, socket: str, t: workload.IndexTable, rows: int) -> dict:
    """The build under the tool sampling only, no probe (lab bench's sampled run); the same build's
    phases timed at their functions' edges beside it (`timed`): one build, two ways of seeing it."""
    workload.drop_index(conn, t)
    timer = phase_timer(target.pid)
    cap, _, seconds = profile_load(target, binary, Plan(), lambda: (rows, workload.build_index(conn, t)),
                                   socket=socket, exact=True, quiet=True, frequency=WALL_FREQUENCY,
                                   build_progress=True)
    timed = timer.stop()
    b = capture_profile(cap).index_build
    return {"seconds": seconds, "method": b.method if b else None,
            "shares": {p.name: p.share for p in b.phases if p.share is not None} if b else {},
            "mechanisms": dict(b.mechanisms) if b else {}, "timed": timed}


def index_tool_run(pid: int, conn, t: workload.IndexTable, workdir: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=workdir))
    workload.drop_index(conn, t)
    _, seconds = profiled_run(pid, out, lambda: (0, workload.build_index(conn, t)), 0.0, "--index-profile")
    b = derived(out)["index_build"] or {}
    return {"seconds": seconds, "rows_scanned": b.get("rows_scanned"), "tuples_inserted": b.get("tuples_inserted"),
            "runs": b.get("runs"), "merge_passes": b.get("merge_passes"), "compressions": b.get("compressions"),
            "method": b.get("method"), "share_source": b.get("share_source"),
            "shares": {p["name"]: p["share"] for p in b.get("phases") or [] if p["share"] is not None}}


def index_bench_cell(sb: sandbox.Sandbox, pid: int, fmt: str, rows: int, repeats: int, workdir: Path) -> dict:
    conn = workload.connect(sb.socket)
    t = index_table_of(fmt)
    saved = workload.barracuda(conn)
    fill_s = workload.fill_index_table(conn, t, rows)
    target = resolve_target(pid)
    binary = load_target_binary(target)
    runs = []
    for r in range(repeats):
        workload.drop_index(conn, t)
        unprobed = workload.build_index(conn, t)
        truth = index_truth_run(pid, conn, t, workdir)
        timed = index_timed_run(pid, conn, t)
        sampled = index_sampled_run(target, binary, conn, sb.socket, t, rows)
        tool = index_tool_run(pid, conn, t, workdir)
        runs.append({"unprobed_s": unprobed, "truth": truth, "timed": timed, "sampled": sampled, "tool": tool})
        log(f"{sb.version} {fmt} #{r + 1}: unprobed {unprobed:.3f}s, under perf {truth['seconds']:.3f}s, "
            f"sampled {sampled['seconds']:.3f}s, profiled {tool['seconds']:.3f}s; shares sampled "
            f"{_shares_text(sampled['shares'])}, timed same build {_shares_text(sampled['timed'])}, own build "
            f"{_shares_text(timed['shares'])}, perf {_shares_text(truth['shares'])}")
    workload.restore_file_format(conn, saved)
    conn.close()
    return {"server": sb.version, "format": fmt, "rows": rows, "fill_s": fill_s, "runs": runs}


def _shares_text(shares: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in shares.items())


def median_share(runs: list[dict], side: str, name: str, kind: str = "shares") -> float | None:
    return med([r[side][kind][name] for r in runs if r[side].get(kind, {}).get(name) is not None])


def _judged(tool: float | None, truth: float | None) -> tuple[str, str]:
    """(error, met) of a share against perf's: judged where perf gives it INDEX_MIN_SHARE or more."""
    err = None if tool is None or not truth else tool / truth - 1
    judged = truth is not None and truth >= INDEX_MIN_SHARE
    met = ("yes" if err is not None and abs(err) <= INDEX_WITHIN else "NO") if judged else "-"
    return ("-" if err is None else f"{err:+.0%}"), met


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def index_markdown(result: dict) -> str:
    lines = ["# Index build by row format: CREATE INDEX sampled and under --index-profile, against perf", "",
             f"- date: {result['date']}", f"- command: `{result['command']}`", f"- commit: {result['commit']}",
             f"- machine: {machine_line(result['machine'])}",
             "- table: id int PK, k int, c char(120), pad char(60), k shuffled; CREATE INDEX k ON it (k)",
             "- unprobed: the build's seconds, as the client timed it; slowdown: the tool's build's seconds over "
             "the unprobed ones (medians), sampled only (no probe: where the shares come from) and profiled "
             "(--index-profile: where the counts come from)",
             f"- truth: an unprobed build beside {cpu_truth(result)} (the server's CPU) and "
             f"{switch_truth(result)}: the stacks "
             "inside row_merge_build_indexes by their innermost phase function, and by the account's mechanism",
             *(["- timed: " + result["phase_timer"] + ": a phase's wall time is the time its function was the "
                "innermost phase open on the building thread (about ten probe hits a build, none a row); in the "
                "sampled run's own build (judged: one build, seen two ways) and in a build of its own (shown); "
                "perf's shown beside (perf walks a call chain at every context switch of every server thread, "
                "which slows the switch-heavy phases most)"]
               if result.get("phase_timer") else []),
             f"- bound: a share within {INDEX_WITHIN:.0%} of the truth's where it gives it at least "
             f"{INDEX_MIN_SHARE:.0%} of the build (phases: the sampled build's timed phases where there are, else "
             "perf's; "
             "mechanisms: perf's); medians [min, max] over the repeats; the profiled run's shares are shown beside, "
             "not judged (its per-row probes stretch some phases more than others)", "",
             "| server | format | rows | ns/row unprobed | slowdown sampled | slowdown profiled | method | rows scanned "
             "| runs | passes | pages compressed | phase | tool share | profiled share | timed, same build "
             "| timed, own build | perf share | error | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    judged = met = perf_judged = perf_met = 0
    mech_lines = []
    for cell in result["cells"]:
        runs = cell["runs"]
        unprobed = [r["unprobed_s"] for r in runs]
        base = statistics.median(unprobed)
        slow = [r["tool"]["seconds"] / base for r in runs]
        sampled_slow = [r["sampled"]["seconds"] / base for r in runs]
        tool0 = runs[0]["tool"]
        timed_runs = all("timed" in r["sampled"] for r in runs)
        phases = sorted({p for r in runs for side in ("sampled", "truth") for p in r[side]["shares"]}
                        | {p for r in runs for p in r["sampled"].get("timed", {})})
        head = (f"| {cell['server']} | {cell['format']} | {cell['rows']} | "
                f"{span([u * 1e9 / cell['rows'] for u in unprobed], '{:.0f}')} | {span(sampled_slow, '{:.2f}x')} | "
                f"{span(slow, '{:.2f}x')} | {tool0['method'] or '-'} | {tool0['rows_scanned']} | {tool0['runs']} | "
                f"{tool0['merge_passes']} | {tool0['compressions']} ")
        for i, phase in enumerate(phases):
            tool, perf = median_share(runs, "sampled", phase), median_share(runs, "truth", phase)
            timed = median_share(runs, "sampled", phase, "timed") if timed_runs else None
            own = median_share(runs, "timed", phase) if all("timed" in r for r in runs) else None
            err, ok = _judged(tool, timed if timed_runs else perf)
            judged, met = judged + (ok != "-"), met + (ok == "yes")
            _, perf_ok = _judged(tool, perf)
            perf_judged, perf_met = perf_judged + (perf_ok != "-"), perf_met + (perf_ok == "yes")
            lines.append((head if i == 0 else "| | | | | | | | | | | ")
                         + f"| {phase} | {_pct(tool)} | {_pct(median_share(runs, 'tool', phase))} | {_pct(timed)} "
                           f"| {_pct(own)} | {_pct(perf)} | {err} | {ok} |")
        names = sorted({n for r in runs for n in r["truth"]["mechanisms"]},
                       key=lambda n: -(median_share(runs, "truth", n, "mechanisms") or 0))
        for j, name in enumerate(names):
            tool, truth = median_share(runs, "sampled", name, "mechanisms"), median_share(runs, "truth", name, "mechanisms")
            if (truth or 0) < INDEX_MIN_SHARE and (tool or 0) < INDEX_MIN_SHARE:
                continue
            err, ok = _judged(tool, truth)
            judged, met = judged + (ok != "-"), met + (ok == "yes")
            mech_lines.append(f"| {cell['server'] if j == 0 else ''} | {cell['format'] if j == 0 else ''} | {name} "
                              f"| {_pct(tool)} | {_pct(truth)} | {err} | {ok} |")
    lines += ["", "The build's mechanisms at 10% or more of it (perf's or the tool's), the sampled run's share "
                  "against perf's:", "",
              "| server | format | mechanism | tool share | perf share | error | met |",
              "|---|---|---|---|---|---|---|"] + mech_lines
    lines += ["", f"Met: {met} of {judged} judged shares (phases and mechanisms) within {INDEX_WITHIN:.0%} of the "
                  f"truth's. The phases against perf's instead: {perf_met} of {perf_judged}."]
    return "\n".join(lines) + "\n"


def main_index_build() -> int:
    ap = bench_parser(DOC_INDEX_BUILD, repeats=3, rows=300007)
    ap.add_argument("--servers", default="10.1.23,10.2.11")
    ap.add_argument("--formats", default=",".join(INDEX_FORMATS))
    ap.add_argument("--render", action="store_true", help="write its RESULTS.md section again from results.json")
    args = ap.parse_args()
    if rendered_again(args, "index_build", index_markdown):
        return 0
    host = machine()
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in args.servers.split(","):
            sb = sandbox.Sandbox(version, instance="bench")
            pid = sb.start(log)
            try:
                for fmt in args.formats.split(","):
                    cells.append(index_bench_cell(sb, pid, fmt, args.rows, args.repeats, Path(tmp)))
            finally:
                sb.stop()
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": host["commit"],
              "command": f"bench/wall.py index-build --repeats {args.repeats} --rows {args.rows} --servers {args.servers} "
                         f"--formats {args.formats}",
              "machine": host, "cells": cells, "phase_timer": PHASE_TIMER,
              "cpu_record": CPU_RECORD, "switch_record": switch_record("dwarf", every=1),
              "switch_timing": SWITCH_TIMING}
    write_results(args.out, "index_build", result, index_markdown)
    return 0


SUBCOMMANDS = {"account": (main_account, DOC_ACCOUNT), "compare": (main_compare, DOC_COMPARE),
               "index-build": (main_index_build, DOC_INDEX_BUILD)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
