"""CPU stacks on a known call chain with return probes pending: the MySQL
5.6 stand-in built with frame pointers (so the BPF sampler walks them, as
on the real servers), every call probed, samples at 997 Hz. In the flame
graph's stacks no probed function sits on a frame that cannot call it: a
return trampoline on the stack must not rename a caller, nor a function
without a frame of its own drop its caller (one sample in a thousand may
still: in the kernel inside a return trampoline's system call, its kernel
stack not taken, nothing on it says it is the probe's)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import compile_fixture
from helpers import Profiler
from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.stacks import PROBE_FRAME, PROBES, fold_probe_frames

pytestmark = pytest.mark.root
ROWS = 300007  # prime

# who may call each probed function in the stand-in (tests/fixtures/mysqld_fixture.cc, -DMYSQL_56).
# handler::ha_write_row tail-calls the virtual write_row (no frame of its own), and static helpers
# the compiler inlines (run, dispatch) stand beside the function they are inlined into
CALLERS = {
    "dispatch_command": {"main", "dispatch"},
    "ha_partition::write_row": {"handler::ha_write_row", "run", "dispatch_command"},
    "get_partition_id_range": {"ha_partition::write_row"},
    "ha_innobase::write_row": {"handler::ha_write_row", "ha_partition::write_row"},
    "row_insert_for_mysql": {"ha_innobase::write_row"},
    "run": {"main", "dispatch_command"},
}


def impossible(stack: str) -> list[tuple[str, str]]:
    frames = stack.split(";")
    return [(caller, f) for caller, f in zip(frames, frames[1:]) if f in CALLERS and caller not in CALLERS[f]]


def test_no_flame_graph_stack_has_a_caller_that_cannot_call(fixture_dir, tmp_path):
    binary = compile_fixture(fixture_dir, "5.6", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                             name="mysqld-5.6-fp")
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline())["ready"]
        prof = Profiler(proc.pid, tmp_path, "--insert-profile", "--exact", "-F", "997", "--no-ps")
        proc.stdin.write(f"query {ROWS} 5 INSERT INTO t SELECT * FROM s\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["rows"] == ROWS
        code, _, err = prof.stop()
        assert code == 0, err
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=10)
    doc = prof.profile()
    assert doc["cpu_profile"]["status"] == "collected" and doc["cpu_profile"].get("sampler") == "bpf"
    raw = folded.parse((tmp_path / "stacks.folded").read_text().splitlines())
    shown, probes = fold_probe_frames(raw)
    assert raw.total > 500 and probes > 0            # every call probed: the probes' own samples are many
    through = sum(n for s, n in shown.stacks.items() if "ha_partition::write_row" in s.split(";"))
    assert through > 0                               # the chain itself is drawn (the probes' cost dwarfs it)
    wrong = {s: n for s, n in shown.stacks.items() if impossible(s)}
    # left: a sample in the kernel inside a return trampoline's system call whose kernel stack
    # could not be taken (no frame says it is the probe's): one in a thousand at most
    assert sum(wrong.values()) <= 0.001 * shown.total, sorted(wrong.items(), key=lambda kv: -kv[1])[:5]
    # no frame of the probes' machinery is left on a stack: each such stack ends in one [mysqlprobe]
    left = [s for s in shown.stacks if any(PROBE_FRAME.search(f) for f in s.split(";")[1:])]
    assert not left, left[:3]
    assert sum(n for s, n in shown.stacks.items() if s.split(";")[-1] == PROBES) == probes
