"""The stage catalog against the MySQL stand-ins (real MariaDB binaries are
checked in tests/integration/test_mariadb.py)."""

import pytest

from mysqlprobe import catalog
from mysqlprobe.collectors.target.symbols import ServerInfo, load_binary


def _resolved(binary, stage_name):
    res = catalog.resolve_stage(catalog.stage(stage_name), binary.symbols, binary.server)
    return res, [(c, s.demangled) for c, s in res.probes]


@pytest.mark.parametrize("line, write_row", [
    ("5.6", "ha_partition::write_row(unsigned char*)"),
    ("5.7", "Partition_helper::ph_write_row(unsigned char*)"),
    ("8.0", "Partition_helper::ph_write_row(unsigned char*)"),
])
def test_partition_write_row_per_line(mysql_fixtures, line, write_row):
    binary = load_binary(str(mysql_fixtures[line]))
    res, probes = _resolved(binary, "partition.write_row")
    assert [d for _, d in probes] == [write_row]
    assert res.missing_expected == []


@pytest.mark.parametrize("line", ["5.7", "8.0"])
def test_native_partitioning_reads_the_partition_id_argument(mysql_fixtures, line):
    binary = load_binary(str(mysql_fixtures[line]))
    _, probes = _resolved(binary, "partition.write_row_in_part")
    assert [d for _, d in probes] == ["ha_innopart::write_row_in_part(unsigned int, unsigned char*)"]
    assert probes[0][0].partition == catalog.PartitionSource("arg", 1)


def test_write_row_in_part_does_not_apply_to_56(mysql_fixtures):
    binary = load_binary(str(mysql_fixtures["5.6"]))
    res, probes = _resolved(binary, "partition.write_row_in_part")
    assert probes == [] and not res.applicable


@pytest.mark.parametrize("line", ["5.6", "5.7", "8.0"])
def test_get_partition_id_reads_the_out_pointer(mysql_fixtures, line):
    binary = load_binary(str(mysql_fixtures[line]))
    _, probes = _resolved(binary, "partition.get_partition_id")
    names = sorted(d.split("(")[0] for _, d in probes)
    assert names == ["get_partition_id_hash_nosub", "get_partition_id_range"]
    assert {c.partition for c, _ in probes} == {catalog.PartitionSource("out", 1)}


@pytest.mark.parametrize("line, verify", [
    ("5.6", "buf_page_is_corrupted(bool, unsigned char const*, unsigned long)"),
    ("5.7", "buf_page_is_corrupted(bool, unsigned char const*, unsigned long)"),
    ("8.0", "BlockReporter::is_corrupted() const"),
])
def test_checksum_stages(mysql_fixtures, line, verify):
    binary = load_binary(str(mysql_fixtures[line]))
    _, probes = _resolved(binary, "innodb.page_verify")
    assert [d for _, d in probes] == [verify]
    _, probes = _resolved(binary, "innodb.page_checksum")
    assert [d.split("(")[0] for _, d in probes] == ["buf_calc_page_crc32"]


def test_insert_profile_stages_exist_and_lines_are_known():
    for name in catalog.INSERT_PROFILE:
        assert catalog.stage(name).candidates
    for st in catalog.STAGES:
        for cand in st.candidates:
            assert all(e.line in catalog.LINES for e in cand.expected)
    with pytest.raises(KeyError, match="unknown stage"):
        catalog.stage("innodb.nope")


def test_version_ranges():
    old = ServerInfo("mariadb", "10.2.11", "mariadb")
    new = ServerInfo("mariadb", "10.11.5", "mariadb")
    (fil_compress,) = [c for c in catalog.stage("innodb.page_compress").candidates if c.name == "fil_compress_page"]
    (fil_page,) = [c for c in catalog.stage("innodb.page_compress").candidates if c.name == "fil_page_compress"]
    assert fil_compress.expected_in(old) and not fil_compress.expected_in(new)
    assert fil_page.expected_in(new) and not fil_page.expected_in(old)
    assert not fil_page.expected_in(ServerInfo("mysql", "8.0.40", "mysql-8.0"))


INDEX_PER_LINE = {
    # the insert method's stages each line has; the other's are not probed there
    "5.6": ({"index.tuple_insert": "btr_cur_optimistic_insert", "index.tuple_split": "btr_cur_pessimistic_insert",
             "index.row_build": "row_build"}, ("index.bulk_insert", "index.page_commit", "index.flush")),
    "5.7": ({"index.bulk_insert": "BtrBulk::insert", "index.page_commit": "BtrBulk::pageCommit",
             "index.flush": "FlushObserver::flush", "index.row_build": "row_build_w_add_vcol"},
            ("index.tuple_insert", "index.tuple_split")),
}


@pytest.mark.parametrize("line", ["5.6", "5.7"])
def test_index_profile_per_line(mysql_fixtures, line):
    binary = load_binary(str(mysql_fixtures[line]))
    present, absent = INDEX_PER_LINE[line]
    for name in ("index.build", "index.scan", "index.merge_sort", "index.insert", "index.block_write"):
        res, probes = _resolved(binary, name)
        assert probes and res.missing_expected == [], name
    for name, function in present.items():
        _, probes = _resolved(binary, name)
        assert [d.split("(")[0] for _, d in probes] == [function], name
    for name in absent:
        res, probes = _resolved(binary, name)
        assert not probes and not res.applicable, name
    (level,) = [c for c in catalog.stage("index.bulk_insert").candidates]
    assert level.partition == catalog.PartitionSource("arg", 2)   # BtrBulk::insert(this, tuple, level)


def test_index_profile_is_not_claimed_for_mysql_80(mysql_fixtures):
    """8.0.27+ builds indexes through ddl::Builder: no stage says otherwise."""
    binary = load_binary(str(mysql_fixtures["8.0"]))
    for name in catalog.INDEX_PROFILE:
        if name.startswith("index."):
            res, probes = _resolved(binary, name)
            assert not probes and not res.applicable, name

