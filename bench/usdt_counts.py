"""What mysqlprobe counts through the server's USDT probes, on a stripped
MariaDB 10.11.5 (no debug file anywhere), under concurrent sysbench,
against the server's own counters over the same statements.

    sudo .venv/bin/python bench/usdt_counts.py [--repeats 3] [--events 20000]

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

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit import MYSQLPROBE, Tool, bench_parser, derived, log, machine, machine_line, write_results
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.perfschema.perfschema import global_status

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


def one_run(sb: sandbox.Sandbox, pid: int, conn, test: str, events: int, profile: tuple[str, ...],
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


def main() -> int:
    args = bench_parser(__doc__, repeats=3, events=20000).parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-usdt-"))
    started = datetime.now(timezone.utc)
    inst = sandbox.install(VERSION, log)
    stripped = workdir / "mariadbd"
    subprocess.run(["objcopy", "--strip-all", str(inst.mysqld), str(stripped)], check=True)
    sb = sandbox.Sandbox(VERSION, instance="usdt-counts")
    pid = sb.start(log, mysqld=stripped)
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"),
              "command": f"bench/usdt_counts.py --repeats {args.repeats} --events {args.events}",
              "statements": {"disable": [], "auto": []}, "inserts": []}
    try:
        conn = workload.connect(sb.socket)
        prepare(sb, conn, "oltp_write_only")
        for r in range(args.repeats):
            for mode in ("disable", "auto"):
                doc, delta = one_run(sb, pid, conn, "oltp_write_only", args.events, ("--stage", "sql.query_exec"),
                                     mode, workdir)
                run = statement_run(doc, delta)
                result["statements"][mode].append(run)
                log(f"statements, prepared {mode}, {r + 1}/{args.repeats}: {run}")
        prepare(sb, conn, "oltp_insert")
        for r in range(args.repeats):
            doc, delta = one_run(sb, pid, conn, "oltp_insert", args.events, ("--insert-profile",), "disable", workdir)
            run = insert_run(doc, delta)
            result["inserts"].append(run)
            log(f"inserts {r + 1}/{args.repeats}: {run}")
        conn.close()
    finally:
        sb.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_results(args.out, "usdt_counts", result, render)
    return 0


def render(result: dict) -> str:
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


if __name__ == "__main__":
    sys.exit(main())
