"""A large block freed goes back to the kernel in record and watch (glibc's
growing mmap threshold otherwise keeps it in the heap: watch grew a MB a
window). Run in a fresh interpreter: the setting is the process's."""

import subprocess
import sys

import pytest

from mysqlprobe.cli import steady_heap

PROBE = """
import sys
from mysqlprobe.cli import steady_heap
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
if sys.argv[1] == "steady":
    assert steady_heap()
block = bytearray(8 << 20); del block   # freed: glibc raises its threshold to 8 MB unless fixed
before = rss()
block = bytearray(6 << 20); del block   # below that threshold: from the heap, kept there
print(rss() - before)
"""


def kept_after_free(mode: str, cwd) -> int:
    # run outside the checkout: its mysqlprobe/ folder is not the installed package
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(not steady_heap(), reason="the C library has no mallopt (not glibc)")
def test_a_freed_large_block_is_given_back(tmp_path):
    assert kept_after_free("default", tmp_path) >= 4 << 20   # what the setting is there for: 6 MB kept
    assert kept_after_free("steady", tmp_path) < 1 << 20


@pytest.mark.parametrize("command, steadied", [("watch", True), ("record", True), ("report", False)])
def test_set_for_the_profiling_commands_only(monkeypatch, command, steadied):
    from mysqlprobe import cli
    calls = []
    monkeypatch.setattr(cli, "steady_heap", lambda: calls.append(command))
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert bool(calls) is steadied
