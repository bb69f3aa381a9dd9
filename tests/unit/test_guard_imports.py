"""The two guard processes start beside mysqlprobe's own start, on the same
two CPUs: while they only wait, they import no more than waiting needs
(each took 0.1-0.15 s of CPU importing everything up front). Run as the
recorder runs them, in a fresh interpreter, with the import log on."""

import subprocess
import sys

import pytest

from mysqlprobe.collectors.safety.guard_process import command, encode

HEAVY = ("pymysql", "mysqlprobe.collectors.libbpf", "mysqlprobe.collectors.target.addresses",
         "mysqlprobe.collectors.perfschema.settings", "mysqlprobe.collectors.safety.breakpoints", "dataclasses",
         "json", "re", "runpy")   # json brings re and enum; -m brings runpy: 25-30 ms of a guard's CPU


def imported_while_waiting(module: str, state: dict, cwd) -> set[str]:
    # run outside the checkout: its collectors/ folder is not the installed package
    done = subprocess.run(command(module, "-X", "importtime"), input=encode(state) + "done\n",
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "no import log: -X importtime not honoured"
    return set(lines)


@pytest.mark.parametrize("module, state", [
    ("mysqlprobe.collectors.safety.breakpoint_guard", {"pid": 1, "binary": "/bin/true", "offsets": [16], "holder": 1}),
    ("mysqlprobe.collectors.perfschema.guard", {"connect": {}, "saved": {}, "lease": None}),
])
def test_a_guard_told_done_imports_nothing_heavy(module, state, tmp_path):
    modules = imported_while_waiting(module, state, tmp_path)
    assert module in modules  # it ran from the package
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_the_guard_without_done_imports_what_it_resets_with(tmp_path):
    """The check above can fail: told nothing (mysqlprobe gone), the guard
    goes on to the breakpoints' code, here on a process without them."""
    state = {"pid": 1, "binary": "/nonexistent", "offsets": [16], "holder": 1}
    done = subprocess.run(command("mysqlprobe.collectors.safety.breakpoint_guard", "-X", "importtime"),
                          input=encode(state), capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "mysqlprobe.collectors.safety.breakpoints" in done.stderr


def test_the_state_line_carries_what_json_did_and_keeps_tuples():
    """The P_S guard's state as collector.py writes it: connection arguments,
    the saved setup (instrument states are tuples) and the lease."""
    import io
    from mysqlprobe.collectors.safety.guard_process import receive, told_done
    state = {"connect": {"unix_socket": "/run/mysqld/mysqld.sock", "user": "root", "ssl_disabled": True, "port": None},
             "saved": {"consumers": {"events_stages_current": "NO"},
                       "instruments": {"stage/sql/init": ("NO", "NO")}, "background_history_off": None},
             "lease": {"path": "/run/mysqlprobe/ps-1-2.json", "holder": [10, 20]}}
    stream = io.StringIO(encode(state) + "done\n")
    assert receive(stream) == state and told_done(stream)
    gone = io.StringIO(encode(state))
    assert receive(gone) == state and not told_done(gone)  # end of file: mysqlprobe is gone


def test_what_is_learnt_later_reaches_the_guard_before_done_or_the_end(tmp_path):
    """The P_S guard starts before the setup changes; the rows' old state and
    the connections follow as "+" lines, each read into the state."""
    import io
    from mysqlprobe.collectors.safety.guard_process import GuardProcess, receive, told_done
    state = {"connect": {"user": "root"}, "saved": None, "lease": None, "connections": [7]}
    saved = {"consumers": {"events_stages_current": "NO"}, "instruments": {}, "background_history_off": None}
    lines = [encode(state), "+" + encode({"saved": saved}), "+" + encode({"connections": [7, 9]})]
    gone = io.StringIO("".join(lines))
    got = receive(gone)
    assert not told_done(gone, got) and got == {**state, "saved": saved, "connections": [7, 9]}
    done = io.StringIO("".join(lines) + "done\n")
    got = receive(done)
    assert told_done(done, got) and got["saved"] == saved
    # and through a real pipe: a guard that echoes its final state
    echo = GuardProcess.__new__(GuardProcess)
    echo.proc = subprocess.Popen([sys.executable, "-I", "-c", "import sys; from mysqlprobe.collectors.safety.guard_process "
                                  "import receive, told_done; s = receive(sys.stdin); told_done(sys.stdin, s); "
                                  "print(sorted(s['connections']))"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    echo.proc.stdin.write(encode(state))
    echo.send({"connections": [7, 11]})
    echo.proc.stdin.close()
    assert echo.proc.stdout.read().strip() == "[7, 11]" and echo.proc.wait(timeout=30) == 0
    echo.send({"connections": [1]})  # the guard gone: nothing to tell, no error
