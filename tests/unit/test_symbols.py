import os
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import compile_fixture, strip_with_debug_file
from mysqlprobe.collectors.target.addresses import FileFunctions
from mysqlprobe.collectors.target import symbols as S
from mysqlprobe.collectors.target.cxxnames import demangle, qualified_name
from mysqlprobe.collectors.target.elf import entry_offset, read_elf
from mysqlprobe.errors import TargetError


@pytest.mark.parametrize("demangled, name", [
    ("ha_partition::write_row(unsigned char*)", "ha_partition::write_row"),
    ("BlockReporter::is_corrupted() const", "BlockReporter::is_corrupted"),
    ("get_sub_part_id_from_key(TABLE const*, unsigned char*) [clone .isra.55]", "get_sub_part_id_from_key"),
    ("non-virtual thunk to ha_innopart::write_row_in_part(unsigned int, unsigned char*)",
     "non-virtual thunk to ha_innopart::write_row_in_part"),
    ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int>(int&&)",
     "std::vector<int, std::allocator<int> >::_M_realloc_insert<int>"),
    ("deflate.isra.0", "deflate"),
    ("my_crc32c", "my_crc32c"),
    ("operator new(unsigned long)", "operator new"),
])
def test_qualified_name(demangled, name):
    assert qualified_name(demangled) == name


def test_demangle():
    assert demangle("_ZN12ha_partition9write_rowEPh") == "ha_partition::write_row(unsigned char*)"
    assert demangle("_ZL22get_partition_id_rangeP14partition_infoPjPx") == \
        "get_partition_id_range(partition_info*, unsigned int*, long long*)"
    assert demangle("not_mangled") == "not_mangled"


def _code_bytes_by_section(path, address, n=16):
    """The first bytes of a function read through the section headers: an
    independent route to the same bytes as vaddr -> PT_LOAD -> file offset."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if sec["sh_addr"] <= address < sec["sh_addr"] + sec["sh_size"] and sec["sh_type"] == "SHT_PROGBITS":
                start = address - sec["sh_addr"]
                return sec.data()[start:start + n]
    raise AssertionError(f"{address:#x} in no section")


@pytest.mark.parametrize("pie", [True, False])
def test_file_offset_of_functions_in_pie_and_non_pie(fixture_dir, pie):
    flags = ("-pie", "-fPIE") if pie else ("-no-pie", "-fno-pie")
    path = compile_fixture(fixture_dir, "5.6", *flags, name=f"offsets-{pie}")
    binary = S.load_binary(str(path))
    assert binary.image.pie is pie
    syms = binary.symbols.lookup("ha_partition::write_row") + binary.symbols.lookup("row_insert_for_mysql")
    assert len(syms) == 2
    with open(path, "rb") as f:
        for sym in syms:
            if not pie:
                assert sym.address >= 0x400000 and sym.offset != sym.address
            f.seek(sym.offset)
            assert f.read(16) == _code_bytes_by_section(path, sym.address)


@pytest.mark.parametrize("line, version", [("5.6", "5.6.51"), ("5.7", "5.7.44"), ("8.0", "8.0.40")])
def test_server_identity_of_mysql_fixtures(mysql_fixtures, line, version):
    binary = S.load_binary(str(mysql_fixtures[line]))
    assert binary.server == S.ServerInfo("mysql", version, f"mysql-{line}")


def test_static_function_of_80_is_matched_by_qualified_name(mysql_fixtures):
    (sym,) = S.load_binary(str(mysql_fixtures["8.0"])).symbols.lookup("get_partition_id_range")
    assert sym.mangled.startswith("_ZL") and sym.binding == "local"


@pytest.mark.parametrize("line", ["5.6", "5.7", "8.0"])
def test_the_name_index_finds_what_demangling_every_name_finds(mysql_fixtures, line):
    everything = S.load_binary(str(mysql_fixtures[line])).symbols.names  # every function demangled
    indexed = S.load_binary(str(mysql_fixtures[line])).symbols             # lookups through the index only
    assert len(everything) > 20
    for name in ("row_insert_for_mysql", "get_partition_id_range"):
        assert indexed._by_qualified_name(name), name
    assert indexed._names is None                       # found without demangling every name
    for name, functions in everything.items():          # std:: and templates: through every name
        found = [f.address for f in indexed._by_qualified_name(name)]
        assert found == sorted(f.address for f in functions), name


def test_lookup_by_signature_mangled_name_and_glob(mysql_fixtures):
    table = S.load_binary(str(mysql_fixtures["5.7"])).symbols
    by_sig = table.lookup("row_insert_for_mysql(unsigned char const*, row_prebuilt_t*)")
    by_mangled = table.lookup("_Z20row_insert_for_mysqlPKhP14row_prebuilt_t")
    assert by_sig == by_mangled and len(by_sig) == 1
    names = {s.name for s in table.glob("get_partition_id_*")}
    assert names == {"get_partition_id_range", "get_partition_id_hash_nosub"}
    assert table.lookup("ha_innopart::write_row_in_part")[0].demangled.startswith("ha_innopart::")
    assert table.similar("row_insert_for_mysq") == ["row_insert_for_mysql"]


def test_stripped_binary_has_no_symtab_and_loses_local_functions(fixture_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "cache"))
    src = compile_fixture(fixture_dir, "8.0", name="strip-src")
    stripped, _ = strip_with_debug_file(src, tmp_path, debuglink=False)
    binary = S.load_binary(str(stripped))
    assert not binary.image.has_symtab and binary.debug_file is None
    assert binary.symbols.lookup("get_partition_id_range") == []


def test_debug_file_found_by_debuglink_next_to_the_binary(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.6", name="debuglink-src")
    stripped, debug = strip_with_debug_file(src, tmp_path)
    binary = S.load_binary(str(stripped))
    assert binary.debug_file == str(debug)
    (sym,) = binary.symbols.lookup("ha_partition::write_row")
    (orig,) = S.load_binary(str(src)).symbols.lookup("ha_partition::write_row")
    assert (sym.address, sym.offset) == (orig.address, orig.offset)


def test_debug_file_found_by_build_id_under_the_process_root(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.7", name="buildid-src")
    bindir = tmp_path / "usr" / "sbin"
    bindir.mkdir(parents=True)
    stripped, debug = strip_with_debug_file(src, bindir, debuglink=False)
    image = read_elf(str(stripped))
    assert image.build_id
    dest = tmp_path / "usr/lib/debug/.build-id" / image.build_id[:2] / f"{image.build_id[2:]}.debug"
    dest.parent.mkdir(parents=True)
    debug.rename(dest)
    binary = S.load_binary(str(stripped), "/usr/sbin/mysqld", root=str(tmp_path))
    assert binary.debug_file == str(dest)
    assert binary.symbols.lookup("Partition_helper::ph_write_row")


def test_not_an_elf_file_is_a_target_error(tmp_path):
    bogus = tmp_path / "mysqld"
    bogus.write_text("#!/bin/sh\n")
    with pytest.raises(TargetError, match="not a readable ELF"):
        S.load_binary(str(bogus))


@pytest.mark.parametrize("damage", ["truncated", "32-bit", "arm64"])
def test_a_damaged_or_foreign_elf_file_is_a_target_error(mysql_fixtures, tmp_path, damage):
    data = bytearray(mysql_fixtures["5.7"].read_bytes())
    if damage == "truncated":   # the section headers sit at the end of the file
        data = data[:len(data) // 2]
    elif damage == "32-bit":
        data[4] = 1
    else:
        data[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    bad = tmp_path / "mysqld"
    bad.write_bytes(bytes(data))
    expected = "only x86-64" if damage != "truncated" else "not a readable ELF"
    with pytest.raises(TargetError, match=expected):
        S.load_binary(str(bad))
    with pytest.raises(TargetError, match=expected):   # the stack namer reads it the same way
        FileFunctions(str(bad))


def test_resolve_target_of_a_missing_process():
    with pytest.raises(TargetError, match="no process with PID"):
        S.resolve_target(2**22 + 1)


def test_a_released_table_refuses_lookups_and_keeps_what_the_window_needs(mysql_fixtures):
    binary = S.load_binary(str(mysql_fixtures["5.7"]))
    assert binary.symbols.lookup("handler::ha_write_row")
    share = binary.image.frame_pointer_share
    binary.symbols.release()
    assert binary.image.functions == [] and binary.symbols.functions == []
    assert binary.image.frame_pointer_share == share is not None   # perf's unwinding is still chosen from it
    assert binary.image.build_id and binary.image.segments and binary.server.family == "mysql"
    for lookup in (lambda: binary.symbols.lookup("handler::ha_write_row"), lambda: binary.symbols.glob("get_*"),
                   lambda: binary.symbols.names):
        with pytest.raises(RuntimeError, match="released"):
            lookup()


def test_the_entry_offset_is_where_start_clears_the_frame_pointer(tmp_path):
    # _start, the ELF's e_entry, begins `xor %ebp,%ebp` (after an endbr64 where built for CET)
    for binary in (os.path.realpath(sys.executable), "/bin/true"):
        with open(binary, "rb") as f:
            elf = ELFFile(f)
            entry = elf.header["e_entry"]
            (load,) = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                       and s["p_vaddr"] <= entry < s["p_vaddr"] + s["p_memsz"]]
        assert entry_offset(binary) == entry - load["p_vaddr"] + load["p_offset"]
        code = Path(binary).read_bytes()[entry_offset(binary):][:8]
        assert code.removeprefix(bytes.fromhex("f30f1efa")).startswith(bytes.fromhex("31ed")), (binary, code.hex())
    (tmp_path / "text").write_text("not an ELF file\n")
    with pytest.raises(TargetError):
        entry_offset(str(tmp_path / "text"))
