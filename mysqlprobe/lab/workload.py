"""The seed load: the `emp` table of the partitioned-insert study, RANGE /
LIST / HASH partitioned on store_id (1..100) with N partitions, or not
partitioned, filled by INSERT ... SELECT from a source table of N rows."""

from __future__ import annotations

import threading
import time

import pymysql

from mysqlprobe.errors import WorkloadError
from dataclasses import dataclass

SCHEMA = "mysqlprobe_load"
SOURCE = "emp_src"
KINDS = ("range", "list", "hash", "none")
STORE_IDS = 100

COLUMN_TYPES = (("id", "int"), ("fname", "varchar(30)"), ("lname", "varchar(30)"),
                ("hired_date", "date not null"), ("separated_date", "date not null"), ("job_code", "int"),
                ("store_id", "int"))
COLUMNS = "(\n" + ",\n".join(f"  {name} {kind}" for name, kind in COLUMN_TYPES) + "\n) ENGINE=InnoDB"


def connect(socket: str, database: str | None = None, user: str = "root", password: str = ""):

    try:
        return pymysql.connect(unix_socket=socket, user=user, password=password, database=database,
                               autocommit=True, connect_timeout=10)
    except pymysql.err.MySQLError as e:
        raise WorkloadError(f"cannot connect through {socket}: {e.args[-1]}") from None


ROW_FORMATS = ("compact", "dynamic", "compressed")


@dataclass(frozen=True)
class Table:
    kind: str            # range, list, hash or none
    partitions: int      # 0 for none
    row_format: str = ""  # compact, dynamic, compressed; "" for the server's default
    key_block_size: int = 0  # compressed: 1, 2, 4, 8 or 16 (KB)

    @property
    def name(self) -> str:
        base = "emp_nopart" if self.kind == "none" else f"emp_{self.kind}_{self.partitions}"
        if self.row_format:
            base += f"_{self.row_format}" + (f"_{self.key_block_size}" if self.key_block_size else "")
        return base

    def insert_row_sql(self, schema: str = "") -> str:
        """One row's INSERT, a parameter for each column (schema: to name the table by)."""
        values = ", ".join(["%s"] * len(COLUMN_TYPES))
        return f"INSERT INTO {schema + '.' if schema else ''}{self.name} VALUES ({values})"

    def ddl(self) -> str:
        options = f" ROW_FORMAT={self.row_format.upper()}" if self.row_format else ""
        options += f" KEY_BLOCK_SIZE={self.key_block_size}" if self.key_block_size else ""
        return f"CREATE TABLE {self.name} {COLUMNS}{options}{self.partition_clause()}"

    def partition_clause(self) -> str:
        n = self.partitions
        if self.kind == "none":
            return ""
        if self.kind == "hash":
            return f"\nPARTITION BY HASH (store_id) PARTITIONS {n}"
        if self.kind == "range":
            parts = [f"PARTITION p{i} VALUES LESS THAN ({STORE_IDS * (i + 1) // n + 1})" for i in range(n - 1)]
            parts.append(f"PARTITION p{n - 1} VALUES LESS THAN MAXVALUE")
            return "\nPARTITION BY RANGE (store_id) (\n  " + ",\n  ".join(parts) + "\n)"
        if self.kind == "list":
            groups = [[v for v in range(1, STORE_IDS + 1) if (v - 1) % n == i] for i in range(n)]
            parts = [f"PARTITION p{i} VALUES IN ({','.join(map(str, g))})" for i, g in enumerate(groups)]
            return "\nPARTITION BY LIST (store_id) (\n  " + ",\n  ".join(parts) + "\n)"
        raise WorkloadError(f"unknown partitioning {self.kind!r}; choose one of {', '.join(KINDS)}")


def table(kind: str, partitions: int, row_format: str = "", key_block_size: int = 0) -> Table:
    if kind not in KINDS:
        raise WorkloadError(f"unknown partitioning {kind!r}; choose one of {', '.join(KINDS)}")
    if kind != "none" and not 1 <= partitions <= (STORE_IDS if kind == "list" else 8192):
        raise WorkloadError(f"{kind} partitioning with {partitions} partitions is not supported here")
    if row_format and row_format not in ROW_FORMATS:
        raise WorkloadError(f"unknown row format {row_format!r}; choose one of {', '.join(ROW_FORMATS)}")
    if key_block_size and (row_format != "compressed" or key_block_size not in (1, 2, 4, 8, 16)):
        raise WorkloadError("KEY_BLOCK_SIZE is 1, 2, 4, 8 or 16, with the compressed row format only")
    return Table(kind, 0 if kind == "none" else partitions, row_format, key_block_size)


def _scalar(cur, sql: str, args=None):
    cur.execute(sql, args)
    row = cur.fetchone()
    return row[0] if row else None


def prepare_source(conn, rows: int) -> None:
    """emp_src with exactly `rows` rows; store_id cycles through 1..100."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
        cur.execute(f"USE {SCHEMA}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {SOURCE} {COLUMNS}")
        if _scalar(cur, f"SELECT COUNT(*) FROM {SOURCE}") == rows:
            return
        cur.execute(f"TRUNCATE TABLE {SOURCE}")
        select = ("SELECT seq, CONCAT('first', seq), CONCAT('last', seq), "
                  "DATE '2000-01-01' + INTERVAL (seq % 3650) DAY, "
                  "DATE '2010-01-01' + INTERVAL (seq % 3650) DAY, seq % 17, "
                  f"1 + (seq * 37) % {STORE_IDS} FROM seq_1_to_{rows}")
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {SOURCE} {select}")
        cur.execute("COMMIT")
        got = _scalar(cur, f"SELECT COUNT(*) FROM {SOURCE}")
        if got != rows:
            raise WorkloadError(f"{SOURCE} has {got} rows, wanted {rows}")


def create_target(conn, t: Table | IndexTable) -> None:
    """The table made anew, empty."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
        cur.execute(f"USE {SCHEMA}")
        cur.execute(f"DROP TABLE IF EXISTS {t.name}")
        try:
            cur.execute(t.ddl())
        except pymysql.err.MySQLError as e:
            raise WorkloadError(f"the server would not create {t.name}: {e.args[-1]}") from None


def insert_select(conn, t: Table) -> tuple[int, float]:
    """INSERT INTO target SELECT * FROM emp_src; (rows affected, seconds)."""
    with conn.cursor() as cur:
        cur.execute(f"USE {SCHEMA}")
        start = time.perf_counter()
        affected = cur.execute(f"INSERT INTO {t.name} SELECT * FROM {SOURCE}")
        return affected, time.perf_counter() - start


def partition_names(conn, t: Table) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT PARTITION_NAME FROM information_schema.PARTITIONS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY PARTITION_ORDINAL_POSITION",
                    (SCHEMA, t.name))
        return [r[0] for r in cur.fetchall() if r[0]]


def partition_counts(conn, t: Table) -> list[int]:
    """Exact rows per partition, in partition id order (SELECT COUNT(*) ... PARTITION (p))."""
    with conn.cursor() as cur:
        cur.execute(f"USE {SCHEMA}")
        return [_scalar(cur, f"SELECT COUNT(*) FROM {t.name} PARTITION ({p})") for p in partition_names(conn, t)]


def row_count(conn, t: Table) -> int:
    with conn.cursor() as cur:
        return _scalar(cur, f"SELECT COUNT(*) FROM {SCHEMA}.{t.name}")


def source_rows(conn, rows: int) -> list[tuple]:
    """The first `rows` rows of emp_src, by id (the connection in SCHEMA)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {SOURCE} ORDER BY id LIMIT %s", (rows,))
        source = list(cur.fetchall())
    if len(source) < rows:
        raise WorkloadError(f"{SOURCE} has {len(source)} rows, wanted {rows}")
    return source


def single_row_inserts(socket: str, t: Table, rows: int, clients: int, user: str = "root") -> tuple[int, float]:
    """`clients` connections, each inserting its share of emp_src's rows one
    autocommitted INSERT at a time, all at once; (rows inserted, seconds)."""

    conns = [connect(socket, SCHEMA, user) for _ in range(clients)]
    source = source_rows(conns[0], rows)
    done = [0] * clients
    errors: list[BaseException] = []
    sql = t.insert_row_sql()

    def client(i: int) -> None:
        try:
            with conns[i].cursor() as cur:
                for row in source[i::clients]:
                    done[i] += cur.execute(sql, row)
        except BaseException as e:  # reported below, from the calling thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    seconds = time.perf_counter() - start
    for c in conns:
        c.close()
    if errors:
        raise WorkloadError(f"single-row inserts failed: {errors[0]}")
    return sum(done), seconds


# the index build of the row-format study: a sysbench-shaped table filled,
# then a secondary index built on k (CREATE INDEX k ON sbtest(k))
INDEX_COLUMNS = ("(\n  id int NOT NULL,\n  k int NOT NULL,\n  c char(120) NOT NULL,\n  pad char(60) NOT NULL,\n"
                 "  PRIMARY KEY (id)\n) ENGINE=InnoDB")
INDEX_NAME = "k"


@dataclass(frozen=True)
class IndexTable:
    row_format: str = ""     # compact, dynamic, compressed; "" for the server's default
    key_block_size: int = 0  # compressed: 1, 2, 4, 8 or 16 (KB)

    @property
    def name(self) -> str:
        fmt = self.row_format or "default"
        return f"sbtest_{fmt}" + (f"_{self.key_block_size}" if self.key_block_size else "")

    def ddl(self) -> str:
        options = f" ROW_FORMAT={self.row_format.upper()}" if self.row_format else ""
        options += f" KEY_BLOCK_SIZE={self.key_block_size}" if self.key_block_size else ""
        return f"CREATE TABLE {self.name} {INDEX_COLUMNS}{options}"


def barracuda(conn) -> str | None:
    """MariaDB 10.1 makes COMPRESSED and DYNAMIC tables only with the Barracuda
    file format (else a COMPACT one, and a warning): set it, return the value
    to put back (None: nothing to put back)."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'innodb_file_format'")
        row = cur.fetchone()
        if not row or row[1].lower() == "barracuda":
            return None
        cur.execute("SET GLOBAL innodb_file_format = 'Barracuda'")
        return row[1]


def restore_file_format(conn, saved: str | None) -> None:
    if saved:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL innodb_file_format = %s", (saved,))


def index_table(row_format: str = "", key_block_size: int = 0) -> IndexTable:
    table("none", 0, row_format, key_block_size)   # the same checks as the seed's tables
    return IndexTable(row_format, key_block_size)


def fill_index_table(conn, t: IndexTable, rows: int) -> float:
    """The table made anew with exactly `rows` rows, no secondary index;
    k spread over the rows (not in id order: the build has to sort). The
    seconds the fill took."""
    create_target(conn, t)
    with conn.cursor() as cur:
        made = _scalar(cur, "SELECT ROW_FORMAT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                            "AND TABLE_NAME = %s", (SCHEMA, t.name))
        if t.row_format and (made or "").lower() != t.row_format:
            raise WorkloadError(f"the server made {t.name} {made}, not {t.row_format.upper()} "
                                "(MariaDB 10.1 needs innodb_file_format=Barracuda: workload.barracuda)")
        start = time.perf_counter()
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {t.name} SELECT seq, (seq * 7919) % {rows} + 1, "
                    "RPAD(CONCAT(seq, '-'), 119, 'c'), RPAD(CONCAT(seq, '-'), 59, 'p') "
                    f"FROM seq_1_to_{rows}")
        cur.execute("COMMIT")
        seconds = time.perf_counter() - start
        got = _scalar(cur, f"SELECT COUNT(*) FROM {t.name}")
        if got != rows:
            raise WorkloadError(f"{t.name} has {got} rows, wanted {rows}")
        return seconds


def drop_index(conn, t: IndexTable) -> None:
    """The index a build made on the table, dropped (nothing where there is none)."""
    with conn.cursor() as cur:
        cur.execute(f"USE {SCHEMA}")
        if _scalar(cur, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND INDEX_NAME = %s", (SCHEMA, t.name, INDEX_NAME)):
            cur.execute(f"DROP INDEX {INDEX_NAME} ON {t.name}")


def build_index(conn, t: IndexTable) -> float:
    """CREATE INDEX k ON the table (dropped first if there); the seconds it took."""
    drop_index(conn, t)
    with conn.cursor() as cur:
        start = time.perf_counter()
        cur.execute(f"CREATE INDEX {INDEX_NAME} ON {t.name} (k)")
        return time.perf_counter() - start
