"""CPU samples taken in BPF (collectors/cpu/cpu_sampler.py), on the known-cost
target busy in one function: the count must match the CPU time the kernel
charged the process (/proc/PID/stat) times the frequency, the stacks must
name the function, and nothing is counted while the session is off."""

from __future__ import annotations

import json
import os
import time

import pytest

from mysqlprobe.collectors.target.addresses import user_names
from mysqlprobe.collectors.cpu.cpu_sampler import CpuSampleSession, cpu_frames
from mysqlprobe.collectors.kernel.process import cpu_seconds

pytestmark = pytest.mark.root

FREQUENCY = 997   # Hz, prime
LOOP_MS = 1301    # prime


def _loop(proc, name: str, ms: int) -> dict:
    proc.stdin.write(f"loop {name} {ms}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _busy(session, proc) -> float:
    """CPU seconds the target used over one loop, the session on."""
    cpu0 = cpu_seconds(proc.pid)
    session.start()
    _loop(proc, "cost_10us", LOOP_MS)
    session.stop()
    return cpu_seconds(proc.pid) - cpu0


def test_samples_match_the_cpu_time_and_name_the_busy_function(known_cost):
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=True, kernel_stacks=True) as session:
        cpu_s = _busy(session, known_cost)
        records = session.records()
        assert session.dropped(("sample map full", "stacks not taken")) == {}
    total = sum(r.count for r in records)
    expected = cpu_s * FREQUENCY
    assert expected > 500
    # a clock tick's worth of CPU time (10 ms) either way in /proc's figures, and 5% for the timer's phase
    assert abs(total - expected) <= 0.05 * expected + 0.01 * FREQUENCY * 2, (total, expected)
    names = user_names(known_cost.pid, [a for r in records for a in r.user])
    stacks = [cpu_frames(r, names.get, lambda _a: None) for r in records]
    # the busy code itself; a leaf without a frame of its own, so the walk goes on from its
    # caller's caller (as perf's does along frame pointers), down to the thread's start in libc
    in_body = [(r.count, frames) for r, frames in zip(records, stacks) if frames[-1] == "body_10us"]
    assert sum(n for n, _ in in_body) >= 0.9 * total, stacks[:5]
    assert all(len(frames) >= 2 and frames[0] == "[libc.so.6]" for _, frames in in_body), in_body[:5]
    assert all(r.tid == known_cost.pid for r in records)   # the target's one thread, no other process


SPREAD = 1 << 12   # the fixture's stacks of a spread (its SPREAD_BITS)


def test_every_sample_keeps_its_stack_where_stacks_collide(known_cost):
    """CPU time spread over the fixture's 4,096 stacks of 13 frames under
    write_spread(): a thousand or more of them sampled, in a stack map of
    16,384 buckets, share buckets by the dozen, and bpf_get_stackid()
    refuses each stack whose bucket holds another. A refused stack is
    copied by its content: no sample loses its stack, each keeps all 13."""
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=True, kernel_stacks=True) as session:
        session.start()
        known_cost.stdin.write(f"spin_spread {SPREAD} 300000\n")
        known_cost.stdin.flush()
        assert json.loads(known_cost.stdout.readline()) == {"calls": SPREAD}
        session.stop()
        records = session.records()
        assert session.dropped(("sample map full", "stacks not taken", "copied-stack map full")) == {}
    names = user_names(known_cost.pid, [a for r in records for a in r.user])
    stacks = [(r.count, cpu_frames(r, names.get, lambda _a: None)) for r in records]
    spread = [(n, frames[frames.index("write_spread") + 1:]) for n, frames in stacks if "write_spread" in frames]
    whole = [(n, tuple(below)) for n, below in spread if len(below) == 13 and
             all(f in ("spread_a", "spread_b") for f in below)]
    assert sum(n for n, _ in whole) >= 0.95 * sum(n for n, _ in spread), spread[:5]
    assert len({below for _, below in whole}) >= 1000


def test_slices_of_time_hold_each_sample_when_it_was_taken(known_cost):
    """Busy, idle, busy again, the session on all along and slicing by 50 ms:
    the sliced samples are the samples; none falls in a slice wholly inside
    the idle gap; each busy spell's slices hold its share of the CPU time
    the kernel charged over it (/proc, read around each spell)."""
    slice_ns = 50_000_000
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=True, kernel_stacks=False,
                          slice_ns=slice_ns) as session:
        session.start()
        spells = []
        for ms in (LOOP_MS, 0, 701):
            t0, cpu0 = time.monotonic_ns(), cpu_seconds(known_cost.pid)
            if ms:
                _loop(known_cost, "cost_10us", ms)
            else:
                time.sleep(0.6)    # idle: the target waits for its next command
            spells.append((t0, time.monotonic_ns(), cpu_seconds(known_cost.pid) - cpu0))
        session.stop()
        whole, sliced = session.records(), session.records(sliced=True)
        assert session.dropped(("sample map full", "samples without their time")) == {}
    assert sum(r.count for r in sliced) == sum(r.count for r in whole) > 500

    def starts(r) -> int:
        return session.origin_ns + r.slice * slice_ns
    (a0, a1, a_cpu), (g0, g1, _), (b0, b1, b_cpu) = spells
    in_gap = [r for r in sliced if starts(r) >= g0 and starts(r) + slice_ns <= g1]
    assert not in_gap, [(r.slice, r.count) for r in in_gap]
    in_a = sum(r.count for r in sliced if starts(r) < a1 and starts(r) + slice_ns > a0)
    in_b = sum(r.count for r in sliced if starts(r) < b1 and starts(r) + slice_ns > b0)
    assert in_a + in_b == sum(r.count for r in sliced)
    # each spell's samples over its CPU seconds: the frequency, within 5% and a tick either way
    for n, cpu_s in ((in_a, a_cpu), (in_b, b_cpu)):
        assert abs(n - cpu_s * FREQUENCY) <= 0.05 * cpu_s * FREQUENCY + 0.01 * FREQUENCY * 2, (n, cpu_s)


def test_nothing_is_counted_while_off(known_cost):
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=False, kernel_stacks=False) as session:
        _busy(session, known_cost)
        before = sum(r.count for r in session.records())
        _loop(known_cost, "cost_10us", 307)             # busy, the session off
        after = sum(r.count for r in session.records())
    assert before > 300 and after == before


def test_without_stacks_the_sampled_address_names_the_function(known_cost):
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=False, kernel_stacks=False) as session:
        _busy(session, known_cost)
        records = session.records()
    assert all(len(r.user) <= 1 and r.kernel == [] for r in records)
    names = user_names(known_cost.pid, [r.user[0] for r in records if r.user])
    own = sum(r.count for r in records if r.user and names[r.user[0]] == "body_10us")
    assert own >= 0.9 * sum(r.count for r in records)


def perf_fds() -> int:
    """The perf events this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        except FileNotFoundError:   # the listing's own descriptor, gone by now
            pass
    return count


def test_the_events_are_closed_when_the_session_is(known_cost):
    before = perf_fds()
    with CpuSampleSession(known_cost.pid, FREQUENCY, user_stacks=True, kernel_stacks=True) as session:
        session.start()
        assert perf_fds() == before + len(session.cpus)
        session.stop()
        assert perf_fds() == before
        session.start()
    assert perf_fds() == before


def test_no_event_is_open_while_the_session_is_off(known_cost):
    """Its events interrupt the CPUs whether the program counts or not: none
    open from the load (where its attach is checked) until start()."""
    before = perf_fds()
    with CpuSampleSession(known_cost.pid, 4999, user_stacks=False, kernel_stacks=False) as session:
        assert perf_fds() == before
        session.start()
        assert perf_fds() == before + len(session.cpus)
        session.stop()
        assert perf_fds() == before
