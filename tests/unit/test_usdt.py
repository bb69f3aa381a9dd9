"""USDT notes (.note.stapsdt) read from a binary built with sys/sdt.h: the
sites, their semaphore and argument specs, kept by strip and listed."""

import io
import shutil
import subprocess

import pytest

from conftest import compile_fixture, strip_with_debug_file
from mysqlprobe import catalog
from mysqlprobe.collectors.target import symbols as S
from mysqlprobe.collectors.target.elf import UsdtArg, file_offset, parse_usdt_args, read_elf
from mysqlprobe.collectors.uprobes.session import usdt_text_operand
from mysqlprobe.probes import abi
from mysqlprobe.errors import TargetError
from dataclasses import replace
from mysqlprobe.recorder.plan import list_plan, plan_in_child, plan_probes, usdt_stand_ins
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
# a unit built without semaphores: its probe has none; and a query's start
# and done, its text an operand in memory at one site, a register at the other
DONE = r"""
#include <sys/sdt.h>
struct thd { char pad[104]; const char *query; };
__attribute__((noinline)) void row_done(long rc) { STAP_PROBE1(mysql, insert__row__done, rc); }
__attribute__((noinline)) void row_failed(void) { STAP_PROBE1(mysql, insert__row__done, 1); }
__attribute__((noinline)) void run_query(struct thd *thd) {
  STAP_PROBE1(mysql, query__start, thd->query);
  STAP_PROBE1(mysql, query__exec__start, thd->query);
  STAP_PROBE1(mysql, query__exec__done, 0);
  STAP_PROBE1(mysql, query__done, 0);
}
__attribute__((noinline)) void next_query(const char *text, long n) {
  STAP_PROBE1(mysql, query__start, text + n);
  STAP_PROBE1(mysql, query__done, 0);
}
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
    assert sorted((n, len(v)) for n, v in by_name.items()) == [
        ("insert__row__done", 2), ("insert__row__start", 1), ("query__done", 2), ("query__exec__done", 1),
        ("query__exec__start", 1), ("query__start", 2)]
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


def test_without_symbols_statements_come_from_the_query_probes(usdt_binary, tmp_path):
    """The stripped binary has no dispatch_command: sql.statement is the
    query__start/done pair, and each start site reads the text through its
    own operand."""
    stripped, _ = strip_with_debug_file(usdt_binary, tmp_path, debuglink=False)
    binary = S.load_binary(str(stripped))
    (spec,) = plan_probes(binary, ["sql.statement"], []).specs
    assert spec.kind == "usdt_statement" and spec.statement.usdt
    starts = [p for p in binary.image.usdt if p.name == "query__start"]
    forms = sorted(p.args[0].kind for p in starts)
    assert forms == ["mem", "reg"], [p.spec for p in starts]   # gcc chose one of each
    cookies = {offset: cookie for offset, _, cookie in spec.site_cookies("starts")}
    assert len(cookies) == 2 and {c for _, _, c in spec.site_cookies("dones")} == {spec.cookie}
    for p in starts:
        cookie = cookies[file_offset(binary.image.segments, p.address)]
        assert cookie & ~usdt_text_operand(p.args[0]) == spec.cookie
        assert (cookie >> abi.STMT_CMD_ARG_SHIFT) & 0xFF == abi.STMT_CMD_QUERY


def test_a_binary_with_symbols_keeps_its_dispatcher_as_the_boundary(fixture_dir):
    binary = S.load_binary(str(compile_fixture(fixture_dir, "5.6")))   # it has query__start too
    (spec,) = plan_probes(binary, ["sql.statement"], []).specs
    assert spec.kind == "statement" and spec.symbol.name == "dispatch_command"


@pytest.mark.parametrize("stages", [["sql.query_exec", "sql.statement"], ["sql.statement", "sql.query_exec"]])
def test_statements_are_kept_under_one_boundary(usdt_binary, stages):
    """query__exec__start nests inside the query: with sql.statement planned
    it only times its span, whatever the order the stages were asked in."""
    specs = {s.stage: s for s in plan_probes(S.load_binary(str(usdt_binary)), stages, []).specs}
    assert specs["sql.statement"].kind == "usdt_statement" and not specs["sql.statement"].statement.nests
    assert specs["sql.query_exec"].kind == "usdt" and specs["sql.query_exec"].statement is None
    (alone,) = plan_probes(S.load_binary(str(usdt_binary)), ["sql.query_exec"], []).specs
    assert alone.kind == "usdt_statement" and alone.statement.nests
    assert not alone.cookie & abi.STMT_USDT_FLAT and specs["sql.statement"].cookie & abi.STMT_USDT_FLAT


R = abi.STMT_TEXT_ARG_SHIFT


@pytest.mark.parametrize("arg, bits", [
    (UsdtArg(8, False, "reg", "r13", 0), (abi.STMT_TEXT_USDT | 2) << R),
    (UsdtArg(8, False, "reg", "rdx", 0), (abi.STMT_TEXT_USDT | 12) << R),
    (UsdtArg(8, False, "mem", "rdi", 104), (abi.STMT_TEXT_USDT | abi.STMT_TEXT_DEREF | 14) << R | 104 << 48),
    (UsdtArg(8, False, "mem", "rbp", -8), (abi.STMT_TEXT_USDT | abi.STMT_TEXT_DEREF | 4) << R | 0xFFF8 << 48),
    (UsdtArg(8, False, "mem", "rbx", 0x8000), (abi.STMT_TEXT_USDT | abi.STMT_REG_NONE) << R),  # too far
    (UsdtArg(4, True, "reg", "eax", 0), (abi.STMT_TEXT_USDT | abi.STMT_REG_NONE) << R),        # not a pointer
    (UsdtArg(4, True, "const", None, 3), (abi.STMT_TEXT_USDT | abi.STMT_REG_NONE) << R),
    (None, (abi.STMT_TEXT_USDT | abi.STMT_REG_NONE) << R),
])
def test_a_text_operand_in_the_cookie(arg, bits):
    assert usdt_text_operand(arg) == bits


def test_the_insert_profile_takes_stand_ins_only_where_the_notes_have_them(usdt_binary, fixture_dir):
    profile = list(catalog.INSERT_PROFILE)
    assert usdt_stand_ins(S.load_binary(str(usdt_binary)), profile) == ["sql.insert_row"]
    assert usdt_stand_ins(S.load_binary(str(usdt_binary)), profile + ["sql.insert_row"]) == []   # asked already
    assert usdt_stand_ins(S.load_binary(str(compile_fixture(fixture_dir, "5.7"))), profile) == []


def test_a_plan_made_in_a_child_is_the_one_made_here(mysql_fixtures, tmp_path):
    """watch reads the symbols and plans in a child process (its heap lives
    for weeks): what comes back is the same plan, the table released; an
    error there is raised here, as itself."""
    proc = subprocess.Popen([str(mysql_fixtures["5.7"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        target = S.resolve_target(proc.pid)
        stages = list(catalog.INSERT_PROFILE)
        binary, plan = plan_in_child(target, stages)
        here = plan_probes(S.load_target_binary(target), stages, [])
        assert [(s.stage, s.symbol, s.partition, s.statement) for s in plan.specs] == \
               [(s.stage, s.symbol, s.partition, s.statement) for s in here.specs] and plan.specs
        assert binary.symbols.released and binary.image.build_id == read_elf(str(mysql_fixtures["5.7"])).build_id
    finally:
        proc.communicate("quit\n", timeout=10)
    bogus = tmp_path / "mysqld"
    bogus.write_text("#!/bin/sh\n")
    gone = replace(target, proc_exe=str(bogus))
    with pytest.raises(TargetError, match="not a readable ELF"):
        plan_in_child(gone, stages)
