"""The I/O collector's tables and names, held to the kernel's own headers
(syscall numbers, struct iocb) and to the BPF program's source; and its
folding and summary on records made here (no root needed)."""

from __future__ import annotations

import io as text_io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mysqlprobe.collectors.kernel import io
from mysqlprobe.flamegraphs import folded
from mysqlprobe.probes import abi

SOURCE = (Path(__file__).parents[2] / "probes" / "io.bpf.c").read_text()


def _compile_and_run(tmp_path, body: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "facts.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <sys/syscall.h>\n#include <linux/aio_abi.h>\n"
                   f"int main(void) {{ {body} return 0; }}\n")
    subprocess.run([cc, "-o", str(tmp_path / "facts"), str(src)], check=True)
    return subprocess.run([str(tmp_path / "facts")], capture_output=True, text=True, check=True).stdout


def test_syscall_numbers_are_the_kernel_headers(tmp_path):
    names = {n: name for n, name in io.SYSCALLS.items()}
    body = "".join(f'printf("%d {name}\\n", (int)SYS_{name});' for name in names.values())
    out = _compile_and_run(tmp_path, body)
    assert {int(n): name for n, name in (line.split() for line in out.splitlines())} == names


def test_iocb_offsets_and_opcodes_are_the_kernel_headers(tmp_path):
    out = _compile_and_run(tmp_path, 'printf("%zu %zu %zu %d %d %d %d %d %d\\n", offsetof(struct iocb, aio_lio_opcode), '
                                     "offsetof(struct iocb, aio_fildes), offsetof(struct iocb, aio_nbytes), "
                                     "IOCB_CMD_PREAD, IOCB_CMD_PWRITE, IOCB_CMD_FSYNC, IOCB_CMD_FDSYNC, "
                                     "IOCB_CMD_PREADV, IOCB_CMD_PWRITEV);")
    opcode, fildes, nbytes, *ops = map(int, out.split())
    defines = dict(re.findall(r"#define (IOCB_\w+) (\d+)", SOURCE))
    assert (int(defines["IOCB_OPCODE"]), int(defines["IOCB_FILDES"]), int(defines["IOCB_NBYTES"])) == (
        opcode, fildes, nbytes)
    assert [io.IOCB_OPS[o] for o in ops] == ["pread", "pwrite", "fsync", "fdsync", "preadv", "pwritev"]
    # IOCB_OP_BASE, MAX_IOCBS, PATH_LEN: io.h's enums, held to abi.py through BTF (test_abi.py)


def test_the_program_takes_every_call_named_here_and_no_other():
    cases = {int(n): name for n, name in re.findall(r"case (\d+):\s*/\* (\w+) \*/", SOURCE)}
    opens = {2: "open", 85: "creat", 257: "openat", 437: "openat2"}
    assert cases == {**io.SYSCALLS, **opens} and set(opens) == io.OPENS


@pytest.mark.parametrize("target, fd, label", [
    ("/var/lib/mysql/test/t1#P#p0.ibd", 7, "test/t1#P#p0.ibd"),
    ("/var/lib/mysql/ib_logfile0", 9, "mysql/ib_logfile0"),
    ("/tmp/ibXy12 (deleted)", 10, "tmp/ibXy12"),
    ("socket:[123456]", 30, "socket"),
    ("pipe:[99]", 4, "pipe"),
    ("anon_inode:[eventfd]", 5, "eventfd"),
    (None, 12, "fd 12 (closed)"),
    (None, -1, "(async completions)"),
])
def test_file_labels(target, fd, label):
    assert io.file_label(target, fd) == label


def test_an_open_seen_in_the_window_names_its_fd_over_proc():
    names = io.FdNames(1)
    names.cwd = "/srv/data"
    names.at_start = {7: "/srv/data/test/old.ibd"}
    names.opened = {(7, 3): "./test/t2.ibd", (8, 4): "/abs/x.log"}
    assert names.label(7) == "test/old.ibd"               # the fd before its reopen
    assert names.label(7, 3) == "test/t2.ibd"             # relative to the server's directory
    assert names.label(8, 4) == "abs/x.log"
    assert names.label(9, 0) == "fd 9 (closed)"


def test_call_names_and_directions():
    assert io.call_name(18) == "pwrite64" and io.call_name(abi.IOCB_OP_BASE + 1) == "aio pwrite"
    assert io.call_name(abi.IOCB_OP_BASE + 42) == "aio 42"
    assert [io.direction(io.call_name(c)) for c in (17, 18, 75, abi.IOCB_OP_BASE, 208)] == [
        "read", "write", "sync", "read", "other"]


def _records() -> list[io.IoRecord]:
    return [io.IoRecord(11, [0x30, 0x20, 0x10], "pwrite64", 7, 0, calls=13, bytes=13 * 16384, ns=2_600_000,
                        errors=0),
            io.IoRecord(11, [0x30, 0x20, 0x10], "fdatasync", 7, 0, calls=2, bytes=0, ns=9_000_000, errors=0),
            io.IoRecord(12, [0x40, 0x10], "pread64", 8, 0, calls=5, bytes=5 * 4096, ns=400, errors=1),
            io.IoRecord(12, [], "io_getevents", -1, 0, calls=3, bytes=0, ns=7_000_000, errors=0)]


def _labels(fd: int, gen: int = 0) -> str:
    return io.file_label({7: "/d/test/t1.ibd", 8: "/d/ibdata1"}.get(fd), fd)


def test_folding_three_ways_under_the_thread():
    names = {0x10: "main", 0x20: "row_ins", 0x30: "os_file_write", 0x40: "buf_read"}
    out = io.fold_io(_records(), names.get, _labels, {11: "mysqld", 12: "mysqld"}, "mysqld",
                     {11: "thread/sql/one_connection", 12: "thread/innodb/io_read_thread"})
    calls = out[io.IO_CALLS_FILE].stacks
    assert calls["thread/sql/one_connection;main;row_ins;os_file_write;pwrite64_[k];[test/t1.ibd]"] == 13
    assert calls["thread/innodb/io_read_thread;io_getevents_[k];[(async completions)]"] == 3
    assert out[io.IO_BYTES_FILE].stacks == {
        "thread/sql/one_connection;main;row_ins;os_file_write;pwrite64_[k];[test/t1.ibd]": 13 * 16384,
        "thread/innodb/io_read_thread;main;buf_read;pread64_[k];[d/ibdata1]": 5 * 4096}
    us = out[io.IO_FILE].stacks   # 400 ns rounds to no microsecond: left out of the time graph
    assert sum(us.values()) == 2600 + 9000 + 7000
    text = text_io.StringIO()
    folded.write(out[io.IO_FILE], text)   # frames with spaces ("aio pwrite") read back whole
    assert folded.parse(text.getvalue().splitlines()).stacks == us


def test_summary_per_call_and_file():
    s = io.summarize(_records(), _labels)
    assert (s["calls"], s["bytes"], s["errors"]) == (23, 13 * 16384 + 5 * 4096, 1)
    assert s["s"] == pytest.approx(0.0186)
    assert [c["call"] for c in s["by_call"]] == ["fdatasync", "io_getevents", "pwrite64", "pread64"]
    (t1,) = [f for f in s["by_file"] if f["file"] == "test/t1.ibd"]
    assert t1 == {"file": "test/t1.ibd", "calls": 15, "read_bytes": 0, "write_bytes": 13 * 16384, "syncs": 2,
                  "s": 0.0116}
    assert s["files_left_out"] == 0


def test_the_report_keeps_async_waits_apart_from_the_files():
    from mysqlprobe.analysis.stack_summaries import IoSummary
    from mysqlprobe.analysis.views import StackSection
    from mysqlprobe.analysis.stacks_report import ASYNC_COMPLETIONS, io_block

    assert io.file_label(None, -1) == ASYNC_COMPLETIONS
    records = _records()
    section = {"status": "collected", **io.summarize(records, _labels), "dropped": {}}
    lines = io_block(IoSummary.of(section, StackSection.of("io", section)), 2.0)
    text = "\n".join(lines)
    assert "(7ms of it waiting for async completions)" in " ".join(text.split())
    files = [line.split()[-1] for line in lines if line.endswith((".ibd", "ibdata1", "completions)"))]
    assert files == ["test/t1.ibd", "d/ibdata1"] and "io_getevents 3" in text


def test_the_report_leads_with_the_load_threads_io():
    from mysqlprobe.analysis.stack_summaries import IoSummary
    from mysqlprobe.analysis.views import StackSection
    from mysqlprobe.analysis.stacks_report import io_block

    records = _records()
    names = {0x10: "main", 0x20: "row_ins", 0x30: "os_file_write", 0x40: "buf_read"}
    load = io.connection_records(records, names.get, {11: "thread/sql/one_connection",
                                                       12: "thread/innodb/io_read_thread"}, {}, "mysqld")
    assert [r.tid for r in load] == [11, 11]          # the io thread's reads and waits are not the load's
    section = {"status": "collected", **io.summarize(records, _labels), "load": io.summarize(load, _labels),
               "dropped": {}}
    text = " ".join("\n".join(io_block(IoSummary.of(section, StackSection.of("io", section)), 2.0)).split())
    assert text.startswith("I/O system calls of the load's threads (client connections): 15 calls, 208.0KiB")
    assert "all threads: 23 calls" in text and "d/ibdata1" not in text
