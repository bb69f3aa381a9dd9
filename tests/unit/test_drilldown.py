"""Stage-rooted trees and the compare's drill-down, on captures made here
(no root): B's rows take a deeper path below row_insert_for_mysql (a file
extension that writes and syncs) that A's do not, and the drill-down must
find that path, with its share of the wall-time difference and the system
calls, bytes and time that explain it."""

from __future__ import annotations

import json
import subprocess

import pytest

from mysqlprobe import capture
from mysqlprobe.analysis import compare as C
from mysqlprobe.analysis import stage_trees as T
from mysqlprobe.analysis.model import Profile
from mysqlprobe.flamegraphs import folded
from conftest import MYSQLPROBE
from test_compare import ROWS, US, make_capture

HZ = 1_000_000     # a sample is a microsecond of CPU
INSERT = "row_insert_for_mysql;row_ins_clust_index_entry"
EXTEND = f"{INSERT};fil_extend;os_file_write"


def _side(version, write_row, wall_us, write_row_us, row_insert_us, cpu, offcpu="", io_us="", io_bytes="",
          io_calls=""):
    doc, stacks = make_capture(version, write_row, wall_us, write_row_us, row_insert_us, cpu)
    doc["cpu_profile"].update(frequency_hz=HZ, samples=stacks.total)
    evidence = {T.CPU_NS: stacks}
    for kind, text, section in ((T.OFFCPU_NS, offcpu, "off_cpu"), (T.IO_NS, io_us, "io"),
                                (T.IO_BYTES, io_bytes, "io"), (T.IO_CALLS, io_calls, "io")):
        if text:
            evidence[kind] = folded.parse(text.split("\n"))
            doc.setdefault(section, {"status": "collected"})
    return doc, evidence


def side_a():
    return _side("10.1.23", "ha_partition::write_row", 10, 6, 4,
                 f"conn;ha_partition::write_row;{INSERT};btr_cur_optimistic_insert {3 * ROWS}\n"
                 f"conn;do_select;copy {3 * ROWS}")


def side_b(extend_cpu_us=4, copy_us=5):
    """6 us more per row below row_insert_for_mysql (4 on CPU writing, 2
    off it in fsync), and copy_us - 3 more outside the stages."""
    return _side("10.2.11", "ha_innopart::write_row", 10 + 6 + copy_us - 3, 12, 10,
                 f"conn;ha_innopart::write_row;{INSERT};btr_cur_optimistic_insert {3 * ROWS}\n"
                 f"conn;ha_innopart::write_row;{EXTEND};pwrite64_[k];ext4_file_write_iter_[k] {extend_cpu_us * ROWS}\n"
                 f"conn;do_select;copy {copy_us * ROWS}",
                 offcpu=f"conn;ha_innopart::write_row;{EXTEND};fsync_[k];do_fsync_[k] {2 * ROWS}",
                 io_us=f"conn;ha_innopart::write_row;{EXTEND};pwrite64_[k];[test/t1.ibd] {1 * ROWS}\n"
                       f"conn;ha_innopart::write_row;{EXTEND};fsync_[k];[test/t1.ibd] {2 * ROWS}",
                 io_bytes=f"conn;ha_innopart::write_row;{EXTEND};pwrite64_[k];[test/t1.ibd] {16384 * ROWS}",
                 io_calls=f"conn;ha_innopart::write_row;{EXTEND};pwrite64_[k];[test/t1.ibd] {ROWS}\n"
                          f"conn;ha_innopart::write_row;{EXTEND};fsync_[k];[test/t1.ibd] {ROWS // 2}")


def run(side, label="x"):
    doc, evidence = side
    return C.run_of(Profile(doc), label, evidence[T.CPU_NS], evidence)


def test_a_stage_tree_holds_what_passes_through_its_function_per_row():
    doc, evidence = side_b()
    trees = T.stage_trees(Profile(doc), evidence, ROWS)
    insert = trees["innodb.row_insert"]
    assert insert.wall_ns == pytest.approx((3 + 4 + 2) * US)                 # CPU and off-CPU below it
    node = insert.at(["row_ins_clust_index_entry", "fil_extend", "os_file_write"])
    assert (node.get(T.CPU_NS), node.get(T.OFFCPU_NS)) == (pytest.approx(4 * US), pytest.approx(2 * US))
    assert (node.get(T.IO_CALLS), node.get(T.IO_BYTES)) == (pytest.approx(1 + (ROWS // 2) / ROWS), pytest.approx(16384))
    # write_row's tree holds row_insert's too, unless exclusive: then it ends in the nested stage
    assert trees["partition.write_row"].wall_ns == pytest.approx(9 * US)
    exclusive = T.stage_trees(Profile(doc), evidence, ROWS, exclusive=True)["partition.write_row"]
    assert list(exclusive.children) == [T.nested_stage("innodb.row_insert")]
    assert "conn" not in insert.children and "copy" not in str(trees)


def test_a_collector_that_saw_part_of_the_window_is_scaled_to_it():
    doc, evidence = side_b()
    doc["off_cpu"]["on_s"] = doc["window"]["duration_s"] / 4
    node = T.stage_trees(Profile(doc), evidence, ROWS)["innodb.row_insert"]
    assert node.get(T.OFFCPU_NS) == pytest.approx(4 * 2 * US)


def test_the_drilldown_finds_the_deeper_path_with_its_share_and_evidence():
    result = C.compare([run(side_a())], [run(side_b())])
    assert result.wall.delta == pytest.approx(8 * US)
    top = result.drilldown[0]
    assert top.path == ("innodb.row_insert", "row_ins_clust_index_entry", "fil_extend", "os_file_write")
    assert top.delta_ns_per_row == pytest.approx(6 * US)
    assert top.share == pytest.approx(0.75)
    b, a = top.b, top.a
    assert (b.cpu_ns, b.offcpu_ns) == (pytest.approx(4 * US), pytest.approx(2 * US))
    assert (a.cpu_ns, a.offcpu_ns, a.io_calls) == (0, 0, 0)
    assert b.syscalls[0].to_json() == {"call": "fsync", "file": "test/t1.ibd", "calls": 0.4995, "bytes": 0, "ns": 2000.0}
    assert b.syscalls[1].call == "pwrite64" and b.syscalls[1].bytes == 16384
    # the stages above it are not findings of their own: it explains them
    assert [e.path for e in result.drilldown] == [top.path]
    text = C.render_text(result)
    assert "drill-down" in text and "fil_extend > os_file_write" in text and "pwrite64 test/t1.ibd" in text


def test_a_difference_split_between_two_paths_stops_where_they_part():
    # B: the extension's 4 us on CPU go instead half to a second path beside it
    doc, evidence = side_b(extend_cpu_us=2)
    evidence[T.CPU_NS].stacks[f"conn;ha_innopart::write_row;{INSERT};lock_rec_insert_check_and_lock"] = 2 * ROWS
    result = C.compare([run(side_a())], [run((doc, evidence))])
    paths = {e.path: e.share for e in result.drilldown}
    ext = ("innodb.row_insert", "row_ins_clust_index_entry", "fil_extend", "os_file_write")
    lock = ("innodb.row_insert", "row_ins_clust_index_entry", "lock_rec_insert_check_and_lock")
    assert paths[ext] == pytest.approx(0.5) and paths[lock] == pytest.approx(0.25)
    assert ("innodb.row_insert", "row_ins_clust_index_entry") not in paths   # explained by the two below


def test_no_difference_no_drilldown():
    result = C.compare([run(side_a())], [run(side_a())])
    assert result.drilldown == []


def _save(tmp_path, name, side):
    doc, evidence = side
    d = tmp_path / name
    files = {T.CPU_NS: ("cpu_profile", "stacks_file", "stacks.folded"), T.OFFCPU_NS: ("off_cpu", "stacks_file", "offcpu.folded"),
             T.IO_NS: ("io", "stacks_file", "io.folded"), T.IO_BYTES: ("io", "bytes_file", "io_bytes.folded"),
             T.IO_CALLS: ("io", "calls_file", "io_calls.folded")}
    for kind in evidence:
        section, key, file = files[kind]
        doc[section][key] = file
    capture.write_capture(str(d), capture.Capture(doc))
    for kind, f in evidence.items():
        with open(d / files[kind][2], "w") as out:
            folded.write(f, out)
    return d


def test_compare_json_and_html_carry_the_drilldown(tmp_path):
    a, b = _save(tmp_path, "a", side_a()), _save(tmp_path, "b", side_b())
    out = tmp_path / "cmp"
    done = subprocess.run([MYSQLPROBE, "compare", str(a), str(b), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drill = json.loads((out / "compare.json").read_text())["drilldown"]
    assert drill[0]["path"][-1] == "os_file_write" and drill[0]["share"] == pytest.approx(0.75)
    page = (out / "compare.html").read_text()
    assert "<h2>Drill-down</h2>" in page and "Below innodb.row_insert" in page and 'class="bar b"' in page
    assert "fil_extend" in done.stdout


def test_confirm_probes_the_paths_functions_this_binary_has(tmp_path):
    from mysqlprobe.lab.commands.bench import confirm_functions
    from mysqlprobe.errors import UsageError

    cmp = tmp_path / "compare.json"
    cmp.write_text(json.dumps({"drilldown": [{"path": ["innodb.row_insert", "row_ins", "fil_extend"]},
                                             {"path": ["innodb.row_insert", "row_ins", "lock_rec"]}]}))

    class Binary:
        class symbols:
            lookup = staticmethod(lambda name: [] if name == "fil_extend" else [name])   # inlined there

    assert confirm_functions(str(cmp), Binary) == (["row_ins", "lock_rec"], ["fil_extend"])
    cmp.write_text(json.dumps({"drilldown": []}))
    with pytest.raises(UsageError, match="no drill-down"):
        confirm_functions(str(cmp), Binary)


@pytest.mark.parametrize("file, group", [("test/t1#P#p7.ibd", "test/t1#P#*.ibd"), ("test/t1#p#p0.ibd", "test/t1#P#*.ibd"),
                                         ("test/t1#P#p1#SP#p1sp0.ibd", "test/t1#P#*.ibd"),
                                         ("data/ib_logfile0", "data/ib_logfile0")])
def test_a_tables_partitions_are_one_file_in_the_evidence(file, group):
    from mysqlprobe.analysis.drilldown import file_group
    assert file_group(file) == group


def test_long_stage_names_are_never_cut_in_the_tables():
    """A name wider than its column gets a line of its own, whole: two that
    share a long prefix (probe:fsp_try_extend_data_f...) stay apart."""
    general, low = (C._row(f"probe:fseg_alloc_free_page_{end}", 27, "   1us") for end in ("general", "low"))
    assert general == ["  probe:fseg_alloc_free_page_general", f"  {'':<27}   1us"]
    assert low[0] == "  probe:fseg_alloc_free_page_low"
    assert C._row("innodb.row_insert", 27, "   1us") == [f"  {'innodb.row_insert':<27}   1us"]
