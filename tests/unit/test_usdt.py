"""USDT notes (.note.stapsdt) read from a binary built with sys/sdt.h: the
sites, their semaphore and argument specs, kept by strip and listed."""

import io
import shutil
import subprocess

import pytest

from conftest import compile_fixture, strip_with_debug_file
from mysqlprobe.collectors import symbols as S
from mysqlprobe.collectors.elf import UsdtArg, file_offset, parse_usdt_args, read_elf
from mysqlprobe.recorder.plan import list_plan, plan_probes
from test_cli import mysqlprobe

SOURCE = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short mysql_insert__row__start_semaphore __attribute__((section(".probes")));
volatile long sink;
void row_done(long);
__attribute__((noinline)) void write_row(const char *db, long n) {
  if (mysql_insert__row__start_semaphore)
    STAP_PROBE2(mysql, insert__row__start, db, n);
  sink += n;
  row_done(0);
}
int main(int argc, char **argv) {
  write_row(argv[0], argc);
  row_done(argc);
  return 0;
}
"""
# a unit built without semaphores: its probe has none
DONE = r"""
#include <sys/sdt.h>
__attribute__((noinline)) void row_done(long rc) { STAP_PROBE1(mysql, insert__row__done, rc); }
__attribute__((noinline)) void row_failed(void) { STAP_PROBE1(mysql, insert__row__done, 1); }
"""


@pytest.fixture(scope="module")
def usdt_binary(tmp_path_factory):
    assert shutil.which("gcc"), "the tests need gcc"
    out = tmp_path_factory.mktemp("usdt")
    (out / "usdt.c").write_text(SOURCE)
    (out / "done.c").write_text(DONE)
    subprocess.run(["gcc", "-O2", "-o", str(out / "usdt"), str(out / "usdt.c"), str(out / "done.c")], check=True)
    return out / "usdt"


def test_sites_semaphore_and_arguments_come_from_the_notes(usdt_binary):
    image = read_elf(str(usdt_binary))
    by_name = {}
    for p in image.usdt:
        by_name.setdefault(p.name, []).append(p)
    assert sorted((n, len(v)) for n, v in by_name.items()) == [("insert__row__done", 2), ("insert__row__start", 1)]
    (start,) = by_name["insert__row__start"]
    assert start.provider == "mysql"
    symtab = subprocess.run(["nm", str(usdt_binary)], capture_output=True, text=True, check=True).stdout
    address = next(int(line.split()[0], 16) for line in symtab.splitlines()
                   if line.endswith(" mysql_insert__row__start_semaphore"))
    assert start.semaphore == address
    assert [a.size for a in start.args] == [8, 8] and all(a.kind in ("reg", "mem") for a in start.args)
    assert all(p.semaphore == 0 for p in by_name["insert__row__done"])   # declared without one
    # each site is the address of a nop inside the code
    text = {s.vaddr: s for s in image.segments if s.executable}
    assert all(any(v <= p.address < v + s.memsz for v, s in text.items()) for p in image.usdt)


def test_the_notes_survive_strip(usdt_binary, tmp_path):
    stripped, _ = strip_with_debug_file(usdt_binary, tmp_path, debuglink=False)
    image = read_elf(str(stripped))
    assert not image.has_symtab
    assert sorted(p.name for p in image.usdt) == sorted(p.name for p in read_elf(str(usdt_binary)).usdt)


@pytest.mark.parametrize("spec, args", [
    ("-4@%r13d 8@16080(%rbx)", [UsdtArg(4, True, "reg", "r13d", 0), UsdtArg(8, False, "mem", "rbx", 16080)]),
    ("-4@$3 8@(%rdi) 1@-8(%rbp)", [UsdtArg(4, True, "const", None, 3), UsdtArg(8, False, "mem", "rdi", 0),
                                   UsdtArg(1, False, "mem", "rbp", -8)]),
    ("", []),
])
def test_argument_specs(spec, args):
    assert list(parse_usdt_args(spec)) == args


def test_an_argument_form_not_understood_is_an_error():
    with pytest.raises(ValueError, match="not understood"):
        parse_usdt_args("8@foo+4(%rip)")


def test_list_shows_them_beside_the_functions(usdt_binary):
    code, out, err = mysqlprobe("--binary", usdt_binary, "--list", "--probe", "write_row")
    assert code == 0, err
    lines = out.splitlines()
    assert any("write_row" in line for line in lines)
    (start,) = [line for line in lines if line.startswith("usdt:mysql:insert__row__start ")]
    assert "1 site, semaphore 0x" in start and "u64" in start
    (done,) = [line for line in lines if line.startswith("usdt:mysql:insert__row__done ")]
    assert "2 sites, no semaphore" in done
    assert S.load_binary(str(usdt_binary)).image.usdt


def test_a_usdt_stage_is_one_probe_over_all_its_sites(usdt_binary):
    binary = S.load_binary(str(usdt_binary))
    plan = plan_probes(binary, ["sql.insert_row"], [])
    (spec,) = plan.specs
    assert spec.kind == "usdt" and spec.stage == "sql.insert_row" and spec.entry_class == "emulated"   # a nop
    (start,) = spec.usdt.starts
    assert len(spec.usdt.dones) == 2 and all(sem == 0 for _, sem in spec.usdt.dones)
    (probe,) = [p for p in binary.image.usdt if p.name == "insert__row__start"]
    assert start == (file_offset(binary.image.segments, probe.address),
                     file_offset(binary.image.segments, probe.semaphore))
    out = io.StringIO()
    list_plan(binary, plan, out)
    assert any(line.startswith("sql.insert_row") and "USDT mysql:insert__row__start" in line
               for line in out.getvalue().splitlines())


def test_a_binary_without_the_probes_says_so(fixture_dir):
    binary = S.load_binary(str(compile_fixture(fixture_dir, "5.7")))
    plan = plan_probes(binary, ["sql.insert_row"], [])
    assert not plan.specs
    assert plan.unavailable == [{"stage": "sql.insert_row",
                                 "reason": "the binary has no such USDT probe (built without DTrace/SystemTap probes)"}]
