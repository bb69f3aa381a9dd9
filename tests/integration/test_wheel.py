"""The wheel a database host installs (`make wheel`): built here with its
BPF objects and calibration helper, installed by pip into a fresh venv,
and run with no compiler on PATH (no clang, cc, gcc or bpftool): the
demo's load on a real server, profiled by the installed copy, its counts
against the server's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import derived, stage

pytestmark = [pytest.mark.root, pytest.mark.server]
REPO = Path(__file__).resolve().parents[2]
ROWS = 300_007   # prime
COMPILERS = re.compile(r"(clang|gcc|g\+\+|cc|c\+\+|cpp|tcc|llc|bpftool)([-.][\w.-]*)?|x86_64-linux-gnu-.*")


def _without_compilers(out: Path) -> str:
    """A PATH of one directory: every program of the usual ones but the compilers and bpftool."""
    out.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            if not COMPILERS.fullmatch(name) and os.access(target, os.X_OK) and not (out / name).exists():
                (out / name).symlink_to(target)
    return str(out)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel (and PyMySQL) installed by pip: its bin/."""
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base / "dist"), str(REPO)],
                   check=True, cwd=base)
    (wheel,) = (base / "dist").glob("mysqlprobe-*.whl")
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl"), wheel.name   # BPF objects: a platform's wheel
    names = zipfile.ZipFile(wheel).namelist()
    for built in ("uprobe_latency.bpf.o", "offcpu.bpf.o", "cpu_sample.bpf.o", "io.bpf.o", "calibrate"):
        assert f"mysqlprobe/probes/{built}" in names, built
    subprocess.run(["python3", "-m", "venv", str(base / "venv")], check=True)
    subprocess.run([str(base / "venv" / "bin" / "pip"), "install", "-q", str(wheel)], check=True, cwd=base)
    return base / "venv" / "bin"


def test_the_wheel_profiles_the_demo_load_with_no_compiler_on_path(installed, tmp_path):
    path = _without_compilers(tmp_path / "bin")
    for tool in ("clang", "cc", "gcc", "bpftool"):
        assert not any(os.path.exists(os.path.join(d, tool)) for d in path.split(os.pathsep)), tool
    env = {**os.environ, "PATH": os.pathsep.join((str(installed), path))}
    where = subprocess.run([str(installed / "python"), "-c", "import mysqlprobe; print(mysqlprobe.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed.parent)), where   # the installed copy, not the checkout
    out = tmp_path / "demo"
    run = subprocess.run([str(installed / "mysqlprobe"), "lab", "demo", "--server", "10.2.11", "--rows", str(ROWS),
                          "-o", str(out)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"load: {ROWS} rows into emp_range_5" in run.stdout
    doc = derived(out)
    inserted = doc["perf_schema"]["deltas"]["status"]["Innodb_rows_inserted"]
    assert inserted == ROWS                                   # the server's count of the window
    assert sum(doc["workload"]["partition_rows"]) == ROWS     # and SELECT COUNT(*) after
    est = stage(doc, "partition.write_row")["estimated_calls"]
    assert abs(est["value"] - ROWS) < 0.05 * ROWS, est        # the probes ran: one call a row
    assert (out / "report.html").stat().st_size > 0 and (out / "flamegraph.svg").stat().st_size > 0
