"""mysqlprobe watch against the real readers: a real Prometheus scrapes it
while the server takes a load and restarts, PromQL returns the
innodb.row_insert histogram and every query of the Grafana dashboard
returns series, promtool accepts the exposition, and go tool pprof reads the
profiles it writes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import pytest

from conftest import MYSQLPROBE, dashboard_queries
from helpers import wait_until
from mysqlprobe.lab import sandbox, workload

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 30011  # prime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def metric(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@contextlib.contextmanager
def watching(version: str, tmp_path):
    """A sandbox of `version` under mysqlprobe watch, windows of 3 s."""
    sb = sandbox.Sandbox(version, instance="watch")
    pid = sb.start(lambda m: print(m, file=sys.stderr))
    port = free_port()
    proc = subprocess.Popen([MYSQLPROBE, "watch", "-p", str(pid), "--listen", f"127.0.0.1:{port}",
                             "--interval", "3", "--pprof-dir", str(tmp_path / "pprof")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert wait_until(lambda: _serves(url), timeout=30), "watch does not serve /metrics"
        yield sb, proc, url, port, tmp_path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        sb.stop()


@pytest.fixture
def watched(tmp_path):
    with watching("10.2.11", tmp_path) as w:
        yield w


def _serves(url: str) -> bool:
    try:
        return "mysqlprobe_up" in get(url)
    except OSError:
        return False


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping what the test gives it, every second."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (scripts/setup-host.sh installs it)"
    started = []

    def start(target_port: int) -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: mysqlprobe\n    static_configs:\n"
                          f"      - targets: ['127.0.0.1:{target_port}']\n")
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(proc)
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def promql(base: str, query: str) -> list[dict]:
    try:
        body = json.loads(get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})))
    except OSError:
        return []
    return body["data"]["result"] if body.get("status") == "success" else []


class Load:
    """Rounds of ROWS single-row inserts from 2 clients, in a thread, until stopped."""

    def __init__(self, sb):
        conn = workload.connect(sb.socket)
        self.table = workload.table("range", 5)
        workload.prepare_source(conn, ROWS)
        conn.close()
        self.sb, self.stop, self.rounds = sb, threading.Event(), 0
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            conn = workload.connect(self.sb.socket)
            workload.create_target(conn, self.table)
            conn.close()
            assert workload.single_row_inserts(self.sb.socket, self.table, ROWS, 2)[0] == ROWS
            self.rounds += 1

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=300)


def test_prometheus_scrapes_the_row_insert_histogram_across_a_restart(watched, prometheus):
    sb, proc, url, port, tmp_path = watched
    base = prometheus(port)
    windows0 = metric(get(url), "mysqlprobe_windows_total")
    load = Load(sb)
    try:
        assert wait_until(lambda: metric(get(url), "mysqlprobe_windows_total") >= windows0 + 2
                          and metric(get(url), "mysqlprobe_rows_changed_total"), timeout=120)
        # the Grafana dashboard's queries, while the load runs: each returns series
        queries = dashboard_queries(rate="30s")
        assert wait_until(lambda: all(promql(base, q) for q in queries.values()), timeout=60), \
            [title for title, q in queries.items() if not promql(base, q)]
    finally:
        load.finish()
    text = get(url)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    query = 'sum by (le) (mysqlprobe_stage_latency_seconds_bucket{stage="innodb.row_insert"})'
    assert wait_until(lambda: promql(base, query), timeout=30), "Prometheus has no innodb.row_insert histogram"
    buckets = {r["metric"]["le"]: float(r["value"][1]) for r in promql(base, query)}
    assert buckets["+Inf"] > 0 and len(buckets) > 10
    p50 = promql(base, f"histogram_quantile(0.5, {query})")
    assert p50 and 0 < float(p50[0]["value"][1]) < 1, p50

    old = sb.pid()                                  # the server restarts: watch follows it
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: metric(get(url), "mysqlprobe_up") == 0, timeout=30)
    new = sb.start(lambda m: print(m, file=sys.stderr))
    assert new != old
    windows = metric(get(url), "mysqlprobe_windows_total")
    assert wait_until(lambda: metric(get(url), "mysqlprobe_up") == 1
                      and metric(get(url), "mysqlprobe_windows_total") >= windows + 1, timeout=60)
    assert wait_until(lambda: promql(base, "mysqlprobe_up == 1"), timeout=30)

    profiles = sorted((tmp_path / "pprof").glob("cpu-*.pb.gz"))
    assert profiles, "no CPU profile written"
    go = shutil.which("go") or "/usr/local/go/bin/go"
    top = subprocess.run([go, "tool", "pprof", "-top", str(profiles[-1])], capture_output=True, text=True,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert top.returncode == 0 and "Type: cpu" in top.stdout, top.stderr
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert "Traceback" not in proc.stderr.read()


def questions(sb) -> int:
    conn = workload.connect(sb.socket)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
            return int(cur.fetchone()[1])
    finally:
        conn.close()


def test_without_a_connection_a_counter_in_memory_is_the_progress(tmp_path):
    """--no-perf-schema --progress-counter global_query_id: the windows'
    progress is the server's statement counter, read from its memory, and
    it is exported as progress, never as rows; a counter the server lacks
    ends watch with one line."""
    sb = sandbox.Sandbox("10.2.11", instance="watch")
    pid = sb.start(lambda m: print(m, file=sys.stderr))
    port = free_port()
    watch = [MYSQLPROBE, "watch", "-p", str(pid), "--listen", f"127.0.0.1:{port}", "--interval", "3",
             "--no-ps"]
    proc = subprocess.Popen(watch + ["--progress-counter", "global_query_id"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert wait_until(lambda: _serves(url), timeout=30), "watch does not serve /metrics"
        before = questions(sb)
        load = Load(sb)
        try:
            assert wait_until(lambda: (metric(get(url), 'mysqlprobe_progress_total{counter="global_query_id"}')
                                       or 0) > 0, timeout=120)
        finally:
            load.finish()
        text = get(url)
        progress = metric(text, 'mysqlprobe_progress_total{counter="global_query_id"}')
        assert 0 < progress <= questions(sb) - before and "mysqlprobe_rows_changed_total" not in text
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        wrong = subprocess.run(watch + ["-q", "--progress-counter", "no_such_counter"], capture_output=True,
                               text=True, timeout=120)
        assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
        assert "--progress-counter no_such_counter: no such variable" in wrong.stderr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        sb.stop()


def test_slow_clients_and_500_scrapes_do_not_hold_watch(watched):
    """1,000 connections that never finish their request head, then 500
    scrapes from 50 clients at once: every scrape is answered, the windows
    go on, watch holds no thread a connection and no stream of tracebacks;
    and its pprof directory keeps the newest windows only."""
    import resource
    from concurrent.futures import ThreadPoolExecutor
    sb, proc, url, port, tmp_path = watched
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    windows = lambda: metric(get(url), "mysqlprobe_windows_total") or 0   # noqa: E731
    assert wait_until(lambda: windows() >= 1, timeout=60)
    slow = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            slow.append(s)
        before = windows()
        with ThreadPoolExecutor(50) as pool:
            answered = list(pool.map(lambda _: "mysqlprobe_up" in get(url), range(500)))
        assert answered.count(True) == 500
        assert wait_until(lambda: windows() >= before + 2, timeout=60), "the windows stopped"
        threads = int(open(f"/proc/{proc.pid}/status").read().split("Threads:")[1].split()[0])
        assert threads < 40, threads
    finally:
        for s in slow:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    err = proc.stderr.read()
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]


# MariaDB 10.11's Performance Schema has InnoDB's alter stages with their work done
# and estimated; before 10.5 MariaDB reports an online ADD INDEX's progress nowhere
# (PROCESSLIST's PROGRESS stays 0 through the build), so there is nothing to gauge
ALTER_STAGES = {"alter table (read PK and internal sort)", "alter table (merge sort)", "alter table (insert)",
                "alter table (flush)", "alter table (log apply index)", "alter table (end)"}


def test_a_build_under_way_is_a_gauge_and_its_phases_counters(tmp_path):
    """CREATE INDEX after CREATE INDEX while watch runs on 10.11.5: /metrics
    gauges the build's progress as the server reports it, drops the gauge
    once no build runs, and counts the builds' phases, never more than the
    builds took by the client's clock."""
    import re
    with watching("10.11.5", tmp_path) as (sb, proc, url, port, tmp_path):
        conn = workload.connect(sb.socket)
        t = workload.index_table("compressed", 8)
        workload.fill_index_table(conn, t, 100003)
        stop, took = threading.Event(), []

        def builds() -> None:
            while not stop.is_set():
                took.append(workload.build_index(conn, t))
        builder = threading.Thread(target=builds)
        builder.start()
        seen: list[tuple[str, float]] = []
        try:
            def gauged() -> bool:
                found = re.findall(r'mysqlprobe_index_build_progress_ratio\{stage="([^"]*)"\} (\S+)', get(url))
                seen.extend((stage, float(v)) for stage, v in found)
                return len(seen) >= 3
            assert wait_until(gauged, timeout=90, step=0.3), "no build progress served"
            windows = metric(get(url), "mysqlprobe_windows_total") or 0
            assert wait_until(lambda: (metric(get(url), "mysqlprobe_windows_total") or 0) >= windows + 2, timeout=60)
        finally:
            stop.set()
            builder.join(timeout=120)
            conn.close()
        assert all(0.0 <= v <= 1.0 and stage in ALTER_STAGES for stage, v in seen), seen
        assert wait_until(lambda: "mysqlprobe_index_build_progress_ratio" not in get(url), timeout=10)
        text = get(url)
        phases = {k: float(v) for k, v in
                  re.findall(r'mysqlprobe_index_build_phase_seconds_total\{phase="([^"]*)"\} (\S+)', text)}
        assert phases and "insert" in phases, text[-3000:]
        assert 0 < sum(phases.values()) <= 1.1 * sum(took), (phases, sum(took))
