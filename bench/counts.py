"""The tool's counts against the server's own: I/O calls, USDT probes on a stripped server, statement digests.

    sudo .venv/bin/python bench/counts.py io [--help]
    sudo .venv/bin/python bench/counts.py usdt [--help]
    sudo .venv/bin/python bench/counts.py digests [--help]

io: The I/O collector's counts against the server's own counters, over the
same window, on the seed bulk load and on OLTP (oltp_insert at 8 threads,
with and without an fsync per commit): MariaDB 10.2.11 sandbox.

usdt: What mysqlprobe counts through the server's USDT probes, on a stripped
MariaDB 10.11.5 (no debug file anywhere), under concurrent sysbench,
against the server's own counters over the same statements.

digests: The per-digest figures against the server's own: sysbench oltp_insert (8
clients) and the seed bulk load on MariaDB 10.2.11, every call counted
(--exact) and sampled (the default)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.collectors.perfschema.settings import global_status

from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import (MYSQLPROBE, Tool, bench_parser, derived, log, machine, machine_line, med,
                                     run_line, run_subcommand, write_results)
from mysqlprobe.lab.benchkit.loads import SHAPES, Load

# --------------------------------------------------------------------------- io

DOC_IO = """The I/O collector's counts against the server's own counters, over the
same window, on the seed bulk load and on OLTP (oltp_insert at 8 threads,
with and without an fsync per commit): MariaDB 10.2.11 sandbox.

mysqlprobe records `--exact` (the I/O programs on all window) while the
load runs; its capture holds the server's status counters read at the
window's edges (perf_schema.deltas.status, read before the I/O programs
attach and after they detach). Compared:
  - bytes the server's threads wrote to the redo log files (ib_logfile*)
    against Innodb_os_log_written;
  - fsync/fdatasync calls on InnoDB's files (log, system and table
    tablespaces) against Innodb_data_fsyncs (every fsync InnoDB makes);
  - the same on the log files against Innodb_os_log_fsyncs.
Writes its section of bench/RESULTS.md (and results.json)."""

SHAPE_NAMES = ("seed bulk load, 1 thread", "oltp_insert, 8 threads", "oltp_insert, 8 threads, fsync per commit")
SYNCS = ("fsync", "fdatasync")
LOG_FILE = re.compile(r"(^|/)ib_logfile\d+$")
INNODB_FILE = re.compile(r"(\.ibd|(^|/)ibdata\d+|(^|/)ib_logfile\d+)$")


def io_figures(doc: dict) -> dict:
    """From the capture: the collector's figures, and the server's counters."""
    io, status = doc["io"], doc["perf_schema"]["deltas"]["status"]
    files = io["by_file"]
    log_bytes = sum(f["write_bytes"] for f in files if LOG_FILE.search(f["file"]))
    log_syncs = sum(f["syncs"] for f in files if LOG_FILE.search(f["file"]))
    innodb_syncs = sum(f["syncs"] for f in files if INNODB_FILE.search(f["file"]))
    return {"io_log_bytes": log_bytes, "server_log_bytes": status.get("Innodb_os_log_written"),
            "io_log_syncs": log_syncs, "server_log_syncs": status.get("Innodb_os_log_fsyncs"),
            "io_innodb_syncs": innodb_syncs, "server_innodb_syncs": status.get("Innodb_data_fsyncs"),
            "files_left_out": io["files_left_out"], "window_s": doc["window"]["duration_s"]}


def ratio(a, b) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def main_io() -> int:
    ap = bench_parser(DOC_IO, repeats=3, seconds=6)
    args = ap.parse_args()
    sb = sandbox.Sandbox("10.2.11")
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-io-counts-"))
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
               "command": f"bench/counts.py io --repeats {args.repeats} --seconds {args.seconds}", "shapes": []}
    with sb.serving(log) as pid:
        for shape in [s for s in SHAPES if s.name in SHAPE_NAMES]:
            load = Load(sb, shape)
            load.prepare()
            load.start()
            runs = []
            try:
                time.sleep(2)   # the load under way
                for r in range(args.repeats):
                    d = Path(tempfile.mkdtemp(dir=workdir))
                    tool = Tool([MYSQLPROBE, "-p", str(pid), "--insert-profile", "--exact", "-q", "--no-cpu",
                                 "-o", str(d)], "Tracing PID", "stderr")
                    time.sleep(args.seconds)
                    load.check()
                    tool.stop()
                    fig = io_figures(derived(d))
                    runs.append(fig)
                    log(f"{shape.name} {r + 1}/{args.repeats}: {fig}")
            finally:
                load.close()
            results["shapes"].append({"shape": shape.name, "runs": runs})
    write_results(args.out, "io_counts", results, render_io)
    return 0


def machine_text(m: dict) -> str:
    return f"{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, kernel {m['kernel']}"


def render_io(results: dict) -> str:
    lines = ["# The I/O collector's counts against the server's counters", "",
             f"- date: {results['date']}", f"- command: `{results['command']}`", f"- machine: {machine_text(results['machine'])}",
             "- server: MariaDB 10.2.11 sandbox; mysqlprobe `--insert-profile --exact --no-perf` while the load runs",
             "", "Each figure is the I/O collector's over the server's own counter for the same window "
             "(perf_schema.deltas.status, read at the window's edges); medians [min, max] over the repeats. "
             "redo bytes: bytes written to ib_logfile* / Innodb_os_log_written. log syncs: fsync and fdatasync "
             "calls on ib_logfile* / Innodb_os_log_fsyncs. InnoDB syncs: fsync and fdatasync calls on InnoDB's "
             "files (.ibd, ibdata, ib_logfile) / Innodb_data_fsyncs.", "",
             "| load shape | redo bytes | log syncs | InnoDB syncs | server's redo bytes/s | server's syncs/s |",
             "|---|---|---|---|---|---|"]
    for s in results["shapes"]:
        runs = s["runs"]

        def cell(io_key, server_key):
            values = [ratio(r[io_key], r[server_key]) for r in runs]
            values = [v for v in values if v is not None]
            return f"{med(values):.4f} [{min(values):.4f}, {max(values):.4f}]" if values else "-"

        rate = lambda key: med([r[key] / r["window_s"] for r in runs if r[key] is not None])  # noqa: E731
        lines.append(f"| {s['shape']} | {cell('io_log_bytes', 'server_log_bytes')} | "
                     f"{cell('io_log_syncs', 'server_log_syncs')} | {cell('io_innodb_syncs', 'server_innodb_syncs')} "
                     f"| {rate('server_log_bytes'):.0f} | {rate('server_innodb_syncs'):.1f} |")
    return "\n".join(lines) + "\n"



# --------------------------------------------------------------------------- usdt

DOC_USDT = """What mysqlprobe counts through the server's USDT probes, on a stripped
MariaDB 10.11.5 (no debug file anywhere), under concurrent sysbench,
against the server's own counters over the same statements.

    sudo .venv/bin/python bench/counts.py usdt [--repeats 3] [--events 20000]

writes its section of bench/RESULTS.md (and results.json). Each repeat:
the server's Com_* and Handler_write are read, mysqlprobe attaches
(--exact, no P_S connection), sysbench runs a fixed number of
transactions from 8 clients (so every statement falls inside the
window), mysqlprobe stops, the counters are read again. Two runs each:
- `--stage sql.query_exec` under oltp_write_only, its statements by
  shape (the text read from each site's USDT operand) against Com_insert,
  Com_update and Com_delete; once with sysbench's server-side prepared
  statements off (text queries) and once with them on;
- `--insert-profile` under oltp_insert: sql.insert_row, standing in from
  the USDT probes for the functions the stripped binary lost, against
  Handler_write (every handler::ha_write_row; 10.11 has no
  Innodb_rows_inserted)."""

SYSBENCH = shutil.which("sysbench") or "sysbench"
VERSION, THREADS, TABLES, TABLE_SIZE = "10.11.5", 8, 4, 10000
COUNTERS = ("Com_insert", "Com_update", "Com_delete", "Handler_write")  # 10.11 has no Innodb_rows_inserted
VERBS = {"INSERT": "Com_insert", "UPDATE": "Com_update", "DELETE": "Com_delete"}


def sysbench(sock: str, test: str, *more: str) -> list[str]:
    return [SYSBENCH, test, "--db-driver=mysql", f"--mysql-socket={sock}", "--mysql-user=root", "--mysql-db=sbtest",
            f"--tables={TABLES}", f"--table-size={TABLE_SIZE}", f"--threads={THREADS}", *more]


def prepare(sb: sandbox.Sandbox, conn, test: str) -> None:
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS sbtest")
        cur.execute("CREATE DATABASE sbtest")
    subprocess.run(sysbench(sb.socket, test, "prepare"), check=True, capture_output=True)


def one_run_usdt(sb: sandbox.Sandbox, pid: int, conn, test: str, events: int, profile: tuple[str, ...],
            ps_mode: str, workdir: Path) -> tuple[dict, dict]:
    """The capture and the counters' deltas over one fixed-size sysbench run inside its window."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    # read outside the window: a SHOW STATUS inside it writes its rows to a temporary
    # table, which ha_write_row (sql.insert_row) sees and Handler_write does not
    before = global_status(conn, COUNTERS)
    tool = Tool([MYSQLPROBE, "-p", str(pid), *profile, "--exact", "--no-ps", "-q", "-o", str(out)],
                "Tracing PID", "stderr")
    subprocess.run(sysbench(sb.socket, test, f"--events={events}", "--time=0", f"--db-ps-mode={ps_mode}", "run"),
                   check=True, capture_output=True)
    _, err = tool.stop()
    after = global_status(conn, COUNTERS)
    if tool.proc.returncode != 0:
        raise RuntimeError(f"mysqlprobe failed: {err.strip()[-400:]}")
    return derived(out), {k: after[k] - before[k] for k in COUNTERS}


def statement_run(doc: dict, delta: dict) -> dict:
    by_verb = {verb: 0 for verb in VERBS}
    for shape in doc["statements"]["shapes"]:
        verb = shape["text"].split(" ", 1)[0].upper()
        if verb in by_verb:
            by_verb[verb] += shape["executions"]
    return {"counted": by_verb, "server": {verb: delta[counter] for verb, counter in VERBS.items()},
            "shapes": len(doc["statements"]["shapes"]),
            "texts_whole": all(s["text_complete"] for s in doc["statements"]["shapes"])}


def insert_run(doc: dict, delta: dict) -> dict:
    (stage,) = [s for s in doc["stages"] if s["stage"] == "sql.insert_row"]
    return {"counted": stage["calls"], "server": delta["Handler_write"],
            "probed": sorted({p["stage"] for p in doc["probes"]})}


def main_usdt() -> int:
    args = bench_parser(DOC_USDT, repeats=3, events=20000).parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-usdt-"))
    started = datetime.now(timezone.utc)
    inst = sandbox.install(VERSION, log)
    stripped = workdir / "mariadbd"
    subprocess.run(["objcopy", "--strip-all", str(inst.mysqld), str(stripped)], check=True)
    sb = sandbox.Sandbox(VERSION, instance="usdt-counts")
    pid = sb.start(log, mysqld=stripped)
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"),
              "command": f"bench/counts.py usdt --repeats {args.repeats} --events {args.events}",
              "statements": {"disable": [], "auto": []}, "inserts": []}
    try:
        conn = workload.connect(sb.socket)
        prepare(sb, conn, "oltp_write_only")
        for r in range(args.repeats):
            for mode in ("disable", "auto"):
                doc, delta = one_run_usdt(sb, pid, conn, "oltp_write_only", args.events, ("--stage", "sql.query_exec"),
                                     mode, workdir)
                run = statement_run(doc, delta)
                result["statements"][mode].append(run)
                log(f"statements, prepared {mode}, {r + 1}/{args.repeats}: {run}")
        prepare(sb, conn, "oltp_insert")
        for r in range(args.repeats):
            doc, delta = one_run_usdt(sb, pid, conn, "oltp_insert", args.events, ("--insert-profile",), "disable", workdir)
            run = insert_run(doc, delta)
            result["inserts"].append(run)
            log(f"inserts {r + 1}/{args.repeats}: {run}")
        conn.close()
    finally:
        sb.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_results(args.out, "usdt_counts", result, render_usdt)
    return 0


def render_usdt(result: dict) -> str:
    lines = ["# USDT counts on a stripped server against its own counters", "",
             f"{machine_line(result['machine'])} Started {result['started']}. Command: "
             f"`sudo .venv/bin/python {result['command']}`.", "",
             f"MariaDB {VERSION}, stripped with `objcopy --strip-all` (no debug file anywhere: no symbols but "
             f".dynsym, the USDT notes kept). sysbench from {THREADS} clients, {TABLES} tables of {TABLE_SIZE} rows, "
             "a fixed number of transactions run wholly inside mysqlprobe's window (`--exact`, no P_S "
             "connection); the server's counters read just before mysqlprobe starts and just after it ends (a "
             "SHOW STATUS inside the window would write rows to a temporary table that ha_write_row sees and "
             "Handler_write does not).", "",
             "## Statements by shape, `--stage sql.query_exec`, oltp_write_only", "",
             "Executions of the shapes that begin with each verb, summed, against the server's Com_ counter. "
             "Texts whole: no where a text is longer than the 127 bytes kept (sysbench's quoted values; with "
             "prepared statements the text has `?` in their place); a cut text still makes its shape.", "",
             "| prepared statements | repeat | INSERT counted / Com_insert | UPDATE / Com_update "
             "| DELETE / Com_delete | shapes | texts whole |",
             "|---|---|---|---|---|---|---|"]
    for mode, runs in result["statements"].items():
        for i, run in enumerate(runs, 1):
            cells = [f"{run['counted'][v]} / {run['server'][v]}" for v in VERBS]
            lines.append(f"| {mode} | {i} | {' | '.join(cells)} | {run['shapes']} | "
                         f"{'yes' if run['texts_whole'] else 'no'} |")
    lines += ["", "## Rows, `--insert-profile` (sql.insert_row from USDT standing in), oltp_insert", "",
              "| repeat | sql.insert_row calls | Handler_write | stages probed |", "|---|---|---|---|"]
    for i, run in enumerate(result["inserts"], 1):
        lines.append(f"| {i} | {run['counted']} | {run['server']} | {', '.join(run['probed'])} |")
    exact = all(run["counted"] == run["server"] for runs in result["statements"].values() for run in runs) and \
        all(run["counted"] == run["server"] for run in result["inserts"])
    lines += ["", f"- every count equal to the server's: {'yes' if exact else 'NO'}", ""]
    return "\n".join(lines)



# --------------------------------------------------------------------------- digests

DOC_DIGESTS = """The per-digest figures against the server's own: sysbench oltp_insert (8
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

    sudo .venv/bin/python bench/counts.py digests [--repeats 3] [--seconds 8]

writes its section of bench/RESULTS.md (and results.json)."""

CASES = ((SHAPES[0], True), (SHAPES[0], False), (SHAPES[1], True), (SHAPES[1], False))


def one_run_digests(load: Load, pid: int, exact: bool, workdir: Path) -> dict:
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


def main_digests() -> None:
    args = bench_parser(DOC_DIGESTS, repeats=3, seconds=8).parse_args()
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
                    runs.append(one_run_digests(load, pid, exact, workdir))
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
             run_line(result, f"bench/counts.py digests --repeats {result['repeats']} --seconds {result['seconds']}"), "",
             "MariaDB 10.2.11. Each cell: median [min, max] over the repeats of the difference against the "
             "server's figure. Columns: see the docstring of bench/counts.py digests.", "",
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


SUBCOMMANDS = {"io": (main_io, DOC_IO), "usdt": (main_usdt, DOC_USDT), "digests": (main_digests, DOC_DIGESTS)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
