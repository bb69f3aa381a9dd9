"""The latency object's parts stand on their own: each compiles alone with
only what it includes itself (the core header), so none calls into the file
that includes it, and a part can be read and changed without that file."""

from __future__ import annotations

import glob
import os
import subprocess

import pytest

from mysqlprobe.probes import build

PARTS = sorted(glob.glob(os.path.join(build.HERE, "latency_*.bpf.h")))


def test_the_parts_are_all_there():
    assert {os.path.basename(p) for p in PARTS} >= {"latency_core.bpf.h", "latency_statements.bpf.h",
                                                     "latency_stages.bpf.h", "latency_cpu_waits.bpf.h"}


@pytest.mark.parametrize("part", PARTS, ids=os.path.basename)
def test_each_part_compiles_alone(part, tmp_path):
    src = tmp_path / "alone.c"
    src.write_text(f'#include "{os.path.basename(part)}"\n')
    done = subprocess.run(build.bpf_command(str(src), str(tmp_path / "alone.o")), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_part_that_calls_into_its_includer_does_not(tmp_path):
    """What the test above would catch: a call to a function of
    uprobe_latency.bpf.c's own (probe_entry) from a part."""
    (tmp_path / "calls_back.bpf.h").write_text('#include "latency_core.bpf.h"\n'
                                               'int calls_back(struct x86_64_regs *r) { return probe_entry(r); }\n')
    src = tmp_path / "alone.c"
    src.write_text('#include "calls_back.bpf.h"\n')
    done = subprocess.run([*build.bpf_command(str(src), str(tmp_path / "alone.o")), "-I", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "probe_entry" in done.stderr
