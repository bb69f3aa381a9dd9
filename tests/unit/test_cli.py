"""The command line as a user meets it: exit codes, one-line errors (the
traceback only with -v), --list without root."""

import os
import pkgutil
import re
import subprocess
import sys

import pytest

from conftest import MYSQLPROBE, compile_fixture, strip_with_debug_file
from mysqlprobe import cli, errors
from mysqlprobe.errors import exit_help
from mysqlprobe.collectors.target.elf import read_elf
from test_debuginfod import publish, serving


def mysqlprobe(*args, env=None):
    """The CLI; no debuginfod server unless the test names one."""
    proc = subprocess.run([MYSQLPROBE, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "DEBUGINFOD_URLS": "", **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


def _one_line(stderr):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_the_insert_profile_is_the_default():
    code, out, err = mysqlprobe("--binary", "/bin/true", "--list")
    assert code == errors.EXIT_NO_TARGET and "does not look like mysqld" in err


def test_several_pids_get_one_clear_line():
    code, _, err = mysqlprobe("-p", "4242 4343")
    assert code == errors.EXIT_USAGE and "Traceback" not in err
    assert "2 PIDs (4242 4343): one server at a time" in err.strip().splitlines()[-1]


def test_old_spellings_still_parse_and_say_the_new_one(tmp_path):
    code, _, err = mysqlprobe("-p", "1", "-F", "0")
    assert code == errors.EXIT_USAGE and "-F/--frequency takes 1 to 10000" in err
    from mysqlprobe.commands.record import renamed_options
    assert renamed_options(["--perf-freq=99", "--no-perf-schema"]) == [
        "mysqlprobe: --perf-freq is now -F/--frequency (the old spelling will go)",
        "mysqlprobe: --no-perf-schema is now --no-ps (the old spelling will go)"]


def test_help_lists_the_commands_and_ends_with_examples_and_exit_codes():
    code, out, _ = mysqlprobe("--help")
    assert code == 0 and "--insert-profile" in out
    for name in cli.COMMANDS + cli.LAB_COMMANDS:
        assert re.search(rf"^  mysqlprobe (lab )?{name} +\S", out, re.M), name
    assert set(cli.SUMMARIES) == set(cli.COMMANDS + cli.LAB_COMMANDS)
    for command in ("report", "compare", "flamegraph", "watch", "lab demo", "lab bench"):
        code, out, err = mysqlprobe(*command.split(), "--help")
        assert code == 0 and not err and "examples:" in out, command
        assert out.rstrip().endswith(exit_help().rstrip()), command
    code, out, err = mysqlprobe("lab", "--help")
    assert code == 0 and "mysqlprobe lab demo" in out and not err
    code, out, _ = mysqlprobe("watch", "--help")
    assert "continuously within a small budget and serve the figures to Prometheus" in out


def test_missing_process():
    code, _, err = mysqlprobe("-p", 2**22 + 3, "--insert-profile")
    assert code == errors.EXIT_NO_TARGET
    assert "no process with PID" in _one_line(err)


def test_traceback_only_with_verbose():
    code, _, err = mysqlprobe("-v", "-p", 2**22 + 3, "--insert-profile")
    assert code == errors.EXIT_NO_TARGET and "Traceback" in err


def test_report_of_something_that_is_not_a_capture(tmp_path):
    code, _, err = mysqlprobe("report", tmp_path)
    assert code == errors.EXIT_CAPTURE and "no such capture" in _one_line(err)


def test_list_insert_profile_of_a_binary(mysql_fixtures):
    code, out, err = mysqlprobe("--binary", mysql_fixtures["5.6"], "--list", "--insert-profile")
    assert code == 0, err
    assert "MySQL 5.6.51 (mysql-5.6)" in out
    assert "ha_partition::write_row(unsigned char*)" in out
    assert "[partition: *argument 1 at return]" in out


def test_list_index_profile_per_line(mysql_fixtures):
    code, out, err = mysqlprobe("--binary", mysql_fixtures["5.7"], "--list", "--index-profile")
    assert code == 0, err
    assert "BtrBulk::insert" in out and "row_merge_build_indexes" in out and "not catalogued" not in err
    code, out, err = mysqlprobe("--binary", mysql_fixtures["8.0"], "--list", "--index-profile")
    assert code == 0, err
    assert "index build of MySQL 8.0.40 is not catalogued" in err and "row_merge" not in out


def test_unknown_probe_suggests_a_name(mysql_fixtures):
    code, _, err = mysqlprobe("--binary", mysql_fixtures["5.7"], "--list", "--probe", "row_insert_for_mysq")
    assert code == errors.EXIT_USAGE
    assert "did you mean row_insert_for_mysql" in _one_line(err)


def test_glob_probe(mysql_fixtures):
    code, out, _ = mysqlprobe("--binary", mysql_fixtures["8.0"], "--list", "--probe", "get_partition_id_*")
    assert code == 0
    assert "get_partition_id_range(partition_info*, unsigned int*, long long*)" in out


def test_stripped_binary_says_what_is_missing(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.7", name="cli-strip-src")
    stripped, _ = strip_with_debug_file(src, tmp_path, debuglink=False)
    code, _, err = mysqlprobe("--binary", stripped, "--list", "--insert-profile")
    assert code == errors.EXIT_NO_SYMBOLS
    line = _one_line(err)
    assert "is stripped and no debug symbols were found" in line
    assert "partition.write_row" in line and "innodb.row_insert" in line and "--debug-file" in line


def test_debug_file_option_restores_the_probes(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.7", name="cli-debugfile-src")
    stripped, debug = strip_with_debug_file(src, tmp_path, debuglink=False)
    code, out, err = mysqlprobe("--binary", stripped, "--debug-file", debug, "--list", "--insert-profile")
    assert code == 0, err
    assert "Partition_helper::ph_write_row" in out and f"debug file {debug}" in out


def test_debuginfod_option_fetches_the_symbols_and_says_so(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.7", name="cli-debuginfod-src")
    stripped, debug = strip_with_debug_file(src, tmp_path, debuglink=False)
    publish(tmp_path / "srv", read_elf(str(stripped)).build_id, debug)
    env = {"DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    with serving(tmp_path / "srv") as url:
        code, out, err = mysqlprobe("--binary", stripped, "--debuginfod", url, "--list", "--insert-profile", env=env)
    assert code == 0, err
    assert "Partition_helper::ph_write_row" in out and f"(debuginfod {url})" in out


def test_an_unreachable_debuginfod_is_named_in_the_one_line(fixture_dir, tmp_path):
    src = compile_fixture(fixture_dir, "5.7", name="cli-debuginfod-down-src")
    stripped, _ = strip_with_debug_file(src, tmp_path, debuglink=False)
    env = {"DEBUGINFOD_URLS": "http://user:pw@127.0.0.1:9", "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    code, _, err = mysqlprobe("--binary", stripped, "--list", "--insert-profile", env=env)
    assert code == errors.EXIT_NO_SYMBOLS
    line = _one_line(err)
    assert "debuginfod failed (http://127.0.0.1:9: " in line and "pw" not in line


@pytest.mark.parametrize("args, message", [
    (["-p", "1", "--insert-profile", "-d", "0"], "positive"),
    (["-p", "1", "--insert-profile", "-d", "nan"], "finite"),
    (["-p", "1", "--insert-profile", "-d", "inf"], "finite"),
    (["-p", "1", "--insert-profile", "--password-file", "/nonexistent/pw"], "--password-file /nonexistent/pw"),
    (["-p", "1", "--stage", "innodb.nope"], "unknown stage"),
    (["--insert-profile"], "-p/--pid is required"),
    (["-p", "1", "--insert-profile", "-F", "0"], "-F/--frequency takes 1 to 10000"),
    (["-p", "1", "--insert-profile", "--burst-freq", "-5"], "--burst-freq takes 0 (none) to 20000"),
    (["-p", "1", "--insert-profile", "--keep-perf-data", "-o", "/tmp/x", "--sampler", "bpf"],
     "--keep-perf-data needs perf record"),
    (["lab", "bench", "--server", "10.2.11", "--cells", "range-0"], "cell 'range-0'"),
    (["lab", "bench", "--server", "10.2.11", "--cells", "sideways"], "unknown cell"),
    (["lab", "bench", "--cells", "none"], "give --server VERSION"),
])
def test_bad_options(args, message):
    code, _, err = mysqlprobe(*args)
    assert code == errors.EXIT_USAGE and message in err


def test_insert_profile_of_a_program_that_is_not_mysqld():
    code, _, err = mysqlprobe("--binary", "/bin/true", "--list", "--insert-profile")
    assert code == errors.EXIT_NO_TARGET
    assert "does not look like mysqld or mariadbd" in _one_line(err)


def test_the_command_names_known_before_their_modules_load():
    """Every name is a command module with what the parser needs; the
    package holds no command the names leave out."""
    from mysqlprobe import commands
    from mysqlprobe.lab import commands as lab_commands
    assert set(cli.COMMANDS) == {m.name for m in pkgutil.iter_modules(commands.__path__)}
    assert set(cli.LAB_COMMANDS) == {m.name for m in pkgutil.iter_modules(lab_commands.__path__)} - {"profiled_load"}
    for name in cli.COMMANDS + cli.LAB_COMMANDS:
        module = cli.command_module(name)
        assert callable(module.add_arguments) and callable(module.run)


def test_lab_commands_run_under_lab_and_the_old_spelling_says_so():
    code, out, err = mysqlprobe("lab", "sandbox", "--help")
    assert code == 0 and out.startswith("usage: mysqlprobe lab sandbox")
    code, out, err = mysqlprobe("sandbox", "--help")
    assert code == 0 and "is a lab command now: mysqlprobe lab sandbox" in err
    code, _, err = mysqlprobe("lab", "record")
    assert code == errors.EXIT_USAGE and "usage: mysqlprobe lab {sandbox,load,demo,bench}" in err


def test_a_recording_imports_no_other_command(tmp_path):
    """The record command's start does not wait for the other commands' modules.
    (Run from tmp_path: in the checkout, the source folder would shadow the package.)"""
    code = ("import sys; from mysqlprobe import cli; cli.command_module('record'); "
            "print(sorted(m for m in sys.modules if m.startswith('mysqlprobe.commands.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert eval(out) == ["mysqlprobe.commands.record"]


def test_a_short_window_samples_fast_enough_for_a_flame_graph():
    from mysqlprobe.collectors.cpu.perf_record import DEFAULT_FREQUENCY
    from mysqlprobe.commands.record import SHORT_WINDOW_MAX_HZ, STACKS_WANTED, sampling_frequency
    assert sampling_frequency(None) == DEFAULT_FREQUENCY          # the load decides the window's end
    assert sampling_frequency(60) == DEFAULT_FREQUENCY
    assert sampling_frequency(2) == 501 and 2 * 501 >= STACKS_WANTED
    assert sampling_frequency(0.5) == SHORT_WINDOW_MAX_HZ
    for d in (1, 1.5, 3, 7, 10.1):
        hz = sampling_frequency(d)
        assert DEFAULT_FREQUENCY <= hz <= SHORT_WINDOW_MAX_HZ and (hz * d >= STACKS_WANTED or hz == SHORT_WINDOW_MAX_HZ
                                                                     or hz == DEFAULT_FREQUENCY)


def test_json_means_the_whole_result_on_every_command():
    """report --json prints what record --json does (the whole derived
    profile, as --json=all did), --json=stages the stage summaries alone."""
    import json
    from pathlib import Path

    from mysqlprobe.reports import load_profile

    demo = Path(__file__).resolve().parents[2] / "docs" / "demo"

    def printed(*args: str):
        done = subprocess.run([MYSQLPROBE, "report", str(demo), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    whole = printed("--json")
    assert whole == printed("--json=all") == json.loads(json.dumps(load_profile(str(demo)).to_json()))
    assert printed("--json=stages") == json.loads(json.dumps(load_profile(str(demo)).stage_records))
    assert "account" in whole and "stages" in whole
