"""The loads the bench scripts run: one load without a break, with blocks
of it profiled between unprobed blocks (what the load felt, measured by the
load itself), and the load shapes a production server carries.

Separate runs of a load drift apart on a shared machine by up to 20% (the
noise column of bench/RESULTS.md's load shapes), more than the effect to be
measured. Here the load never stops: sysbench reports its transactions every
second (`--report-interval=1`), the seed load's rows are read from the
server's `Innodb_rows_inserted` every second by this process. A block's rate
is its seconds' mean; a profiled block is set against the unprobed blocks
just before and after it, and each unprobed block against its two unprobed
neighbours gives the noise of the same measure."""

from __future__ import annotations


import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

from mysqlprobe.collectors.perfschema.settings import rows_changed
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import log

TPS = re.compile(r"^\[\s*\d+s\s*\].*?\btps:\s*([\d.]+)")


def rows_inserted(conn) -> int:
    """The server's Innodb_rows_inserted."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_rows_inserted'")
        return int(cur.fetchone()[1])


@dataclass
class RateLog:
    """A load's rate over time: (monotonic end, seconds, count) per sample."""

    samples: list[tuple[float, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, end: float, seconds: float, count: float) -> None:
        with self.lock:
            self.samples.append((end, seconds, count))

    def rate(self, t0: float, t1: float) -> float | None:
        """The mean rate of the samples wholly inside [t0, t1]."""
        with self.lock:
            inside = [(s, n) for end, s, n in self.samples if end - s >= t0 and end <= t1]
        seconds = sum(s for s, _ in inside)
        return sum(n for _, n in inside) / seconds if seconds else None

    def seconds(self, t0: float, t1: float) -> float:
        with self.lock:
            return sum(s for end, s, _ in self.samples if end - s >= t0 and end <= t1)


class SysbenchStream:
    """sysbench `run` without an end, its per-second transactions into a RateLog."""

    def __init__(self, command: list[str]):
        self.log = RateLog()
        self.proc = subprocess.Popen(command + ["--time=0", "--report-interval=1", "run"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.tail: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            m = TPS.match(line)
            if m:
                self.log.add(now, 1.0, float(m.group(1)))
            else:
                self.tail = (self.tail + [line])[-20:]

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)


class CounterPoll:
    """A server counter read every `period` seconds (once a second) on a
    connection of its own, its increments into a RateLog."""

    def __init__(self, socket: str, read=rows_inserted, period: float = 1.0):
        self.log = RateLog()
        self.socket, self.read, self.period = socket, read, period
        self._last: tuple[float, int] | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        conn = workload.connect(self.socket)
        try:
            first = True
            while not self._stop.wait(0 if first else self.period):
                first = False
                t0 = time.monotonic()
                count = self.read(conn)
                self.reading((t0 + time.monotonic()) / 2, count)
        finally:
            conn.close()

    def reading(self, now: float, count: int) -> None:
        """One reading, timed at the middle of its query."""
        if self._last:
            self.log.add(now, now - self._last[0], count - self._last[1])
        self._last = (now, count)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=120)


class StatementLoop:
    """The seed load without an end: INSERT ... SELECT into a fresh table,
    again and again, its rows read from the server's Innodb_rows_inserted
    once a second on a connection of its own.

    A cycle (the table dropped and made again, then filled) is the load's
    unit: a reading shorter than one holds more or less of the table's
    making, which inserts no row, so a measure per row that must hold
    still is taken over whole cycles (until_cycle_starts). The seconds of
    each cycle's two parts are kept (cycle_s)."""

    def __init__(self, socket: str, table: workload.Table):
        self.socket, self.table = socket, table
        self.error: str | None = None
        self.cycles = 0   # cycles started
        self.cycle_s: list[tuple[float, float]] = []  # (making the table, filling it) per cycle ended
        self._cycle = threading.Condition()
        self._stop = threading.Event()
        self._loader = threading.Thread(target=self._load, daemon=True)
        self._loader.start()
        self.counter = CounterPoll(socket)
        self.log = self.counter.log

    def until_cycle_starts(self, after_s: float = 0.0, timeout_s: float = 600.0) -> None:
        """Wait for the first cycle to start at least after_s from now."""
        not_before = time.monotonic() + after_s
        deadline = not_before + timeout_s
        with self._cycle:
            seen = self.cycles
            while True:
                now = time.monotonic()
                if now < not_before:
                    seen = self.cycles  # one started before then does not count
                    self._cycle.wait(not_before - now)
                    continue
                if self.cycles > seen:
                    return
                if self.error or now > deadline:
                    raise RuntimeError(self.error or f"no cycle of the statement loop started in {timeout_s} s")
                self._cycle.wait(1.0)

    def _load(self) -> None:
        conn = workload.connect(self.socket)
        try:
            while not self._stop.is_set():
                with self._cycle:
                    self.cycles += 1
                    self._cycle.notify_all()
                t0 = time.monotonic()
                workload.create_target(conn, self.table)
                made = time.monotonic()
                workload.insert_select(conn, self.table)
                self.cycle_s.append((made - t0, time.monotonic() - made))
        except Exception as e:  # reported by running()
            self.error = str(e)
        finally:
            conn.close()

    def running(self) -> bool:
        return self.error is None and self._loader.is_alive() and self.counter.thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self.counter.stop()
        self._loader.join(timeout=120)


@dataclass
class Blocks:
    """The spans of one continuous load in order: ("off" | "on", t0, t1,
    what was on)."""

    spans: list[tuple[str, float, float, str]] = field(default_factory=list)

    def add(self, kind: str, t0: float, t1: float, label: str = "") -> None:
        self.spans.append((kind, t0, t1, label))

    def felt(self, log: RateLog) -> list[dict]:
        """Per profiled block: its rate, the unprobed blocks' on either side,
        and their mean over its rate (None where a rate is missing)."""
        out = []
        for i, (kind, t0, t1, label) in enumerate(self.spans):
            if kind != "on":
                continue
            before = self._rate_near(log, i, -1)
            after = self._rate_near(log, i, +1)
            rate = log.rate(t0, t1)
            out.append({"label": label, "rate": rate, "before": before, "after": after, "seconds": log.seconds(t0, t1),
                        "felt": (before + after) / 2 / rate if rate and before and after else None})
        return out

    def _rate_near(self, log: RateLog, i: int, step: int) -> float | None:
        j = i + step
        while 0 <= j < len(self.spans):
            kind, t0, t1, _ = self.spans[j]
            if kind == "off":
                return log.rate(t0, t1)
            j += step
        return None

    def noise(self, log: RateLog) -> list[float]:
        """Each unprobed block's rate over the mean of its unprobed neighbours'."""
        rates = self.unprobed_rates(log)
        return [r / ((a + b) / 2) for a, r, b in zip(rates, rates[1:], rates[2:]) if a and r and b]

    def unprobed_rates(self, log: RateLog) -> list[float | None]:
        return [log.rate(t0, t1) for kind, t0, t1, _ in self.spans if kind == "off"]


def unprobed_block(blocks: Blocks, seconds: float, settle_s: float = 1.0) -> None:
    """Wait out an unprobed block: settle_s to let what ran before end its
    effects (not counted), then `seconds` counted as unprobed."""
    time.sleep(settle_s)
    t0 = time.monotonic()
    time.sleep(seconds)
    blocks.add("off", t0, time.monotonic())


SYSBENCH = shutil.which("sysbench") or "sysbench"
TABLES, TABLE_SIZE = 4, 10000
SEED_ROWS = 1000000


@dataclass(frozen=True)
class Shape:
    name: str
    test: str | None = None      # sysbench test; None: the seed load
    threads: int = 1
    flush: int | None = None     # innodb_flush_log_at_trx_commit for the shape


SHAPES = (Shape("seed bulk load, 1 thread"),
          Shape("oltp_insert, 8 threads", "oltp_insert", 8),
          Shape("oltp_insert, 32 threads", "oltp_insert", 32),
          Shape("oltp_write_only, 8 threads", "oltp_write_only", 8),
          Shape("oltp_insert, 8 threads, fsync per commit", "oltp_insert", 8, flush=1))


def sysbench_command(sock: str, shape: Shape) -> list[str]:
    assert shape.test is not None, "the seed load is not sysbench's"
    return [SYSBENCH, shape.test, "--db-driver=mysql", f"--mysql-socket={sock}", "--mysql-user=root",
            "--mysql-db=sbtest", f"--tables={TABLES}", f"--table-size={TABLE_SIZE}", f"--threads={shape.threads}"]


class Load:
    """One shape on a running server: prepare() once, then start() it
    without an end (a SysbenchStream or a StatementLoop) and stop() it."""

    def __init__(self, sb: sandbox.Sandbox, shape: Shape):
        self.sb, self.shape = sb, shape
        self.conn = workload.connect(sb.socket)
        self.stream: SysbenchStream | StatementLoop | None = None
        self.rows: CounterPoll | None = None  # the server's rows changed, as mysqlprobe paces on them

    def prepare(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (self.shape.flush or 2,))
            if self.shape.test:
                cur.execute("DROP DATABASE IF EXISTS sbtest")
                cur.execute("CREATE DATABASE sbtest")
        if self.shape.test:
            done = subprocess.run(sysbench_command(self.sb.socket, self.shape) + ["prepare"], capture_output=True,
                                  text=True)
            if done.returncode != 0:
                raise RuntimeError(f"sysbench prepare failed: {done.stderr.strip() or done.stdout[-400:]}")
        else:
            workload.prepare_source(self.conn, SEED_ROWS)

    def start(self) -> RateLog:
        self.stream = (SysbenchStream(sysbench_command(self.sb.socket, self.shape)) if self.shape.test
                       else StatementLoop(self.sb.socket, workload.table("range", 5)))
        self.rows = CounterPoll(self.sb.socket, rows_changed)
        return self.stream.log

    def check(self) -> None:
        if self.stream is None or not self.stream.running():
            tail = "".join(getattr(self.stream, "tail", [])) or getattr(self.stream, "error", "")
            raise RuntimeError(f"the load stopped: {tail.strip()[-400:]}")

    def close(self) -> None:
        for poll in (self.stream, self.rows):
            if poll:
                poll.stop()
        with self.conn.cursor() as cur:
            cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 2")  # the sandbox's own
        self.conn.close()


def quiet_rate(doc: dict) -> float | None:
    """The server's rows changed per second in a capture's quiet phases."""
    sampling = doc["sampling"]
    return sampling["quiet_rows"] / sampling["quiet_s"] if sampling.get("quiet_s") else None


def quiet_slowdown(fig: dict, rows: dict) -> float | None:
    """The server's rows changed per second in the unprobed blocks either
    side over its rate in the capture's quiet phases: above 1 where
    something of mysqlprobe stays on in them."""
    if not fig.get("quiet_rate") or not rows["before"] or not rows["after"]:
        return None
    return (rows["before"] + rows["after"]) / 2 / fig["quiet_rate"]


class RowInserts:
    """`clients` connections inserting one row at a time until stopped, each its own ids."""

    def __init__(self, socket: str, table: workload.Table, clients: int = 4):
        self.socket, self.table, self.clients = socket, table, clients
        self.stop = threading.Event()
        self.done = [0] * clients
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def _client(self, i: int) -> None:
        conn = workload.connect(self.socket, workload.SCHEMA)
        sql = self.table.insert_row_sql()
        n = 0
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    key = 1 + i + self.clients * n  # each client its own ids
                    self.done[i] += cur.execute(sql, (key, f"first{key}", f"last{key}", "2000-01-01",
                                                      "2010-01-01", key % 17, 1 + key * 37 % workload.STORE_IDS))
                    n += 1
        except BaseException as e:
            self.errors.append(e)
        finally:
            conn.close()

    def start(self) -> None:
        self.stop.clear()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(self.clients)]
        for t in self.threads:
            t.start()

    def inserted(self) -> int:
        return sum(self.done)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        if self.errors:
            raise RuntimeError(f"the load failed: {self.errors[0]}")


def close_quietly(load: Load) -> None:
    """The load's end: its connection may have died with the server."""
    try:
        load.close()
    except Exception as e:  # noqa: BLE001  the figures are what matters here
        log(f"closing the load: {e}")


SYSBENCH_SHAPE = "sysbench-8"   # oltp_insert from 8 clients: one row a transaction, tables not partitioned
SYSBENCH_8 = Shape("oltp_insert, 8 threads", "oltp_insert", 8)


class ShapeRun:
    """One run of a named load shape, (rows, seconds): a table shape
    (range-5, hash-100...) is one INSERT ... SELECT into a new table of
    that kind; sysbench-8 is oltp_insert from 8 clients for `seconds`, its
    rows counted by the server."""

    def __init__(self, sb: sandbox.Sandbox, conn, shape: str, table: workload.Table | None = None,
                 seconds: float = 0.0, rows: int | None = None):
        self.sb, self.conn, self.shape, self.table, self.seconds = sb, conn, shape, table, seconds
        self.rows = rows   # the source's rows a table shape inserts (None: sysbench's, counted by the server)

    def prepare(self) -> None:
        if self.table is not None:
            workload.create_target(self.conn, self.table)

    def run(self) -> tuple[int, float]:
        if self.table is not None:
            return workload.insert_select(self.conn, self.table)
        rows0, t0 = rows_inserted(self.conn), time.perf_counter()
        subprocess.run(sysbench_command(self.sb.socket, SYSBENCH_8) + [f"--time={max(round(self.seconds), 1)}",
                                                                         "run"], check=True, capture_output=True)
        return rows_inserted(self.conn) - rows0, time.perf_counter() - t0


def shape_sizes(sb: sandbox.Sandbox, conn, shape: str,
                lengths: list[float]) -> tuple[workload.Table | None, dict[float, int | None]]:
    """A shape's table (None for sysbench-8, its tables prepared here) and the
    rows that make each length of load on this server, sized from its rate
    on a statement of 200,003 rows (None: sysbench runs for the length)."""
    if shape == SYSBENCH_SHAPE:
        prepared = Load(sb, SYSBENCH_8)
        prepared.prepare()
        prepared.conn.close()
        return None, {length: None for length in lengths}
    kind, parts = shape.split("-")
    table = workload.table(kind, int(parts))
    workload.prepare_source(conn, 200_003)
    workload.create_target(conn, table)
    rows, took = workload.insert_select(conn, table)
    return table, {length: int(rows / took * length) | 1 for length in lengths}


def shape_runs(sb: sandbox.Sandbox, conn, shape: str, lengths: list[float]):
    """(length, its ShapeRun) for each length of a shape's load, the source
    table sized for it first (sysbench-8's tables prepared once)."""
    table, sizes = shape_sizes(sb, conn, shape, lengths)
    for length in lengths:
        n = sizes[length]
        if n is not None:
            workload.prepare_source(conn, n)
        yield length, ShapeRun(sb, conn, shape, table, length, n)


def unprobed_ns_per_row(conn, table: workload.Table, settle_s: float = 0.5) -> float:
    """One INSERT ... SELECT into a new table with nothing attached: its time
    per row, its rows the statement's own (10.11 keeps no Innodb_rows_inserted)."""
    workload.create_target(conn, table)
    time.sleep(settle_s)
    rows, seconds = workload.insert_select(conn, table)
    return seconds * 1e9 / rows
