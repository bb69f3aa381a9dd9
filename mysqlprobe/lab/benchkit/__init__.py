"""The bench scripts' shared library: what every script of bench/ needs to
run a tool beside a load and to publish what it measured.

A script's figures go to one place: its section of bench/RESULTS.md (found
by a marker line, replaced in place) and its key of bench/results.json (the
figures the section was written from). SECTIONS orders them; a script not
in it gets the next number. The scripts import this module; none imports
another script."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

from mysqlprobe import __version__


def measure_of(overhead: dict) -> float | None:
    """The slowdown a capture measured, below 1.0 too (`slowdown_estimate`;
    `measured_slowdown`, the printed figure, is null there), for the bench
    to set against the felt one; captures before it: the printed figure."""
    return overhead.get("slowdown_estimate", overhead.get("measured_slowdown"))


def bench_dir() -> Path:
    """The checkout's bench/: the running script's folder, else ./bench."""
    here = Path(sys.argv[0]).resolve().parent
    return here if here.name == "bench" else Path.cwd() / "bench"


HERE = bench_dir()
ROOT = HERE.parent
MYSQLPROBE = str(Path(sys.executable).with_name("mysqlprobe"))
BPFTRACE = shutil.which("bpftrace") or "bpftrace"

# (results key, script and options that write it), in RESULTS.md's order
SECTIONS = (("overhead", "bench/overhead.py"), ("oltp", "bench/oltp.py"), ("per_call", "bench/per_call.py"),
            ("short_load", "bench/short_load.py"), ("per_call_oltp", "bench/per_call.py --clients N"),
            ("regression", "bench/wall.py compare"), ("oltp_parts", "bench/costs.py parts"),
            ("cpu_share", "bench/costs.py cpu-share"), ("phase_profile", "bench/phases.py profile"),
            ("ps_switch", "bench/phases.py ps-switch"), ("sampler_agreement", "bench/cpu_sampler.py agreement"),
            ("sample_cost", "bench/cpu_sampler.py cost"), ("digests", "bench/counts.py digests"),
            ("io_counts", "bench/counts.py io"), ("usdt_counts", "bench/counts.py usdt"),
            ("startup", "bench/startup.py"), ("start_stop", "bench/lifecycle.py start-stop"),
            ("attach_churn", "bench/lifecycle.py churn"), ("soak", "bench/lifecycle.py soak"),
            ("account", "bench/wall.py account"), ("fuzz", "bench/fuzz.py"),
            ("index_build", "bench/wall.py index-build"))
MARKER = "<!-- section: {} -->"
RESULTS_HEAD = """# Benchmark results

Every figure mysqlprobe's README states comes from here. Each section is
written by the script its heading names (bench/README.md says what each
asks and how long it takes) and regenerated in place when that script runs
again: git keeps the earlier ones. Each says its date, command, commit and
machine. bench/results.json holds the figures each section was written
from, under the same key as the section's marker line.
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def med(xs):
    return statistics.median(xs) if xs else None


BOOTSTRAP_ROUNDS = 4000


def median_interval(values: list[float], rounds: int = BOOTSTRAP_ROUNDS) -> tuple[float, float]:
    """A 95% interval for the median of values: the medians of resampled
    sets (with replacement, seeded), their 2.5th and 97.5th percentiles."""
    if not values:
        return math.nan, math.nan
    pick = random.Random(0)
    medians = sorted(statistics.median(pick.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def spread(xs):
    return [min(xs), max(xs)] if xs else None


def span(xs: list[float], f: str = "{:.0f}") -> str:
    """'median [min, max]' of figures, each as f formats it; '-' for none."""
    if not xs:
        return "-"
    return f"{f.format(statistics.median(xs))} [{f.format(min(xs))}, {f.format(max(xs))}]"


class Tool:
    """A probing tool running in the background, ready once its probes are attached."""

    def __init__(self, cmd: list[str], ready: str, stream: str, env: dict | None = None):
        self.started = time.monotonic()
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        pipe = self.proc.stderr if stream == "stderr" else self.proc.stdout
        assert pipe is not None and self.proc.stderr is not None
        seen = []
        for line in pipe:
            seen.append(line)
            if ready in line:
                break
        else:
            raise RuntimeError(f"{cmd[0]} did not get ready: {''.join(seen)}{self.proc.stderr.read()}")
        self.ready_s = time.monotonic() - self.started

    def stop(self) -> tuple[str, str]:
        # bpftrace 0.17 now and then misses a SIGINT that comes soon after its
        # start, and waits for ever: it gets another every 10 s
        if self.cmd[0] != BPFTRACE:
            self.proc.send_signal(signal.SIGINT)
            return self.proc.communicate(timeout=600)
        for _ in range(60):
            self.proc.send_signal(signal.SIGINT)
            try:
                return self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        self.proc.kill()
        return self.proc.communicate()


def profiled_run(pid: int, out: Path, run: Callable[[], tuple[int, float]], lead_s: float,
                 *args: str) -> tuple[int, float]:
    """mysqlprobe -p PID -o OUT (and args) in its default mode, `run` started
    lead_s after its window opened, mysqlprobe stopped (SIGINT) as it
    returns: the load's (rows, seconds). The capture is in OUT."""
    proc = subprocess.Popen([MYSQLPROBE, "-p", str(pid), "-o", str(out), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "Tracing PID" in line:
            break
    time.sleep(lead_s)
    rows, seconds = run()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    return rows, seconds


class Mysqlprobe:
    """mysqlprobe saving to a new folder, started and stopped around a block of a load."""

    def __init__(self, pid: int, workdir: Path, *args: str):
        self.pid, self.workdir, self.args = pid, workdir, args

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(dir=self.workdir))
        self.tool = Tool([MYSQLPROBE, "-p", str(self.pid), "-q", "-o", str(self.dir), *self.args], "Tracing PID",
                         "stderr")

    def stop(self) -> dict:
        """The slowdown it reported, and the load's rate in its quiet phases."""
        self.tool.stop()
        doc = derived(self.dir)
        from mysqlprobe.lab.benchkit.loads import quiet_rate
        return {"reported": measure_of(doc["overhead"]), "quiet_rate": quiet_rate(doc)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def derived(capture_dir) -> dict:
    """A saved capture with everything analysis derives from it."""
    from mysqlprobe.reports import load_profile
    return load_profile(str(capture_dir)).to_json()


def fixture_command(proc, line: str) -> dict:
    """One request to the known-cost fixture's command loop, its JSON answer."""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "0")
    bt = subprocess.run([BPFTRACE, "--version"], capture_output=True, text=True).stdout.strip() \
        if shutil.which(BPFTRACE) else ""
    return {"hostname": platform.node(), "kernel": platform.release(), "cpu": cpu, "cpus": os.cpu_count(),
            "memory_gib": round(int(mem) / 2**20, 1), "mysqlprobe": __version__, "bpftrace": bt,
            "commit": commit()}


def commit() -> str:
    """The checkout's commit, marked when the tree had changes (the figures are then not that commit's)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=7", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine_line(m: dict) -> str:
    """A results section's line about the machine, from machine()."""
    return (f"Machine: {m['hostname']}, {m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}, "
            f"mysqlprobe {m['mysqlprobe']}" + (f", commit {m['commit']}." if m.get("commit") else "."))


def bench_parser(doc: str, **numbers: int) -> argparse.ArgumentParser:
    """A bench script's arguments: its docstring's first paragraph, --NAME N
    for each of `numbers` (their defaults), and --out (default bench/)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name, default in numbers.items():
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--out", default=str(HERE))
    return ap


def rendered_again(args: argparse.Namespace, key: str, markdown: Callable[[dict], str]) -> bool:
    """With --render: the section written again from the figures results.json
    keeps, nothing measured; whether it was asked."""
    if not args.render:
        return False
    write_results(args.out, key, stored(key, args.out), markdown)
    return True


def run_line(result: dict, command: str | None = None) -> str:
    """A results section's line about the machine, the start and the command."""
    return (f"{machine_line(result['machine'])} Started {result['started']}. Command: "
            f"`sudo .venv/bin/python {command or result['command']}`.")


def stored(key: str, out_dir: str | Path = HERE) -> dict:
    """A section's figures as results.json keeps them."""
    return json.loads((Path(out_dir) / "results.json").read_text())[key]


def section_text(key: str, markdown: str) -> str:
    """A script's markdown as its RESULTS.md section: its marker, its title
    numbered and followed by the script, its headings one level down."""
    keys = [k for k, _ in SECTIONS]
    number = keys.index(key) + 1 if key in keys else len(keys) + 1
    script = dict(SECTIONS).get(key, f"bench/{key}.py")
    lines = markdown.strip("\n").splitlines()
    title = key
    if lines and lines[0].startswith("# "):
        title, lines = lines[0][2:].strip(), lines[1:]
    lines = ["#" + line if re.match(r"#{2,5} ", line) else line for line in lines]
    return "\n".join([MARKER.format(key), f"## {number}. {title} ({script})", *lines]).rstrip("\n") + "\n"


def replace_section(text: str, key: str, section: str) -> str:
    """RESULTS.md's text with a section put in place of its old one, or in
    SECTIONS' order where it had none."""
    marks = [(m.start(), m.group(1)) for m in re.finditer(r"^<!-- section: (\S+) -->$", text, re.M)]
    keys = [k for k, _ in SECTIONS]
    for i, (at, k) in enumerate(marks):
        if k == key:
            end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
            return text[:at] + section + ("\n" if end < len(text) else "") + text[end:]
    rank = keys.index(key) if key in keys else len(keys)
    after = next((at for at, k in marks if (keys.index(k) if k in keys else len(keys)) > rank), None)
    if after is None:
        return text.rstrip("\n") + "\n\n" + section
    return text[:after] + section + "\n" + text[after:]


def publish(key: str, result: dict | None, markdown: str, out_dir: str | Path = HERE) -> Path:
    """A script's figures into results.json[key] and its section into RESULTS.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if result is not None:
        path = out / "results.json"
        every = json.loads(path.read_text()) if path.exists() else {}
        every[key] = result
        path.write_text(json.dumps(every, indent=1) + "\n")
    md = out / "RESULTS.md"
    text = md.read_text() if md.exists() else RESULTS_HEAD
    md.write_text(replace_section(text, key, section_text(key, markdown)))
    log(f"wrote section '{key}' of {md}")
    return md


def run_subcommand(doc: str, subcommands: dict[str, tuple[Callable[[], object], str]]) -> int:
    """A script of several measurements: the one named first runs with the
    rest of the command line; none, or --help: the list of them."""
    if len(sys.argv) < 2 or sys.argv[1] not in subcommands:
        asked = "--help" in sys.argv or "-h" in sys.argv
        listed = "\n".join(textwrap.fill(text.split("\n\n")[0].replace("\n", " "), 79,
                                         initial_indent=f"  {name:<12} ", subsequent_indent=" " * 15)
                           for name, (_, text) in subcommands.items())
        print(f"usage: {sys.argv[0]} {{{','.join(subcommands)}}} [options]\n\n{doc.split(chr(10) * 2, 1)[0]}"
              f"\n\nsubcommands:\n{listed}", file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    name = sys.argv.pop(1)
    run, _ = subcommands[name]
    sys.argv[0] = f"{sys.argv[0]} {name}"   # argparse's usage line names the subcommand
    run()
    return 0


def write_results(out_dir: str, name: str, result: dict, markdown: Callable[[dict], str]) -> None:
    """A script's figures and their markdown, published under its name."""
    publish(name, result, markdown(result), out_dir)
