"""A --debug-file is used only when it describes the binary: its layout
always, its build-id unless --force-debug-file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import MYSQLPROBE
from mysqlprobe.collectors.target import debug_match
from mysqlprobe.collectors.target.elf import ElfImage, Function, read_elf
from mysqlprobe.errors import EXIT_NO_SYMBOLS, NoSymbolsError

PROGRAMS = {
    "one": "int f1(int x){return x*3+1;}\nint f2(int x){return f1(x)+2;}\n"
           "int main(int c, char **v){return f2(c);}\n",
    "two": "static int g[100];\nint h1(int x){for(int i=0;i<x;i++) g[i%100]+=i; return g[3];}\n"
           "int h2(int x){return h1(x)*2;}\nint h3(int x){return h2(x)-h1(x);}\n"
           "int main(int c, char **v){return h3(c);}\n",
}


def build(tmp_path: Path, name: str, build_id: bool) -> tuple[str, str]:
    """(stripped binary, its split debug file)."""
    src = tmp_path / f"{name}.c"
    src.write_text(PROGRAMS[name])
    full = tmp_path / f"{name}-{build_id}"
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc, "the tests need a C compiler"
    subprocess.run([cc, "-O1", "-g", f"-Wl,--build-id={'sha1' if build_id else 'none'}", "-o", str(full), str(src)],
                   check=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(full), f"{full}.debug"], check=True)
    subprocess.run(["objcopy", "--strip-all", str(full), f"{full}.stripped"], check=True)
    return f"{full}.stripped", f"{full}.debug"


def check(binary: str, debug: str, force: bool = False) -> None:
    debug_match.check_debug_file(binary, read_elf(binary), debug, read_elf(debug), force)


def test_the_binarys_own_debug_file_is_taken(tmp_path):
    binary, debug = build(tmp_path, "one", build_id=True)
    check(binary, debug)
    layout = debug_match.read_layout(binary)
    assert layout.function_starts and all(a in layout.function_starts
                                          for a in debug_match.sample_starts(read_elf(debug), layout.text))


def test_another_programs_debug_file_is_refused_even_forced(tmp_path):
    binary, _ = build(tmp_path, "one", build_id=False)
    _, other = build(tmp_path, "two", build_id=False)
    for force in (False, True):
        with pytest.raises(NoSymbolsError) as e:
            check(binary, other, force)
        assert e.value.exit_code == EXIT_NO_SYMBOLS
        assert "does not describe" in str(e.value) and ".text is at" in str(e.value)


def test_the_same_layout_of_another_build_is_refused_unless_forced(tmp_path):
    """The same source built twice, each with its own build-id: the layout
    matches, the build-id does not (another build's debug file)."""
    src = tmp_path / "one.c"
    src.write_text(PROGRAMS["one"])
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc
    made = {}
    for tag in ("aa", "bb"):
        out = tmp_path / f"one-{tag}"
        subprocess.run([cc, "-O1", "-g", f"-Wl,--build-id=0x{tag * 20}", "-o", str(out), str(src)], check=True)
        subprocess.run(["objcopy", "--only-keep-debug", str(out), f"{out}.debug"], check=True)
        subprocess.run(["objcopy", "--strip-all", str(out), f"{out}.stripped"], check=True)
        made[tag] = (f"{out}.stripped", f"{out}.debug")
    binary, other = made["aa"][0], made["bb"][1]
    assert debug_match.layout_mismatch(debug_match.read_layout(binary), read_elf(other),
                                       debug_match.read_layout(other)) is None
    with pytest.raises(NoSymbolsError) as e:
        check(binary, other)
    assert e.value.exit_code == EXIT_NO_SYMBOLS
    assert f"belongs to build-id {'bb' * 20}, not {'aa' * 20}" in str(e.value) and "--force-debug-file" in str(e.value)
    check(binary, other, force=True)
    check(binary, made["aa"][1])


def test_a_missing_build_id_is_refused_unless_forced_once_the_layout_holds(tmp_path):
    binary, debug = build(tmp_path, "one", build_id=False)
    with pytest.raises(NoSymbolsError) as e:
        check(binary, debug)
    assert "has no build-id" in str(e.value) and "--force-debug-file" in str(e.value)
    check(binary, debug, force=True)


def _image(starts) -> ElfImage:
    return ElfImage("debug", True, None, None, True, True, [], [Function(f"f{a:x}", a, 16, "global", ".symtab")
                                                                for a in starts])


def test_function_starts_off_the_binarys_are_refused():
    """Same .text, but the debug file's functions begin where the binary's do not."""
    starts = range(0x1000, 0x1800, 0x40)
    binary = debug_match.Layout((0x1000, 0x800), frozenset(starts))
    text_only = debug_match.Layout((0x1000, 0x800), None)
    why = debug_match.layout_mismatch(binary, _image(a + 3 for a in starts), text_only)
    assert why == f"only 0 of {len(starts)} of its function starts begin a function in the binary (its unwind table)"
    assert debug_match.layout_mismatch(binary, _image(starts), text_only) is None


def test_the_cli_refuses_a_mismatched_debug_file_in_one_line(tmp_path):
    binary, _ = build(tmp_path, "one", build_id=False)
    _, other = build(tmp_path, "two", build_id=False)
    p = subprocess.run([MYSQLPROBE, "--binary", binary, "--debug-file", other, "--force-debug-file", "--list",
                        "--probe", "f1"], capture_output=True, text=True)
    assert p.returncode == EXIT_NO_SYMBOLS and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "does not describe" in p.stderr
