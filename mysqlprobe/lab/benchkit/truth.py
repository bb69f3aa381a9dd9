"""The truth the bench holds mysqlprobe's figures to: perf sampling every
CPU of an unprobed run, a function's CPU read off the stacks its samples
hold (its callees' with it), by this module's own reader of `perf script`."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path


def record_truth(wait, workdir: Path, hz: int) -> Path:
    """`perf record -g` of every CPU for as long as wait() waits, stopped: its data file."""
    data = workdir / "truth.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", str(hz), "-a",
                             "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait()
    perf.send_signal(2)
    perf.wait()
    return data


def on_stack_ns(pid: int, data: Path, groups: dict[str, str]) -> tuple[Counter, int]:
    """CPU ns of the unprobed server's samples with a function whose mangled
    name holds groups[g] anywhere on the stack, per group g (each sample
    counted once in a group), and of all its samples: the functions' CPU
    with their callees'. Read here, not by mysqlprobe's own reader of its
    bursts."""
    script = subprocess.Popen(["perf", "script", "-i", str(data), "--pid", str(pid), "-F", "period,ip,sym",
                               "--no-demangle"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ns: Counter = Counter()
    stack: list[str] = []
    period = total = 0
    assert script.stdout is not None

    def count() -> None:
        for g, part in groups.items():
            if any(part in frame for frame in stack):
                ns[g] += period

    for line in script.stdout:
        if line.startswith("\t"):  # a frame: address, then symbol
            stack.append(line.split(None, 1)[-1])
        elif line.strip().isdigit():  # a sample's period: the frames follow
            count()
            total += period
            period, stack = int(line), []
    count()
    total += period
    script.wait()
    data.unlink()
    return ns, total
