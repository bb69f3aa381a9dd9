"""The stage catalog: logical stages of the insert path -> functions, per
server line. Comparisons across versions go through stage names, so
`ha_partition::write_row` (MySQL 5.6, MariaDB) and
`Partition_helper::ph_write_row` (MySQL 5.7/8.0) both count as
partition.write_row.

Names are qualified C++ names, matched against the demangled symbols
whatever their parameter lists (those drift between versions). Sources:
MySQL 5.6.21/5.7.18/8.0.40 and MariaDB 10.1.23/10.2.11/10.11.5 (see
tests/unit/test_catalog.py for the binaries and fixtures that pin them)."""

from __future__ import annotations

from collections.abc import Iterable

from dataclasses import dataclass, field

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the catalog is data: it needs no collector to be imported
    from mysqlprobe.collectors.target.symbols import ResolvedSymbol, ServerInfo, SymbolTable

LINES = ("mysql-5.6", "mysql-5.7", "mysql-8.0", "mariadb")
FAMILY_NAMES = {"mysql": "MySQL", "mariadb": "MariaDB"}


def family_name(family: str | None) -> str:
    """A server family as the reports name it."""
    return FAMILY_NAMES.get(family or "", "unknown server")


@dataclass(frozen=True)
class Expect:
    """Where a function is expected: a server line and an optional version range."""

    line: str
    min_version: tuple[int, ...] = ()
    max_version: tuple[int, ...] = ()  # inclusive, compared on its length

    def covers(self, server: ServerInfo) -> bool:
        if server.line != self.line:
            return False
        v = server.version_tuple
        if not v:
            return True
        if self.min_version and v[: len(self.min_version)] < self.min_version:
            return False
        if self.max_version and v[: len(self.max_version)] > self.max_version:
            return False
        return True


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")) if text else ()


def expect(*specs: str) -> tuple[Expect, ...]:
    """'mysql-5.6', 'mariadb:10.1-10.2', 'mariadb:10.4-' -> Expect tuples."""
    out = []
    for spec in specs:
        line, _, rng = spec.partition(":")
        if line not in LINES:
            raise ValueError(f"unknown server line {line!r}")
        lo, _, hi = rng.partition("-")
        out.append(Expect(line, _v(lo), _v(hi)))
    return tuple(out)


ALL = expect(*LINES)
MYSQL_NATIVE_PARTITIONING = expect("mysql-5.7", "mysql-8.0")
HA_PARTITION = expect("mysql-5.6", "mariadb")


@dataclass(frozen=True)
class PartitionSource:
    """How the partition id is read: an integer argument at entry ('arg'),
    or a uint32 that a pointer argument points to, read at return ('out')."""

    kind: str     # "arg" or "out"
    arg: int      # 0-based; a C++ method's `this` is argument 0

    def describe(self) -> str:
        return f"argument {self.arg}" if self.kind == "arg" else f"*argument {self.arg} at return"


@dataclass(frozen=True)
class StatementArgs:
    """Where a command dispatcher's probe reads the command and the
    statement's text: argument indexes (0-based), and whether the text
    argument points to a structure whose first members are the text and its
    length (MySQL 5.7+'s COM_DATA) rather than being the text (the packet)."""

    command: int
    text: int
    length: int = 0         # the text's length (not read where indirect: the structure's second member)
    indirect: bool = False
    # a USDT query site: every hit is a query, text is the index of the
    # operand holding the text (its form differs from site to site), and
    # the text ends at its NUL (command and length unused)
    usdt: bool = False
    nests: bool = True      # False: a start ends a statement whose done never came


@dataclass(frozen=True)
class UsdtPair:
    """A span the server marks with two USDT probes (they survive strip):
    timed from any start site to the next done site on the thread."""

    provider: str
    start: str
    done: str


@dataclass(frozen=True)
class Candidate:
    """One symbol a stage may be probed at, and on which server lines it is expected."""

    name: str
    expected: tuple[Expect, ...] = ALL
    partition: PartitionSource | None = None
    signature: str | None = None  # substring of the demangled signature, to pick one overload
    statement: StatementArgs | None = None  # a statement boundary: the probe keeps calls per statement
    marks_stage: bool = False  # P_S's start_stage(key, ...): the stage each thread is in
    usdt: UsdtPair | None = None  # USDT probes, not a function: name is "provider:start"

    def expected_in(self, server: ServerInfo) -> bool:
        return any(e.covers(server) for e in self.expected)


@dataclass(frozen=True)
class Stage:
    """A logical step of an INSERT (innodb.row_insert ...) and the symbols that make it per server line."""

    name: str
    title: str
    candidates: tuple[Candidate, ...]
    select: str = "all"          # "all" present candidates, or the "first" present one
    background: bool = False     # usually runs in InnoDB background threads too
    # probe only the candidates expected on the server's line: a function that
    # is the stage on one line and something else, called more often, on another
    only_expected: bool = False


PART_OUT = PartitionSource("out", 1)   # get_partition_id_*(part_info, uint32 *part_id, longlong *func_value)
PART_ARG1 = PartitionSource("arg", 1)  # write_row_in_part(this, uint part_id, uchar *buf)

_GET_PARTITION_ID = (
    "get_partition_id_range", "get_partition_id_range_col", "get_partition_id_list",
    "get_partition_id_list_col", "get_partition_id_hash_nosub", "get_partition_id_linear_hash_nosub",
    "get_partition_id_key_nosub", "get_partition_id_linear_key_nosub", "get_partition_id_with_sub",
)
_GET_SUBPARTITION_ID = (
    "get_partition_id_hash_sub", "get_partition_id_linear_hash_sub",
    "get_partition_id_key_sub", "get_partition_id_linear_key_sub",
)

STATEMENT = "sql.statement"
# stages whose functions take tens of nanoseconds: shorter than the probes
# can time, so the CPU bursts sample them with the probes off
SHORT_STAGES = ("partition.get_partition_id", "partition.get_subpartition_id")
STAGE_CHANGE = "sql.stage_change"

STAGES: tuple[Stage, ...] = (
    # dispatch_command(command, THD *, char *packet, uint length, ...) in MySQL 5.6 and MariaDB;
    # dispatch_command(THD *, const COM_DATA *, command) in MySQL 5.7 and 8.0
    Stage(STATEMENT, "a client command, start to end: statements, and the probed calls kept per statement",
          (Candidate("dispatch_command", HA_PARTITION, signature="(enum_server_command, THD*",
                     statement=StatementArgs(0, 2, length=3)),
           Candidate("dispatch_command", MYSQL_NATIVE_PARTITIONING, signature="(THD*, COM_DATA const*",
                     statement=StatementArgs(2, 1, indirect=True)),
           # without symbols (a stripped binary built with USDT probes): each client query,
           # query__start(query, connection id, db, user, host) to query__done, in
           # dispatch_command; not query__exec__*, which fires again for every statement a
           # stored program runs and would count those as statements of their own
           Candidate("mysql:query__start", (), usdt=UsdtPair("mysql", "query__start", "query__done"),
                     statement=StatementArgs(0, 0, usdt=True, nests=False))),
          select="first"),
    # which P_S stage a statement's probed calls ran in (entry only; with a
    # connection, P_S names the keys): 17 hits per sysbench INSERT
    Stage(STAGE_CHANGE, "a statement entering a P_S stage: the stage each probed call ran in",
          (Candidate("start_stage_v1", expect("mysql-5.6", "mariadb:10.1-10.4"), marks_stage=True),
           Candidate("pfs_start_stage_v1", expect("mysql-5.7", "mariadb:10.5-"), marks_stage=True),
           Candidate("pfs_start_stage_vc", expect("mysql-8.0"), marks_stage=True)),
          select="first"),
    Stage("sql.ha_write_row", "handler::ha_write_row: every row any engine writes",
          (Candidate("handler::ha_write_row"),)),
    Stage("partition.write_row", "row handed to the partitioning layer",
          (Candidate("Partition_helper::ph_write_row", MYSQL_NATIVE_PARTITIONING),
           Candidate("ha_partition::write_row", HA_PARTITION)),
          select="first"),
    Stage("partition.write_row_in_part", "row written into the chosen partition (native partitioning)",
          (Candidate("ha_innopart::write_row_in_part", MYSQL_NATIVE_PARTITIONING, PART_ARG1),
           Candidate("ha_partition::write_row_in_part", expect("mysql-5.7"), PART_ARG1))),
    Stage("partition.get_partition_id", "partition chosen for a row (range/list/hash/key)",
          tuple(Candidate(n, ALL, PART_OUT) for n in _GET_PARTITION_ID)
          + (Candidate("vers_get_partition_id", expect("mariadb:10.3-"), PART_OUT),)),
    Stage("partition.get_subpartition_id", "subpartition chosen for a row",
          tuple(Candidate(n) for n in _GET_SUBPARTITION_ID)),
    Stage("innodb.write_row", "InnoDB handler write_row",
          (Candidate("ha_innobase::write_row"),), select="first"),
    Stage("innodb.row_insert", "InnoDB row insert (row_insert_for_mysql)",
          (Candidate("row_insert_for_mysql"),), select="first"),
    Stage("innodb.row_ins_clust_index", "insert into the clustered index",
          (Candidate("row_ins_clust_index_entry_low"),)),
    Stage("innodb.row_ins_sec_index", "insert into secondary indexes",
          (Candidate("row_ins_sec_index_entry_low"),)),
    Stage("innodb.btr_insert", "B-tree cursor insert (optimistic, pessimistic on page split)",
          (Candidate("btr_cur_optimistic_insert"), Candidate("btr_cur_pessimistic_insert"))),
    Stage("innodb.page_checksum", "page checksum computed (crc32, innodb, none; compressed pages)",
          (Candidate("buf_calc_page_crc32"), Candidate("buf_calc_page_new_checksum"),
           Candidate("buf_calc_page_old_checksum"),
           Candidate("page_zip_calc_checksum", expect("mysql-5.6", "mysql-5.7", "mariadb")),
           Candidate("BlockReporter::calc_zip_checksum", expect("mysql-8.0"))),
          background=True),
    Stage("innodb.page_verify", "page checksum verified on read",
          (Candidate("buf_page_is_corrupted", expect("mysql-5.6", "mysql-5.7", "mariadb")),
           Candidate("BlockReporter::is_corrupted", expect("mysql-8.0"))),
          background=True),
    Stage("innodb.page_compress", "page compressed (ROW_FORMAT=COMPRESSED, page compression)",
          (Candidate("page_zip_compress"),
           Candidate("fil_compress_page", expect("mariadb:10.1-10.3")),
           Candidate("fil_page_compress", expect("mariadb:10.4-")),
           Candidate("os_file_compress_page", MYSQL_NATIVE_PARTITIONING, signature="IORequest")),
          background=True),
    Stage("innodb.page_decompress", "page decompressed",
          (Candidate("page_zip_decompress"),
           Candidate("fil_decompress_page", expect("mariadb:10.1-10.3")),
           Candidate("fil_page_decompress", expect("mariadb:10.4-")),
           Candidate("os_file_decompress_page", MYSQL_NATIVE_PARTITIONING)),
          background=True),
)


# the in-place index build (CREATE INDEX, ALTER TABLE ... ADD INDEX): InnoDB's
# row_merge_build_indexes (row0merge.cc) on the 5.6 and 5.7 lines and every
# MariaDB. It scans the clustered index, builds each row's tuple for the new
# index into a sort buffer (a run when full: sorted in memory, written to a
# temporary file in blocks of innodb_sort_buffer_size), merges the runs in
# passes that each read and write the whole file, then inserts the sorted
# tuples: bottom-up, a page at a time (BtrBulk, the 5.7 line and MariaDB
# 10.2+), or one by one through the B-tree (the 5.6 line and MariaDB 10.1).
# MySQL 8.0.27+ builds through ddl::Builder (parallel DDL): not catalogued.
BUILD_LINES = expect("mysql-5.6", "mysql-5.7", "mariadb")
SORTED_BUILD = expect("mysql-5.7", "mariadb:10.2-")
TUPLE_BUILD = expect("mysql-5.6", "mariadb:10.1-10.1")
# BtrBulk::insert(this, tuple, level): level 0 is the leaf tuples, above it the node pointers
BULK_LEVEL = PartitionSource("arg", 2)

INDEX_STAGES: tuple[Stage, ...] = (
    Stage("index.build", "an index build, whole (row_merge_build_indexes)",
          (Candidate("row_merge_build_indexes", BUILD_LINES),)),
    Stage("index.scan", "the clustered index read into sort buffers (row_merge_read_clustered_index)",
          (Candidate("row_merge_read_clustered_index", BUILD_LINES),)),
    Stage("index.row_build", "a row of the clustered index made into the new index's columns (row_build)",
          (Candidate("row_build_w_add_vcol", SORTED_BUILD), Candidate("row_build", TUPLE_BUILD)),
          select="first"),
    Stage("index.merge_sort", "the runs merged into one, every pass (row_merge_sort)",
          (Candidate("row_merge_sort", BUILD_LINES),)),
    # a full sort buffer is sorted and written as one block: the blocks the scan writes are the runs
    Stage("index.block_write", "a block of the temporary sort file written (row_merge_write)",
          (Candidate("row_merge_write", BUILD_LINES),)),
    Stage("index.block_read", "a block of the temporary sort file read (row_merge_read)",
          (Candidate("row_merge_read", BUILD_LINES),)),
    Stage("index.insert", "the sorted tuples inserted into the new index (row_merge_insert_index_tuples)",
          (Candidate("row_merge_insert_index_tuples", BUILD_LINES),)),
    Stage("index.bulk_insert", "a tuple added bottom-up to a page of the new index (BtrBulk::insert), by level",
          (Candidate("BtrBulk::insert", SORTED_BUILD, BULK_LEVEL),)),
    Stage("index.page_commit", "a page of the new index finished and linked (BtrBulk::pageCommit)",
          (Candidate("BtrBulk::pageCommit", SORTED_BUILD),)),
    Stage("index.tuple_insert", "a tuple inserted through the B-tree, one by one (btr_cur_optimistic_insert)",
          (Candidate("btr_cur_optimistic_insert", TUPLE_BUILD),), only_expected=True),
    Stage("index.tuple_split", "a tuple that did not fit its page, inserted by splitting it (btr_cur_pessimistic_insert)",
          (Candidate("btr_cur_pessimistic_insert", TUPLE_BUILD),), only_expected=True),
    Stage("index.flush", "the new index's pages written out before the build commits (FlushObserver::flush)",
          (Candidate("FlushObserver::flush", expect("mysql-5.7", "mariadb:10.2-10.4")),)),
)


def _usdt_stage(name: str, title: str, start: str, done: str, statement: StatementArgs | None = None) -> Stage:
    """A stage from the server's own USDT probes (MariaDB and MySQL built
    with DTrace/SystemTap probes: MariaDB 10.11.5's sandbox build; not 10.1 or 10.2)."""
    return Stage(name, title, (Candidate(f"mysql:{start}", usdt=UsdtPair("mysql", start, done),
                                         statement=statement),))


USDT_STAGES: tuple[Stage, ...] = (
    _usdt_stage("sql.insert_row", "a row written by the SQL layer (USDT insert__row__start to done)",
                "insert__row__start", "insert__row__done"),
    _usdt_stage("sql.update_row", "a row updated (USDT update__row__start to done)",
                "update__row__start", "update__row__done"),
    _usdt_stage("sql.delete_row", "a row deleted (USDT delete__row__start to done)",
                "delete__row__start", "delete__row__done"),
    # query__exec__start(query, connection id, db, user, host, kind): its text keeps
    # the statements by shape where no other boundary is probed (see plan_probes);
    # a stored program's statements nest inside its CALL and are kept in it
    _usdt_stage("sql.query_exec", "a query executed (USDT query__exec__start to done)",
                "query__exec__start", "query__exec__done", StatementArgs(0, 0, usdt=True)),
    _usdt_stage("sql.handler_wrlock", "a table write-locked for a statement (USDT handler__wrlock__start to done)",
                "handler__wrlock__start", "handler__wrlock__done"),
)

BY_NAME = {s.name: s for s in STAGES + INDEX_STAGES + USDT_STAGES}

# what --insert-profile takes from the server's USDT probes where a stripped
# binary lost the functions: every row handed to an engine, with no symbols
INSERT_PROFILE_USDT = ("sql.insert_row",)

INSERT_PROFILE = (
    STATEMENT, "partition.write_row", "partition.write_row_in_part", "partition.get_partition_id",
    "partition.get_subpartition_id", "innodb.write_row", "innodb.row_insert",
    "innodb.page_checksum", "innodb.page_verify", "innodb.page_compress", "innodb.page_decompress",
)


# --index-profile: the build's phases, with the compression the seed's row
# formats pay in it (page_zip_compress) and the statement around it
INDEX_PROFILE = (STATEMENT,) + tuple(s.name for s in INDEX_STAGES) + ("innodb.page_compress",)


def stage(name: str) -> Stage:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; known: {', '.join(BY_NAME)}") from None


@dataclass
class StageResolution:
    """A stage on one binary: the symbols found for it, and the expected ones missing."""

    stage: Stage
    probes: list[tuple[Candidate, ResolvedSymbol]] = field(default_factory=list)
    missing_expected: list[str] = field(default_factory=list)  # expected here, absent

    applicable: bool = True  # some candidate is expected on this server line

    @property
    def available(self) -> bool:
        return bool(self.probes)


def _present(candidate: Candidate, symbols: SymbolTable) -> list[ResolvedSymbol]:
    if candidate.usdt:  # all its start sites are one probe: the first stands for them
        return symbols.usdt_sites(candidate.usdt.provider, candidate.usdt.start)[:1]
    found = symbols.lookup(candidate.name)
    if candidate.signature:
        found = [s for s in found if candidate.signature in s.demangled]
    return found


def resolve_stage(st: Stage, symbols: SymbolTable, server: ServerInfo) -> StageResolution:
    res = StageResolution(st, applicable=server.family == "unknown"
                          or any(c.expected_in(server) for c in st.candidates))
    ordered = sorted(st.candidates, key=lambda c: not c.expected_in(server))  # expected first, stable
    for cand in ordered:
        if st.only_expected and server.family != "unknown" and not cand.expected_in(server):
            continue
        found = _present(cand, symbols)
        if not found and cand.expected_in(server):
            res.missing_expected.append(cand.name)
        res.probes.extend((cand, sym) for sym in found)
        if found and st.select == "first":
            break
    return res


def resolve(stage_names: Iterable[str], symbols: SymbolTable, server: ServerInfo) -> list[StageResolution]:
    return [resolve_stage(stage(n), symbols, server) for n in stage_names]
