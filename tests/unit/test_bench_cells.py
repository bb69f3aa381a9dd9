"""lab bench's cells: the index-build cells of the row-format study name
their table and statement, and refuse what is not a row format."""

from __future__ import annotations

import pytest

from mysqlprobe.errors import UsageError
from mysqlprobe.lab.commands.bench import DEFAULT_CELLS, ROW_FORMATS, parse_cell


def test_an_index_cell_builds_k_on_the_seeds_table_in_its_row_format():
    cell = parse_cell("index-compressed-8")
    assert cell.index is not None and cell.index.row_format == "compressed" and cell.index.key_block_size == 8
    assert cell.describe() == "CREATE INDEX k ON sbtest_compressed_8 (k)"
    assert cell.row_format == "compressed"
    assert "ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8" in cell.ddl and "c char(120)" in cell.ddl
    assert parse_cell("index-dynamic").ddl.endswith("ROW_FORMAT=DYNAMIC")
    # the insert cells are as they were
    plain = parse_cell("compressed-8")
    assert plain.index is None and plain.describe().startswith("INSERT ... SELECT into ")


@pytest.mark.parametrize("name", ["index-", "index-range-5", "index-none", "index-compressed-3", "index-foo"])
def test_an_index_cell_of_no_row_format_is_refused(name):
    with pytest.raises(UsageError):
        parse_cell(name)


def test_the_default_matrix_holds_the_seeds_five_index_builds():
    assert [c for c in DEFAULT_CELLS if c.startswith("index-")] == [f"index-{f}" for f in ROW_FORMATS]
    assert all(parse_cell(c) for c in DEFAULT_CELLS)
