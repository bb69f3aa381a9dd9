"""Privacy by default: what a capture keeps of statements, and who may read it."""

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import MYSQLPROBE
from test_compare import A, B, _save
from mysqlprobe.collectors.perfschema.settings import PerfSchema
from mysqlprobe.sqltext import normalized

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize("sql, digest", [
    ("INSERT INTO sbtest1 (id, k, c) VALUES (0, 4992, 'it''s a \\' secret'), (1, 2, \"b\")",
     "INSERT INTO sbtest1 (id, k, c) VALUES (?, ...), (?, ...)"),
    ("SELECT * FROM t2 WHERE a=-1.5e3 AND b = 0x1F AND t2.c3 = x'AB' LIMIT 10",
     "SELECT * FROM t2 WHERE a=? AND b = ? AND t2.c3 = ? LIMIT ?"),
    ("UPDATE `p100`\n  SET pad='x'\tWHERE id IN (7, 8,9)", "UPDATE `p100` SET pad=? WHERE id IN (?, ...)"),
])
def test_literals_are_made_question_marks(sql, digest):
    assert normalized(sql) == digest


def test_statements_keep_the_servers_digest_unless_full_text_is_asked():
    ps = PerfSchema(conn=None)
    secret = "INSERT INTO users VALUES ('alice', 'hunter2')"
    assert ps._text(secret, "INSERT INTO `users` VALUES (...)") == "INSERT INTO `users` VALUES (...)"
    assert "hunter2" not in ps._text(secret, None)          # digests off on the server: normalized here
    assert PerfSchema(conn=None, full_sql=True)._text(secret, "INSERT ...") == secret


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize("flags, file_mode, dir_mode", [((), 0o600, 0o700), (("--shared-output",), 0o644, 0o755)])
def test_written_files_are_private_unless_shared(tmp_path, flags, file_mode, dir_mode):
    capture = tmp_path / "capture"
    capture.mkdir(mode=0o755)
    shutil.copy(FIXTURES / "profile_v1_exact.json", capture / "profile.json")
    (capture / "profile.json").chmod(0o644)
    done = subprocess.run([MYSQLPROBE, "report", *flags, str(capture), "--html"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = {k: v for k, v in _modes(capture).items() if k not in (".", "profile.json")}
    assert written and all(m == file_mode for m in written.values()), written
    a, b, out = _save(tmp_path, "a", A), _save(tmp_path, "b", B), tmp_path / "new" / "cmp"
    done = subprocess.run([MYSQLPROBE, "compare", *flags, str(a), str(b), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    made = _modes(out)
    assert made.pop(".") == dir_mode and stat.S_IMODE(out.parent.stat().st_mode) == dir_mode
    assert len(made) == 4 and set(made.values()) == {file_mode}, made


@pytest.mark.parametrize("sql", [
    "CREATE USER 'app'@'%' IDENTIFIED BY 'hunter2'",
    "ALTER USER app IDENTIFIED WITH mysql_native_password BY 'hunter2'",
    "GRANT ALL ON *.* TO u IDENTIFIED BY \"hunter2\"",
])
def test_full_sql_keeps_no_credential_on_either_path(sql):
    """--full-sql keeps literals, never a password: the P_S collector's text
    and the statement probe's (read from the server's memory, a prefix where
    the kernel cut it) both go through the redaction."""
    from mysqlprobe.collectors.uprobes.counts import StatementCounts
    from mysqlprobe.collectors.uprobes.latency import statement_text
    from mysqlprobe.probes import abi
    from mysqlprobe.probes.histogram import Histogram
    kept = PerfSchema(conn=None, full_sql=True)._text(sql, "CREATE USER ...")
    assert "hunter2" not in kept and "<redacted>" in kept
    for text, whole in ((sql, True), (sql[:sql.index("hunter2") + 4], False)):
        counts = StatementCounts(abi.COM_QUERY, text.encode(), whole, 1, 100, Histogram.of_slots([0] * 160), 0, 0)
        shown = statement_text(counts, 1, full_sql=True)
        assert "hunt" not in shown, shown
