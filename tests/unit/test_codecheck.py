"""The code check sees a breakpoint left in a process's code, and nothing
where the code is its file's. No root: the process writes its own code
through /proc/self/mem, as the kernel does for a uprobe."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from mysqlprobe.collectors.safety.codecheck import DiskReader, code_changes
from mysqlprobe.collectors.target.elf import read_elf
from mysqlprobe.collectors.target.symbols import SymbolTable

SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) int probed(int x) { return x * 3 + 1; }
int main(int argc, char **argv) {
    if (argc > 1) {  /* put an int3 where probed() starts, as a uprobe would */
        int fd = open("/proc/self/mem", O_RDWR);
        unsigned char int3 = 0xCC;
        if (fd < 0 || pwrite(fd, &int3, 1, (off_t)(unsigned long)&probed) != 1) return 2;
        close(fd);
    }
    printf("ready\n");
    fflush(stdout);
    return getchar() == EOF ? 0 : probed(argc);
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "the tests need gcc"
    d = tmp_path_factory.mktemp("codecheck")
    (d / "p.c").write_text(SOURCE)
    subprocess.run([gcc, "-O2", "-o", str(d / "p"), str(d / "p.c")], check=True)
    return d / "p"


def changes_while_running(program: Path, *args: str):
    proc = subprocess.Popen([str(program), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        return code_changes(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def direct_io_allowed(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


def test_code_as_on_disk_has_no_change(program):
    changes = changes_while_running(program)
    assert changes.bytes_checked > 0
    assert changes.differing == () and changes.int3 == () and changes.cache_differing == ()
    # set against the disk, past the page cache, where the filesystem allows it
    assert changes.uncached == direct_io_allowed(program)
    assert changes.as_dict()["compared_with"] == ("disk" if changes.uncached else "page cache")


def test_the_disk_reader_reads_what_a_plain_read_does(tmp_path, program):
    """Unaligned offsets and lengths, reads across and past the end of the
    file, as O_DIRECT's alignment is made up for."""
    odd = tmp_path / "odd"
    odd.write_bytes(random.Random(7).randbytes(3 * 4096 + 123))
    rng = random.Random(11)
    for path in (odd, program):
        data = path.read_bytes()
        with DiskReader(str(path)) as disk:
            for _ in range(300):
                offset = rng.randrange(len(data) + 10)
                length = rng.choice([1, 2, 4095, 4096, 4097, 70000])
                assert disk.read(offset, length) == data[offset:offset + length], (path, offset, length)


def test_an_int3_left_at_a_function_is_found_at_its_file_offset(program):
    offset = SymbolTable(read_elf(str(program))).lookup("probed")[0].offset
    changes = changes_while_running(program, "break")
    assert changes.int3 == (offset,) and changes.differing == (offset,)
    assert changes.as_dict()["int3_at"] == [hex(offset)]
