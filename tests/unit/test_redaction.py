"""--full-sql keeps a statement's literals but never its credentials."""

from __future__ import annotations

import pytest

from mysqlprobe.sqltext import redacted

SECRET = "S3cr3t!pw"
CASES = [
    f"CREATE USER 'app'@'%' IDENTIFIED BY '{SECRET}'",
    f"ALTER USER app IDENTIFIED WITH mysql_native_password BY '{SECRET}'",
    f"CREATE USER x IDENTIFIED VIA ed25519 USING PASSWORD('{SECRET}')",
    f"CREATE USER x IDENTIFIED BY PASSWORD '{SECRET}'",
    f"GRANT ALL ON *.* TO u IDENTIFIED BY \"{SECRET}\"",
    f"SET PASSWORD FOR 'app'@'localhost' = PASSWORD('{SECRET}')",
    f"SET PASSWORD = '{SECRET}'",
    f"CHANGE MASTER TO MASTER_HOST='h', MASTER_PASSWORD='{SECRET}', MASTER_PORT=3306",
    f"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'u', PASSWORD '{SECRET}')",
    f"SELECT AES_ENCRYPT(card, '{SECRET}') FROM t",
    f"select old_password('{SECRET}')",
    f"INSERT INTO t VALUES ('it''s', 'IDENTIFIED BY ', 1) /* */; CREATE USER z IDENTIFIED BY '{SECRET}'",
]


@pytest.mark.parametrize("sql", CASES)
def test_credentials_are_taken_out(sql):
    out = redacted(sql)
    assert SECRET not in out and "<redacted>" in out


def test_card_numbers_are_taken_out_and_other_numbers_kept():
    sql = "INSERT INTO pay VALUES (4111111111111111, '5500-0000-0000-0004', 1234567890123, 20261127)"
    out = redacted(sql)
    assert "4111111111111111" not in out and "5500-0000-0000-0004" not in out
    assert "1234567890123" in out and "20261127" in out   # no Luhn match, or too short


def test_ordinary_statements_are_unchanged():
    for sql in ("INSERT INTO emp_range_5 SELECT * FROM emp_src", "SELECT 'password' AS word, 42",
                "UPDATE t SET password_hash = 'x' WHERE id = 3"):
        assert redacted(sql) == sql
