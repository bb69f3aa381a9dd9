"""What each part of the default profile costs an OLTP load on its own:
a load of bench/oltp.py (default: sysbench oltp_insert, 8 clients, MariaDB
10.2.11) running without a break,
each variant on for a block between unprobed blocks, in an order shuffled
each round, set
against the unprobed blocks on either side (mysqlprobe/lab/benchkit/loads.py):

  default     mysqlprobe --insert-profile (all collectors, duty cycles)
  ps_setup    the window's Performance Schema setup alone (consumers and
              instruments on, as mysqlprobe sets them; no mysqlprobe running)
  ps_toggle   the same setup, its quiet phases' part switched off and on
              again every second (as quiet phases switch it)
  perf        perf record -a at 99 Hz, stacks unwound as mysqlprobe chooses
              for this binary, alone
  perf_idle   the same perf record with its events off all along (-D -1),
              as mysqlprobe's is in its quiet phases
  cold_all    mysqlprobe with every collector but probing one function the
              load never calls: the collectors and the duty cycles' switching
              without probe hits
  no_perf, no_off_cpu, probes_only
              the default profile without CPU sampling, without off-CPU
              stacks, without either
  perf_19hz, no_bursts
              the default profile sampling CPU at 19 Hz, or without the
              CPU bursts' sampler (not even started)
  ps_stages   the stage instruments alone (timed, events_stages_current on)
  ps_stage_history  the same with the stage history consumers
  ps_statement_history  the statement history consumers alone
  status_reads  the server's row counter read 12 times a second, as the
              duty cycles read it (no mysqlprobe running)
  thread_list the watch of the server's threads alone
  no_ps, ps_whole
              the default profile without a server connection (no P_S, the
              duty cycles paced by time), or with the window's P_S setup
              left on in the quiet phases (--ps-whole-window)

    sudo .venv/bin/python bench/oltp_parts.py [--rounds 8] [--seconds 8] [--shape 1] [--variants ...]

writes its section of bench/RESULTS.md (and results.json). The reported column
is mysqlprobe's overhead.measured_slowdown where it ran."""

from __future__ import annotations

import random
import signal
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Blocks, unprobed_block
from mysqlprobe.lab.benchkit.loads import Load, SHAPES, quiet_slowdown
from mysqlprobe.lab.benchkit import Mysqlprobe, bench_parser, log, machine, med, run_line, write_results
from mysqlprobe.lab import workload
from mysqlprobe.collectors.cpu.perf_record import choose_unwinding
from mysqlprobe.collectors.perfschema.perfschema import PerfSchema, rows_changed
from mysqlprobe.collectors.perfschema.ps_threads import PROCESSLIST_TID, ThreadWatch
from mysqlprobe.collectors.target.symbols import load_target_binary, resolve_target
from mysqlprobe.lab import sandbox

COLD_FUNCTION = "fts_savepoint_free"  # full-text search: never called by oltp_insert


class PsSetup:
    def __init__(self, socket: str):
        self.socket = socket

    def start(self) -> None:
        self.ps = PerfSchema(workload.connect(self.socket))
        self.ps.enable()

    def stop(self) -> None:
        self.ps.restore()
        self.ps.conn.close()


class PsToggle(PsSetup):
    """The window's setup, switched off and on again every `period` seconds
    as quiet phases switch it (PerfSchema.quiet): what the switching costs."""

    def __init__(self, socket: str, period: float = 1.0):
        super().__init__(socket)
        self.period = period

    def start(self) -> None:
        super().start()
        self.stop_flag = threading.Event()

        def loop():
            quiet = True
            while not self.stop_flag.wait(self.period):
                self.ps.quiet(quiet)
                quiet = not quiet
            self.ps.quiet(False)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=30)
        super().stop()


class PsPart:
    """Part of the window's Performance Schema setup: instruments matching
    `instruments` enabled and timed, and `consumers` on; put back at stop."""

    def __init__(self, socket: str, instruments: str | None, consumers: tuple[str, ...]):
        self.socket, self.instruments, self.consumers = socket, instruments, consumers

    def start(self) -> None:
        self.conn = workload.connect(self.socket)
        with self.conn.cursor() as cur:
            cur.execute("SELECT NAME, ENABLED FROM performance_schema.setup_consumers")
            self.saved_consumers = dict(cur.fetchall())
            cur.execute("SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments WHERE NAME LIKE %s",
                        (self.instruments or "-",))
            self.saved_instruments = cur.fetchall()
            if self.instruments:
                cur.execute("UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' "
                            "WHERE NAME LIKE %s", (self.instruments,))
            for name in self.consumers:
                cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = %s", (name,))

    def stop(self) -> None:
        with self.conn.cursor() as cur:
            for name, enabled, timed in self.saved_instruments:
                cur.execute("UPDATE performance_schema.setup_instruments SET ENABLED = %s, TIMED = %s "
                            "WHERE NAME = %s", (enabled, timed, name))
            for name in self.consumers:
                cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = %s WHERE NAME = %s",
                            (self.saved_consumers[name], name))
        self.conn.close()


class StatusReads:
    """The server's row counter read as the duty cycles read it, `per_s` times a second."""

    def __init__(self, socket: str, per_s: float = 12.0):
        self.socket, self.per_s = socket, per_s

    def start(self) -> None:
        self.stop_flag = threading.Event()
        conn = workload.connect(self.socket)

        def loop():
            while not self.stop_flag.wait(1 / self.per_s):
                rows_changed(conn)
            conn.close()

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=30)


class ThreadList:
    """mysqlprobe's watch of the server's threads alone (the list once a second)."""

    def __init__(self, socket: str):
        self.socket = socket

    def start(self) -> None:
        self.watch = ThreadWatch(workload.connect(self.socket), PROCESSLIST_TID, quiet=False).start()

    def stop(self) -> None:
        self.watch.stop()


class Perf:
    def __init__(self, pid: int, workdir: Path, idle: bool = False):
        unwinding = choose_unwinding(load_target_binary(resolve_target(pid)).image)
        self.command = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "99", "--call-graph",
                        unwinding.call_graph(), "-a", "-o", str(workdir / "perf.data"), *(["-D", "-1"] if idle else [])]

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        time.sleep(0.2)  # its events open

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)


def main() -> None:
    ap = bench_parser(__doc__, rounds=8, seconds=8)
    ap.add_argument("--shape", type=int, default=1, help="index into bench/oltp.py's shapes (default: 1)")
    ap.add_argument("--variants", default="default,ps_setup,perf,cold_all",
                    help="comma-separated (default: default,ps_setup,perf,cold_all)")
    ap.add_argument("--seed", type=int, default=1, help="of the variants' order in each round (default: 1)")
    ap.add_argument("--name", default="oltp_parts", help="results file names (default: oltp_parts)")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-parts-"))
    sb = sandbox.Sandbox("10.2.11")
    started = datetime.now(timezone.utc)
    reported: dict[str, list] = {}
    with sb.serving(log) as pid:
        known = {"default": lambda: Mysqlprobe(pid, workdir, "--insert-profile"),
                 "ps_setup": lambda: PsSetup(sb.socket), "ps_toggle": lambda: PsToggle(sb.socket),
                 "perf": lambda: Perf(pid, workdir),
                 "perf_idle": lambda: Perf(pid, workdir, idle=True),
                 "cold_all": lambda: Mysqlprobe(pid, workdir, "--probe", COLD_FUNCTION),
                 "no_perf": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--no-cpu"),
                 "no_off_cpu": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--no-off-cpu"),
                 "perf_19hz": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "-F", "19"),
                 "no_bursts": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--burst-freq", "0"),
                 "ps_stages": lambda: PsPart(sb.socket, "stage/%", ("events_stages_current",)),
                 "ps_stage_history": lambda: PsPart(sb.socket, "stage/%", (
                     "events_stages_current", "events_stages_history", "events_stages_history_long")),
                 "ps_statement_history": lambda: PsPart(sb.socket, None, (
                     "events_statements_history", "events_statements_history_long")),
                 "status_reads": lambda: StatusReads(sb.socket), "thread_list": lambda: ThreadList(sb.socket),
                 "probes_only": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--no-cpu", "--no-off-cpu"),
                 "no_ps": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--no-ps"),
                 "ps_whole": lambda: Mysqlprobe(pid, workdir, "--insert-profile", "--ps-whole-window")}
        variants = {name: known[name]() for name in args.variants.split(",")}
        load, blocks = Load(sb, shape), Blocks()
        try:
            load.prepare()
            rates = load.start()
            unprobed_block(blocks, args.seconds, settle_s=3.0)
            order = random.Random(args.seed)
            for r in range(args.rounds):
                # shuffled each round: a variant always in the same place would
                # meet the same point of slower drifts in the load
                for name, part in order.sample(list(variants.items()), len(variants)):
                    part.start()
                    t0 = time.monotonic()
                    time.sleep(args.seconds)
                    blocks.add("on", t0, time.monotonic(), name)
                    reported.setdefault(name, []).append(part.stop() or {})
                    unprobed_block(blocks, args.seconds)
                    load.check()
                    f = blocks.felt(rates)[-1]
                    log(f"round {r + 1} {name}: {f['rate']}/s against {f['before']} and {f['after']}: "
                        f"felt {f['felt']}, reported {reported[name][-1].get('reported')}")
        finally:
            load.close()
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    counters = {name: iter(values) for name, values in reported.items()}
    for f, rows in zip(blocks.felt(rates), blocks.felt(load.rows.log)):
        own = next(counters[f["label"]])
        runs[f["label"]].append({**f, "reported": own.get("reported"),
                                 "quiet_slowdown": quiet_slowdown(own, rows)})
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "shape": shape.name,
              "command": "bench/oltp_parts.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
              "rounds": args.rounds, "seconds": args.seconds, "runs": runs, "noise": blocks.noise(rates)}
    write_results(args.out, args.name, result, markdown)


def _range(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"


def markdown(result: dict) -> str:
    lines = ["# What each part of the default profile costs an OLTP load", "",
             run_line(result), "", f"Load: {result['shape']} on MariaDB 10.2.11, one run without a break. Each variant "
             f"is on for a {result['seconds']} s block between unprobed blocks (in an order "
             f"{result.get('order', 'shuffled each round')}); felt = the unprobed "
             "blocks' mean rate (sysbench's per-second transactions) over the block's. Medians with min-max.", "",
             "quiet: the server's rows changed per second in the unprobed blocks either side over the rate in "
             "mysqlprobe's quiet phases (above 1 by what of it stays on there).", "",
             "| variant | runs | felt slowdown | reported by mysqlprobe | quiet |", "|---|---|---|---|---|"]
    for name, runs in result["runs"].items():
        felt = [r["felt"] for r in runs if r["felt"] is not None]
        rep = [r["reported"] for r in runs if r["reported"] is not None]
        quiet = [r["quiet_slowdown"] for r in runs if r.get("quiet_slowdown") is not None]
        lines.append(f"| {name} | {len(runs)} | {med(felt):.3f} ({_range(felt)}) | "
                     + (f"{med(rep):.3f} ({_range(rep)})" if rep else "-") + " | "
                     + (f"{med(quiet):.3f} ({_range(quiet)})" if quiet else "-") + " |")
    noise = result["noise"]
    lines += ["", f"Noise: each unprobed block against the mean of its unprobed neighbours, {len(noise)} blocks: "
              f"median {med(noise):.3f} ({_range(noise)}).", "",
              "Variants: see the docstring of bench/oltp_parts.py.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
