"""Per-call cost under concurrent OLTP: bench/per_call.py's measure with
many clients, short autocommitted transactions, a redo fsync per commit,
instead of one INSERT ... SELECT.

    sudo .venv/bin/python bench/per_call_oltp.py [--repeats 3] [--seconds 10] [--clients 8] [--flush 1]

On MariaDB 10.2.11 with innodb_flush_log_at_trx_commit=`--flush` (1: a
redo fsync per commit; the sandbox's own is 2; set back at the end)
`--clients` connections insert single rows into a table RANGE
partitioned 100 ways, again and again. Per repeat: an unprobed block
sampled by `perf record -F 20000 -a -g`, a block profiled by
`mysqlprobe --insert-profile --probe page_cur_insert_rec_low`, another
unprobed block. Truth as in bench/per_call.py: the function's share of
the server's samples with it on the stack times the server's CPU per row
measured with nothing sampling it, over the calls (one lookup a row, by
Innodb_rows_inserted; page_cur_insert_rec_low's calls per row as its
probe counted them), the mean of the two unprobed blocks. Writes
bench/PER_CALL_OLTP.md and bench/per_call_oltp.json."""

from __future__ import annotations

import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

from overhead import bench_parser, log, machine, med, run_line, write_results
from per_call import CLEAN_S, INNODB_FUNCTION, LOOKUP, _tool, profiled_repeats, truth_text, within
from mysqlprobe.lab import sandbox, workload

ROWS = 20011  # a round of single-row inserts (prime)
FLUSH_TEXT = {0: "innodb_flush_log_at_trx_commit=0: redo written about once a second",
              1: "innodb_flush_log_at_trx_commit=1: a redo fsync per commit",
              2: "innodb_flush_log_at_trx_commit=2: redo written per commit, synced about once a second"}
KIND, PARTS = "range", 100


class InsertLoad:
    """`clients` connections inserting single rows without a pause, each
    cycling through its share of the source's ROWS rows until stopped (the
    table has no unique key). No DDL, reconnection or read of the source
    between rounds: the truth's CPU per row is the inserts' alone (rounds
    that recreated the table put seconds of DDL into some of its windows)."""

    def __init__(self, socket: str, clients: int):
        conn = workload.connect(socket)
        table = workload.table(KIND, PARTS)
        workload.create_target(conn, table)
        source = workload.source_rows(conn, ROWS)
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


def main() -> None:
    parser = bench_parser(__doc__, repeats=3, seconds=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--flush", type=int, default=1, choices=(0, 1, 2), help="innodb_flush_log_at_trx_commit")
    parser.add_argument("--extra", default="", help="more mysqlprobe options for the profiled blocks, e.g. "
                        "'--ps-waits all' (P_S costing more: the quiet phases take more of the off-time)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-percall-oltp-"))
    started = datetime.now(timezone.utc)
    sb = sandbox.Sandbox("10.2.11")
    with sb.serving(log) as pid:
        conn = workload.connect(sb.socket)
        workload.prepare_source(conn, ROWS)
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")
            (flush_before,) = cur.fetchone()
            cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (args.flush,))
        load = InsertLoad(sb.socket, args.clients)
        try:
            runs = profiled_repeats(pid, conn, load, f"{KIND} {PARTS}, {args.clients} clients", args.repeats,
                                    args.seconds, workdir, tuple(args.extra.split()))
        finally:
            load.finish()
            with conn.cursor() as cur:
                cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (flush_before,))
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"),
              "command": f"bench/per_call_oltp.py --repeats {args.repeats} --seconds {args.seconds} "
                         f"--clients {args.clients} --flush {args.flush}"
                         + (f" --extra '{args.extra}'" if args.extra else ""), "clients": args.clients,
              "flush_log_at_trx_commit": args.flush, "truth": "cpu share",
              "truth_clean_s": CLEAN_S, "runs": runs}
    write_results(args.out, "per_call_oltp", result, markdown)


def markdown(result: dict) -> str:
    lines = ["# Per-call cost under concurrent OLTP", "", run_line(result), "",
             f"MariaDB 10.2.11, {result['clients']} clients inserting single rows (autocommit, "
             f"{FLUSH_TEXT[result.get('flush_log_at_trx_commit', 2)]}) into a table RANGE partitioned {PARTS} "
             "ways. Per repeat a block profiled by the default "
             f"`--insert-profile --probe {INNODB_FUNCTION}{extra_text(result)}` between unprobed blocks "
             "sampled by `perf record -F 20000 -a -g`. Truth: " + truth_text({"truth_stacks": True, **result}) + " over its calls in "
             "the unprobed blocks. ns per call.", "",
             "| repeat | function | truth | mysqlprobe | within max(10 ns, 35%) |", "|---|---|---|---|---|"]
    every = []
    for i, r in enumerate(result["runs"], 1):
        for key, name in (("lookup", f"{LOOKUP} ({KIND} {PARTS})"), ("innodb", INNODB_FUNCTION)):
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
