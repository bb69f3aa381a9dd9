"""The main job on a sandbox: start MariaDB, run the seed load, profile it in the default mode."""

from __future__ import annotations

import sys

from mysqlprobe import catalog
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.reports import capture_profile
from mysqlprobe.analysis.reporters import write_text
from mysqlprobe.collectors.target.symbols import load_target_binary, resolve_target
from mysqlprobe.lab.commands.profiled_load import profile_load
from mysqlprobe.output import check_output_dir, save_capture
from mysqlprobe.recorder.plan import Plan, plan_probes

EXAMPLES = """examples:
  mysqlprobe lab demo                                   # MariaDB 10.2.11, 4000037 rows (about 10 s), RANGE 5
  mysqlprobe lab demo --exact                           # every call counted (the load runs 4-5x slower)
  mysqlprobe lab demo --server 10.1.23 --partitions 100 -o out/demo-10.1
"""


def add_arguments(p) -> None:
    p.add_argument("--server", choices=sandbox.VERSIONS, default="10.2.11")
    p.add_argument("--rows", type=int, default=4000037,
                   help="rows to insert (default: 4000037, a prime: about 10 s, long enough for steady figures)")
    p.add_argument("--exact", action="store_true", help="count every call (default: duty cycles within 5%%)")
    p.add_argument("--partitioning", choices=workload.KINDS, default="range")
    p.add_argument("--partitions", type=int, default=5)
    p.add_argument("-o", "--output", default="out/demo", metavar="DIR", help="capture directory")
    p.add_argument("--keep-running", action="store_true", help="leave the sandbox server running")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def run(args, parser) -> int:
    sb = sandbox.Sandbox(args.server)
    with sb.serving(_log, keep=args.keep_running) as pid:
        conn = workload.connect(sb.socket)
        table = workload.table(args.partitioning, args.partitions)
        _log(f"preparing {workload.SOURCE} with {args.rows} rows and {table.name}")
        workload.prepare_source(conn, args.rows)
        workload.create_target(conn, table)
        target = resolve_target(pid)
        binary = load_target_binary(target)
        plan: Plan = plan_probes(binary, list(catalog.INSERT_PROFILE), [])
        _log(f"INSERT INTO {table.name} SELECT * FROM {workload.SOURCE}, profiled")
        check_output_dir(args.output)
        cap, rows, seconds = profile_load(target, binary, plan, lambda: workload.insert_select(conn, table),
                                          socket=sb.socket, exact=args.exact, verbose=args.verbose)
        cap.doc["workload"] = {"table": table.name, "ddl": table.ddl(), "rows": rows, "seconds": round(seconds, 3),
                           "statement": f"INSERT INTO {table.name} SELECT * FROM {workload.SOURCE}",
                           "partition_rows": workload.partition_counts(conn, table) if table.partitions else []}
        profile = capture_profile(cap)
        failure = save_capture(cap, args.output, profile)
        write_text(profile, sys.stdout)
        print(f"\nload: {rows} rows into {table.name} in {seconds:.2f}s; rows per partition "
              f"(SELECT COUNT(*)): {cap.doc['workload']['partition_rows']}")
        print(f"open {args.output}/report.html in a browser (no network needed); the flame graph: "
              f"{args.output}/flamegraph.svg")
    if failure:
        raise failure
    return 0
