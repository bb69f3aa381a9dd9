"""Run a load matrix on a server and keep one capture per run: partitioning, row formats, concurrent inserts."""

from __future__ import annotations

import argparse
import html
from typing import Any
import json
import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import median

from mysqlprobe import catalog
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.analysis.compare import probe_free_seconds
from mysqlprobe.capture import now_utc
from mysqlprobe.collectors.target.symbols import load_target_binary, resolve_target
from mysqlprobe.lab.commands.profiled_load import profile_load
from mysqlprobe.files import make_dir, write_new
from mysqlprobe.output import check_output_dir, save_capture
from mysqlprobe.recorder.plan import Plan, plan_probes
from mysqlprobe.reports import capture_profile
from mysqlprobe.errors import UsageError, WorkloadError
from dataclasses import dataclass, field

PARTITION_COUNTS = (5, 25, 50, 100)
ROW_FORMATS = ("compact", "dynamic", "compressed-8", "compressed-4", "compressed-2")
DEFAULT_CELLS = ([f"{k}-{n}" for k in ("range", "list", "hash") for n in PARTITION_COUNTS] + ["none"]
                 + list(ROW_FORMATS) + ["concurrent-4"] + [f"index-{f}" for f in ROW_FORMATS])

EXAMPLES = """examples:
  mysqlprobe lab bench --server 10.2.11 --cells range-100              # one cell, 5 repeats
  mysqlprobe lab bench --server 10.1.23,10.2.11 --cells range-100 -o out/bench
                                                    # both servers, alternated run by run (A, B, A, B...)
  mysqlprobe compare out/bench/10.1.23/range-100 out/bench/10.2.11/range-100
  mysqlprobe lab bench --server 10.11.5                                # the whole matrix
  mysqlprobe lab bench --pid $(pidof mariadbd) --socket /run/mysqld/mysqld.sock --cells none,range-5
  mysqlprobe lab bench --server 10.1.23,10.2.11 --cells compressed-8,index-compressed-8 --rows 300007
                                                    # the row-format study: the load, then the index build

cells: KIND-N (KIND range, list or hash; N partitions), none (not partitioned),
compact, dynamic, compressed-KB (row formats, not partitioned; KB 1/2/4/8/16),
concurrent-C (C clients inserting single rows into a 5-partition RANGE table),
index-FORMAT (CREATE INDEX k on a table of --rows rows, id, k, c char(120),
pad char(60), PK on id, in that row format: the build is the load, profiled
with --index-profile; the table is filled once per server, unprobed).

Each repeat of a cell runs the load three times on each server: unprobed (its
time per row: compare's wall delta), sampled only, no probe attached (CPU
samples at 999 Hz and off-CPU switches: the wall-time account compare explains
the delta by, DIR/SERVER/CELL/wall-rN), and profiled (the probes' counts and
latencies per call, DIR/SERVER/CELL/rN). With two servers the runs alternate,
each kind's two runs adjacent in time, A first then B first repeat by repeat,
so that the host's drift falls on both alike.
"""


def _versions(text: str) -> list[str]:
    versions = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in versions if v not in sandbox.VERSIONS]
    if unknown or not 1 <= len(versions) <= 2 or len(set(versions)) != len(versions):
        raise argparse.ArgumentTypeError(f"one or two of {', '.join(sandbox.VERSIONS)}, comma-separated")
    return versions


def _pids(text: str) -> list[int]:
    try:
        pids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("one or two process ids, comma-separated") from None
    if not 1 <= len(pids) <= 2:
        raise argparse.ArgumentTypeError("one or two process ids, comma-separated")
    return pids


def add_arguments(p) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server", type=_versions, metavar="VERSION[,VERSION]",
                       help=f"sandbox MariaDB from the Maven jars ({', '.join(sandbox.VERSIONS)}); two: both run, "
                            "alternated run by run")
    where.add_argument("--pid", type=_pids, metavar="PID[,PID]", help="running servers (with --socket)")
    p.add_argument("--socket", help="the running servers' unix sockets, in --pid's order")
    p.add_argument("--frequency", type=int, default=WALL_FREQUENCY, metavar="HZ",
                   help=f"CPU samples per second of the sampled runs (default {WALL_FREQUENCY})")
    p.add_argument("--cells", help=f"comma-separated cells (default: all {len(DEFAULT_CELLS)})")
    p.add_argument("--rows", type=int, default=1000003, help="rows per INSERT ... SELECT (default 1000003, a prime)")
    p.add_argument("--single-rows", type=int, default=20011,
                   help="rows the concurrent cells insert one by one (default 20011, a prime)")
    p.add_argument("--repeats", type=int, default=5,
                   help="runs per cell, each the load unprobed then profiled (default 5: a 95%% interval on the "
                        "unprobed time per row of about +-5%% where runs vary by 5-10%%; the cost: twice the "
                        "load's time per repeat, plus the profiled runs' slowdown)")
    p.add_argument("--sampled", action="store_true",
                   help="duty-cycled probes as in a production run (default: every call counted, which "
                        "gives compare exact stage times; the load then runs slower, and its time less the "
                        "probes' calibrated cost is reported beside it)")
    p.add_argument("--confirm", metavar="COMPARE_JSON",
                   help="also probe the functions on the drill-down paths of a compare (its compare.json), "
                        "for their exact calls per row and latency per call: run it on both sides, then compare")
    p.add_argument("-o", "--output", default="out/bench", metavar="DIR",
                   help="DIR/VERSION/CELL/rN/ (profiled) and wall-rN/ (sampled only) captures, "
                        "DIR/VERSION/results.{md,json}, chart.svg")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


@dataclass(frozen=True)
class Cell:
    name: str
    table: workload.Table
    clients: int = 0  # 0: INSERT ... SELECT; else single-row inserts by this many clients
    index: workload.IndexTable | None = None   # the load is CREATE INDEX on this table (table unused)

    def describe(self) -> str:
        if self.index:
            return f"CREATE INDEX {workload.INDEX_NAME} ON {self.index.name} (k)"
        how = f"{self.clients} clients, single-row INSERTs" if self.clients else "INSERT ... SELECT"
        return f"{how} into {self.table.name}"

    @property
    def row_format(self) -> str:
        return self.index.row_format if self.index else self.table.row_format

    @property
    def ddl(self) -> str:
        return self.index.ddl() if self.index else self.table.ddl()


def parse_cell(name: str) -> Cell:
    try:
        return _cell(name)
    except WorkloadError as e:
        raise UsageError(f"cell {name!r}: {e}") from None


def _cell(name: str) -> Cell:
    m = re.fullmatch(r"(range|list|hash)-(\d+)", name)
    if m:
        return Cell(name, workload.table(m.group(1), int(m.group(2))))
    if name == "none":
        return Cell(name, workload.table("none", 0))
    if name in ("compact", "dynamic"):
        return Cell(name, workload.table("none", 0, name))
    m = re.fullmatch(r"compressed-(\d+)", name)
    if m:
        return Cell(name, workload.table("none", 0, "compressed", int(m.group(1))))
    m = re.fullmatch(r"concurrent-(\d+)", name)
    if m and int(m.group(1)) > 0:
        return Cell(name, workload.table("range", 5), clients=int(m.group(1)))
    if name.startswith("index-"):
        fmt = _cell(name.removeprefix("index-"))
        if fmt.table.row_format:
            return Cell(name, fmt.table,
                        index=workload.index_table(fmt.table.row_format, fmt.table.key_block_size))
    raise WorkloadError("unknown cell (see mysqlprobe lab bench --help)")


def _progress(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


WALL_FREQUENCY = 999   # a 1M-row load's sampled run: a few thousand samples of its thread
SETTLE_S = 0.5         # after a run's table is dropped (its dirty pages with it), before the next run
RUNS_PER_REPEAT = 3    # a side's runs of a repeat, in this order: unprobed, sampled only, profiled (_bench)


@dataclass
class Side:
    """One server of the bench: where its captures go, and what probes it."""

    name: str            # its directory under -o: the version, or a / b for two running servers
    pid: int
    socket: str
    target: Any = None
    binary: Any = None
    plan: Plan = field(default_factory=Plan)
    index_plan: Plan = field(default_factory=Plan)   # the index cells' probes (--index-profile's)
    conn: Any = None
    results: list[dict] = field(default_factory=list)
    filled: set[str] = field(default_factory=set)     # the index cells' tables, filled once


def run(args, parser) -> int:
    if args.repeats < 1 or args.rows < 1 or args.single_rows < 1 or args.frequency < 1:
        parser.error("--repeats, --rows, --single-rows and --frequency must be positive")
    if args.single_rows > args.rows:
        parser.error("--single-rows takes rows of the source table: at most --rows")
    if args.pid and not args.socket:
        parser.error("--pid needs --socket")
    if not args.server and not args.pid:
        parser.error("give --server VERSION[,VERSION] (sandboxes) or --pid PID[,PID] --socket SOCK[,SOCK]")
    sockets = args.socket.split(",") if args.socket else []
    if args.pid and len(sockets) != len(args.pid):
        parser.error("--socket takes one socket per --pid, in the same order")
    cells = [parse_cell(c.strip()) for c in (args.cells.split(",") if args.cells else DEFAULT_CELLS) if c.strip()]
    if not cells:
        raise UsageError("no cell to run")
    with ExitStack() as stack:
        if args.server:
            sides = []
            for version in args.server:
                sb = sandbox.Sandbox(version)
                pid = stack.enter_context(sb.serving(lambda m: _progress(args.quiet, m)))
                sides.append(Side(version, pid, sb.socket))
        else:
            names = ["a", "b"] if len(args.pid) == 2 else [""]
            sides = [Side(name, pid, sock) for name, pid, sock in zip(names, args.pid, sockets)]
        _bench(args, cells, sides)
    return 0


def run_unprobed(conn, socket: str, cell: Cell, rows: int) -> tuple[int, float]:
    """The cell's load with nothing attached: (rows, seconds); an index
    build's rows are the table's, which it scans."""
    if cell.index:
        return rows, workload.build_index(conn, cell.index)
    if cell.clients:
        return workload.single_row_inserts(socket, cell.table, rows, cell.clients)
    return workload.insert_select(conn, cell.table)


def _open(side: Side, args) -> None:
    side.conn = workload.connect(side.socket)
    side.target = resolve_target(side.pid)
    side.binary = binary = load_target_binary(side.target)
    confirm, missing = confirm_functions(args.confirm, binary) if args.confirm else ([], [])
    if missing:
        _progress(args.quiet, f"not in {binary.display_path} (inlined, or named otherwise): {', '.join(missing)}")
    side.plan = plan_probes(binary, list(catalog.INSERT_PROFILE), confirm)
    side.index_plan = plan_probes(binary, list(catalog.INDEX_PROFILE), confirm)
    side.name = side.name or binary.server.version or f"pid{side.pid}"


def _fresh(side: Side, cell: Cell, rows: int) -> None:
    """The cell's table dropped and made again (its dirty pages go with it), and a pause.
    An index cell's table is filled once; each run drops the index the last one built."""
    if cell.index:
        if cell.index.name not in side.filled:
            workload.fill_index_table(side.conn, cell.index, rows)
            side.filled.add(cell.index.name)
        workload.drop_index(side.conn, cell.index)
    else:
        workload.create_target(side.conn, cell.table)
    time.sleep(SETTLE_S)


def _unprobed(args, side: Side, cell: Cell, r: int, pair: bool) -> dict:
    """The cell's load with nothing attached on one side, on a fresh table:
    the record its captures carry (the unprobed time per row is compare's
    wall delta)."""
    rows = args.single_rows if cell.clients else args.rows
    _fresh(side, cell, rows)
    started = now_utc()
    unprobed = run_unprobed(side.conn, side.socket, cell, rows)
    table = cell.index.name if cell.index else cell.table.name
    record = {"cell": cell.name, "table": table, "ddl": cell.ddl, "clients": cell.clients or 1,
              "statement": cell.describe(), "repeat": r + 1, "unprobed_started": started,
              "unprobed": {"rows": unprobed[0], "seconds": round(unprobed[1], 4)}}
    if pair:
        record["pair"] = {"index": r + 1, "side": side.name, "interleaved": True}
    return record


def _captured(args, side: Side, cell: Cell, r: int, kind: str, record: dict, base: Path) -> tuple[int, float, Any]:
    """The load again on a fresh table under mysqlprobe, saved: sampled
    only, no probe attached ('wall': the wall-time account compare explains
    the delta by), or with the probes ('profiled')."""
    rows = args.single_rows if cell.clients else args.rows
    load = lambda: run_unprobed(side.conn, side.socket, cell, rows)  # noqa: E731
    plan = Plan() if kind == "wall" else side.index_plan if cell.index else side.plan
    directory = base / side.name / cell.name / (f"wall-r{r + 1}" if kind == "wall" else f"r{r + 1}")
    _fresh(side, cell, rows)
    check_output_dir(str(directory))
    # a build is profiled with every call counted (--index-profile): the duty cycles pace on rows changed
    cap, got, seconds = profile_load(side.target, side.binary, plan, load, socket=side.socket,
                                     exact=kind == "wall" or not args.sampled or bool(cell.index),
                                     verbose=args.verbose, quiet=True,
                                     frequency=args.frequency if kind == "wall" else None,
                                     build_progress=bool(cell.index))
    cap.doc["workload"] = {**record, "run": kind, "rows": got, "seconds": round(seconds, 3)}
    profile = capture_profile(cap)
    failure = save_capture(cap, str(directory), profile)
    if failure:
        raise failure
    return got, seconds, profile


def _bench(args, cells: list[Cell], sides: list[Side]) -> None:
    restore_format: dict[str, str | None] = {}
    try:
        for side in sides:
            _open(side, args)
            if any(c.row_format for c in cells):
                restore_format[side.name] = workload.barracuda(side.conn)
            workload.prepare_source(side.conn, args.rows)
        base = Path(args.output)
        pair = len(sides) == 2
        total = len(cells) * args.repeats * len(sides)
        done = 0
        for r in range(args.repeats):  # repeats outermost: a drift of the machine spreads over every cell
            # the two unprobed runs of a pair adjacent in time, before either side's captured runs
            # (whose dirty pages and slower pace would else fall on one side's unprobed run and not
            # the other's); A first, then B first (A B B A): neither side always follows the other
            order = sides if r % 2 == 0 else sides[::-1]
            for cell in cells:
                records = {side.name: _unprobed(args, side, cell, r, pair) for side in order}
                for side in order:
                    _captured(args, side, cell, r, "wall", records[side.name], base)
                profiled = {side.name: _captured(args, side, cell, r, "profiled", records[side.name], base)
                            for side in order}
                for side in order:
                    got, seconds, profile = profiled[side.name]
                    side.results.append({"cell": cell.name, "repeat": r + 1, "rows": got, "seconds": seconds,
                                         "unprobed_seconds": probe_free_seconds(profile, seconds)})
                    done += 1
                    _progress(args.quiet, f"[{done}/{total}] {side.name} {cell.name} run {r + 1}: "
                                          f"{got} rows in {seconds:.2f}s")
        for side in sides:
            summary = summarise(side.results, cells, side.binary.server.describe(), args)
            if args.confirm:
                summary["confirm"] = {"from": args.confirm}
            directory = base / side.name
            make_dir(str(directory))
            write_new(str(directory), "results.json", json.dumps(summary, indent=1) + "\n")
            write_new(str(directory), "results.md", render_markdown(summary))
            write_new(str(directory), "chart.svg", render_chart(summary))
            sys.stdout.write(render_markdown(summary))
            _progress(args.quiet, f"wrote {directory}/results.md, results.json, chart.svg and the captures")
        if pair:
            a, b = (base / s.name for s in sides)
            _progress(args.quiet, "compare them: " + " ".join(f"mysqlprobe compare {a / c.name} {b / c.name}"
                                                              for c in cells[:1]))
    finally:
        for side in sides:
            if side.conn is None:
                continue
            workload.restore_file_format(side.conn, restore_format.get(side.name))
            side.conn.close()


def confirm_functions(compare_json: str, binary) -> tuple[list[str], list[str]]:
    """The functions on a compare's drill-down paths, below their stages, in
    order: those this binary has, and those it has not."""
    try:
        drill = json.loads(Path(compare_json).read_text()).get("drilldown")
    except (OSError, ValueError) as e:
        raise UsageError(f"--confirm {compare_json}: cannot read it as a compare.json ({e})") from None
    if not drill:
        raise UsageError(f"--confirm {compare_json}: no drill-down in it (compare found no path to follow)")
    names = list(dict.fromkeys(f for entry in drill for f in entry["path"][1:]))
    present = [n for n in names if binary.symbols.lookup(n)]
    return present, [n for n in names if n not in present]


def summarise(results: list[dict], cells: list[Cell], server: str, args) -> dict:
    out = []
    for cell in cells:
        secs = [r["seconds"] for r in results if r["cell"] == cell.name]
        unprobed = [r["unprobed_seconds"] for r in results if r["cell"] == cell.name]
        rows = [r["rows"] for r in results if r["cell"] == cell.name][0]
        out.append({"cell": cell.name, "load": cell.describe(), "rows": rows, "runs": secs,
                    "median_s": median(secs), "min_s": min(secs), "max_s": max(secs),
                    "unprobed_median_s": median(unprobed), "rows_per_s": rows / median(unprobed)})
    return {"server": server, "date": now_utc(), "command": " ".join(sys.argv),
            "mode": "sampled (default overhead budget)" if args.sampled else "exact (every call)",
            "repeats": args.repeats,
            "cells": out}


def render_markdown(summary: dict) -> str:
    lines = [f"# mysqlprobe lab bench: {summary['server']}", "",
             f"- date: {summary['date']}", f"- command: `{summary['command']}`",
             f"- probes: {summary['mode']}; {summary['repeats']} runs per cell, repeats interleaved; "
             "seconds are the load's own with mysqlprobe attached; 'less probes' takes off the "
             "probes' calibrated cost", "",
             "| cell | load | rows | seconds (median [min, max]) | less probes | rows/s |",
             "|---|---|---|---|---|---|"]
    for c in summary["cells"]:
        lines.append(f"| {c['cell']} | {c['load']} | {c['rows']} | {c['median_s']:.2f} "
                     f"[{c['min_s']:.2f}, {c['max_s']:.2f}] | {c['unprobed_median_s']:.2f} | "
                     f"{c['rows_per_s']:,.0f} |")
    kinds = [k for k in ("range", "list", "hash") if any(c["cell"].startswith(k + "-") for c in summary["cells"])]
    if kinds:
        by = {c["cell"]: c for c in summary["cells"]}
        counts = sorted({int(c["cell"].split("-")[1]) for c in summary["cells"]
                         if c["cell"].split("-")[0] in kinds})
        lines += ["", "Median seconds (less probes) by partitioning and partition count:", "",
                  "| partitioning | " + " | ".join(str(n) for n in counts) + " |",
                  "|---|" + "---|" * len(counts)]
        for k in kinds:
            lines.append(f"| {k} | " + " | ".join(f"{by[f'{k}-{n}']['unprobed_median_s']:.2f}" if f"{k}-{n}" in by else "-"
                                                 for n in counts) + " |")
        if "none" in by:
            lines.append(f"\nNot partitioned: {by['none']['unprobed_median_s']:.2f} s.")
    return "\n".join(lines) + "\n"


def render_chart(summary: dict) -> str:
    """Median seconds per cell as bars, min-max as whiskers; an SVG."""
    cells = summary["cells"]
    top = max(c["max_s"] for c in cells) or 1.0
    row_h, left, width = 22, 150, 560
    height = 40 + row_h * len(cells)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="8" y="18" font-size="14">{html.escape(summary["server"])}: seconds per load '
           f'(median, min-max)</text>']
    for i, c in enumerate(cells):
        y = 30 + i * row_h
        w = c["median_s"] / top * width
        x0, x1 = left + c["min_s"] / top * width, left + c["max_s"] / top * width
        out += [f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{html.escape(c["cell"])}</text>',
                f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" fill="#4a78b0">'
                f'<title>{c["median_s"]:.2f}s</title></rect>',
                f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y + 11}" y2="{y + 11}" stroke="#222"/>',
                f'<text x="{x1 + 6:.1f}" y="{y + 14}">{c["median_s"]:.2f}s</text>']
    out.append("</svg>")
    return "\n".join(out) + "\n"
