"""The BPF CPU sampler's user-space side: which sampler a capture gets,
the CPUs it opens events on, and how its records become frames (no root:
the sampling itself is tests/integration/test_cpu_sampler.py)."""

from types import SimpleNamespace

import pytest

from mysqlprobe.collectors.cpu.cpu_bursts import burst_time, burst_time_of
from mysqlprobe.collectors.cpu.cpu_sampler import (CpuBurstSampler, CpuProfileCollector, SampleRecord, cpu_frames,
                                               online_cpus)
from mysqlprobe.collectors.cpu.cpu_bursts import CpuBurstCollector
from mysqlprobe.collectors.cpu.perf import PerfCollector, PerfOptions
from mysqlprobe.collectors.cpu.perf_record import Unwinding
from mysqlprobe.errors import BpfError
from mysqlprobe.recorder.recorder import cpu_bursts, cpu_profile

WITH_FP = SimpleNamespace(frame_pointer_share=0.98)
WITHOUT_FP = SimpleNamespace(frame_pointer_share=0.0)


@pytest.mark.parametrize("text, cpus", [("0\n", [0]), ("0-1\n", [0, 1]), ("0-3,5,7-8\n", [0, 1, 2, 3, 5, 7, 8])])
def test_online_cpus(text, cpus):
    assert online_cpus(text) == cpus


def test_frame_pointers_get_the_bpf_sampler_and_dwarf_keeps_perf():
    bpf = cpu_profile(7, WITH_FP, PerfOptions(), "auto")
    assert isinstance(bpf, CpuProfileCollector) and bpf.unwinding.mode == "fp" and bpf.frequency == 99
    assert isinstance(cpu_profile(7, WITHOUT_FP, PerfOptions(), "auto"), PerfCollector)
    assert isinstance(cpu_profile(7, WITH_FP, PerfOptions(keep_data=True), "auto"), PerfCollector)  # perf.data
    assert isinstance(cpu_profile(7, WITH_FP, PerfOptions(), "perf"), PerfCollector)
    forced = cpu_profile(7, WITHOUT_FP, PerfOptions(frequency=49), "bpf")
    assert isinstance(forced, CpuProfileCollector) and forced.frequency == 49
    assert forced.unwinding.mode == "fp" and "--sampler bpf" in forced.unwinding.reason


def test_bursts_are_sampled_in_bpf_with_or_without_stacks():
    fp = Unwinding("fp", "test")
    with_stacks = cpu_bursts(7, {"s": ["f"]}, 1999, fp, "auto")
    assert isinstance(with_stacks, CpuBurstSampler) and with_stacks.user_stacks and not with_stacks.kernel_stacks
    assert not cpu_bursts(7, {"s": ["f"]}, 1999, None, "auto").user_stacks   # the sampled address alone
    assert isinstance(cpu_bursts(7, {"s": ["f"]}, 1999, fp, "perf"), CpuBurstCollector)


def test_frames_run_root_first_user_then_kernel_without_clone_suffixes():
    record = SampleRecord(tid=11, user=[0x10, 0x20, 0x30], kernel=[0xff01, 0xff02], in_kernel=True, count=3)
    user = {0x10: "leaf", 0x20: "caller", 0x30: "[libc.so.6]"}.get
    kernel = {0xff01: "finish_task_switch.isra.0", 0xff02: None}.get
    assert cpu_frames(record, user, kernel) == ["[libc.so.6]", "caller", "leaf", "[unknown]_[k]",
                                                "finish_task_switch_[k]"]
    lost = SampleRecord(tid=11, user=[], kernel=[], in_kernel=False, count=1)   # no user stack taken
    assert cpu_frames(lost, user, kernel) == ["[unknown]"]
    # at a return-probed function's entry the callers the kernel gave are not trusted: the leaf and [uprobes]
    entry = SampleRecord(tid=11, user=[0x10, 0x20, 0x30], kernel=[], in_kernel=False, count=2, at_entry=True)
    assert cpu_frames(entry, user, kernel) == ["leaf", "[uprobes]"]
    # a frameless leaf: the walk skipped its caller, the word at the stack's top gives it back
    skipped = SampleRecord(tid=11, user=[0x10, 0x30], kernel=[], in_kernel=False, count=1, caller=0x20)
    assert cpu_frames(skipped, user, kernel) == ["[libc.so.6]", "caller", "leaf"]
    framed = SampleRecord(tid=11, user=[0x10, 0x20, 0x30], kernel=[], in_kernel=False, count=1, caller=0x21)
    assert cpu_frames(framed, {**{0x21: "caller"}, 0x10: "leaf", 0x20: "caller", 0x30: "[libc.so.6]"}.get,
                      kernel) == ["[libc.so.6]", "caller", "leaf"]       # already on the chain: not twice


def test_counted_samples_weigh_as_many_of_perfs_lines():
    lines = ["    500250            994948 _Zf", "    500250            994950 _Zg",
             "    500250            994951 _Zf"]
    stages = {"a": ["_Zf"], "b": ["_Zg"]}
    from_lines, n = burst_time(lines, stages)
    counted, m = burst_time_of([(500250, ["_Zf"], 2), (500250, ["_Zg"], 1)], stages)
    assert (counted, m) == (from_lines, n)
    kernel, _ = burst_time_of([(500250, ["[kernel]", "_Zf"], 4)], stages)   # in a system call made from _Zf
    assert kernel.functions == {} and kernel.stages == {"a": {"samples": 4, "ns": 4 * 500250}}


class FlakySession:
    """A sampling session whose events cannot be opened again after `opens` times."""

    def __init__(self, opens: int):
        self.opens, self.on = opens, False

    def start(self):
        if self.opens == 0:
            raise BpfError("a cpu-clock event on CPU 1: Too many open files")
        self.opens -= 1
        self.on = True

    def stop(self):
        self.on = False


def test_sampling_that_cannot_be_switched_back_on_is_counted_not_fatal():
    profile = CpuProfileCollector(7, 99, Unwinding("fp", "test"))
    profile.session = FlakySession(opens=1)
    profile.resume()
    assert profile.session.on
    assert profile.quiet(True) and not profile.session.on
    assert not profile.quiet(False)      # could not open again: still quiet, counted
    assert profile.switch_failures == 1 and not profile.session.on
    notes = profile.switch_notes()
    assert len(notes) == 1 and "could not be switched on 1 times (a cpu-clock event on CPU 1: Too many" in notes[0]
    bursts = CpuBurstSampler(7, {"s": ["f"]}, 1999, None)
    bursts.session = FlakySession(opens=0)
    bursts.resume()
    bursts.pause()
    assert bursts.switch_failures == 1
