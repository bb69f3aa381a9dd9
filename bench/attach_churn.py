"""Attach and detach as often as mysqlprobe ever would, on two servers of
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

    sudo .venv/bin/python bench/attach_churn.py [--minutes 20]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.lab.benchkit.loads import Load, Shape
from mysqlprobe.lab.benchkit import MYSQLPROBE, bench_parser, log, machine, run_line, write_results
from mysqlprobe.lab.benchkit import free_port
from mysqlprobe.lab.benchkit.loads import close_quietly
from mysqlprobe.lab import sandbox  # noqa: E402
from mysqlprobe.collectors.safety.codecheck import code_changes  # noqa: E402

VERSION = "10.11.5"
SHAPE = Shape("oltp_write_only, 2 threads", "oltp_write_only", 2)
WATCH_BUDGET = "25"
CHECK_S = 5


def kernel_lines() -> list[str]:
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if "trap int3" in line or "uprobe" in line]


def profile_b(pid: int, out: str) -> int:
    return subprocess.run([MYSQLPROBE, "-p", str(pid), "--insert-profile", "-d", "3", "-q", "-o", out],
                          capture_output=True, text=True).returncode


def main() -> None:
    args = bench_parser(__doc__, minutes=20).parse_args()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    before = len(kernel_lines())
    servers = [sandbox.Sandbox(VERSION, instance=name) for name in ("churn-a", "churn-b")]
    loads = []
    for sb in servers:
        sb.start(log)
        loads.append(Load(sb, SHAPE))
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
    result = {"machine": machine(), "started": started, "command": "bench/attach_churn.py " + " ".join(sys.argv[1:]),
              "server": f"MariaDB {VERSION}", "load": SHAPE.name, "minutes": round(seconds / 60, 1),
              "watch_windows": windows, "profiles_on_b": runs, "profiles_failed": failed, "deaths": deaths,
              "code_after": code, "kernel_says": kernel_lines()[before:]}
    write_results(args.out, "attach_churn", result, render)


def render(r: dict) -> str:
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


if __name__ == "__main__":
    main()
