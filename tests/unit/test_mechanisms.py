"""The mechanism catalog: functions on a path to what they do and the
settings that govern it; and compare's wall delta from unprobed runs."""

from __future__ import annotations

import pytest

from mysqlprobe.analysis import mechanisms
from mysqlprobe.analysis.compare_wall import unprobed_wall


def test_the_deepest_catalog_function_on_a_path_names_it():
    path = ["partition.write_row", "ha_innobase::write_row", "row_ins_clust_index_entry_low",
            "btr_cur_pessimistic_insert", "fsp_try_extend_data_file", "fil_space_extend", "pwrite64_[k]"]
    assert mechanisms.of_path(path).name == "tablespace extension"
    assert mechanisms.of_path(["partition.write_row", "get_partition_id_range_col"]).name == \
        "partition lookup and routing"
    assert mechanisms.of_path(["innodb.page_compress"]).name == "page compression"
    assert mechanisms.of_path(["some_function"]) is None


def test_a_latch_waited_for_in_the_free_page_search_is_the_search():
    """MariaDB 10.2's buf_LRU_get_free_block takes the buffer pool's mutex at
    each try (buf_pool_mutex_enter, inlined: the sync array's wait right
    under it), which the page cleaner's LRU flush holds meanwhile; a 32 MB
    pool's inserts spend their extra time there. Elsewhere a mutex wait is
    the latch's, and what the search runs of another mechanism's stays that
    mechanism's."""
    base = ["one_connection", "ha_innobase::write_row", "row_ins_clust_index_entry_low", "btr_page_split_and_insert",
            "fseg_alloc_free_page_general", "buf_page_create"]
    wait = ["sync_array_wait_event", "os_event_wait_low", "[libc.so.6]", "futex_wait_[k]"]
    searched = mechanisms.of_stack([*base, "buf_LRU_get_free_block", *wait], off_cpu=True)
    assert searched.mechanism == "free page search and foreground flush"
    flushed = mechanisms.of_stack([*base, "buf_LRU_get_free_block", "buf_flush_single_page_from_LRU", "buf_flush_page",
                                   "buf_page_io_complete", *wait], off_cpu=True)
    assert flushed.mechanism == "free page search and foreground flush"
    assert mechanisms.of_stack([*base, "buf_page_make_young", *wait], off_cpu=True).mechanism == \
        "latch and mutex waits"
    written = mechanisms.of_stack([*base, "buf_LRU_get_free_block", "buf_flush_single_page_from_LRU",
                                   "buf_flush_page", "buf_dblwr_flush_buffered_writes", "fsync_[k]"], off_cpu=True)
    assert written.mechanism == "doublewrite"


def test_settings_that_differ_are_listed_with_both_values():
    m = mechanisms.of_function("fil_extend_space_to_desired_size")
    a = {"innodb_autoextend_increment": "64", "innodb_file_per_table": "ON", "innodb_use_fallocate": "OFF"}
    b = {"innodb_autoextend_increment": "64", "innodb_file_per_table": "ON"}
    assert mechanisms.differing_settings(m, a, b) == [("innodb_use_fallocate", "OFF", "-")]
    assert mechanisms.differing_settings(m, a, None) == []


def test_every_catalog_function_is_named_once():
    names = [f for m in mechanisms.CATALOG for f in m.functions]
    assert len(names) == len(set(names))


def test_the_unprobed_delta_and_its_verdict():
    a = [6760.0, 6900.0, 6600.0, 6850.0, 6700.0]
    b = [4920.0, 5000.0, 4850.0, 5100.0, 4800.0]
    w = unprobed_wall(a, b)
    assert w.delta == pytest.approx(sum(b) / 5 - sum(a) / 5)
    assert w.low < w.delta < w.high < 0 and w.verdict == "finding"
    assert w.share == pytest.approx(w.delta / (sum(a) / 5))
    same = unprobed_wall(a, [x + 10 for x in a])
    assert same.low < 0 < same.high and same.verdict == "noise"
    # intervals that do not overlap are a finding, whatever the delta's own interval says
    apart = unprobed_wall([100.0, 100.1], [103.0, 103.1])
    assert apart.a.high < apart.b.low and apart.verdict == "finding"
    assert unprobed_wall([1.0], [2.0, 3.0]) is None
    doc = w.to_json()
    assert set(doc) >= {"delta", "ci95", "verdict", "method"} and doc["verdict"] == "finding"


def test_a_wait_under_way_as_the_tracing_switched_on_is_charged_by_its_system_call():
    """Its stack was not taken: a client read or poll is the wait for the
    client; any other call is no mechanism, named by the frame itself."""
    from mysqlprobe.analysis import mechanisms as M
    from mysqlprobe.flamegraphs.stacks import UNDER_WAY
    for call in ("poll", "read", "recvfrom", "ppoll"):
        assert M.of_stack(["sql/one_connection", UNDER_WAY.format(call)], off_cpu=True).mechanism == M.IDLE
    futex = M.of_stack(["sql/one_connection", UNDER_WAY.format("futex")], off_cpu=True)
    assert futex == M.Charge(M.OTHER, UNDER_WAY.format("futex"))
    # on CPU there is no such frame, and off CPU inside a statement a read is the statement's
    assert M.of_stack(["t", "dispatch_command", UNDER_WAY.format("read")], off_cpu=True).mechanism != M.IDLE
