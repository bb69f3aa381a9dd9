"""Running the real CLI against real processes, and looking at what the
kernel has attached."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from mysqlprobe.analysis.profile import t95

from conftest import MYSQLPROBE
from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.reports import load_profile
from mysqlprobe.lab import workload
from mysqlprobe.collectors.safety.codecheck import code_changes


class Profiler:
    """`mysqlprobe -p PID ...` in the background, started once its probes are attached."""

    def __init__(self, pid: int, out_dir: Path, *args: str, env: dict | None = None):
        self.out_dir = out_dir
        self.proc = subprocess.Popen([MYSQLPROBE, "-p", str(pid), "-o", str(out_dir), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.before = []  # stderr lines before it (a debug file's download progress)
        for line in self.proc.stderr:
            if line.startswith("Tracing PID"):
                break
            self.before.append(line)
        else:
            raise AssertionError("mysqlprobe ended before tracing: " + "".join(self.before))
        self.first_line = line

    def stop(self, sig=signal.SIGINT, timeout: float = 60) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, self.first_line + err

    def profile(self) -> dict:
        """The saved capture with everything analysis derives from it."""
        return derived(self.out_dir)


def derived(capture_dir) -> dict:
    return load_profile(str(capture_dir)).to_json()


def stage(doc: dict, name: str) -> dict:
    (s,) = [s for s in doc["stages"] if s["stage"] == name]
    return s


def partition_calls(s: dict) -> list[int]:
    return [p["calls"] for p in sorted(s["partitions"], key=lambda p: p["id"])]


def perf_uprobes(holder_pid: int | None = None) -> list[dict]:
    """BPF programs attached through perf events (uprobes among them), as bpftool lists them."""
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    out = subprocess.run([bpftool, "-j", "perf", "show"], capture_output=True, text=True, check=True).stdout
    rows = [r for r in json.loads(out or "[]") if r.get("fd_type") in ("uprobe", "uretprobe")]
    return [r for r in rows if holder_pid is None or r.get("pid") == holder_pid]


def held_bpf_ids(pid: int) -> tuple[set[int], set[int]]:
    """The BPF programs and links whose descriptors a process holds (uprobe_multi links among them)."""
    progs, links = set(), set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for entry in fdinfo.iterdir() if fdinfo.exists() else []:
        try:
            text = entry.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key == "prog_id":
                progs.add(int(value))
            elif key == "link_id":
                links.add(int(value))
    return progs, links


def held_link_ids(pid: int) -> set[int]:
    return held_bpf_ids(pid)[1]


def live_bpf_ids(kind: str) -> set[int]:
    """The ids of the BPF programs ("prog") or links ("link") the kernel holds now."""
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    out = subprocess.run([bpftool, "-j", kind, "show"], capture_output=True, text=True, check=True).stdout
    return {item["id"] for item in json.loads(out or "[]")}


def live_link_ids() -> set[int]:
    return live_bpf_ids("link")


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def tracefs_uprobe_events() -> str:
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        p = Path(d) / "uprobe_events"
        if p.exists():
            return p.read_text()
    return ""


def wait_until(predicate, timeout: float = 10.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def code_as_in_file(pid: int) -> None:
    """The process's code in memory is its file's again: no int3 left where
    a probe was (the kernel must put every original byte back), and none
    in the file's cached pages either."""
    changes = code_changes(pid)
    assert changes.bytes_checked and not changes.differing and not changes.cache_differing, changes.as_dict()


def kill9_leaves_no_probe(profiler: Profiler, binary_hint: str, target: int) -> None:
    """kill -9 mysqlprobe: the kernel must drop every uprobe with its descriptors."""
    holder = profiler.proc.pid
    helpers = children(holder)  # the calibration helper
    assert helpers, "mysqlprobe runs no calibration helper"
    links = held_link_ids(holder)
    assert links & live_link_ids() or perf_uprobes(holder), \
        "no uprobe link is seen while mysqlprobe runs: the check would prove nothing"
    os.kill(holder, signal.SIGKILL)
    profiler.proc.wait(timeout=30)
    assert wait_until(lambda: not perf_uprobes(holder) and not links & live_link_ids()), \
        (perf_uprobes(holder), links & live_link_ids())
    assert not [r for r in perf_uprobes() if binary_hint in str(r.get("filename", ""))]
    assert wait_until(lambda: not [p for p in helpers if Path(f"/proc/{p}").exists()]), "helper left running"
    assert binary_hint not in tracefs_uprobe_events()
    code_as_in_file(target)


def whole_setup(sb) -> tuple:
    """Every consumer and instrument row, and the background threads' history."""
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("SELECT NAME, ENABLED FROM performance_schema.setup_consumers ORDER BY NAME")
        consumers = cur.fetchall()
        cur.execute("SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments ORDER BY NAME")
        instruments = cur.fetchall()
        cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'performance_schema' "
                    "AND TABLE_NAME = 'threads' AND COLUMN_NAME = 'HISTORY'")
        history_off = None
        if cur.fetchone()[0]:
            cur.execute("SELECT COUNT(*) FROM performance_schema.threads WHERE TYPE = 'BACKGROUND' "
                        "AND HISTORY = 'NO'")
            history_off = cur.fetchone()[0]
    conn.close()
    return consumers, instruments, history_off


def history_consumers_on(sb) -> bool:
    conn = workload.connect(sb.socket)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM performance_schema.setup_consumers WHERE ENABLED = 'NO' AND NAME IN "
                    "('events_stages_history_long', 'events_statements_history_long')")
        off = cur.fetchone()[0]
    conn.close()
    return off == 0


def assert_delta_is_the_servers(result: dict, a_ns: list[float], b_ns: list[float]) -> None:
    """compare's paired wall delta against the same unprobed runs as each
    server timed them (ns a row, pair by pair, A then B): each side's mean,
    the delta and its paired t 95% interval within what the client's clock
    adds to the server's (a round trip and the parse: 1% of a row's time is
    far more); the verdict the interval gives; and its mechanisms with the
    unattributed rest summing to the delta. A delta of another sign, of 0, of
    twice the truth's, from the sampled or profiled runs, or pairs matched
    wrong (the interval) fails it wherever the delta is more than that 1%."""
    wall = result["wall"]
    tolerance = 0.01 * statistics.fmean(a_ns + b_ns)
    pairs = [b - a for a, b in zip(a_ns, b_ns, strict=True)]
    truth = statistics.fmean(pairs)
    half = t95(len(pairs) - 1) * statistics.stdev(pairs) / len(pairs) ** 0.5
    seen = (wall, a_ns, b_ns)
    assert wall["a"]["mean"] == pytest.approx(statistics.fmean(a_ns), abs=tolerance), seen
    assert wall["b"]["mean"] == pytest.approx(statistics.fmean(b_ns), abs=tolerance), seen
    assert wall["delta"] == pytest.approx(truth, abs=tolerance), seen
    assert wall["ci95"] == pytest.approx([truth - half, truth + half], abs=2 * tolerance), seen
    if abs(abs(truth) - half) > 2 * tolerance:   # not on the edge
        assert wall["verdict"] == ("finding" if abs(truth) > half else "noise"), seen
    named = sum(m["delta_ns_per_row"] for m in result["mechanisms"] if m["finding"])
    assert named + result["unattributed_ns_per_row"] == pytest.approx(wall["delta"], abs=2.0)


def perf_pictures(sides: list[tuple[int, object]], one_run, pairs: int = 2) -> list[dict[str, float]]:
    """Each side's ns a row by mechanism as perf sees it, the mean of
    `pairs` unprobed runs alternated A B, B A (one pair of one-second
    loads on this host moved a mechanism by a third): one_run(pid, conn)
    gives one run's picture."""
    runs: list[list[dict[str, float]]] = [[] for _ in sides]
    for n in range(pairs):
        for i in (range(len(sides)) if n % 2 == 0 else reversed(range(len(sides)))):
            runs[i].append(one_run(*sides[i]))
    return [{name: statistics.fmean(r.get(name, 0.0) for r in side) for name in {k for r in side for k in r}}
            for side in runs]


def assert_top_mechanism_is_perfs(result: dict, per_side: list[dict[str, float]], within: float) -> None:
    """compare's top finding is the mechanism whose delta is largest in perf's
    picture of an unprobed pair (ns a row by mechanism, A then B), within `within` of it."""
    deltas = {n: per_side[1].get(n, 0.0) - per_side[0].get(n, 0.0)
              for n in set(per_side[0]) | set(per_side[1]) if n not in (M.IDLE, M.PROBES_MECHANISM, M.OTHER)}
    truth_top = max(deltas, key=lambda n: abs(deltas[n]))
    findings = [m for m in result["mechanisms"] if m["finding"]]
    assert findings and findings[0]["name"] == truth_top, \
        (findings[:3], sorted(deltas.items(), key=lambda kv: kv[1])[:3])
    assert abs(findings[0]["delta_ns_per_row"] - deltas[truth_top]) <= within * abs(deltas[truth_top]), \
        (findings[0], deltas[truth_top])
