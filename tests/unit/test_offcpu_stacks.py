"""Off-CPU folding and symbolization, without root: synthetic records and this
process's own address space."""

from __future__ import annotations

import ctypes
import os

import pytest

from mysqlprobe.collectors.target import addresses
from mysqlprobe.collectors.target.addresses import KernelSymbols, alias_rank, user_names
from mysqlprobe.collectors.kernel.offcpu import (WAITING_FOR_CPU, OffCpuRecord, ThreadWaits, fold_offcpu,
                                          kernel_frames, spread_waits, totals, wait_length)

USER = {0x401000: "clone3", 0x402000: "start_thread", 0x403000: "log_write_up_to", 0x404000: "fsync",
        0x405000: "io_handler_thread", 0x406000: "os_aio_handler"}
KERNEL = {0xffff1: "entry_SYSCALL_64_after_hwframe", 0xffff2: "do_fsync", 0xffff3: "io_schedule",
          0xffff4: "schedule", 0xffff5: "__schedule", 0xffff6: "bpf_trace_run4", 0xffff7: "bpf_prog_1234_on_switch"}


def _record(tid, user, kernel, ns, preempted=False, count=1, recovered=False):
    # the BPF stack maps give leaf first
    inverse_u = {v: k for k, v in USER.items()}
    inverse_k = {v: k for k, v in KERNEL.items()}
    return OffCpuRecord(tid, [inverse_u[f] for f in reversed(user)], [inverse_k[f] for f in reversed(kernel)],
                        preempted, ns, count, recovered)


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
        _record(12, ["clone3", "start_thread", "io_handler_thread", "os_aio_handler"], blocked, 1_000_000, recovered=True),
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
    assert totals(records) == {"blocked_s": 0.0035, "waiting_for_cpu_s": 7e-06, "switches": 4,  # to the us
                               "recovered_s": 0.001}


def test_paced_stacks_carry_all_of_their_threads_waits_of_their_kind():
    """Thread 7 had 10 blocked waits, 4 ms in all; of them 2 were taken, one
    in log_write_up_to (1 ms) and one in os_aio_handler (0.5 ms): the 4 ms
    are spread 2:1, the waits 5 each. Its one preempted wait was taken, as
    timed. Thread 8's blocked waits had no stack taken: apart, in none."""
    log = _record(7, ["clone3", "log_write_up_to"], ["do_fsync"], 1_000_000)
    aio = _record(7, ["clone3", "os_aio_handler"], ["io_schedule"], 500_000)
    cpu = _record(7, ["clone3", "log_write_up_to"], [], 300_000, preempted=True)
    timed = {(7, False, 0): ThreadWaits(4_000_000, 10), (7, True, 0): ThreadWaits(300_000, 1),
             (8, False, 0): ThreadWaits(2_000_000, 3)}
    spread, unstacked = spread_waits([log, aio, cpu], timed)
    assert [(r.user, r.ns, r.count) for r in spread] == [(log.user, 2_666_667, 5), (aio.user, 1_333_333, 5),
                                                        (cpu.user, 300_000, 1)]
    assert spread[2] is cpu and unstacked == 2_000_000
    assert sum(r.ns for r in spread if not r.preempted) == pytest.approx(4_000_000, abs=1)
    assert spread_waits([log], {(7, False, 0): ThreadWaits(1_000_000, 1)}) == ([log], 0)   # unpaced: as taken
    # a wait of a longer decade with no stack taken stays apart: it does not swell the short waits' stacks
    spread, unstacked = spread_waits([log], {(7, False, 0): ThreadWaits(2_000_000, 4),
                                             (7, False, 4): ThreadWaits(900_000_000, 1)})
    assert [r.ns for r in spread] == [2_000_000] and unstacked == 900_000_000


def test_a_waits_length_is_its_decade_from_a_tenth_of_a_millisecond():
    assert [wait_length(ns) for ns in (0, 99_999, 100_000, 999_999, 1_000_000, 99_999_999, 100_000_000, 10**12)] \
        == [0, 0, 1, 1, 2, 3, 4, 4]


def test_addresses_of_this_process_resolve_to_their_functions():
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    names = user_names(os.getpid(), [address, 1, address], root="")
    assert names == {address: "__getpid", 1: "[unknown]"}   # the global alias, as perf names it; 1 is not mapped
    maps = "00400000-00401000 r-xp 00000000 00:00 1 /nonexistent/lib.so\n"
    assert user_names(0, [0x400010], maps_text=maps, root="") == {0x400010: "[lib.so]"}   # unreadable file


def test_a_file_read_for_one_collector_serves_the_next(monkeypatch):
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    files: dict = {}
    first = user_names(os.getpid(), [address], root="", files=files)
    assert first == {address: "__getpid"} and len(files) == 1 and None not in files.values()

    def no_second_read(path):
        raise AssertionError(f"{path} read again")
    monkeypatch.setattr(addresses, "FileFunctions", no_second_read)
    assert user_names(os.getpid(), [address], root="", files=files) == first


def test_names_are_read_from_the_file_as_pyelftools_reads_them():
    """The string tables stay in the file: names_at reads each name asked
    for; libc's names at its functions' starts and inside them are
    pyelftools' (the outside reference), up to the aliases' choice."""
    from elftools.elf.elffile import ELFFile
    with open("/proc/self/maps") as f:
        maps = addresses.file_mappings(f.read())
    libc = next(m.path for m in maps if "/libc.so" in m.path or "/libc-" in m.path)
    functions = addresses.FileFunctions(libc)
    theirs: dict[int, set] = {}
    with open(libc, "rb") as f:
        for table in ("symtab", "dynsym"):
            section = ELFFile(f).get_section_by_name("." + table)
            for sym in section.iter_symbols() if section else ():
                if sym["st_info"]["type"] in ("STT_FUNC", "STT_LOOS") and sym["st_shndx"] != "SHN_UNDEF" \
                        and sym["st_value"]:
                    theirs.setdefault(sym["st_value"], set()).add(sym.name)
    starts = sorted(theirs)[::7]
    names = functions.names_at(starts + [s + 1 for s in starts])
    assert all(names[s] in theirs[s] for s in starts)
    assert sum(names.get(s + 1) in theirs[s] for s in starts) > 0.9 * len(starts)   # inside, where size > 1


def test_a_name_longer_than_a_read_and_the_order_of_any_starts(tmp_path):
    long_name = "_Z" + "x" * 1000
    table = tmp_path / "strings"
    table.write_bytes(b"\0" + long_name.encode() + b"\0tail")
    with open(table, "rb") as f:
        assert addresses._string_at(f.fileno(), 1) == long_name
        assert addresses._string_at(f.fileno(), len(long_name) + 2) == "tail"   # the file ends first
    from array import array
    for starts in ([5, 1, 3, 1], [0xffffffffc0000000, 0xffffffff81000300, 0xffffffff81000000],
                   [1 << 45, 7, 1 << 41, 0],    # packed keys (above the lowest), and beyond what they hold
                   [1, 2, 4, 8, 9, 3, 0, 9, 5], [1, 2, 3], []):   # a sorted head and a tail merged in
        order = addresses._sorted_order(array("Q", starts))
        assert [starts[i] for i in order] == sorted(starts)


def test_aliases_at_one_address_are_named_as_perf_names_them():
    weak, glob = 1, 0   # alias_rank's binding ranks: global first
    pwrite = [(weak, "pwrite"), (weak, "__pwrite64"), (weak, "pwrite64"), (glob, "__libc_pwrite")]
    assert min(pwrite, key=lambda a: alias_rank(*a))[1] == "__libc_pwrite"   # perf's choice: the global one
    assert min([(weak, "fsync"), (weak, "__fsync")], key=lambda a: alias_rank(*a))[1] == "fsync"


KALLSYMS = """0000000000000000 A fixed_percpu_data
ffffffff81000000 T _stext
ffffffff81000100 t do_one_initcall
ffffffff81000200 D some_data
ffffffff81000300 T schedule
ffffffffc0000000 t xfs_file_fsync\t[xfs]
"""


@pytest.mark.parametrize("shuffled", [False, True])
def test_kernel_addresses_name_the_text_symbol_below_them(tmp_path, shuffled):
    lines = KALLSYMS.splitlines(keepends=True)
    path = tmp_path / "kallsyms"
    path.write_text("".join(reversed(lines) if shuffled else lines))
    names = KernelSymbols(str(path)).names([0xffffffff81000250, 0xffffffff81000300, 0xffffffffc0000010, 0x10])
    # data symbols are not functions: 0x...250 falls in do_one_initcall; nothing is below 0x10
    assert names == {0xffffffff81000250: "do_one_initcall", 0xffffffff81000300: "schedule",
                     0xffffffffc0000010: "xfs_file_fsync"}


def test_one_read_of_the_kernel_symbols_serves_every_collector(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    symbols = KernelSymbols(str(path))
    assert symbols.names([0xffffffff81000300]) == {0xffffffff81000300: "schedule"}      # the CPU stacks'
    index = symbols._starts()
    assert symbols.names([0xffffffffc0000010]) == {0xffffffffc0000010: "xfs_file_fsync"}  # off-CPU's
    assert symbols._starts() is index and symbols.names([]) == {}
    assert KernelSymbols(str(tmp_path / "none")).names([0xffffffff81000300]) == {}     # unreadable: no names


def test_a_run_time_meter_counts_what_ran_between_its_start_and_stop():
    """The collectors' cost of their BPF programs: the run statistics' growth
    over the window only, not what ran before it (the calibration, a load)."""
    from mysqlprobe.collectors.libbpf import RunTimeMeter
    stats = iter([(5_000, 10), (12_500, 25), (40_000, 99)])
    meter = RunTimeMeter(lambda: next(stats))
    meter.start()
    meter.stop()
    assert (meter.ns, meter.runs) == (7_500, 15)
    assert not meter.measured   # never opened: a cost from it is "not measured"
    meter.close()
    meter.close()               # safe twice, as every collector's close is
