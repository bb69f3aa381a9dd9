"""The I/O collector on the known-cost target: it writes a file with a known
number of pwrite64 calls of a known size and one fdatasync, or submits a
known number of iocbs through io_submit, with the system calls made right
in write_pages() and submit_pages(): the stack, the file, the calls and the
bytes are all known."""

from __future__ import annotations

import json
import time

import pytest

from helpers import Profiler
from mysqlprobe.flamegraphs import folded

pytestmark = pytest.mark.root

WRITES, PAGE = 13, 4096          # prime count
IOCBS, AIO_PAGE = 14, 8192       # two iocbs per io_submit
SPREAD = 1 << 12                 # the fixture's writes of a stack each (its SPREAD_BITS)


def _command(proc, line: str) -> dict:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _stacks(path) -> dict[str, int]:
    return folded.parse(path.read_text().splitlines()).stacks


def _below(stacks: dict[str, int], function: str, call: str, file: str) -> int:
    """The weight of the stacks that run through function into call on file."""
    total = 0
    for stack, weight in stacks.items():
        frames = stack.split(";")
        if function in frames and frames[-2:] == [call + "_[k]", f"[{file}]"]:
            total += weight
    return total


def _profiled(known_cost, tmp_path, file: str, command: str):
    """The fixture's command on tmp_path/file, profiled: (its answer, the io
    section, the capture directory, the report)."""
    data = tmp_path / file
    data.parent.mkdir()
    prof = Profiler(known_cost.pid, tmp_path / "cap", "--probe", "cost_1us", "--exact", "--no-cpu")
    done = _command(known_cost, command.format(data=data))
    code, out, err = prof.stop()
    assert code == 0, err
    doc = prof.profile()
    assert doc["io"]["status"] == "collected"
    assert doc["overhead"]["by_collector"]["io"]["target_s"] > 0
    return done, doc["io"], tmp_path / "cap", out


def test_writes_are_counted_with_their_stack_file_and_bytes(known_cost, tmp_path):
    done, io, cap, out = _profiled(known_cost, tmp_path, "pages/t1.ibd", f"write {{data}} {WRITES} {PAGE}")
    assert done == {"written": WRITES * PAGE, "calls": WRITES}
    (entry,) = [f for f in io["by_file"] if f["file"] == "pages/t1.ibd"]
    assert (entry["calls"], entry["write_bytes"], entry["read_bytes"], entry["syncs"]) == (WRITES + 1, WRITES * PAGE,
                                                                                        0, 1)
    calls, written = _stacks(cap / io["calls_file"]), _stacks(cap / io["bytes_file"])
    assert _below(calls, "write_pages", "pwrite64", "pages/t1.ibd") == WRITES
    assert _below(written, "write_pages", "pwrite64", "pages/t1.ibd") == WRITES * PAGE
    assert _below(calls, "write_pages", "fdatasync", "pages/t1.ibd") == 1
    assert _below(_stacks(cap / io["stacks_file"]), "write_pages", "fdatasync", "pages/t1.ibd") > 0
    assert "I/O system calls:" in out and "pages/t1.ibd" in out
    assert (cap / "io.svg").read_text().startswith("<svg")
    assert "I/O flame graph" in (cap / "report.html").read_text()


def test_every_write_keeps_its_stack_where_stacks_collide(known_cost, tmp_path):
    """4,096 stacks of writes, each its own, in a stack map of 16,384
    buckets: hundreds share a bucket, which bpf_get_stackid() refuses.
    Each refused stack is copied by its content: every write is found
    under its own stack, none without one."""
    done, io, cap, _ = _profiled(known_cost, tmp_path, "spread/t", f"spread {{data}} {SPREAD} 512")
    assert done == {"written": SPREAD * 512, "calls": SPREAD}
    calls = _stacks(cap / io["calls_file"])
    spread = {s: w for s, w in calls.items() if "write_spread" in s.split(";")}
    assert sum(spread.values()) == SPREAD and len(spread) == SPREAD, (sum(spread.values()), len(spread))
    assert _below(_stacks(cap / io["bytes_file"]), "write_spread", "pwrite64", "spread/t") == SPREAD * 512
    assert not io["dropped"], io["dropped"]


def test_iocbs_count_under_their_own_file_and_size(known_cost, tmp_path):
    done, io, cap, _ = _profiled(known_cost, tmp_path, "aio/log", f"aio {{data}} {IOCBS} {AIO_PAGE}")
    assert done == {"submitted": IOCBS}
    calls, written = _stacks(cap / io["calls_file"]), _stacks(cap / io["bytes_file"])
    assert _below(calls, "submit_pages", "aio pwrite", "aio/log") == IOCBS
    assert _below(written, "submit_pages", "aio pwrite", "aio/log") == IOCBS * AIO_PAGE
    reaped = sum(w for s, w in calls.items() if "submit_pages" in s and "io_getevents_[k]" in s.split(";"))
    assert 1 <= reaped <= IOCBS
    (by_call,) = [c for c in io["by_call"] if c["call"] == "aio pwrite"]
    assert (by_call["calls"], by_call["bytes"]) == (IOCBS, IOCBS * AIO_PAGE)


def test_no_io_leaves_it_out(known_cost, tmp_path):
    prof = Profiler(known_cost.pid, tmp_path, "--probe", "cost_1us", "--exact", "--no-cpu", "--no-io")
    _command(known_cost, f"write {tmp_path / 'x'} 3 512")
    code, _, err = prof.stop()
    assert code == 0, err
    assert prof.profile()["io"] == {"status": "not requested"}
    assert not (tmp_path / "io.folded").exists()


def test_a_call_open_when_a_phase_ends_counts_up_to_its_end(known_cost):
    """The fixture waits for its next command in read(0): open across the
    phases' end, its later return must not add the time between phases."""
    from mysqlprobe.collectors.kernel.io import IoSession

    with IoSession(known_cost.pid) as session:
        session.start()
        _command(known_cost, "run cost_1us 1")          # its next read(0) begins in this phase
        time.sleep(0.05)
        session.stop()                                   # it still reads: cut here
        time.sleep(0.3)
        session.start()
        _command(known_cost, "run cost_1us 1")          # the read returns in this phase
        session.stop()
        reads = [r for r in session.records() if r.call == "read" and r.fd == 0]
    assert reads and sum(r.calls for r in reads) >= 1
    assert all(r.ns < 250_000_000 for r in reads)        # not the 0.3 s between the phases
    assert max(r.ns for r in reads) >= 40_000_000        # the cut call: up to its phase's end
