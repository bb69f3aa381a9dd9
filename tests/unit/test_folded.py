import io
from pathlib import Path

from mysqlprobe.flamegraphs import folded

GOLDEN = Path(__file__).parents[1] / "golden"


def _sample() -> folded.Folded:
    f = folded.Folded()
    f.add(["mysqld", "handle_connection", "ha_partition::write_row(unsigned char*)", "get_partition_id_range"], 7)
    f.add(["mysqld", "handle_connection", "ha_partition::write_row(unsigned char*)", "row_insert_for_mysql"], 11)
    f.add(["page_cleaner", "buf_flush_page_cleaner", "buf_calc_page_crc32"], 3)
    f.add(["mysqld", "handle_connection", "ha_partition::write_row(unsigned char*)", "get_partition_id_range"], 2)
    return f


def test_written_sorted_and_merged_as_the_golden_file():
    out = io.StringIO()
    folded.write(_sample(), out)
    assert out.getvalue() == (GOLDEN / "stacks.folded").read_text()


def test_round_trip_and_lenient_reading():
    text = (GOLDEN / "stacks.folded").read_text() + "garbage without count\n\nlast;frame x\n"
    f = folded.parse(io.StringIO(text))
    assert f.stacks == _sample().stacks and f.total == 23
    assert f.ignored == 2


def test_separators_inside_a_frame_are_replaced():
    f = folded.Folded()
    f.add(["a;b", "c\nd", ""])
    assert list(f.stacks) == ["a:b;c d;[unknown]"]


def test_diff_lists_every_stack_with_both_counts():
    before = folded.parse(["a;b 3", "a;c 1"])
    after = folded.parse(["a;b 5", "a;d 2"])
    out = io.StringIO()
    folded.write_diff(before, after, out)
    assert out.getvalue() == "a;b 3 5\na;c 1 0\na;d 0 2\n"
