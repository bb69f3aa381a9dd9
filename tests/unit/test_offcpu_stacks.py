"""Off-CPU folding and symbolization, without root: synthetic records and this
process's own address space."""

from __future__ import annotations

import ctypes
import os

from mysqlprobe.collectors.offcpu import (WAITING_FOR_CPU, AddressResolver, OffCpuRecord, fold_offcpu,
                                          kernel_frames, totals)

USER = {0x401000: "clone3", 0x402000: "start_thread", 0x403000: "log_write_up_to", 0x404000: "fsync",
        0x405000: "io_handler_thread", 0x406000: "os_aio_handler"}
KERNEL = {0xffff1: "entry_SYSCALL_64_after_hwframe", 0xffff2: "do_fsync", 0xffff3: "io_schedule",
          0xffff4: "schedule", 0xffff5: "__schedule", 0xffff6: "bpf_trace_run4", 0xffff7: "bpf_prog_1234_on_switch"}


def _record(tid, user, kernel, ns, preempted=False, count=1):
    # the BPF stack maps give leaf first
    inverse_u = {v: k for k, v in USER.items()}
    inverse_k = {v: k for k, v in KERNEL.items()}
    return OffCpuRecord(tid, [inverse_u[f] for f in reversed(user)], [inverse_k[f] for f in reversed(kernel)],
                        preempted, ns, count)


def test_kernel_frames_stop_where_the_thread_gave_up_its_cpu():
    leaf_first = [0xffff7, 0xffff6, 0xffff5, 0xffff4, 0xffff3, 0xffff2, 0xffff1]
    assert kernel_frames(leaf_first, KERNEL.get) == ["entry_SYSCALL_64_after_hwframe_[k]", "do_fsync_[k]",
                                                     "io_schedule_[k]"]


def test_folded_stacks_weigh_microseconds_under_the_thread_name():
    blocked = ["entry_SYSCALL_64_after_hwframe", "do_fsync", "io_schedule", "schedule", "__schedule",
               "bpf_trace_run4"]
    records = [
        _record(11, ["clone3", "start_thread", "log_write_up_to", "fsync"], blocked, 2_500_400),
        _record(11, ["clone3", "start_thread", "log_write_up_to"], [], 7_000, preempted=True),
        _record(12, ["clone3", "start_thread", "io_handler_thread", "os_aio_handler"], blocked, 1_000_000),
        _record(12, ["clone3", "start_thread", "io_handler_thread"], [], 400, preempted=True),  # under 1 us: dropped
    ]
    folded = fold_offcpu(records, lambda a: USER[a], KERNEL.get, {11: "mysqld", 12: "mysqld"}, "mysqld",
                         {12: "thread/innodb/io_write_thread"})
    assert folded.stacks == {
        "mysqld/log_write_up_to;clone3;start_thread;log_write_up_to;fsync;entry_SYSCALL_64_after_hwframe_[k];"
        "do_fsync_[k];io_schedule_[k]": 2500,
        "mysqld/log_write_up_to;clone3;start_thread;log_write_up_to;" + WAITING_FOR_CPU: 7,
        "thread/innodb/io_write_thread;clone3;start_thread;io_handler_thread;os_aio_handler;"
        "entry_SYSCALL_64_after_hwframe_[k];do_fsync_[k];io_schedule_[k]": 1000,
    }
    assert totals(records) == {"blocked_s": 0.0035, "waiting_for_cpu_s": 7e-06, "switches": 4}  # to the us


def test_addresses_of_this_process_resolve_to_their_functions():
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    resolver = AddressResolver(os.getpid(), root="")
    assert resolver.name(address) == "__getpid"   # the global alias, as perf names it
    assert resolver.name(1) == "[unknown]"                       # not mapped
    maps = "00400000-00401000 r-xp 00000000 00:00 1 /nonexistent/lib.so\n"
    assert AddressResolver(0, maps_text=maps, root="").name(0x400010) == "[lib.so]"   # unreadable file


def test_aliases_at_one_address_are_named_as_perf_names_them():
    from mysqlprobe.collectors.elf import Function
    from mysqlprobe.collectors.offcpu import one_name_per_address

    libc = [Function("pwrite", 0xF6470, 165, "weak", ".dynsym"), Function("__pwrite64", 0xF6470, 165, "weak", ".dynsym"),
            Function("pwrite64", 0xF6470, 165, "weak", ".dynsym"),
            Function("__libc_pwrite", 0xF6470, 165, "global", ".dynsym"),   # perf's choice: the global one
            Function("fsync", 0xF7000, 90, "weak", ".dynsym"), Function("__fsync", 0xF7000, 90, "weak", ".dynsym")]
    assert sorted(one_name_per_address(libc)) == [(0xF6470, 165, "__libc_pwrite"), (0xF7000, 90, "fsync")]
