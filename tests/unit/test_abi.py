"""The BPF ABI has one Python source (probes/abi.py); these hold it to the
compiled objects and to the C code itself (no root needed)."""

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mysqlprobe.collectors import libbpf
from mysqlprobe.errors import BpfError
from mysqlprobe.probes import abi, object_path
from mysqlprobe.probes.btf import Btf

PROBES = Path(__file__).parents[2] / "probes"


@pytest.mark.parametrize("name", sorted(abi.MIRRORS))
def test_ctypes_mirrors_match_the_btf_of_the_compiled_object(name):
    btf = Btf.of_object(object_path(name))
    assert abi.layout_mismatches(btf, abi.MIRRORS[name]) == []
    for struct_name, mirror in abi.MIRRORS[name].items():
        size, members = btf.struct(struct_name)
        assert size == ctypes.sizeof(mirror)
        assert [m.name for m in members] == [f[0] for f in mirror._fields_]


def test_a_layout_change_is_caught():
    class Shifted(ctypes.Structure):
        _fields_ = [("probe", ctypes.c_uint32), ("part", ctypes.c_uint64)]

    btf = Btf.of_object(object_path("uprobe_latency"))
    size_problem, member_problem = abi.layout_mismatches(btf, {"part_key": Shifted})
    assert size_problem == "struct part_key: 8 bytes in the object, 16 in abi.py"
    assert "'part': (4, 4)" in member_problem and "'part': (8, 8)" in member_problem


def test_the_abi_version_is_read_from_the_object(monkeypatch):
    btf = abi.checked_object("uprobe_latency")
    assert abi.compiled_abi(btf) == abi.UPROBE_LATENCY_ABI
    header = (PROBES / "uprobe_latency.h").read_text()
    assert f"#define UPROBE_LATENCY_ABI {abi.UPROBE_LATENCY_ABI}\n" in header
    abi.checked_object.cache_clear()
    monkeypatch.setattr(abi, "UPROBE_LATENCY_ABI", abi.UPROBE_LATENCY_ABI + 1)
    with pytest.raises(BpfError, match="ABI .* compiled in, .* expected"):
        abi.checked_object("uprobe_latency")
    abi.checked_object.cache_clear()


def test_rodata_is_the_objects_own_with_the_configuration_set():
    data = abi.rodata("uprobe_latency", abi.LatencyConfig(abi.UPROBE_LATENCY_ABI, 4242, 77))
    btf = abi.checked_object("uprobe_latency")
    offset, size = btf.variable(".rodata", "config")
    assert len(data) == len(btf.rodata)
    assert abi.LatencyConfig.from_buffer_copy(data[offset:offset + size]).targ_tgid == 4242
    with pytest.raises(BpfError):
        abi.rodata("uprobe_latency", ctypes.c_uint32(1))


def test_the_c_histogram_slots_are_the_python_ones(tmp_path):
    """histogram.h compiled into a user-space program, fed the same values."""
    cc = shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "slots.c"
    src.write_text('#include <stdio.h>\n#include "histogram.h"\n'
                   'int main(void) { unsigned long long v;\n'
                   '  while (scanf("%llu", &v) == 1) printf("%llu\\n", (unsigned long long)hist_slot(v));\n'
                   '  return 0; }\n')
    subprocess.run([cc, "-O2", "-I", str(PROBES), "-o", str(tmp_path / "slots"), str(src)], check=True)
    values = sorted({*range(0, 300), *(1 << e for e in range(64)), *((1 << e) - 1 for e in range(1, 64)),
                     *((1 << e) + (1 << max(e - 2, 0)) for e in range(2, 62)), 10**6, 10**9 + 7, 2**40 - 1, 2**41})
    out = subprocess.run([str(tmp_path / "slots")], input="\n".join(map(str, values)), capture_output=True,
                         text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [abi.slot_of(v) for v in values]   # MAX_SLOTS, HIST_SUB_BITS: through BTF


@pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="the kernel exports no BTF")
def test_bpf_prog_info_offsets_are_the_kernels():
    size, members = Btf.of_kernel().struct("bpf_prog_info")
    at = {m.name: m.offset for m in members}
    assert size == libbpf.PROG_INFO_SIZE
    assert at["run_time_ns"] == libbpf.PROG_INFO_RUN_TIME_NS and at["run_cnt"] == libbpf.PROG_INFO_RUN_CNT


@pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="the kernel exports no BTF")
def test_the_registers_header_lays_out_pt_regs_as_the_kernel():
    """x86_64_regs.h stands in for the kernel's struct pt_regs (uprobes and
    the raw sys_enter tracepoint read it without kernel BTF)."""
    fields = re.findall(r"\b(\w+)\s*[,;]", re.search(r"struct x86_64_regs \{(.*?)\};",
                                                       (PROBES / "x86_64_regs.h").read_text(), re.S).group(1))
    _, members = Btf.of_kernel().struct("pt_regs")
    at = {m.name: m.offset for m in members}
    read = fields[:fields.index("ip") + 1]  # past ip the kernel wraps cs and ss in unions (FRED)
    assert read[-3:] == ["di", "orig_ax", "ip"]
    assert {name: at.get(name) for name in read} == {name: 8 * i for i, name in enumerate(read)}


@pytest.mark.parametrize("name", sorted(abi.ENUMS))
def test_the_headers_enums_are_abi_pys_constants(name):
    # the C constants Python uses come out of the object's BTF, not its source text
    assert abi.enum_mismatches(Btf.of_object(object_path(name)), abi.ENUMS[name]) == []


def test_an_enum_change_is_caught(monkeypatch):
    btf = Btf.of_object(object_path("io"))
    changed = {**abi.ENUMS["io"], "io_limits": {**abi.ENUMS["io"]["io_limits"], "MAX_IOCBS": 16}}
    assert abi.enum_mismatches(btf, changed) == [
        "enum io_limits: {'MAX_IOCBS': 8, 'IOCB_OP_BASE': 1000, 'PATH_LEN': 256} in the object, "
        "{'MAX_IOCBS': 16, 'IOCB_OP_BASE': 1000, 'PATH_LEN': 256} in abi.py"]
    assert abi.enum_mismatches(btf, {"io_gone": {}}) == ["enum io_gone: not in the object"]
    abi.checked_object.cache_clear()
    monkeypatch.setitem(abi.ENUMS, "io", changed)
    with pytest.raises(BpfError, match="enum io_limits"):
        abi.checked_object("io")
    abi.checked_object.cache_clear()


def test_each_drop_kind_the_programs_count_has_a_name():
    for enums, drops in ((abi.ENUMS["offcpu"]["offcpu_dropped"], abi.OFFCPU_DROPPED),
                         (abi.ENUMS["io"]["io_dropped"], abi.IO_DROPPED),
                         (abi.ENUMS["cpu_sample"]["sample_dropped"], abi.SAMPLE_DROPPED)):
        assert max(enums.values()) == len(drops)   # the count that sizes the `dropped` map


@pytest.mark.parametrize("name", sorted(abi.MIRRORS))
def test_the_objects_sections_are_those_pyelftools_reads(name):
    from elftools.elf.elffile import ELFFile
    from mysqlprobe.elfsections import ElfSections
    with open(object_path(name), "rb") as f:
        theirs = ELFFile(f)
        ours = ElfSections(f)
        assert [s.name for s in ours.sections] == [s.name for s in theirs.iter_sections()]
        for section in (".BTF", ".rodata"):
            if theirs.get_section_by_name(section) is not None:
                assert ours.data(ours.section(section)) == theirs.get_section_by_name(section).data()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unreadable_object_is_one_bpf_error(tmp_path, damage):
    data = Path(object_path("uprobe_latency")).read_bytes()
    bad = tmp_path / "bad.bpf.o"
    bad.write_bytes(b"not an object" if damage == "garbage" else data[:len(data) // 2])
    with pytest.raises(BpfError, match="not a readable BPF object"):
        Btf.of_object(str(bad))
