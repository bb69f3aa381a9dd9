"""mysqlprobe watch for an hour or more under load, with the server
restarted inside it: its memory stays flat and under 60 MB, and it keeps
profiling the server it finds again after each restart.

The server (MariaDB 10.11.5, the largest binary) takes sysbench
oltp_write_only from 4 threads (the tables keep their size) all along,
but for its restarts: every RESTART minutes it is stopped and started
again (a new PID) and sysbench with it. `mysqlprobe watch` runs with its
defaults (60-s windows, 1% budget) and --pprof-dir. Read from outside,
every 10 s:

  rss      watch's resident memory (VmRSS of /proc/PID/status) and its
           high-water mark (VmHWM: the peaks inside a window the samples
           miss), and its children's (perf, the guards) summed apart
  metrics  mysqlprobe_up, mysqlprobe_windows_total,
           mysqlprobe_window_failures_total, mysqlprobe_window_seconds_total
           (the time its figures cover), mysqlprobe_functions and
           mysqlprobe_probes (what the last window probed) from its /metrics
  uprobes  the kernel's own count: for 60 s every 10 minutes, every 5 ms,
           the uprobe_cnt of watch's uprobe_multi links on the server's
           binary (/proc/PID/fdinfo), the largest sum at one moment
  fds      watch's open file descriptors (/proc/PID/fd): the perf events
           and BPF objects each window opens must all be closed again

    sudo .venv/bin/python bench/soak.py [--minutes 65] [--restart 20] [--interval 60]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Load, Shape, close_quietly
from mysqlprobe.lab.benchkit import MYSQLPROBE, bench_parser, free_port, log, machine, machine_line, write_results
from mysqlprobe.lab import sandbox  # noqa: E402
from mysqlprobe.collectors.safety.codecheck import code_changes  # noqa: E402

VERSION = "10.11.5"
SAMPLE_S = 10
SHAPE = Shape("oltp_write_only, 4 threads", "oltp_write_only", 4)
LIMIT_MB = 60
# InnoDB's row, B-tree and file functions beside the insert profile: 500+ functions a window on 10.11.5
PROBES = ("row_*", "btr_*", "fil_*")
UPROBE_POLL_S = 0.005   # how often the kernel's count is read in a burst
UPROBE_BURST_S = 60     # one burst of reads every 10 minutes


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def children_rss_mb(pid: int) -> float:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    return sum(rss_mb(int(k)) or 0.0 for k in kids)


def metrics(url: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name = line.split(" ", 1)[0]
        if name in ("mysqlprobe_up", "mysqlprobe_windows_total", "mysqlprobe_window_failures_total",
                    "mysqlprobe_window_seconds_total", "mysqlprobe_probes", "mysqlprobe_functions"):
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    args = bench_parser(__doc__, minutes=65, restart=20, interval=60).parse_args()
    sb = sandbox.Sandbox(VERSION, instance="soak")
    sb.start(log)
    load = Load(sb, SHAPE)
    load.prepare()
    load.start()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    samples, restarts, deaths, code_checks = [], [], [], []
    with tempfile.TemporaryDirectory() as pprof:
        watch = subprocess.Popen([MYSQLPROBE, "watch", "-p", str(sb.pid()), "--listen", f"127.0.0.1:{port}",
                                  "--pprof-dir", pprof, "--interval", str(args.interval),
                                  *[arg for glob in PROBES for arg in ("--probe", glob)]],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        next_restart = t0 + args.restart * 60
        binary = os.readlink(f"/proc/{sb.pid()}/exe")
        bursts: list[dict] = []
        done = threading.Event()

        def count_uprobes() -> None:
            # at minute 5, 15, 25...: the kernel's count, apart from the RSS samples
            while not done.wait(300 if not bursts else 600 - UPROBE_BURST_S):
                at = round(time.monotonic() - t0, 1)
                bursts.append({"t_s": at, "max_uprobes": kernel_uprobes(watch.pid, binary, UPROBE_BURST_S)})
        threading.Thread(target=count_uprobes, daemon=True).start()
        try:
            while time.monotonic() - t0 < args.minutes * 60:
                time.sleep(SAMPLE_S)
                now = time.monotonic()
                if watch.poll() is not None:
                    raise RuntimeError(f"watch exited {watch.returncode}: {watch.stderr.read()[-2000:]}")
                samples.append({"t_s": round(now - t0, 1), "rss_mb": rss_mb(watch.pid),
                                "hwm_mb": rss_mb(watch.pid, "VmHWM"), "fds": open_fds(watch.pid),
                                "children_rss_mb": round(children_rss_mb(watch.pid), 1), **metrics(url)})
                server = sb.pid()
                if server is None or not Path(f"/proc/{server}").is_dir():
                    deaths.append({"t_s": round(now - t0, 1), "pid": server, "kernel_says": kernel_traps()})
                    raise RuntimeError(f"the server died at {now - t0:.0f} s: {deaths[-1]['kernel_says']}")
                if now >= next_restart:
                    log(f"restart at {now - t0:.0f} s; last sample {samples[-1]}")
                    close_quietly(load)
                    old = sb.pid()
                    # probes may be on: only the file's cached pages against the disk count here
                    code_checks.append({"t_s": round(now - t0, 1), "watch_running": True,
                                        **code_changes(old).as_dict()})
                    sb.stop()
                    new = sb.start(log)
                    restarts.append({"t_s": round(time.monotonic() - t0, 1), "old_pid": old, "new_pid": new})
                    load = Load(sb, SHAPE)
                    load.start()
                    next_restart = time.monotonic() + args.restart * 60
        finally:
            done.set()
            watch.send_signal(signal.SIGINT)
            try:
                code = watch.wait(timeout=120)
            except subprocess.TimeoutExpired:
                watch.kill()
                code = watch.wait()
            err = watch.stderr.read()
            close_quietly(load)
            server = sb.pid()
            if server is not None and Path(f"/proc/{server}").is_dir():  # watch gone: every byte counts
                code_checks.append({"t_s": round(time.monotonic() - t0, 1), "watch_running": False,
                                    **code_changes(server).as_dict()})
            sb.stop()
            pprofs = len(list(Path(pprof).glob("*.pb.gz")))
            result = outcome(args, restarts, samples, deaths, code, err, pprofs, code_checks)
            write_results(args.out, "soak", {**result, "uprobe_bursts": bursts}, render)


def kernel_uprobes(watch_pid: int, binary: str, seconds: float) -> int:
    """The most uprobes the kernel held at once for watch on the server's
    binary over `seconds` (the on-phases are short: read every 5 ms)."""
    end, best = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        total = 0
        try:
            fds = os.listdir(f"/proc/{watch_pid}/fdinfo")
        except OSError:
            return best
        for fd in fds:
            try:
                text = Path(f"/proc/{watch_pid}/fdinfo/{fd}").read_text()
            except OSError:
                continue
            if "uprobe_multi" in text and binary in text:
                total += int(text.split("uprobe_cnt:")[1].split()[0])
        best = max(best, total)
        time.sleep(UPROBE_POLL_S)
    return best


def kernel_traps() -> list[str]:
    """What the kernel said of trapped or leaked uprobes (dmesg), the last few lines."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if "trap int3" in line or "leaking uprobe" in line][-5:]


def outcome(args, restarts, samples, deaths, code, err, pprofs, code_checks) -> dict:
    return {"machine": machine(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "sudo .venv/bin/python bench/soak.py " + " ".join(sys.argv[1:]),
              "server": f"MariaDB {VERSION}", "load": SHAPE.name, "minutes": args.minutes,
              "interval_s": args.interval, "probe_globs": list(PROBES),
              "restarts": restarts, "samples": samples, "exit": code, "traceback": "Traceback" in err,
              "pprof_files": pprofs, "server_deaths": deaths, "code_checks": code_checks,
              # its lines about failures ("window failed: why"), the last 20
              "watch_window_lines": [line for line in err.splitlines() if "fail" in line.lower()][-20:]}


def _quarter(samples: list[dict], which: int) -> list[float]:
    n = len(samples)
    return [s["rss_mb"] for s in samples[which * n // 4:(which + 1) * n // 4] if s["rss_mb"] is not None]


def covered(samples: list[dict]) -> str:
    """The share of the run's time the windows' figures cover: window seconds
    (counted as each window ends) over wall seconds, first sample to last,
    the servers' restarts included."""
    have = [s for s in samples if "mysqlprobe_window_seconds_total" in s]
    if len(have) < 2 or have[-1]["t_s"] <= have[0]["t_s"]:
        return "-"
    share = ((have[-1]["mysqlprobe_window_seconds_total"] - have[0]["mysqlprobe_window_seconds_total"])
             / (have[-1]["t_s"] - have[0]["t_s"]))
    return f"{share:.0%}"


def rss_slope(samples: list[dict]) -> str:
    """Watch's RSS growth in kB a minute, fitted over the samples past the
    first 5 minutes (the first windows fill the caches)."""
    pts = [(s["t_s"], s["rss_mb"]) for s in samples if s["t_s"] >= 300 and s["rss_mb"] is not None]
    if len(pts) < 3:
        return "-"
    slope = statistics.linear_regression([t for t, _ in pts], [m for _, m in pts]).slope
    return f"{slope * 60 * 1000:+.1f} kB/min ({slope * 1e6:+.0f} B/s)"


def probe_range(samples: list[dict], name: str = "mysqlprobe_probes") -> str:
    counts = [int(s[name]) for s in samples if s.get(name)]
    return f"{min(counts)}-{max(counts)}" if counts else "not read in this run"


def render(r: dict) -> str:
    samples = r["samples"]
    rss = [s["rss_mb"] for s in samples if s["rss_mb"] is not None]
    windows = max((s.get("mysqlprobe_windows_total", 0) for s in samples), default=0)
    failures = max((s.get("mysqlprobe_window_failures_total", 0) for s in samples), default=0)
    down = sum(1 for s in samples if s.get("mysqlprobe_up") == 0)
    first, last = statistics.median(_quarter(samples, 0)), statistics.median(_quarter(samples, 3))
    marks = [s["hwm_mb"] for s in samples if s.get("hwm_mb") is not None]
    hwm = f"{max(marks):.1f} MB" if marks else "not read in this run"
    fds = [[s["fds"] for s in samples[q * len(samples) // 4:(q + 1) * len(samples) // 4] if s.get("fds")]
           for q in (0, 3)]
    fd_line = (f"{max(fds[0])} -> {max(fds[1])}" if all(fds) else "not read in this run")
    lines = ["# mysqlprobe watch over a long run, with server restarts", "",
             f"{machine_line(r['machine'])} {r['date']}. Command: `{r['command']}`.", "",
             f"{r['server']} under sysbench {r['load']} for {r['minutes']} minutes, restarted "
             f"{len(r['restarts'])} times (stopped and started: a new PID). `mysqlprobe watch` with its 1% "
             f"budget, {r.get('interval_s', 60)}-s windows (60 by default), `--pprof-dir`"
             + "".join(f" `--probe '{g}'`" for g in r.get("probe_globs", []))
             + " (the insert profile and these functions). Every 10 s this "
             "script read watch's VmRSS and VmHWM from /proc, its children's RSS (perf, the guards) apart, its "
             "open file descriptors and its /metrics.", "",
             "| minutes | watch RSS, median (MB) | max (MB) | children's RSS, max (MB) | open fds, max "
             "| windows so far | up |",
             "|---|---|---|---|---|---|---|"]
    for start in range(0, int(samples[-1]["t_s"]) + 1, 300):
        block = [s for s in samples if start <= s["t_s"] < start + 300]
        sizes = [s["rss_mb"] for s in block if s["rss_mb"] is not None]
        if not sizes:
            continue
        ups = {int(s["mysqlprobe_up"]) for s in block if "mysqlprobe_up" in s}
        fd_counts = [s["fds"] for s in block if s.get("fds")]
        lines.append(f"| {start // 60}-{start // 60 + 5} | {statistics.median(sizes):.1f} | {max(sizes):.1f} | "
                     f"{max(s['children_rss_mb'] for s in block):.1f} | {max(fd_counts, default='-')} | "
                     f"{int(max(s.get('mysqlprobe_windows_total', 0) for s in block))} | "
                     f"{'/'.join(str(u) for u in sorted(ups)) or '-'} |")
    lines += ["", "| check | result |", "|---|---|",
              f"| watch's peak RSS in the samples | {max(rss):.1f} MB (limit {LIMIT_MB}) |",
              f"| watch's high-water mark (VmHWM) | {hwm} |",
              f"| RSS, first quarter's median against the last's | {first:.1f} MB -> {last:.1f} MB "
              f"({last - first:+.1f}) |",
              f"| RSS growth, least-squares slope after the first 5 minutes | {rss_slope(samples)} |",
              f"| open fds, first quarter's max against the last's | {fd_line} |",
              f"| functions probed per window (watch's /metrics) | {probe_range(samples, 'mysqlprobe_functions')} |",
              f"| probes per window, entries and returns (watch's /metrics) | {probe_range(samples)} |",
              f"| uprobes the kernel held at once (fdinfo uprobe_cnt, 60-s bursts of 5-ms reads) | "
              f"{', '.join(str(b['max_uprobes']) for b in r.get('uprobe_bursts', [])) or 'not read'} |",
              "| restarts (old PID -> new PID, at minute) | "
              + ", ".join(f"{x['old_pid']} -> {x['new_pid']} at {x['t_s'] / 60:.0f}" for x in r["restarts"]) + " |",
              f"| windows profiled / failed | {int(windows)} / {int(failures)} |",
              *([f"| what watch said of failures (stderr, the last {len(r['watch_window_lines'])}) | "
                 + "<br>".join(r["watch_window_lines"]).replace("|", "\\|") + " |"]
                if r.get("watch_window_lines") else []),
              f"| time the windows' figures cover | {covered(samples)} |",
              f"| samples with mysqlprobe_up 0 (server restarting) | {down} of {len(samples)} |",
              f"| pprof files written | {r['pprof_files']} |",
              f"| watch's exit at SIGINT / tracebacks | {r['exit']} / {'yes' if r['traceback'] else 'none'} |",
              "| the server died unasked | " + ("; ".join(f"at minute {d['t_s'] / 60:.0f}: {' / '.join(d['kernel_says'])}"
                                                    for d in r.get("server_deaths", [])) or "no") + " |",
              *code_lines(r.get("code_checks")), ""]
    return "\n".join(lines)


def code_lines(checks: list[dict] | None) -> list[str]:
    """The server's code against the binary on disk: after watch stopped,
    every byte; at each restart (probes perhaps on), the file's cached pages."""
    if not checks:
        return []
    out = [f"| the binary's cached pages against the disk ({len(checks)} checks, at each restart and the end) | "
           + (", ".join(f"{c['page_cache_differing']} bytes differ at minute {c['t_s'] / 60:.0f}"
                        for c in checks if c.get("page_cache_differing")) or "the same every time")
           + ("" if checks[-1].get("compared_with") == "disk" else " (no O_DIRECT here: not checked)") + " |"]
    after = [c for c in checks if not c["watch_running"]]
    if after:
        c = after[-1]
        out.append(f"| the server's code in memory against the disk once watch stopped | {c['bytes_differing']} of "
                   f"{c['bytes_checked']} bytes differ; int3 left: {c['int3_left']} |")
    return out


if __name__ == "__main__":
    main()
