"""What a short function costs per call in situ: mysqlprobe's default mode
against the truth from CPU samples of the unprobed server.

    sudo .venv/bin/python bench/per_call.py [--repeats 3] [--seconds 10] [--clients 8 [--flush 1]]

writes its section of bench/RESULTS.md (and results.json). On MariaDB 10.2.11 the
seed load (INSERT ... SELECT of 1,000,000 rows, again and again) fills
tables RANGE, LIST and HASH partitioned 5 and 100 ways. Per table and
repeat: an unprobed block sampled by `perf record -F 20000 -a`, a block
profiled by `mysqlprobe --insert-profile --probe FUNCTION`, another
unprobed block. Truth: the share of the server's samples with the
function on the stack (perf record -g: these builds keep frame pointers)
times the server's CPU per row inserted (its CPU time in /proc over the
server's Innodb_rows_inserted, in the seconds just before, with nothing
sampling it: perf at 20 kHz adds its own interrupts to every function's
time), over the function's calls per row (one partition lookup per row
inserted; the InnoDB function's calls per row as its probe counted
them), the mean of the two blocks around the profiled one. mysqlprobe:
the stage's mean_ns, its interval and method.

With --clients N, the same measure under concurrent OLTP: N connections
insert single rows (autocommit, innodb_flush_log_at_trx_commit=--flush,
set back at the end) into a table RANGE partitioned 100 ways, again and
again; the truth as above, page_cur_insert_rec_low's calls per row as its
probe counted them. A section of its own."""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path


from mysqlprobe.lab.known_cost import build_known_cost
from mysqlprobe.lab.benchkit.truth import on_stack_ns, record_truth
from mysqlprobe.lab.benchkit.loads import StatementLoop, rows_inserted
from mysqlprobe.lab.benchkit import (MYSQLPROBE, ROOT, Tool, bench_parser, derived, fixture_command, log, machine, measure_of,
                                     med, run_line, write_results)
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.analysis.per_call import samples_to_resolve
from mysqlprobe.analysis.sampling import Estimate
from mysqlprobe.collectors.kernel.process import cpu_seconds

TRUTH_HZ = 20000
SOURCE_ROWS = 1000000
TABLES = [("range", 5), ("range", 100), ("list", 5), ("list", 100), ("hash", 5), ("hash", 100)]
LOOKUP = "partition.get_partition_id"
# inserts a record into a page: about 100 ns a call with its callees, 17 ns of them in its own code
INNODB_FUNCTION = "page_cur_insert_rec_low"
INNODB_STAGE = f"probe:{INNODB_FUNCTION}"
KNOWN_SHORT = ["cost_10ns", "cost_20ns", "cost_40ns"]  # countdowns of the known-cost fixture
TRUTH_CALLS = 1_000_000  # per round of the fixture's own timing of the unprobed twin
# the server's CPU per row, measured with nothing sampling it, before each
# truth block: at least this long, over whole cycles of the seed's loop
CLEAN_S = 3


def truth_block(pid: int, conn, load, seconds: float, workdir: Path) -> dict:
    """Where the unprobed server's CPU goes, per row inserted: each function's
    share of its perf samples times its CPU per row measured with nothing
    sampling it (perf at TRUTH_HZ adds its own interrupts to every
    function's time, 20-35% on this kind of host). Both over whole cycles
    of a load that has them (the seed's statement loop): a reading that
    held more or less of the table's making than the other would set a
    share of one mix against a CPU per row of another."""
    wait = getattr(load, "until_cycle_starts", time.sleep)
    if wait is not time.sleep:
        wait(0)
    t0, cpu0, rows0 = time.monotonic(), cpu_seconds(pid), rows_inserted(conn)
    wait(CLEAN_S)
    clean_s, cpu_per_row = time.monotonic() - t0, (cpu_seconds(pid) - cpu0) * 1e9 / (rows_inserted(conn) - rows0)
    t0, rows0 = time.monotonic(), rows_inserted(conn)
    data = record_truth(lambda: wait(seconds), workdir, TRUTH_HZ)
    rows = rows_inserted(conn) - rows0  # while perf recorded, not while its samples are read
    sampled_s = time.monotonic() - t0
    ns, total = on_stack_ns(pid, data, {"lookup": "get_partition_id", "innodb": INNODB_FUNCTION})
    return {"rows": rows, "cpu_ns_per_row": cpu_per_row, "sampled_ns_per_row": total / rows,
            "clean_s": round(clean_s, 2), "sampled_s": round(sampled_s, 2),
            "lookup_ns_per_row": ns["lookup"] / total * cpu_per_row,
            "innodb_ns_per_row": ns["innodb"] / total * cpu_per_row}


def profiled_block(pid: int, seconds: float, workdir: Path, extra: tuple = ()) -> dict:
    out = Path(tempfile.mkdtemp(dir=workdir))
    subprocess.run([MYSQLPROBE, "-p", str(pid), "--insert-profile", "--probe", INNODB_FUNCTION, "-q",
                    "-d", str(seconds), "-o", str(out), *extra], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    doc = derived(out)
    figures = {"lookup": stage_figures(doc, LOOKUP), "innodb": stage_figures(doc, INNODB_STAGE)}
    innodb_calls, lookup_calls = figures["innodb"]["calls"], figures["lookup"]["calls"]
    # the InnoDB function's calls per row inserted: per lookup, as the probes counted both
    figures["innodb_calls_per_row"] = innodb_calls / lookup_calls if lookup_calls else None
    figures["slowdown"] = measure_of(doc["overhead"])
    sampling = doc.get("sampling") or {}
    # where the window's off-time went: the bursts' share decides how many samples a short function gets
    figures["phases"] = {k: sampling.get(k) for k in ("on_s", "off_s", "quiet_s", "quiet_share", "burst_s",
                                                       "burst_rows", "cycles")}
    return figures


def bench_table(sb, pid: int, conn, kind: str, parts: int, repeats: int, seconds: int, workdir: Path) -> dict:
    """The repeats, and the seconds of the loop's cycles (median making, filling)."""
    loop = StatementLoop(sb.socket, workload.table(kind, parts))
    try:
        runs = profiled_repeats(pid, conn, loop, f"{kind} {parts}", repeats, seconds, workdir)
    finally:
        loop.stop()
    making, filling = zip(*loop.cycle_s) if loop.cycle_s else ((), ())
    return {"runs": runs, "cycles": len(loop.cycle_s), "making_s": round(med(making), 2) if making else None,
            "filling_s": round(med(filling), 2) if filling else None}


def profiled_repeats(pid: int, conn, load, label: str, repeats: int, seconds: float, workdir: Path,
                     extra: tuple = ()) -> list[dict]:
    """Per repeat a profiled block between unprobed ones (each shared with
    its neighbour), beside a running load (its .error: what stopped it)."""
    runs = []
    time.sleep(3)
    before = truth_block(pid, conn, load, seconds / 2, workdir)
    for r in range(repeats):
        tool = profiled_block(pid, seconds, workdir, extra)
        time.sleep(1)
        after = truth_block(pid, conn, load, seconds / 2, workdir)
        per_row = tool["innodb_calls_per_row"] or 1.0
        truth = {"lookup_ns": (before["lookup_ns_per_row"] + after["lookup_ns_per_row"]) / 2,
                 "innodb_ns": (before["innodb_ns_per_row"] + after["innodb_ns_per_row"]) / 2 / per_row}
        runs.append({"truth": truth, "tool": tool, "before": before, "after": after})
        log(f"{label} {r + 1}/{repeats}: lookup truth {truth['lookup_ns']:.1f} ns, mysqlprobe "
            f"{tool['lookup']['mean_ns']} {tool['lookup']['ci95']} ({tool['lookup']['method']}); "
            f"{INNODB_FUNCTION} truth {truth['innodb_ns']:.1f}, mysqlprobe {tool['innodb']['mean_ns']} "
            f"{tool['innodb']['ci95']} ({tool['innodb']['method']}); reported slowdown {tool['slowdown']}")
        before = after
        if load.error:
            raise RuntimeError(load.error)
    return runs


def stage_figures(doc: dict, stage: str) -> dict:
    s = next(s for s in doc["stages"] if s["stage"] == stage)
    return {"mean_ns": s["mean_ns"], "ci95": s["mean_ns_ci95"], "resolved": s["mean_resolved"],
            "method": "samples" if s["mean_method"].startswith("CPU samples") else "probes",
            "off_phase_cpu": s["off_phase_cpu"], "calls": s["calls"]}


def known_cost_block(exe: Path, name: str, seconds: int, workdir: Path) -> dict:
    """One window of the default mode on the fixture calling `name` in a
    loop (no server: its progress is the loop's count of its calls, read
    from its memory). Truth: the fixture's own timing of the unprobed
    twin, before and after the window."""
    target = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        target.stdout.readline()
        truth = [fixture_command(target, f"compare {name} {TRUTH_CALLS} 9")["truth_ns"]]
        out = Path(tempfile.mkdtemp(dir=workdir))
        tool = Tool([MYSQLPROBE, "-p", str(target.pid), "--probe", name, "--progress-counter", "loop_calls",
                     "--no-ps", "-q", "-o", str(out)], "Tracing PID", "stderr")
        fixture_command(target, f"loop {name} {seconds * 1000}")
        tool.stop()
        truth.append(fixture_command(target, f"compare {name} {TRUTH_CALLS} 9")["truth_ns"])
        target.stdin.write("quit\n")
    finally:
        target.stdin.close()
        target.wait(timeout=10)
    doc = derived(out)
    return {"truth_ns": sum(truth) / 2, "truths": truth, "tool": stage_figures(doc, f"probe:{name}"),
            "in_situ_factor": doc["calibration"].get("in_situ_factor")}


def bench_fixture(repeats: int, seconds: int, workdir: Path) -> dict[str, list[dict]]:
    exe = build_known_cost(ROOT / "tests" / "fixtures", workdir, frame_pointers=False)
    runs: dict[str, list[dict]] = {n: [] for n in KNOWN_SHORT}
    for r in range(repeats):
        for name in KNOWN_SHORT:
            run = known_cost_block(exe, name, seconds, workdir)
            runs[name].append(run)
            log(f"fixture {name} {r + 1}/{repeats}: truth {run['truth_ns']:.1f} ns, mysqlprobe "
                f"{run['tool']['mean_ns']} {run['tool']['ci95']} ({run['tool']['method']})")
    return runs


def within(tool: dict, truth: float) -> bool:
    """The target: the best estimate within max(10 ns, 35%) of the truth; a
    bound (`<X`) only where all it allows is (X itself no further above)."""
    tolerance = max(10.0, 0.35 * truth)
    if tool["mean_ns"] is None:
        return False
    if not tool["resolved"] and tool["ci95"]:
        return tool["ci95"][1] <= truth + tolerance
    return abs(tool["mean_ns"] - truth) <= tolerance


DISTINCT = 1.35  # truths further apart than this have an order to keep


def order_kept(tables: list[dict], kind: str) -> bool | None:
    """5 against 100 partitions of a kind, on every repeat where the truths
    differ by more than DISTINCT and mysqlprobe measured both (a bound
    claims no order): the tool's order is the truth's. None where no
    repeat qualifies."""
    few, many = ([t for t in tables if t["kind"] == kind and t["partitions"] == n] for n in (5, 100))
    if not few or not many:
        return None
    pairs = [(a, b) for a, b in zip(few[0]["runs"], many[0]["runs"])
             if max(a["truth"]["lookup_ns"], b["truth"]["lookup_ns"])
             > DISTINCT * min(a["truth"]["lookup_ns"], b["truth"]["lookup_ns"])
             and a["tool"]["lookup"]["resolved"] and b["tool"]["lookup"]["resolved"]]
    if not pairs:
        return None
    return all((b["tool"]["lookup"]["mean_ns"] > a["tool"]["lookup"]["mean_ns"])
               == (b["truth"]["lookup_ns"] > a["truth"]["lookup_ns"]) for a, b in pairs)


def main() -> None:
    parser = bench_parser(__doc__, repeats=3, seconds=10)
    parser.add_argument("--fixture-seconds", type=int, default=6, help="each known-cost fixture window")
    parser.add_argument("--clients", type=int, default=0,
                        help="instead of the seed load: this many clients inserting single rows (concurrent OLTP)")
    parser.add_argument("--flush", type=int, default=1, choices=(0, 1, 2),
                        help="with --clients: innodb_flush_log_at_trx_commit")
    parser.add_argument("--extra", default="", help="with --clients: more mysqlprobe options for the profiled "
                        "blocks, e.g. '--ps-waits all' (P_S costing more: the quiet phases take more of the off-time)")
    args = parser.parse_args()
    if args.clients:
        return main_oltp(args)
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-percall-"))
    started = datetime.now(timezone.utc)
    sb = sandbox.Sandbox("10.2.11")
    tables = []
    with sb.serving(log) as pid:
        conn = workload.connect(sb.socket)
        workload.prepare_source(conn, SOURCE_ROWS)
        for kind, parts in TABLES:
            tables.append({"kind": kind, "partitions": parts,
                           **bench_table(sb, pid, conn, kind, parts, args.repeats, args.seconds, workdir)})
    fixture = bench_fixture(args.repeats, args.fixture_seconds, workdir)
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"),
              "command": f"bench/per_call.py --repeats {args.repeats} --seconds {args.seconds} "
                         f"--fixture-seconds {args.fixture_seconds}",
              "truth_hz": TRUTH_HZ, "truth_stacks": True, "truth": "cpu share, whole cycles", "truth_clean_s": CLEAN_S,
              "innodb_function": INNODB_FUNCTION, "tables": tables, "fixture": fixture}
    write_results(args.out, "per_call", result, markdown)


def _tool(t: dict) -> str:
    if t["mean_ns"] is None:
        return "-"
    interval = f" [{t['ci95'][0]:.1f}, {t['ci95'][1]:.1f}]" if t["ci95"] else ""
    shown = f"{t['mean_ns']:.1f}" if t["resolved"] else f"<{t['ci95'][1]:.1f}"
    return f"{shown}{interval} ({t['method']})"


def sample_counts(tool: dict, truth_ns: float) -> list[str]:
    """The samples mysqlprobe's figure rests on, how many the truth's cost
    per call would have given over the same calls, and how many would
    resolve it where it is a bound (blank where the figure is the probes')."""
    cpu = tool.get("off_phase_cpu") or {}
    calls = cpu.get("calls") or {}
    if not cpu.get("samples") or not calls.get("value") or not calls.get("ci95"):
        return ["", "", ""]
    period = cpu["cpu_ns"] / cpu["samples"]
    needed = None if tool["resolved"] else samples_to_resolve(Estimate(calls["value"], *calls["ci95"]))
    return [str(cpu["samples"]), f"{calls['value'] * truth_ns / period:.1f}",
            "" if tool["resolved"] else "-" if needed is None else str(needed)]


def markdown(result: dict) -> str:
    return "\n".join(section(result, "# Per-call cost of short functions, in situ"))


def truth_text(result: dict) -> str:
    """How the run's truth was taken (runs before the CPU-share truth took the samples' time itself)."""
    if result.get("truth") == "cpu share, whole cycles":
        return ("the share of the server's samples with the function on the stack (its callees included) times "
                "the server's CPU per row inserted, measured from /proc before each block with nothing sampling "
                "it (perf's own interrupts at 20 kHz would add to every function's time), both over whole cycles "
                f"of the load (a cycle: the table made again, then filled; the CPU reading at least "
                f"{result['truth_clean_s']} s),")
    if result.get("truth") == "cpu share":
        return ("the share of the server's samples with the function on the stack (its callees included) times "
                f"the server's CPU per row inserted, measured from /proc in the {result['truth_clean_s']} s before "
                "each block with nothing sampling it (perf's own interrupts at 20 kHz would add to every "
                "function's time),")
    return ("a function's " + ("samples with it on the stack (its callees included)" if result.get("truth_stacks")
                               else "self samples") + " times their period")


def section(result: dict, title: str) -> list[str]:
    """The results as markdown under `title` (also bench/RESULTS.md's section)."""
    stacks = result.get("truth_stacks")  # runs before it took the functions' own samples
    lines = [title, "",
             run_line(result), "",
             "Load: the seed's INSERT ... SELECT of 1,000,000 rows, again and again, on MariaDB 10.2.11. Per "
             "table and repeat, a block profiled by the default `--insert-profile` (with `--probe "
             f"{result['innodb_function']}`) between two unprobed blocks sampled by `perf record -F "
             f"{result['truth_hz']} -a{' -g' if stacks else ''}`. Truth: " + truth_text(result) + " over its calls "
             "in the unprobed blocks (a partition lookup per row inserted, by the server's Innodb_rows_inserted; "
             f"{result['innodb_function']}'s calls per row as its probe counted them), the mean of the blocks "
             "around the profiled one. mysqlprobe: the stage's `mean_ns` [95% interval] and the method that "
             "gave it (samples: CPU samples with the probes off; probes: probe timestamps less their "
             "calibrated cost); `<X` where it is only a bound. ns per call.", "",
             "samples: the CPU samples mysqlprobe's figure rests on; at the truth: how many the truth's cost "
             "per call would give over the same calls (a count far from it is the samples' chance, or the "
             "function's cost in that block, not the truth's); to resolve, for a bound: how many would make it "
             "a mean (mysqlprobe's own hint, which it prints with a bound).", "",
             "| table | function | truth | mysqlprobe | within max(10 ns, 35%) | samples | at the truth "
             "| to resolve |", "|---|---|---|---|---|---|---|---|"]
    for key, function in (("lookup", None), ("innodb", result["innodb_function"])):
        for t in result["tables"]:
            for r in t["runs"]:
                tool, truth = r["tool"][key], r["truth"][f"{key}_ns"]
                name = function or f"get_partition_id_{t['kind']}*"
                ok = "yes" if within(tool, truth) else "NO"
                lines.append(f"| {t['kind']} {t['partitions']} | {name} | {truth:.1f} | {_tool(tool)} | {ok} | "
                             + " | ".join(sample_counts(tool, truth)) + " |")
    every = [within(r["tool"][k], r["truth"][f"{k}_ns"]) for t in result["tables"] for r in t["runs"]
             for k in ("lookup", "innodb")]
    orders = {k: order_kept(result["tables"], k) for k in ("range", "list", "hash")}
    slowdowns = [r["tool"]["slowdown"] for t in result["tables"] for r in t["runs"] if r["tool"]["slowdown"]]
    lines += ["", f"- within max(10 ns, 35%) of the truth: {sum(every)} of {len(every)}",
              "- the order between 5 and 100 partitions, on every repeat where the truths differ by more "
              f"than {DISTINCT:.2f}x and mysqlprobe measured both (`-`: no such repeat): "
              + ", ".join(f"{k} {'-' if v is None else 'yes' if v else 'NO'}" for k, v in orders.items()),
              "  (LIST's lookup searches the table's 100 listed values whatever the partition count, and "
              "HASH's computes one hash, so their 5 and 100 cost about the same)",
              f"- slowdown the profiled blocks reported: {med(slowdowns):.3f} "
              f"({min(slowdowns):.3f} to {max(slowdowns):.3f})" if slowdowns else ""] + cycle_lines(result)
    return lines + fixture_lines(result.get("fixture")) + [""]


def cycle_lines(result: dict) -> list[str]:
    """The load's cycles and the truth readings' spans, where the truth was taken over whole cycles."""
    tables = [t for t in result["tables"] if t.get("making_s") is not None]
    if not tables:
        return []
    blocks = [b for t in tables for r in t["runs"] for b in (r["before"], r["after"])]
    clean, sampled = [b["clean_s"] for b in blocks], [b["sampled_s"] for b in blocks]
    return ["- the load's cycles, median seconds (making the table + filling it): "
            + ", ".join(f"{t['kind']} {t['partitions']} {t['making_s']:.1f} + {t['filling_s']:.1f}" for t in tables),
            f"- the truth's readings over whole cycles: CPU per row {med(clean):.1f} s ({min(clean):.1f}-"
            f"{max(clean):.1f}), perf {med(sampled):.1f} s ({min(sampled):.1f}-{max(sampled):.1f})"]


def fixture_lines(fixture: dict | None) -> list[str]:
    if not fixture:
        return []
    counter = any("in_situ_factor" in r for runs in fixture.values() for r in runs)  # runs with the counter
    how = ("`--probe NAME --progress-counter loop_calls --no-perf-schema` (no server: the loop's own count of "
           "its calls, read from its memory, is the progress the bursts' calls are scaled by)" if counter else
           "`--probe NAME --no-perf-schema` (no server, hence no row counter: the bursts' calls come from the "
           "load's speed, which the probes' own cost blurs for a function called millions of times a second, "
           "so mysqlprobe keeps the probes' bound)")
    lines = ["", "Known-cost fixture (tests/fixtures/known_cost.cc): a countdown in the function's own code, "
             f"called in a loop; the default mode with {how}. Truth: the fixture's own timing of the unprobed "
             "twin, before and after the window. ns per call. A bound `<X` counts as within only if X is.", "",
             "| function | truth | mysqlprobe | within max(10 ns, 35%) |", "|---|---|---|---|"]
    every = []
    for name, runs in fixture.items():
        for r in runs:
            ok = within(r["tool"], r["truth_ns"])
            every.append(ok)
            lines.append(f"| {name} | {r['truth_ns']:.1f} | {_tool(r['tool'])} | {'yes' if ok else 'NO'} |")
    # the order on the repeats that resolved all three (a bound claims none)
    resolved = [runs for runs in zip(*fixture.values()) if all(r["tool"]["resolved"] for r in runs)]
    order = all(a["tool"]["mean_ns"] < b["tool"]["mean_ns"] for runs in resolved for a, b in zip(runs, runs[1:]))
    return lines + ["", f"- within max(10 ns, 35%) of the truth: {sum(every)} of {len(every)}",
                    "- 10 < 20 < 40 ns in that order, on every repeat that resolved all three: "
                    + ("- (none did)" if not resolved else "yes" if order else "NO")]


OLTP_ROWS = 20011  # a round of single-row inserts (prime)
FLUSH_TEXT = {0: "innodb_flush_log_at_trx_commit=0: redo written about once a second",
              1: "innodb_flush_log_at_trx_commit=1: a redo fsync per commit",
              2: "innodb_flush_log_at_trx_commit=2: redo written per commit, synced about once a second"}
OLTP_KIND, OLTP_PARTS = "range", 100


class InsertLoad:
    """`clients` connections inserting single rows without a pause, each
    cycling through its share of the source's ROWS rows until stopped (the
    table has no unique key). No DDL, reconnection or read of the source
    between rounds: the truth's CPU per row is the inserts' alone (rounds
    that recreated the table put seconds of DDL into some of its windows)."""

    def __init__(self, socket: str, clients: int):
        conn = workload.connect(socket)
        table = workload.table(OLTP_KIND, OLTP_PARTS)
        workload.create_target(conn, table)
        source = workload.source_rows(conn, OLTP_ROWS)
        conn.close()
        self.sql = table.insert_row_sql(workload.SCHEMA)
        self.stop, self.error = threading.Event(), None
        self.threads = [threading.Thread(target=self._client, args=(socket, source[i::clients]), daemon=True)
                        for i in range(clients)]
        for t in self.threads:
            t.start()

    def _client(self, socket: str, rows: list) -> None:
        try:
            conn = workload.connect(socket)
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    for row in rows:
                        cur.execute(self.sql, row)
                        if self.stop.is_set():
                            break
            conn.close()
        except BaseException as e:  # noqa: BLE001 - told by the main thread
            self.error = repr(e)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def main_oltp(args) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-percall-oltp-"))
    started = datetime.now(timezone.utc)
    sb = sandbox.Sandbox("10.2.11")
    with sb.serving(log) as pid:
        conn = workload.connect(sb.socket)
        workload.prepare_source(conn, OLTP_ROWS)
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")
            (flush_before,) = cur.fetchone()
            cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (args.flush,))
        load = InsertLoad(sb.socket, args.clients)
        try:
            runs = profiled_repeats(pid, conn, load, f"{OLTP_KIND} {OLTP_PARTS}, {args.clients} clients", args.repeats,
                                    args.seconds, workdir, tuple(args.extra.split()))
        finally:
            load.finish()
            with conn.cursor() as cur:
                cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (flush_before,))
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"),
              "command": f"bench/per_call.py --clients {args.clients} --repeats {args.repeats} "
                         f"--seconds {args.seconds} --flush {args.flush}"
                         + (f" --extra '{args.extra}'" if args.extra else ""), "clients": args.clients,
              "flush_log_at_trx_commit": args.flush, "truth": "cpu share",
              "truth_clean_s": CLEAN_S, "runs": runs}
    write_results(args.out, "per_call_oltp", result, markdown_oltp)


def markdown_oltp(result: dict) -> str:
    lines = ["# Per-call cost under concurrent OLTP", "", run_line(result), "",
             f"MariaDB 10.2.11, {result['clients']} clients inserting single rows (autocommit, "
             f"{FLUSH_TEXT[result.get('flush_log_at_trx_commit', 2)]}) into a table RANGE partitioned {OLTP_PARTS} "
             "ways. Per repeat a block profiled by the default "
             f"`--insert-profile --probe {INNODB_FUNCTION}{extra_text(result)}` between unprobed blocks "
             "sampled by `perf record -F 20000 -a -g`. Truth: " + truth_text({"truth_stacks": True, **result}) + " over its calls in "
             "the unprobed blocks. ns per call.", "",
             "| repeat | function | truth | mysqlprobe | within max(10 ns, 35%) |", "|---|---|---|---|---|"]
    every = []
    for i, r in enumerate(result["runs"], 1):
        for key, name in (("lookup", f"{LOOKUP} ({OLTP_KIND} {OLTP_PARTS})"), ("innodb", INNODB_FUNCTION)):
            ok = within(r["tool"][key], r["truth"][f"{key}_ns"])
            every.append(ok)
            lines.append(f"| {i} | {name} | {r['truth'][f'{key}_ns']:.1f} | {_tool(r['tool'][key])} | "
                         f"{'yes' if ok else 'NO'} |")
    slowdowns = [r["tool"]["slowdown"] for r in result["runs"] if r["tool"]["slowdown"]]
    lines += ["", f"- within max(10 ns, 35%) of the truth: {sum(every)} of {len(every)}"]
    for i, r in enumerate(result["runs"], 1):
        lines.append(f"- repeat {i}: {phases_text(r['tool'])}")
    if slowdowns:
        lines.append(f"- slowdown the profiled blocks reported: {med(slowdowns):.3f} "
                     f"({min(slowdowns):.3f} to {max(slowdowns):.3f})")
    return "\n".join(lines) + "\n"


def extra_text(result: dict) -> str:
    extra = result["command"].partition(" --extra ")[2].strip("'")
    return f" {extra}" if extra else ""


def phases_text(tool: dict) -> str:
    """Where the window's off-time went, and the samples the bursts took."""
    p = tool.get("phases") or {}
    samples = "/".join(str((tool[k].get("off_phase_cpu") or {}).get("samples", "-")) for k in ("lookup", "innodb"))
    if p.get("burst_s") is None or p.get("off_s") is None:
        return f"samples (lookup/InnoDB) {samples}"
    off = p["off_s"] + (p.get("quiet_s") or 0) + p["burst_s"]
    return (f"bursts {p['burst_s']:.1f} s of {off:.1f} s off the probes (quiet share aimed at "
            f"{p.get('quiet_share')}), samples (lookup/InnoDB) {samples}")


if __name__ == "__main__":
    main()
