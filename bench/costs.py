"""What the default profile costs an OLTP load: each part alone, and mysqlprobe's own CPU seen by a perf it does not run.

    sudo .venv/bin/python bench/costs.py parts [--help]
    sudo .venv/bin/python bench/costs.py cpu-share [--help]

parts: What each part of the default profile costs an OLTP load on its own:
a load of bench/oltp.py (default: sysbench oltp_insert, 8 clients, MariaDB
10.2.11) running without a break,
each variant on for a block between unprobed blocks, in an order shuffled
each round, set
against the unprobed blocks on either side (mysqlprobe/lab/benchkit/loads.py):

cpu-share: Where the CPU mysqlprobe costs a load goes, seen by a perf that mysqlprobe
does not run: each collector's own figure checked from outside."""

from __future__ import annotations

import random
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.collectors.cpu.perf_record import choose_unwinding
from mysqlprobe.collectors.perfschema.settings import PerfSchema, rows_changed
from mysqlprobe.collectors.perfschema.threads import PROCESSLIST_TID, ThreadWatch
from mysqlprobe.collectors.target.symbols import load_target_binary, resolve_target

from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import (Mysqlprobe, bench_parser, derived, log, machine, measure_of, med, run_line,
                                     run_subcommand, write_results)
from mysqlprobe.lab.benchkit.loads import SHAPES, Blocks, Load, quiet_slowdown, unprobed_block

# --------------------------------------------------------------------------- parts

DOC_PARTS = """What each part of the default profile costs an OLTP load on its own:
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

    sudo .venv/bin/python bench/costs.py parts [--rounds 8] [--seconds 8] [--shape 1] [--variants ...]

writes its section of bench/RESULTS.md (and results.json). The reported column
is mysqlprobe's overhead.slowdown_estimate (the measure, below 1.0 too) where it ran."""

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


def main_parts() -> None:
    ap = bench_parser(DOC_PARTS, rounds=8, seconds=8)
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
              "command": "bench/costs.py parts " + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
              "rounds": args.rounds, "seconds": args.seconds, "runs": runs, "noise": blocks.noise(rates)}
    write_results(args.out, args.name, result, markdown_parts)


def _range(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"


def markdown_parts(result: dict) -> str:
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
              "Variants: see the docstring of bench/costs.py parts.", ""]
    return "\n".join(lines)



# --------------------------------------------------------------------------- cpu-share

DOC_CPU_SHARE = """Where the CPU mysqlprobe costs a load goes, seen by a perf that mysqlprobe
does not run: each collector's own figure checked from outside.

On one continuous load of bench/oltp.py (default: oltp_insert, 8 clients),
blocks with the default --insert-profile alternate with unprobed ones. A
witness `perf record -a` samples the whole host in every block, and its
samples are sorted into:

  mysqlprobe    mysqlprobe's own processes (itself, its perf, its
                calibration helper)
  probe paths   the kernel's uprobe and BPF code, in any thread (the probes'
                hits, the off-CPU program on context switches)
  P_S           Performance Schema's instrument code in mysqld
  spin/wait     InnoDB's mutex and rw-lock spin loops and wait arrays, and
                the kernel's sched_yield: CPU a thread burns while another
                holds what it needs
  load          everything else that ran (mysqld, sysbench)

in CPU seconds per second. What a profiled block adds over the mean of its
unprobed neighbours is set beside what the capture says: by_collector's
sums (in the target, CPU of their own), standing_cpu_s and the reported
slowdown, and beside the slowdown sysbench felt. The load's CPU per
transaction, and the symbols whose CPU per transaction grew most in the
profiled blocks, tell whether the probes made each transaction dearer
(lock holds stretched by probe hits show as spin) or only took CPU away.

    sudo .venv/bin/python bench/costs.py cpu-share [--rounds 6] [--seconds 10] [--shape 1] [--name cpu_share]

writes its section of bench/RESULTS.md (and results.json) (--name: a section of its own)."""

WITNESS_HZ = 499
OWN_COMMS = {"mysqlprobe", "perf", "calibrate"}
PROBE_PATH = re.compile(r"uprobe|uretprobe|swbp|int3|sstep|xol|bpf|callchain|stackid")
PS_CODE = re.compile(r"^(pfs_|PFS_)|_v1$|^insert_events_|^copy_events_|^find_\w+_class$|^get_timer_|^my_timer_"
                     r"|clock_gettime|gettimeofday")
SPIN_CODE = re.compile(r"^ut_delay|^sync_array|^os_event_wait|^os_thread_yield|TTASEventMutex|^PolicyMutex"
                       r"|^mutex_enter|^rw_lock_[sx]+_lock|sched_yield")
KINDS = ("mysqlprobe", "probe paths", "P_S", "spin/wait", "load", "idle")
TOP_SYMBOLS = 15


class Witness:
    """perf record -a over a block; its samples by kind, in CPU seconds."""

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def start(self) -> None:
        self.path = Path(tempfile.mkstemp(dir=self.workdir, suffix=".data")[1])
        self.proc = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", str(WITNESS_HZ),
                                      "-o", str(self.path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # its events open

    def stop(self) -> tuple[dict[str, float], Counter]:
        """CPU seconds by kind, and mysqld's samples by symbol."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        out = subprocess.run(["perf", "script", "-i", str(self.path), "-F", "comm,pid,ip,sym"],
                             capture_output=True, text=True).stdout
        self.path.unlink()
        counts, symbols = Counter(), Counter()
        for line in out.splitlines():
            if line.strip():
                kind, comm, sym = kind_of(line, self.proc.pid)
                counts[kind] += 1
                if comm.startswith("mysqld"):
                    symbols[sym or "[unknown]"] += 1
        counts.pop(None, None)
        return {k: counts[k] / WITNESS_HZ for k in KINDS}, symbols


def kind_of(line: str, witness_pid: int) -> tuple[str | None, str, str]:
    """A `perf script -F comm,pid,ip,sym` line's kind (None for the
    witness's own samples), command and symbol."""
    parts = line.split()
    pid_at = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    if pid_at is None:
        return "load", "", ""
    comm, pid, sym = " ".join(parts[:pid_at]), int(parts[pid_at]), " ".join(parts[pid_at + 2:])
    if pid == witness_pid:
        return None, comm, sym
    if pid == 0 or comm == "swapper":
        return "idle", comm, sym
    if comm in OWN_COMMS:
        return "mysqlprobe", comm, sym
    if PROBE_PATH.search(sym):
        return "probe paths", comm, sym
    if comm.startswith("mysqld") and PS_CODE.search(sym):
        return "P_S", comm, sym
    if SPIN_CODE.search(sym):
        return "spin/wait", comm, sym
    return "load", comm, sym


def main_cpu_share() -> None:
    ap = bench_parser(DOC_CPU_SHARE, rounds=6, seconds=10)
    ap.add_argument("--shape", type=int, default=1, help="index into bench/oltp.py's shapes (default: 1)")
    ap.add_argument("--name", default="cpu_share", help="results file names (default: cpu_share)")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-share-"))
    witness, blocks, shares = Witness(workdir), Blocks(), []
    started = datetime.now(timezone.utc)
    sb = sandbox.Sandbox("10.2.11")
    with sb.serving(log) as pid:
        load = Load(sb, shape)
        try:
            load.prepare()
            rates = load.start()
            time.sleep(3)
            for r in range(args.rounds):
                for kind in ("off", "on"):
                    tool = Mysqlprobe(pid, workdir, "--insert-profile") if kind == "on" else None
                    if tool:
                        tool.start()
                    else:
                        time.sleep(1)  # what ran before ends its effects
                    witness.start()
                    t0 = time.monotonic()
                    time.sleep(args.seconds)
                    t1 = time.monotonic()
                    cpu, symbols = witness.stop()
                    blocks.add(kind, t0, t1)
                    entry = {"kind": kind, "seconds": round(t1 - t0, 3), "rate": rates.rate(t0, t1),
                             "cpu_per_s": {k: round(v / (t1 - t0), 4) for k, v in cpu.items()},
                             "mysqld_samples": dict(symbols.most_common(200))}
                    if tool:
                        tool.tool.stop()
                        entry["capture"] = capture_figures(derived(tool.dir))
                    shares.append(entry)
                    load.check()
                log(f"round {r + 1}: " + ", ".join(f"{e['kind']} {e['cpu_per_s']}" for e in shares[-2:]))
            unprobed_block(blocks, args.seconds)
        finally:
            load.close()
    felt = [f["felt"] for f in blocks.felt(rates)]
    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "shape": shape.name,
              "command": "bench/costs.py cpu-share " + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k not in ("out", "name")),
              "witness_hz": WITNESS_HZ, "blocks": shares, "felt": felt, "added": added(shares),
              "per_transaction": per_transaction(shares), "dearer_symbols": dearer_symbols(shares)}
    write_results(args.out, args.name, result, markdown_cpu_share)


def capture_figures(doc: dict) -> dict:
    o = doc["overhead"]
    costs = o["by_collector"].values()
    window = doc["window"]["duration_s"]
    return {"reported_slowdown": measure_of(o), "phase_slowdown": o.get("phase_slowdown"),
            "standing_slowdown": o.get("standing_slowdown"),
            "standing_cpu_per_s": round((o.get("standing_cpu_s") or 0) / window, 4),
            "in_target_per_s": round(sum(c.get("target_s") or 0 for c in costs) / window, 4),
            "own_cpu_per_s": round(sum(c.get("cpu_s") or 0 for c in costs) / window, 4)}


def added(blocks: list[dict]) -> list[dict]:
    """Each profiled block's CPU per second by kind, less the mean of the
    unprobed blocks on either side."""
    out = []
    for i, b in enumerate(blocks):
        if b["kind"] != "on":
            continue
        near = [blocks[j]["cpu_per_s"] for j in (i - 1, i + 1) if 0 <= j < len(blocks) and blocks[j]["kind"] == "off"]
        if near:
            base = {k: statistics.mean(n[k] for n in near) for k in KINDS}
            out.append({k: round(b["cpu_per_s"][k] - base[k], 4) for k in KINDS} | {"capture": b["capture"]})
    return out


def per_transaction_us(block: dict, kind: str) -> float | None:
    """A block's CPU of one kind per unit of the load's rate, in microseconds."""
    return 1e6 * block["cpu_per_s"][kind] / block["rate"] if block.get("rate") else None


def per_transaction(blocks: list[dict]) -> list[dict]:
    """Each profiled block's CPU per transaction by kind, in µs, beside the
    mean of its unprobed neighbours'; and the slowdown that CPU implies on
    a saturated host: all the CPU a transaction took (idle left out),
    profiled over unprobed."""
    out = []
    for i, b in enumerate(blocks):
        near = [blocks[j] for j in (i - 1, i + 1) if 0 <= j < len(blocks) and blocks[j]["kind"] == "off"]
        if b["kind"] != "on" or not b.get("rate") or not near or not all(n.get("rate") for n in near):
            continue
        on = {k: per_transaction_us(b, k) for k in KINDS}
        off = {k: statistics.mean(per_transaction_us(n, k) for n in near) for k in KINDS}
        busy = [k for k in KINDS if k != "idle"]
        out.append({"on": on, "off": off, "implied_slowdown": sum(on[k] for k in busy) / sum(off[k] for k in busy)})
    return out


def dearer_symbols(blocks: list[dict]) -> list[dict]:
    """mysqld's symbols by how much CPU per transaction they gained in the
    profiled blocks over the unprobed ones (all blocks pooled)."""
    def per_transaction(kind: str) -> dict[str, float]:
        chosen = [b for b in blocks if b["kind"] == kind and b.get("rate")]
        done = sum(b["rate"] * b["seconds"] for b in chosen)
        pooled = Counter()
        for b in chosen:
            pooled.update(b["mysqld_samples"])
        return {sym: 1e6 * n / WITNESS_HZ / done for sym, n in pooled.items()} if done else {}
    on, off = per_transaction("on"), per_transaction("off")
    rows = [{"symbol": sym, "on_us": round(on.get(sym, 0.0), 3), "off_us": round(off.get(sym, 0.0), 3),
             "kind": kind_of(f"mysqld 1 0 {sym}", -1)[0]} for sym in on.keys() | off.keys()]
    rows.sort(key=lambda r: r["off_us"] - r["on_us"])
    return rows[:TOP_SYMBOLS]


def _fig(xs: list[float], digits: int = 3) -> str:
    xs = [x for x in xs if x is not None]
    return f"{med(xs):.{digits}f} ({min(xs):.{digits}f} to {max(xs):.{digits}f})" if xs else "-"


def markdown_cpu_share(result: dict) -> str:
    added_ = result["added"]
    on = [b for b in result["blocks"] if b["kind"] == "on"]
    off = [b for b in result["blocks"] if b["kind"] == "off"]
    lines = ["# The CPU mysqlprobe costs a load, seen from outside", "",
             run_line(result), "",
             f"Load: {result['shape']} on MariaDB 10.2.11, one run without a break. Profiled blocks "
             "(default `--insert-profile`) alternate with unprobed ones; a witness `perf record -a -F "
             f"{result['witness_hz']}` samples the host in every block. CPU seconds per second, medians "
             "with min to max; `added` is a profiled block less the mean of its unprobed neighbours.", "",
             "| kind | unprobed | profiled | added |", "|---|---|---|---|"]
    for k in KINDS:
        lines.append(f"| {k} | {_fig([b['cpu_per_s'][k] for b in off])} | {_fig([b['cpu_per_s'][k] for b in on])} | "
                     f"{_fig([a[k] for a in added_])} |")
    pt = result.get("per_transaction") or []
    if pt:
        lines += ["", "The same CPU per transaction (µs of CPU over the load's rate in the block; `added`: a "
                  "profiled block less its unprobed neighbours' mean). On a saturated host the load's rate is "
                  "the CPU over what a transaction takes, so these sum to the slowdown it felt.", "",
                  "| kind | unprobed | profiled | added |", "|---|---|---|---|"]
        for k in KINDS[:-1]:
            lines.append(f"| {k} | {_fig([p['off'][k] for p in pt], 2)} | {_fig([p['on'][k] for p in pt], 2)} | "
                         f"{_fig([p['on'][k] - p['off'][k] for p in pt], 2)} |")
        lines += ["", f"- slowdown implied (a transaction's CPU, profiled over unprobed): "
                  f"{_fig([p['implied_slowdown'] for p in pt])}"]
    caps = [a["capture"] for a in added_]
    lines += ["", "What the captures said of the same blocks (per second of window):", "",
              f"- mysqlprobe's CPU in every phase (`standing_cpu_s`; it includes the server's CPU for its "
              f"connections, which the witness counts as load): {_fig([c['standing_cpu_per_s'] for c in caps])}",
              f"- the collectors' cost in the target (`by_collector` target_s): "
              f"{_fig([c['in_target_per_s'] for c in caps])}",
              f"- CPU of their own (`by_collector` cpu_s): {_fig([c['own_cpu_per_s'] for c in caps])}",
              f"- slowdown reported: {_fig([c['reported_slowdown'] for c in caps])} "
              f"(phases {_fig([c['phase_slowdown'] for c in caps])}, standing "
              f"{_fig([c['standing_slowdown'] for c in caps])})",
              f"- slowdown the load felt (its own rate, as bench/oltp.py reads it, against the unprobed "
              f"neighbours): "
              f"{_fig(result['felt'])}", ""]
    if result.get("dearer_symbols"):
        lines += ["mysqld's symbols whose CPU per transaction grew most in the profiled blocks (µs per "
                  "transaction, all blocks of a kind pooled):", "",
                  "| symbol | kind | unprobed | profiled |", "|---|---|---|---|"]
        lines += [f"| `{r['symbol'][:70]}` | {r['kind']} | {r['off_us']:.3f} | {r['on_us']:.3f} |"
                  for r in result["dearer_symbols"]]
        lines.append("")
    return "\n".join(lines)


SUBCOMMANDS = {"parts": (main_parts, DOC_PARTS), "cpu-share": (main_cpu_share, DOC_CPU_SHARE)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
