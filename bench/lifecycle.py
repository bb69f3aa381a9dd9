"""Starting, stopping and staying: nothing lost and nothing left changed over many starts, attach churn, and an hour of watch.

    sudo .venv/bin/python bench/lifecycle.py start-stop [--help]
    sudo .venv/bin/python bench/lifecycle.py churn [--help]
    sudo .venv/bin/python bench/lifecycle.py soak [--help]

start-stop: mysqlprobe started and stopped 100 times on a server under load: the
server alive, its rows exact, nothing left behind, and what it cost the load.

churn: Attach and detach as often as mysqlprobe ever would, on two servers of
one binary at once, and check from outside that the servers live and that
no breakpoint is left in their code.

soak: mysqlprobe watch for an hour or more under load, with the server
restarted inside it: its memory stays flat and under 60 MB, and it keeps
profiling the server it finds again after each restart."""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.collectors.safety.codecheck import code_changes

from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import MYSQLPROBE, bench_parser, free_port, log, machine, machine_line, run_line, run_subcommand, write_results
from mysqlprobe.lab.benchkit.loads import Load, RowInserts, Shape, close_quietly

# --------------------------------------------------------------------------- start-stop

DOC_START_STOP = """mysqlprobe started and stopped 100 times on a server under load: the
server alive, its rows exact, nothing left behind, and what it cost the load.

The load: 4 clients inserting single rows (autocommit) into a partitioned
table of MariaDB 10.2.11 until told to stop, each counting the inserts the
server acknowledged. Then, in turn:

  unprobed  the load alone, SECONDS long
  stress    mysqlprobe --insert-profile (the default mode: duty cycles,
            perf, off-CPU, P_S) started and stopped RUNS times, each stopped
            at a random moment by SIGINT, SIGTERM or SIGHUP (some before
            its window opens, most in it)
  unprobed  the load alone again

and after the stress:
  rows      the table's rows against the inserts the clients counted
  left      BPF programs and links, mysqlprobe processes, uprobes on the
            server and P_S setup, against before
  slowdown  the unprobed rows/s (both runs' mean) over the stress rows/s

    sudo .venv/bin/python bench/lifecycle.py start-stop [--runs 100] [--seconds 30]

writes its section of bench/RESULTS.md (and results.json)."""

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS / "integration"), str(TESTS)]  # the suite's checks of the server and the kernel
from helpers import live_bpf_ids, tracefs_uprobe_events, whole_setup  # noqa: E402

HERE = Path(__file__).parent
CLIENTS = 4
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def rate(load: RowInserts, seconds: float) -> float:
    """Rows per second the load made over the next `seconds`."""
    n0, t0 = load.inserted(), time.monotonic()
    time.sleep(seconds)
    return (load.inserted() - n0) / (time.monotonic() - t0)


def mysqlprobe_processes() -> list[str]:
    """Processes of mysqlprobe's (the tool, its helpers, perf into its directory), this one aside."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if ("bin/mysqlprobe" in cmd or "mysqlprobe.collectors" in cmd or "mysqlprobe-perf-" in cmd):
                out.append(f"{d.name} {cmd[:120]}")
    return out


def one_start_stop(pid: int, outdir: Path, rng: random.Random) -> dict:
    """mysqlprobe started, then stopped by a random signal after a random time."""
    sig = rng.choice(SIGNALS)
    after = rng.uniform(0.2, 6.0)  # symbols and calibration take about 2 s: some stops come before the window
    p = subprocess.Popen([MYSQLPROBE, "-p", str(pid), "--insert-profile", "-q", "-o", str(outdir)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    if p.poll() is None:
        p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    phase = ("window" if "Tracing PID" in err else
             last.split(" while ", 1)[1].split(";")[0] if " while " in last else "before the window")
    return {"signal": signal.Signals(sig).name, "after_s": round(after, 2), "exit": p.returncode, "phase": phase,
            "capture": (outdir / "profile.json").exists(), "traceback": "Traceback" in err,
            "last_line": last}


def main_start_stop() -> int:
    ap = argparse.ArgumentParser(description=DOC_START_STOP.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0, help="each unprobed phase")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sb = sandbox.Sandbox("10.2.11", instance="stress")
    with sb.serving(log) as pid:
        conn = workload.connect(sb.socket)
        table = workload.table("range", 5)
        workload.prepare_source(conn, 1)
        workload.create_target(conn, table)
        conn.close()
        setup0, progs0, links0 = whole_setup(sb), live_bpf_ids("prog"), live_bpf_ids("link")
        load = RowInserts(sb.socket, table)
        load.start()
        time.sleep(3)  # warm
        before = rate(load, args.seconds)
        log(f"unprobed: {before:.0f} rows/s")
        runs, t0, n0 = [], time.monotonic(), load.inserted()
        work = Path(os.environ.get("TMPDIR", "/tmp")) / "mysqlprobe-start-stop"
        for i in range(args.runs):
            runs.append(one_start_stop(pid, work / f"run{i}", rng))
            log(f"run {i + 1}/{args.runs}: {runs[-1]}")
        stress = (load.inserted() - n0) / (time.monotonic() - t0)
        after = rate(load, args.seconds)
        log(f"stress: {stress:.0f} rows/s; unprobed again: {after:.0f} rows/s")
        load.finish()
        conn = workload.connect(sb.socket)
        rows = workload.row_count(conn, table)
        conn.close()
        left = {"bpf_programs": sorted(live_bpf_ids("prog") - progs0), "bpf_links": sorted(live_bpf_ids("link") - links0),
                "processes": mysqlprobe_processes(), "uprobes_on_server": f"/proc/{pid}/" in tracefs_uprobe_events(),
                "ps_setup_changed": whole_setup(sb) != setup0}
        subprocess.run(["rm", "-rf", str(work)])
    result = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": " ".join(["bench/lifecycle.py start-stop"] + sys.argv[1:]), "runs": runs,
              "rows_in_table": rows, "rows_acknowledged": load.inserted(), "left": left,
              "unprobed_rows_per_s": [round(before, 1), round(after, 1)], "stress_rows_per_s": round(stress, 1),
              "slowdown": round((before + after) / 2 / stress, 3) if stress else None}
    write_results(args.out, "start_stop", result, render_start_stop)
    clean = (rows == load.inserted() and not any(left.values())
             and not any(r["traceback"] for r in runs) and all(r["exit"] in (0, 129, 130, 143) for r in runs))
    return 0 if clean else 1


def render_start_stop(r: dict) -> str:
    runs, left = r["runs"], r["left"]
    by = Counter((x["phase"], x["exit"]) for x in runs)
    lines = [f"# Start and stop, {len(runs)} times, under load", "",
             f"{machine_line(r['machine'])} {r['date']}, `sudo .venv/bin/python {r['command']}`.", "",
             f"{len(runs)} runs of `mysqlprobe --insert-profile` (the default mode) on MariaDB 10.2.11 while "
             f"{CLIENTS} clients insert single rows; each run stopped after 0.2-6 s by SIGINT, SIGTERM or SIGHUP.",
             "", "| stopped while | exit | runs | capture written |", "|---|---|---|---|"]
    for (phase, code), n in sorted(by.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        written = sum(1 for x in runs if x["phase"] == phase and x["exit"] == code and x["capture"])
        lines.append(f"| {phase} | {code} | {n} | {written} |")
    tracebacks = sum(1 for x in runs if x["traceback"])
    lines += ["", "| check | result |", "|---|---|",
              f"| rows in the table against inserts acknowledged | {r['rows_in_table']:,} / "
              f"{r['rows_acknowledged']:,} ({'exact' if r['rows_in_table'] == r['rows_acknowledged'] else 'DIFFER'}) |",
              f"| BPF programs / links left | {len(left['bpf_programs'])} / {len(left['bpf_links'])} |",
              f"| mysqlprobe processes left | {len(left['processes'])} |",
              f"| uprobes left on the server | {'yes' if left['uprobes_on_server'] else 'none'} |",
              f"| P_S setup changed | {'yes' if left['ps_setup_changed'] else 'no'} |",
              f"| tracebacks | {tracebacks} |",
              f"| load, unprobed before / after (rows/s) | {r['unprobed_rows_per_s'][0]:,.0f} / "
              f"{r['unprobed_rows_per_s'][1]:,.0f} |",
              f"| load during the 100 start/stops (rows/s) | {r['stress_rows_per_s']:,.0f} |",
              f"| slowdown (unprobed mean / stress) | {r['slowdown']}x |", ""]
    lines += ["The slowdown covers everything a start and a stop do to the server: reading /proc, calibration, "
              "attaching and detaching the probes, P_S setup and restore, the duty cycles of each window. "
              "One pair of unprobed phases on a shared 2-CPU machine: read it with the noise of "
              "bench/RESULTS.md's OLTP parts section (unprobed runs against each other: 0.81-1.21).", ""]
    return "\n".join(lines)



# --------------------------------------------------------------------------- churn

DOC_CHURN = """Attach and detach as often as mysqlprobe ever would, on two servers of
one binary at once, and check from outside that the servers live and that
no breakpoint is left in their code.

Why: in the soak a MariaDB 10.11.5 server died of SIGTRAP at the int3 of a
probe (`traps: mariadbd[...] trap int3` in dmesg) while `watch` cycled its
probes and, at that moment, short insert profiles ran on a second server
started from the same file. A uprobe belongs to the file (inode and
offset), so two servers of one binary share every probe the kernel keeps.

Two sandboxes of MariaDB 10.11.5 (A and B, the same mariadbd file) take
sysbench oltp_write_only from 2 threads each for MINUTES:
  A  `mysqlprobe watch` at a 25% budget and 20-s windows: about 20 times
     the attach/detach cycles of the default 1%;
  B  `mysqlprobe --insert-profile -d 3`, one run after another.
Outside measures: every few seconds, whether each server's process is
still there; at the end, once no mysqlprobe runs, each server's code as
it is in memory (/proc/PID/mem over the binary's executable mapping)
against the file's bytes on disk, read past the page cache (a breakpoint
left behind is an 0xCC there), and the file's cached pages against the
disk (an int3 there would be in every process of the file); and the
kernel's lines about trapped or leaked uprobes (dmesg).

    sudo .venv/bin/python bench/lifecycle.py churn [--minutes 20]

writes its section of bench/RESULTS.md (and results.json)."""

VERSION_churn = "10.11.5"
SHAPE_churn = Shape("oltp_write_only, 2 threads", "oltp_write_only", 2)
WATCH_BUDGET = "25"
CHECK_S = 5


def kernel_lines() -> list[str]:
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if "trap int3" in line or "uprobe" in line]


def profile_b(pid: int, out: str) -> int:
    return subprocess.run([MYSQLPROBE, "-p", str(pid), "--insert-profile", "-d", "3", "-q", "-o", out],
                          capture_output=True, text=True).returncode


def main_churn() -> None:
    args = bench_parser(DOC_CHURN, minutes=20).parse_args()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    before = len(kernel_lines())
    servers = [sandbox.Sandbox(VERSION_churn, instance=name) for name in ("churn-a", "churn-b")]
    loads = []
    for sb in servers:
        sb.start(log)
        loads.append(Load(sb, SHAPE_churn))
        loads[-1].prepare()
        loads[-1].start()
    a, b = (sb.pid() for sb in servers)
    deaths, runs, failed, windows = [], 0, 0, 0
    with tempfile.TemporaryDirectory() as out:
        watch = subprocess.Popen([MYSQLPROBE, "watch", "-p", str(a), "--listen", f"127.0.0.1:{free_port()}",
                                  "--budget", WATCH_BUDGET, "--interval", "20"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < args.minutes * 60 and not deaths:
                code = profile_b(b, out)
                runs, failed = runs + 1, failed + (code != 0)
                for name, pid in (("A", a), ("B", b)):
                    if not Path(f"/proc/{pid}").is_dir():
                        deaths.append({"server": name, "pid": pid, "t_s": round(time.monotonic() - t0, 1)})
                if watch.poll() is not None:
                    raise RuntimeError(f"watch exited {watch.returncode}")
        finally:
            watch.send_signal(signal.SIGINT)
            try:
                watch.wait(timeout=120)
            except subprocess.TimeoutExpired:
                watch.kill()
            windows = watch.stderr.read().count("window of")
            seconds = time.monotonic() - t0
            code = [code_changes(pid).as_dict() for pid in (a, b) if Path(f"/proc/{pid}").is_dir()]
            for load in loads:
                close_quietly(load)
            for sb in servers:
                sb.stop()
    result = {"machine": machine(), "started": started, "command": "bench/lifecycle.py churn " + " ".join(sys.argv[1:]),
              "server": f"MariaDB {VERSION_churn}", "load": SHAPE_churn.name, "minutes": round(seconds / 60, 1),
              "watch_windows": windows, "profiles_on_b": runs, "profiles_failed": failed, "deaths": deaths,
              "code_after": code, "kernel_says": kernel_lines()[before:]}
    write_results(args.out, "attach_churn", result, render_churn)


def render_churn(r: dict) -> str:
    lines = ["# Attach and detach churn on two servers of one binary", "", run_line(r), "",
             f"{r['server']}, two sandboxes started from the same mariadbd, each under sysbench {r['load']}, "
             f"for {r['minutes']} minutes. Server A: `mysqlprobe watch --budget {WATCH_BUDGET} --interval 20` "
             f"({r['watch_windows']} windows). Server B: `mysqlprobe --insert-profile -d 3` one run after another "
             f"({r['profiles_on_b']} runs, {r['profiles_failed']} failed).", "",
             "| check (outside mysqlprobe) | result |", "|---|---|",
             "| a server died | " + ("; ".join(f"{d['server']} (PID {d['pid']}) at {d['t_s']} s" for d in r["deaths"])
                                   or "no") + " |"]
    for c in r["code_after"]:
        lines.append(f"| PID {c['pid']}: code in memory against the file "
                     f"({c.get('compared_with', 'page cache')}), after | {c['bytes_differing']} of "
                     f"{c['bytes_checked']} bytes differ; int3 left: {c['int3_left']}"
                     + (f"; the page cache against the disk: {c['page_cache_differing']} differ"
                        if c.get("compared_with") == "disk" else "") + " |")
    lines += ["| the kernel's uprobe lines during the run (dmesg) | "
              + (" / ".join(r["kernel_says"]) or "none") + " |", ""]
    return "\n".join(lines)



# --------------------------------------------------------------------------- soak

DOC_SOAK = """mysqlprobe watch for an hour or more under load, with the server
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

    sudo .venv/bin/python bench/lifecycle.py soak [--minutes 65] [--restart 20] [--interval 60]

writes its section of bench/RESULTS.md (and results.json)."""

VERSION_soak = "10.11.5"
SAMPLE_S = 10
SHAPE_soak = Shape("oltp_write_only, 4 threads", "oltp_write_only", 4)
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


def main_soak() -> None:
    args = bench_parser(DOC_SOAK, minutes=65, restart=20, interval=60).parse_args()
    sb = sandbox.Sandbox(VERSION_soak, instance="soak")
    sb.start(log)
    load = Load(sb, SHAPE_soak)
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
                    load = Load(sb, SHAPE_soak)
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
            write_results(args.out, "soak", {**result, "uprobe_bursts": bursts}, render_soak)


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
              "command": "sudo .venv/bin/python bench/lifecycle.py soak " + " ".join(sys.argv[1:]),
              "server": f"MariaDB {VERSION_soak}", "load": SHAPE_soak.name, "minutes": args.minutes,
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


def render_soak(r: dict) -> str:
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


SUBCOMMANDS = {"start-stop": (main_start_stop, DOC_START_STOP), "churn": (main_churn, DOC_CHURN), "soak": (main_soak, DOC_SOAK)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
