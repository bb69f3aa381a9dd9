"""One load running without a break, with blocks of it profiled between
unprobed blocks: what the load felt, measured by the load itself.

Separate runs of a load drift apart on a shared machine by up to 20%
(bench/OLTP.md's noise column), more than the effect to be measured. Here
the load never stops: sysbench reports its transactions every second
(`--report-interval=1`), the seed load's rows are read from the server's
`Innodb_rows_inserted` every second by this process. A block's rate is its
seconds' mean; a profiled block is set against the unprobed blocks just
before and after it, and each unprobed block against its two unprobed
neighbours gives the noise of the same measure."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

from mysqlprobe.lab import workload

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
        return [rates[i] / ((rates[i - 1] + rates[i + 1]) / 2) for i in range(1, len(rates) - 1)
                if rates[i] and rates[i - 1] and rates[i + 1]]

    def unprobed_rates(self, log: RateLog) -> list[float | None]:
        return [log.rate(t0, t1) for kind, t0, t1, _ in self.spans if kind == "off"]


def unprobed_block(blocks: Blocks, seconds: float, settle_s: float = 1.0) -> None:
    """Wait out an unprobed block: settle_s to let what ran before end its
    effects (not counted), then `seconds` counted as unprobed."""
    time.sleep(settle_s)
    t0 = time.monotonic()
    time.sleep(seconds)
    blocks.add("off", t0, time.monotonic())
