"""What a recording imports before its probes are attached: the modules
only a later step needs (the SQL driver, in the P_S setup's thread;
tempfile, for saving; traceback, with -v) are imported where they are
used, and the stand-ins for the standard library's answer the same."""

import os
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone

from mysqlprobe import capture
from mysqlprobe.collectors.perfschema import connection

# each was imported by the record command's modules, together 0.05-0.09 s of every start
# (the start's whole time is bench/startup.py's to measure, not a list of banned modules)
LATER = ("pymysql", "ssl", "tempfile", "shutil", "platform", "socket", "traceback", "hashlib",
         "importlib.resources")


def imported_by_record(cwd) -> set[str]:
    # run outside the checkout: its collectors/ folder is not the installed package
    done = subprocess.run([sys.executable, "-I", "-X", "importtime", "-c",
                           "import mysqlprobe.cli, mysqlprobe.commands.record"],
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "no import log: -X importtime not honoured"
    return set(lines)


def test_the_record_command_imports_none_of_what_later_steps_need(tmp_path):
    modules = imported_by_record(tmp_path)
    assert "mysqlprobe.recorder.recorder" in modules and "mysqlprobe.collectors.perfschema.collector" in modules
    assert not modules & set(LATER), sorted(modules & set(LATER))


def test_the_sql_driver_is_pymysql_at_first_use():
    import pymysql
    assert connection.pymysql.err.MySQLError is pymysql.err.MySQLError
    assert connection.pymysql.connect is pymysql.connect


def test_the_host_record_says_what_socket_and_platform_say():
    import platform
    host = capture.host_record()
    assert host["hostname"] == socket.gethostname()
    assert (host["kernel"], host["machine"], host["cpus"]) == (platform.release(), platform.machine(), os.cpu_count())


def test_now_utc_is_iso_8601_to_the_millisecond():
    before = datetime.now(timezone.utc).replace(microsecond=0)
    stamp = capture.now_utc()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert before <= parsed <= datetime.now(timezone.utc)
