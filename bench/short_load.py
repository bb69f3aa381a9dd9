"""Short loads: one INSERT ... SELECT of 1 or 4 seconds, mysqlprobe in its
default mode started just before it, against a truth it did not compute.

    sudo .venv/bin/python bench/short_load.py [--repeats 3] [--seconds 1,4]
        [--shapes range-5,range-100,list-5,list-100,hash-5,hash-100] [--lead 0,1]

On MariaDB 10.2.11 (sandbox). Per shape and length, the statement's rows
are sized from the server's rate (shape sysbench-8: oltp_insert from 8
clients for the length, one row a transaction, its tables not
partitioned: innodb.row_insert only), then per repeat, interleaved:

- truth: the statement unprobed under `perf record -g -F 999 -a`
  (frame pointers: these builds keep them). Per call of a function: the
  share of the server's samples with it on the stack, times the server's
  CPU over the statement (/proc), over its calls (one write_row and one
  row_insert_for_mysql per row inserted);
- unprobed: the statement with nothing attached, just before or just
  after the tool's run (alternately): the rate the load felt the tool
  against;
- tool: mysqlprobe -p PID (default mode) started, the statement sent
  `lead` seconds after its window opened, mysqlprobe stopped (SIGINT) as
  the statement returns. Its stages' mean per call, its estimated calls
  against the server's Innodb_rows_inserted over the window, the slowdown
  it printed (with its interval) and the share of the window its probes
  were on.

Writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit import (BOOTSTRAP_ROUNDS, bench_parser, derived, log, machine, machine_line, med,
                                     median_interval, profiled_run, rendered_again, span, write_results)
from mysqlprobe.lab.benchkit.loads import SYSBENCH_SHAPE, ShapeRun, rows_inserted, shape_runs
from mysqlprobe.collectors.kernel.process import cpu_seconds
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit.truth import on_stack_ns

TRUTH_HZ = 999
STAGES = {"partition.write_row": "ha_partition9write_row", "innodb.row_insert": "row_insert_for_mysql"}


def stages_of(shape: str) -> dict[str, str]:
    """The stages a shape's rows go through (sysbench's tables have no partitions)."""
    return {"innodb.row_insert": STAGES["innodb.row_insert"]} if shape == SYSBENCH_SHAPE else STAGES


TRUTH = "perf record -g -F 999 -a"
TASK_TRUTH = "perf record -g -F 999 -p PID"   # before 2026-11-28 20:20: its own cost slowed sysbench's clients
BOUND = 0.35          # the bound on a stage's mean per call, against the truth
COUNT_BOUND = 0.02    # and on estimated calls, against the server's counter


def truth_run(pid: int, load: ShapeRun, workdir: Path) -> dict:
    load.prepare()
    data = workdir / "truth.data"
    # CPU-wide, its samples read for the server (on_stack_ns): per-task events (-p PID) cost the
    # kernel at every context switch of the task, and slowed 8 sysbench clients by a quarter
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", str(TRUTH_HZ), "-a",
                             "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # perf's events open
    cpu0 = cpu_seconds(pid)
    rows, seconds = load.run()
    cpu_ns = (cpu_seconds(pid) - cpu0) * 1e9
    perf.send_signal(signal.SIGINT)
    perf.wait()
    stages = stages_of(load.shape)
    ns, total = on_stack_ns(pid, data, stages)
    # the samples span perf's whole run (a little before and after the statement):
    # the functions' share of them, times the CPU the statement took
    return {"rows": rows, "seconds": seconds, "cpu_ns": cpu_ns,
            "per_call_ns": {stage: ns[stage] / total * cpu_ns / rows if total and rows else None
                            for stage in stages}}


def unprobed_run(load: ShapeRun) -> dict:
    """The statement with nothing attached: its rows and seconds."""
    load.prepare()
    rows, seconds = load.run()
    return {"rows": rows, "seconds": seconds}


def tool_run(pid: int, load: ShapeRun, lead: float, workdir: Path, keep: Path | None = None) -> dict:
    load.prepare()
    conn = load.conn
    out = keep if keep is not None else Path(tempfile.mkdtemp(dir=workdir))
    rows0 = rows_inserted(conn)
    rows, seconds = profiled_run(pid, out, load.run, lead, "--insert-profile")
    server_rows = rows_inserted(conn) - rows0
    doc = derived(out)
    stages = {s["stage"]: s for s in doc["stages"]}
    overhead, sampling = doc.get("overhead") or {}, doc.get("sampling") or {}
    return {"rows": rows, "seconds": seconds, "server_rows": server_rows,
            "window_s": doc["window"]["duration_s"], "cycles": sampling.get("cycles"),
            "printed_slowdown": overhead.get("measured_slowdown"), "slowdown_estimate": overhead.get("slowdown_estimate"),
            "slowdown_interval": overhead.get("slowdown_interval"), "slowdown_doubt": overhead.get("slowdown_doubt"),
            "probes_on_share": sampling["on_s"] / doc["window"]["duration_s"] if sampling.get("on_s") is not None
            and doc["window"]["duration_s"] else None, "budget": sampling.get("overhead_budget"),
            "mean_ns": {st: stages[st]["mean_ns"] if st in stages else None for st in stages_of(load.shape)},
            "estimated_calls": {st: stages[st]["estimated_calls"]["value"] if st in stages else None
                                for st in stages_of(load.shape)},
            "withheld": [f"{v['stage']} {v['figure']}" for v in doc.get("consistency") or []]}


def bench_shape(sb, pid: int, shape: str, seconds: list[float], repeats: int, leads: list[float],
                workdir: Path, keep: Path | None = None) -> list[dict]:
    conn = workload.connect(sb.socket)
    out = []
    for length, load in shape_runs(sb, conn, shape, seconds):
        for r in range(repeats):
            for i, lead in enumerate(leads):
                truth = truth_run(pid, load, workdir)
                kept = keep / f"{shape}-{length:g}s-lead{lead:g}-{r + 1}" if keep else None
                if kept:
                    kept.mkdir(parents=True)
                # the unprobed run before the tool's and after it in turn: a drift of the host's speed cancels
                unprobed_first = (r * len(leads) + i) % 2 == 0
                unprobed = unprobed_run(load) if unprobed_first else None
                tool = tool_run(pid, load, lead, workdir, kept)
                unprobed = unprobed or unprobed_run(load)
                out.append({"shape": shape, "seconds": length, "rows": load.rows if load.rows is not None else tool["server_rows"],
                            "repeat": r + 1, "lead_s": lead, "truth": truth, "unprobed": unprobed, "tool": tool,
                            "unprobed_first": unprobed_first})
                log(f"{shape} {length}s lead {lead}s #{r + 1}: truth {fmt(truth['per_call_ns'])}, "
                    f"tool {fmt(tool['mean_ns'])}, calls {tool['estimated_calls']} for {tool['server_rows']} rows, "
                    f"{tool['cycles']} cycles, withheld {tool['withheld']}, felt {felt(out[-1]) or 0:.3f}x, "
                    f"printed {tool['printed_slowdown']}, estimate {tool['slowdown_estimate']}")
    conn.close()
    return out


def fmt(d: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]} {v:.0f}ns" if v is not None else f"{k} -" for k, v in d.items())


def errors(run: dict) -> dict:
    out = {}
    for stage in stages_of(run["shape"]):
        truth, tool = run["truth"]["per_call_ns"][stage], run["tool"]["mean_ns"][stage]
        calls = run["tool"]["estimated_calls"][stage]
        if f"{stage} calls" in run["tool"]["withheld"]:
            calls = None   # not printed: the tool said it could not count them
        if f"{stage} mean" in run["tool"]["withheld"]:
            tool = None    # not printed either
        out[stage] = {"mean": None if truth is None or tool is None else tool / truth - 1,
                      "calls": None if calls is None else calls / run["tool"]["server_rows"] - 1}
    return out


def median_error(runs: list[dict], stage: str) -> float | None:
    """The tool's median over the truth's median: each pair's own error holds
    the statement's run-to-run spread (its unprobed runs differ by up to a
    third on this host), which the medians of the interleaved runs cancel."""
    truth = [r["truth"]["per_call_ns"][stage] for r in runs if r["truth"]["per_call_ns"][stage]]
    tool = [r["tool"]["mean_ns"][stage] for r in runs if printed_mean(r, stage) is not None]
    return statistics.median(tool) / statistics.median(truth) - 1 if truth and tool else None


def printed_mean(run: dict, stage: str) -> float | None:
    """The tool's mean as it printed it: none where it withheld it."""
    return None if f"{stage} mean" in run["tool"]["withheld"] else run["tool"]["mean_ns"][stage]


def felt(run: dict) -> float | None:
    """The slowdown the load felt: its rows per second in the unprobed run
    beside the tool's over its rows per second profiled (runs before this
    measure had none: None)."""
    unprobed, tool = run.get("unprobed"), run["tool"]
    if not unprobed or not unprobed["seconds"] or not tool["seconds"] or not tool["server_rows"]:
        return None
    return (unprobed["rows"] / unprobed["seconds"]) / (tool["server_rows"] / tool["seconds"])


FELT_BOUND = 1.05     # issue 59: the felt slowdown's median, every shape
GAP_BOUND = 0.03      # and the printed one within this of the felt, or its interval covering it


def gap(run: dict) -> float | None:
    """What the run measured of its slowdown (`overhead.slowdown_estimate`,
    below 1.0 too: the figure before 'not measurable') less what the load felt."""
    f, measured = felt(run), run["tool"].get("slowdown_estimate")
    return None if f is None or measured is None else measured - f


def printed_holds(run: dict) -> bool | None:
    """Whether what the run printed of its slowdown holds the felt one: the
    figure within GAP_BOUND, or its 95% interval covering it; where it printed
    'not measurable (+-x)', the felt one within 1 +- x. None: no felt figure."""
    f, tool = felt(run), run["tool"]
    if f is None:
        return None
    printed, interval, doubt = tool["printed_slowdown"], tool.get("slowdown_interval"), tool.get("slowdown_doubt")
    if printed is not None:
        return abs(printed - f) <= GAP_BOUND or bool(interval and interval[0] <= f <= interval[1])
    return doubt is not None and abs(f - 1.0) <= max(doubt, GAP_BOUND)


def printed_text(run: dict) -> str:
    tool = run["tool"]
    if tool["printed_slowdown"] is not None:
        return f"{tool['printed_slowdown']:.2f}x"
    return f"n.m. (+-{tool['slowdown_doubt']:.2f})" if tool.get("slowdown_doubt") is not None else "-"


def slowdown_lines(groups: dict[tuple, list[dict]]) -> list[str]:
    """The cost table: per shape and length, what the load felt and what the tool printed."""
    lines = ["", "What the runs cost the statement (issue 59). felt: the unprobed run's rows per second (the one "
             "just before or after the tool's, in turn) over the profiled run's; printed: the slowdown the "
             "capture printed (`overhead.measured_slowdown`; 'n.m. (+-x)': printed as not measurable, within x), "
             "per run in the order of leads and repeats; gap: the measured slowdown (printed, or the figure "
             "behind 'not measurable') less the felt one, per run; printed holds: runs whose printed figure is "
             f"within {GAP_BOUND} of the felt one or whose 95% interval covers it; probes on: the share of the "
             "window the probes were attached; medians' 95% intervals by bootstrap "
             f"({BOOTSTRAP_ROUNDS} resamples, seeded). A single pair of short statements differs by up to a third "
             f"on this host with nothing attached (the truth spread above). Bound: felt median at most "
             f"{FELT_BOUND:.2f}x, and the median gap within {GAP_BOUND}.", "",
             "| shape | load | leads | felt | felt median 95% | printed (each run) | gap | gap median 95% "
             "| printed holds | probes on | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (shape, length), runs in groups.items():
        f = [x for x in (felt(r) for r in runs) if x is not None]
        if not f:
            continue
        low, high = median_interval(f)
        gaps = [x for x in (gap(r) for r in runs) if x is not None]
        gap_low, gap_high = median_interval(gaps)
        holds = [printed_holds(r) for r in runs if printed_holds(r) is not None]
        on = [r["tool"]["probes_on_share"] for r in runs if r["tool"].get("probes_on_share") is not None]
        leads = ",".join(f"{x:g}" for x in sorted({r["lead_s"] for r in runs}))
        met = med(f) <= FELT_BOUND and bool(gaps) and abs(med(gaps)) <= GAP_BOUND
        lines.append(f"| {shape} | {length:g}s | {leads} | {span(f, '{:.3f}')} | [{low:.3f}, {high:.3f}] | "
                     f"{', '.join(printed_text(r) for r in runs)} | {span(gaps, '{:+.3f}')} | "
                     f"[{gap_low:+.3f}, {gap_high:+.3f}] | {sum(holds)} of {len(holds)} | "
                     f"{span(on, '{:.1%}')} | {'yes' if met else 'NO'} |")
    return lines


def spread(xs: list[float]) -> float | None:
    """max/min - 1 of the truth's own runs: the noise floor of any comparison."""
    return max(xs) / min(xs) - 1 if xs and min(xs) > 0 else None


def markdown(result: dict) -> str:
    lines = ["# Short loads: the tool started 0-8 s before a 0.5-4 s statement", "",
             f"- date: {result['date']}", f"- command: `{result['command']}`", f"- commit: {result['commit']}",
             f"- machine: {machine_line(result['machine'])}",
             f"- truth: the statement unprobed under {result.get('truth_record', TASK_TRUTH)}; a function's share of the "
             "server's samples on the stack x the server's CPU over the statement / rows",
             "- tool: mysqlprobe -p PID --insert-profile (default mode), window opened `lead` seconds before "
             "the statement, ended as it returned; mean per call and estimated calls (server: "
             "Innodb_rows_inserted)",
             f"- bound: the tool's median mean within {BOUND:.0%} of the truth's median, every run's calls within "
             f"{COUNT_BOUND:.0%}; medians [min, max] over repeats and leads; 'truth spread': max/min - 1 of the "
             "unprobed runs themselves, the noise any single pair carries; withheld: runs in which the tool "
             "withheld one of the stage's figures (a bound broken: its means and counts are left out; a run "
             "whose count was withheld has none, and the row is not met)", "",
             "| shape | load | rows | stage | truth ns/call | truth spread | tool ns/call | error of medians "
             "| error per pair | calls error (printed) | withheld | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for run in result["runs"]:
        groups.setdefault((run["shape"], run["seconds"]), []).append(run)
    for (shape, length), runs in groups.items():
        for stage in stages_of(shape):
            truth = [r["truth"]["per_call_ns"][stage] for r in runs if r["truth"]["per_call_ns"][stage]]
            tool = [printed_mean(r, stage) for r in runs if printed_mean(r, stage) is not None]
            errs = [errors(r)[stage]["mean"] for r in runs if errors(r)[stage]["mean"] is not None]
            calls = [errors(r)[stage]["calls"] for r in runs if errors(r)[stage]["calls"] is not None]
            withheld = sum(1 for r in runs if any(w.startswith(stage + " ") for w in r["tool"]["withheld"]))
            both = median_error(runs, stage)
            counted = len(calls) == len(runs)   # a withheld count is no count
            met = both is not None and abs(both) <= BOUND and counted and all(abs(c) <= COUNT_BOUND for c in calls)
            noise = spread(truth)
            lines.append(f"| {shape} | {length:g}s | {runs[0]['rows']} | {stage} | {span(truth, '{:.0f}')} | "
                         f"{'-' if noise is None else f'{noise:.0%}'} | {span(tool, '{:.0f}')} | "
                         f"{'-' if both is None else f'{both:+.0%}'} | {span(errs, '{:+.0%}')} | "
                         f"{span(calls, '{:+.1%}')} | {withheld} of {len(runs)} | "
                         f"{'yes' if met else 'NO'} |")
    return "\n".join(lines + slowdown_lines(groups)) + "\n"


def main() -> int:
    ap = bench_parser(__doc__, repeats=3)
    ap.add_argument("--seconds", default="1,4")
    ap.add_argument("--shapes", default=f"range-5,range-100,list-5,list-100,hash-5,hash-100,{SYSBENCH_SHAPE}")
    ap.add_argument("--lead", default="0,1", help="seconds between the window's opening and the statement")
    ap.add_argument("--render", action="store_true", help="write its RESULTS.md section again from results.json")
    ap.add_argument("--keep-captures", metavar="DIR", help="keep each profiled run's capture under DIR")
    args = ap.parse_args()
    if rendered_again(args, "short_load", markdown):
        return 0
    host = machine()   # once, before the runs: its commit is the tree's as it ran
    sb = sandbox.Sandbox("10.2.11", instance="bench")
    pid = sb.start(log)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for shape in args.shapes.split(","):
                runs += bench_shape(sb, pid, shape, [float(s) for s in args.seconds.split(",")], args.repeats,
                                    [float(x) for x in args.lead.split(",")], Path(tmp),
                                    Path(args.keep_captures) if args.keep_captures else None)
    finally:
        sb.stop()
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": host["commit"],
              "command": f"bench/short_load.py --repeats {args.repeats} --seconds {args.seconds} "
                         f"--shapes {args.shapes} --lead {args.lead}",
              "machine": host, "runs": runs, "truth_record": TRUTH}
    write_results(args.out, "short_load", result, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
