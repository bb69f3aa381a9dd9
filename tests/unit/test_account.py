"""The wall-time account: stacks charged to the innermost mechanism, and the
kernel's per-thread totals split by them so that the parts add up to the
load threads' wall time, with what the stacks did not see as parts of its
own."""

from __future__ import annotations

import json

import pytest

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.account import NOT_TRACED
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.report import render_text
from mysqlprobe.flamegraphs.folded import Folded
from test_report import synthetic_run

CONN = "one_connection"
LOOP = [CONN, "do_handle_one_connection", "do_command"]


def charge(*frames: str, off: bool = False) -> str:
    return M.of_stack(list(frames), off_cpu=off).mechanism


def test_a_stack_is_charged_to_its_innermost_mechanism():
    insert = LOOP + ["dispatch_command", "mysql_execute_command", "mysql_insert", "write_record",
                     "handler::ha_write_row", "ha_partition::write_row(unsigned char*)", "ha_innobase::write_row",
                     "row_insert_for_mysql", "row_ins_clust_index_entry_low", "btr_cur_pessimistic_insert",
                     "btr_page_split_and_insert", "fseg_alloc_free_page_general", "fsp_try_extend_data_file",
                     "fil_space_extend", "os_file_set_size", "posix_fallocate64", "ext4_fallocate_[k]"]
    assert charge(*insert) == "tablespace extension"
    assert charge(*insert[:-5]) == "page allocation"
    assert charge(*insert[:-6]) == "page split"
    assert charge(*insert[:-8]) == "row insert into the clustered index"
    assert charge(*insert[:-11]) == "partition lookup and routing"
    assert charge(*insert[:-12]) == "SQL layer insert path"
    # 10.1's names (XtraDB): the extension writes zeroes and syncs
    assert charge(*LOOP, "fsp_try_extend_data_file_with_pages", "fil_extend_space_to_desired_size",
                  "os_aio_func", "pwrite64", "copy_folio_from_iter_atomic_[k]") == "tablespace extension"
    # 10.11's: the descent is a method, the lock wait renamed
    assert charge(*LOOP, "btr_cur_t::search_leaf(dtuple_t const*, page_cur_mode_t, btr_latch_mode, mtr_t*)") \
        == "B-tree descent"
    assert charge(*LOOP, "lock_wait(que_thr_t*)", "pthread_cond_wait", "futex_wait_[k]", off=True) == "row locks"
    # a clone's suffix is the function's
    assert charge(*LOOP, "buf_calc_page_crc32.isra.0") == "page checksums"


BUILD = LOOP + ["dispatch_command", "mysql_execute_command", "mysql_alter_table",
                "ha_innobase::inplace_alter_table(TABLE*, Alter_inplace_info*)", "row_merge_build_indexes"]


def test_inside_an_index_build_its_phases_are_the_mechanisms():
    """The build's stacks (row0merge.cc of 10.1, 10.2, 10.11): the catalog's
    INSERT words give way to the build's phase, the clustered row insert is
    10.1's tuple-by-tuple insert, and what runs beneath a phase stays its own."""
    scan = BUILD + ["row_merge_read_clustered_index"]
    assert charge(*scan, "btr_pcur_move_to_next_page") == "index build: clustered index scan"   # not the SELECT side
    assert charge(*scan, "row_merge_buf_add", "row_build_index_entry_low") == "index build: clustered index scan"
    assert charge(*BUILD, "btr_pcur_move_to_next_page") == "index build: clustered index scan"  # 10.11 inlines it
    assert charge(*scan, "row_merge_buf_sort", "row_merge_tuple_sort", "cmp_dtuple_rec") \
        == "index build: runs sorted and written"
    assert charge(*scan, "row_merge_write", "os_file_write_func", "__pwrite64", "ksys_pwrite64_[k]") \
        == "index build: temporary sort file I/O"
    # reading a record of the sort file is the phase that reads it
    assert charge(*BUILD, "row_merge_sort", "row_merge_read_rec") == "index build: merge sort"
    insert = BUILD + ["row_merge_insert_index_tuples"]
    assert charge(*insert, "row_merge_read_rec") == "index build: sorted tuples read back"
    # 10.1: through the B-tree, one tuple at a time; its descent and splits are theirs
    assert charge(*insert, "btr_cur_optimistic_insert", "page_cur_tuple_insert", "page_cur_insert_rec_low") \
        == "tuple-by-tuple index insert"
    assert charge(*insert, "btr_cur_search_to_nth_level") == "B-tree descent"
    assert charge(*insert, "btr_cur_pessimistic_insert", "btr_page_split_and_insert") == "page split"
    # 10.2+: bottom-up, a page at a time
    bulk = insert + ["BtrBulk::insert(dtuple_t*, unsigned long)"]
    assert charge(*bulk, "PageBulk::insert(unsigned char const*, unsigned long*)", "rec_get_offsets_func") \
        == "sorted index build"
    assert charge(*bulk, "void PageBulk::insertPage<(PageBulk::format)0>(unsigned char const*, unsigned long*)") \
        == "sorted index build"
    assert charge(*BUILD, "FlushObserver::flush(bool, trx_t*)") == "index build: new pages flushed"
    assert charge(*BUILD, "FlushObserver::flush(bool, trx_t*)", "buf_flush_page") == "page flush"
    # the same frames outside a build keep the INSERT's words
    assert charge(*LOOP, "btr_pcur_move_to_next_page") == "SELECT side of INSERT ... SELECT"
    assert charge(*LOOP, "row_ins_clust_index_entry_low", "btr_cur_optimistic_insert") \
        == "row insert into the clustered index"


def test_a_page_compressed_again_after_a_split_or_reorganize_is_re_compression():
    bulk = BUILD + ["row_merge_insert_index_tuples", "BtrBulk::insert"]
    assert charge(*bulk, "BtrBulk::pageCommit", "PageBulk::compress", "page_zip_compress", "deflate") \
        == "page compression"
    assert charge(*bulk, "BtrBulk::pageSplit", "PageBulk::compress", "page_zip_compress", "deflate") \
        == "page re-compression"
    row = LOOP + ["row_insert_for_mysql", "row_ins_clust_index_entry_low"]
    assert charge(*row, "btr_cur_optimistic_insert", "page_cur_insert_rec_zip", "page_zip_compress") \
        == "page compression"
    assert charge(*row, "btr_cur_pessimistic_insert", "btr_page_split_and_insert", "page_zip_compress") \
        == "page re-compression"
    assert charge(*row, "btr_cur_optimistic_insert", "page_cur_insert_rec_zip", "page_zip_reorganize",
                  "page_zip_compress") == "page re-compression"
    assert M.BY_NAME["page re-compression"].settings[:2] == ("innodb_compression_failure_threshold_pct",
                                                              "innodb_compression_pad_pct_max")


def test_a_connection_waiting_for_its_client_is_idle_off_cpu_only():
    waiting = LOOP + ["my_net_read_packet", "vio_read", "vio_socket_io_wait", "poll", "do_sys_poll_[k]"]
    assert charge(*waiting, off=True) == M.IDLE
    assert charge(*waiting) == "client protocol"          # reading the request on a CPU is the load's
    # a network read beneath a statement is the statement's (LOAD DATA LOCAL)
    assert charge(*LOOP, "dispatch_command", "mysql_load", "my_net_read", "vio_read", off=True) == "client protocol"


def test_preempted_once_its_reply_is_sent_the_statement_is_over():
    """Sending the reply wakes the client, which takes the CPU: the thread
    waits in send() with its statement done, between statements; the libc
    wrapper keeps no frame pointer, so the stack stops at it."""
    assert charge(CONN, "__send", off=True) == "client protocol"          # blocked on a full socket
    assert M.of_stack([CONN, "__send"], off_cpu=True, runnable=True).mechanism == M.IDLE
    assert M.of_stack([CONN, "__libc_recv"], off_cpu=True).mechanism == M.IDLE
    assert charge(CONN, "__send") == "client protocol"                    # on CPU: the load's


def test_what_meets_no_mechanism_is_other_named_by_its_innermost_function():
    c = M.of_stack(LOOP + ["dispatch_command", "mysql_execute_command", "evaluate_join_record", "memcpy"])
    assert c == M.Charge(M.OTHER, "memcpy")
    assert M.of_stack([CONN, "futex_do_wait_[k]"], off_cpu=True) == M.Charge(M.OTHER, "[kernel] futex_do_wait")
    assert charge(CONN, "do_command", "[mysqlprobe]") == M.PROBES_MECHANISM


def test_every_catalog_function_is_named_once_and_has_settings_or_stages():
    for catalog in (M.CATALOG, M.SCOPED):
        names = [f for m in catalog for f in m.functions]
        assert len(names) == len(set(names))
    assert len(M.BY_NAME) == len(M.CATALOG) + len(M.SCOPED)
    # a scoped mechanism names where it applies; a catalog one applies everywhere; either takes
    # over only mechanisms there are, never itself
    assert all(m.within for m in M.SCOPED) and not any(m.within for m in M.CATALOG)
    assert {t for m in M.CATALOG + M.SCOPED for t in m.takes} <= {m.name for m in M.CATALOG}
    assert not any(m.name in m.takes for m in M.CATALOG + M.SCOPED)
    # an exact name wins over another mechanism's glob
    assert M.of_function("buf_flush_page").name == "page flush"
    assert M.of_function("buf_dblwr_flush_buffered_writes").name == "doublewrite"


# --- the account of a capture -------------------------------------------------

ROWS = 1000
LOAD, CLEANER, OWN = 4242, 4243, 4250
WINDOW_NS = 1_500_000_000


def capture(on_cpu_ns: int = 900_000_000, runq_ns: int = 50_000_000, blocked_at_start: str | None = None,
            traced_blocked_ns: int = 500_000_000, quiet_s: float = 0.0) -> tuple[dict, dict[str, Folded]]:
    doc = json.loads(json.dumps(synthetic_run()))
    doc["process"]["write_bytes"] = 4096 * ROWS
    doc["process"]["thread_times"] = [
        {"tid": LOAD, "comm": "mysqld", "wall_ns": WINDOW_NS, "on_cpu_ns": on_cpu_ns, "runq_ns": runq_ns,
         "voluntary": 30, "involuntary": 10, "born_in_window": False, "blocked_at_start": blocked_at_start},
        {"tid": CLEANER, "comm": "mysqld", "wall_ns": WINDOW_NS, "on_cpu_ns": 200_000_000, "runq_ns": 0},
        {"tid": OWN, "comm": "mysqld", "wall_ns": WINDOW_NS, "on_cpu_ns": 5_000_000, "runq_ns": 0},
    ]
    doc["cpu_profile"] = {"status": "collected", "sampler": "bpf", "frequency_hz": 1000, "quiet_s": quiet_s,
                          "samples": 1100, "threads": [], "top_self": [], "top_total": [], "event": "cpu-clock",
                          "unwinding": {"mode": "fp", "describe": "frame pointers", "reason": ""},
                          "by_thread": [{"tid": LOAD, "samples": 900, "connection": True},
                                        {"tid": CLEANER, "samples": 200, "connection": False}]}
    doc["off_cpu"] = {"status": "collected", "quiet_s": quiet_s, "blocked_s": 0.5, "waiting_for_cpu_s": 0.05,
                      "switches": 40, "threads": [], "top_self": [], "top_total": [], "load_us": 550_000,
                      "dropped": {},
                      "by_thread": [{"tid": LOAD, "blocked_ns": traced_blocked_ns, "runq_ns": runq_ns,
                                     "connection": True}]}
    doc["perf_schema"] = {"status": "collected", "own_os_tids": [OWN],
                          "deltas": {"status": {"Innodb_rows_inserted": ROWS, "Innodb_data_fsyncs": 10,
                                                "Innodb_os_log_written": 100 * ROWS}}}
    path = ";".join(LOOP + ["dispatch_command", "mysql_insert", "ha_innobase::write_row", "row_insert_for_mysql"])
    cpu = Folded()
    cpu.stacks[path + ";row_ins_clust_index_entry_low"] = 600
    cpu.stacks[path + ";btr_cur_search_to_nth_level"] = 200
    cpu.stacks[";".join(LOOP + ["dispatch_command", "evaluate_join_record", "memcpy"])] = 100
    cpu.stacks["page_cleaner;buf_flush_page_cleaner_coordinator;buf_flush_page"] = 200   # background
    off = Folded()
    off.stacks[path + ";log_write_up_to;os_event_wait_low;pthread_cond_wait;futex_wait_[k]"] = 300_000
    off.stacks[path + ";fsp_try_extend_data_file;fil_space_extend;fsync;ext4_sync_file_[k]"] = 200_000
    off.stacks[path + ";row_ins_clust_index_entry_low;[waiting for a CPU]"] = 50_000
    return doc, {"cpu_profile": cpu, "off_cpu": off}


def test_the_parts_add_up_to_the_load_threads_wall_time():
    doc, stacks = capture()
    a = Profile(doc, stacks).account
    assert a is not None and a.threads == 1 and a.rows == ROWS
    assert a.wall_ns == WINDOW_NS and a.on_cpu_ns == 900_000_000 and a.runq_ns == 50_000_000
    assert a.blocked_ns == WINDOW_NS - 900_000_000 - 50_000_000
    assert sum(p.ns for p in a.parts) == pytest.approx(WINDOW_NS)
    by = {p.name: p for p in a.parts}
    # on CPU split 6:2:1 by the load's samples, the page cleaner's left out
    assert by["row insert into the clustered index"].on_cpu_ns == pytest.approx(600e6)
    assert by["B-tree descent"].on_cpu_ns == pytest.approx(200e6)
    assert by[M.OTHER].on_cpu_ns == pytest.approx(100e6) and by[M.OTHER].functions[0][0] == "memcpy"
    # the wait for a CPU goes where the thread was preempted; blocked time 3:2 by the traced waits,
    # and what the tracing missed (550 ms blocked, 500 ms traced) is a part of its own
    assert by["row insert into the clustered index"].runq_ns == pytest.approx(50e6)
    assert by["redo log write and flush"].blocked_ns == pytest.approx(300e6)
    assert by["tablespace extension"].blocked_ns == pytest.approx(200e6)
    assert by[NOT_TRACED].blocked_ns == pytest.approx(50e6)
    assert a.unattributed_ns == pytest.approx(150e6)
    assert a.coverage.on_cpu == pytest.approx(1.0) and a.coverage.off_cpu == pytest.approx(550 / 600)
    assert a.coverage.off_cpu_by_state == 0   # the untraced 50 ms had no state to charge them by
    e = a.efficiency
    assert e is not None and e.cpu_us_foreground == pytest.approx(900.0) and e.cpu_us_background == pytest.approx(200.0)
    assert e.kb_written == pytest.approx(4.0) and e.fsyncs == pytest.approx(0.01) and e.redo_bytes == 100


def test_the_wait_for_a_cpu_after_a_wake_up_stays_with_the_wait_it_ended():
    """The kernel counts a woken thread's wait for a CPU on the run queue; the
    off-CPU program times each wait from switch-out to switch-in, that wait
    in it. Kernel: 600 ms off CPU, 300 of them queued; traced: 500 ms of
    blocked waits (their wake-ups' queueing in them) and 50 ms switched out
    runnable. Each traced stack keeps its traced time: the preempted one
    50 ms, not the kernel's 300 (the old split gave it every wake-up's
    queueing); the 50 ms the tracing missed is a part of its own."""
    doc, stacks = capture(runq_ns=300_000_000)
    doc["off_cpu"]["by_thread"][0]["runq_ns"] = 50_000_000
    a = Profile(doc, stacks).account
    assert a is not None and a.runq_ns == 300_000_000 and a.blocked_ns == 300_000_000
    by = {p.name: p for p in a.parts}
    assert by["row insert into the clustered index"].runq_ns == pytest.approx(50e6)
    assert by["redo log write and flush"].blocked_ns == pytest.approx(300e6)
    assert by["tablespace extension"].blocked_ns == pytest.approx(200e6)
    assert by[NOT_TRACED].blocked_ns == pytest.approx(50e6)
    assert sum(p.ns for p in a.parts) == pytest.approx(WINDOW_NS)


def test_a_wait_for_the_client_begun_before_the_window_is_idle_not_the_rows():
    doc, stacks = capture(blocked_at_start="S 7", traced_blocked_ns=300_000_000)   # in poll(2)
    a = Profile(doc, stacks).account
    assert a is not None
    assert a.part(M.IDLE) is not None and a.part(M.IDLE).blocked_ns == pytest.approx(250e6)
    assert a.part(NOT_TRACED) is None
    assert a.row_time_ns == pytest.approx(WINDOW_NS - 250e6)
    j = Profile(doc, stacks).to_json()["account"]
    assert j["wall_ns_per_row"] == pytest.approx((WINDOW_NS - 250e6) / ROWS, abs=0.1)
    assert j["on_cpu_ns_per_row"] + j["off_cpu_ns_per_row"] == pytest.approx(j["wall_ns_per_row"], abs=0.2)
    names = [m["name"] for m in j["mechanisms"]]
    assert M.IDLE not in names and "redo log write and flush" in names
    assert {"name", "ns_per_row", "on_cpu_ns_per_row", "off_cpu_ns_per_row", "settings"} <= set(j["mechanisms"][0])


@pytest.mark.parametrize("blocked_in, part", [
    (["pthread_cond_timedwait", "one_thread_per_connection_end", "do_handle_one_connection"], M.IDLE),
    (["pthread_cond_wait", "os_event::wait_low", "lock_wait_suspend_thread", "row_ins_clust_index_entry_low",
      "row_insert_for_mysql", "dispatch_command", "do_handle_one_connection"], "row locks"),
    (["pthread_cond_wait", "some_wait"], NOT_TRACED),
])
def test_a_wait_begun_before_the_window_is_charged_by_the_stack_it_was_in(blocked_in, part):
    """The thread's stack when the window opened, scanned from its memory,
    names the wait the tracing never saw begin: a thread parked in the thread
    cache is idle, one in a row lock wait is in row locks."""
    doc, stacks = capture(blocked_at_start="S 202", traced_blocked_ns=300_000_000)   # futex
    doc["process"]["thread_times"][0]["blocked_in"] = blocked_in
    a = Profile(doc, stacks).account
    assert a is not None and a.part(part) is not None
    untraced = WINDOW_NS - 900_000_000 - 50_000_000 - 300_000_000
    assert a.part(part).blocked_ns == pytest.approx(untraced, rel=0.01)   # the traced waits are elsewhere
    # what the traces saw and what the opening state charged make the threads' time off CPU whole
    # (a stack that names nothing leaves its wait not traced: no state charged it)
    off = WINDOW_NS - 900_000_000
    assert a.coverage.off_cpu == pytest.approx(350e6 / off, rel=0.01)
    assert a.coverage.off_cpu_by_state == pytest.approx(0 if part == NOT_TRACED else untraced / off, rel=0.01)


def test_stacks_seen_in_part_of_the_window_are_scaled_to_it():
    doc, stacks = capture(quiet_s=0.75, traced_blocked_ns=275_000_000)   # off in half the window
    a = Profile(doc, stacks).account
    assert a is not None and a.part(NOT_TRACED) is None
    assert a.coverage.off_cpu == pytest.approx(1.0, abs=0.1)


def test_the_headline_is_the_account_per_row():
    doc, stacks = capture()
    text = render_text(Profile(doc, stacks))
    head = text.split("\n\n")[0]
    assert "1.5ms of the load's thread time a row (1 thread): 900us on CPU, 600us off it" in " ".join(head.split())
    assert "redo log write and flush" in head and "unattributed" in head and "memcpy" in head


def test_no_account_without_the_kernels_thread_times():
    doc, stacks = capture()
    del doc["process"]["thread_times"]
    profile = Profile(doc, stacks)
    assert profile.account is None and profile.to_json()["account"] is None
    assert "WHERE AN INSERTED ROW'S TIME WENT" in render_text(profile)


def build_capture(bulk: bool = True) -> tuple[dict, dict[str, Folded]]:
    """The load's thread in a CREATE INDEX (no probe of it): 900 samples on
    CPU, 300 ms of traced waits; the lab's count of the table's rows."""
    doc, _ = capture(traced_blocked_ns=300_000_000)
    doc["perf_schema"]["deltas"]["status"]["Innodb_rows_inserted"] = 0   # a build inserts no row
    doc["workload"] = {"cell": "index-compact", "table": "sbtest_compact", "ddl": "CREATE TABLE sbtest_compact (...)",
                       "clients": 1, "statement": "CREATE INDEX k ON sbtest_compact (k)", "repeat": 1,
                       "unprobed_started": "2026-11-28T09:00:00.000Z", "unprobed": {"rows": ROWS, "seconds": 1.4},
                       "run": "wall", "rows": ROWS, "seconds": 1.5}
    insert = ["row_merge_insert_index_tuples"] + (["BtrBulk::insert(dtuple_t*, unsigned long)", "PageBulk::insert"]
                                                  if bulk else ["btr_cur_optimistic_insert", "page_cur_tuple_insert"])
    cpu, off = Folded(), Folded()
    cpu.stacks[";".join(BUILD + ["row_merge_read_clustered_index", "row_merge_buf_add"])] = 300
    cpu.stacks[";".join(BUILD + ["row_merge_sort", "row_merge_read_rec"])] = 150
    cpu.stacks[";".join(BUILD + insert)] = 450
    off.stacks[";".join(BUILD + ["row_merge_sort", "row_merge_write", "__pwrite64", "ext4_file_write_iter_[k]"])] \
        = 300_000
    doc["off_cpu"]["by_thread"][0]["runq_ns"] = 0   # as its stacks: no wait for a CPU traced
    return doc, {"cpu_profile": cpu, "off_cpu": off}


def test_a_build_seen_only_in_the_stacks_has_its_phases_per_row_of_the_table():
    doc, stacks = build_capture()
    p = Profile(doc, stacks)
    b = p.index_build
    assert b is not None and b.builds is None and b.tuples_inserted is None   # no probe counted them
    assert b.method == "sorted, bottom-up (BtrBulk)"
    assert p.subject == "index build" and p.rows_inserted == (ROWS, "the load's own count")
    shares = {ph.name: ph.share for ph in b.phases}
    # on CPU 300:150:450 samples of 1 ms (900 ms), off CPU the 300 ms traced (the untraced rest of the
    # blocked time is a part of its own, on no stack)
    assert b.wall_ns == pytest.approx(900e6 + 300e6, rel=0.01)
    assert shares["scan"] == pytest.approx(300 / 1200, rel=0.01)
    assert shares["merge sort"] == pytest.approx((150 + 300) / 1200, rel=0.01)
    assert shares["insert"] == pytest.approx(450 / 1200, rel=0.01)
    by = {ph.name: ph for ph in b.phases}
    assert by["insert"].ns_per_row == pytest.approx(450e6 / ROWS, rel=0.01)
    by_mechanism = {m.name: m for m in p.account.mechanisms}
    assert by_mechanism["sorted index build"].on_cpu_ns == pytest.approx(450e6)
    assert by_mechanism["index build: temporary sort file I/O"].off_cpu_ns == pytest.approx(300e6, rel=0.01)
    text = render_text(p)
    assert text.startswith("WHERE A ROW'S TIME WENT IN THE INDEX BUILD")
    assert "mysqlprobe index build profile:" in text and "seen in the stacks, not probed" in text
    # the build's mechanisms: its stacks charged as the account charges them, one source for both
    mechanisms = dict(b.mechanisms)
    assert mechanisms["sorted index build"] == pytest.approx(450 / 1200, rel=0.01)
    assert mechanisms["index build: temporary sort file I/O"] == pytest.approx(300 / 1200, rel=0.01)
    assert sum(mechanisms.values()) == pytest.approx(1.0)
    j = p.to_json()["index_build"]
    assert j["builds"] is None and [ph["name"] for ph in j["phases"]] == ["scan", "merge sort", "insert"]
    assert j["mechanisms"][0] == {"name": "sorted index build", "share": 0.375, "ns_per_row": 450_000.0}
    assert "by mechanism: sorted index build 38%" in " ".join(text.split())


def test_a_tuple_by_tuple_build_is_named_by_its_stacks():
    doc, stacks = build_capture(bulk=False)
    p = Profile(doc, stacks)
    assert p.index_build is not None and p.index_build.method == "tuple by tuple through the B-tree"
    assert {m.name for m in p.account.mechanisms} >= {"tuple-by-tuple index insert", "index build: merge sort"}


def test_a_builds_waits_cut_short_in_the_c_library_are_said_not_placed():
    """The building thread asleep in select() (InnoDB's os_thread_sleep), its
    user stack stopping in glibc: the phases cannot place that time, and
    the build says how much there was instead."""
    doc, stacks = build_capture()
    cut = ";".join([CONN, "[unknown]", "__select", "entry_SYSCALL_64_after_hwframe_[k]", "do_select_[k]"])
    stacks["off_cpu"].stacks[cut] = 200_000   # us traced: 200 ms
    p = Profile(doc, stacks)
    b = p.index_build
    assert b is not None
    (note,) = [n for n in b.notes if "cut short" in n]
    # the account's time: traced waits scaled to the kernel's blocked time, as every stack is
    cut_ns = 200_000 * p.account.per_blocked_us
    assert p.account.per_blocked_us < 1000   # ns a traced us: the kernel blocked less than all now traced
    assert note.startswith(f"{cut_ns / 1e6:,.0f} ms of connection threads' time "
                           f"({cut_ns / b.stacks_wall_ns:.0%} of the build's own stacks)"), note
    shares = {ph.name: ph.share for ph in b.phases}
    assert shares["scan"] == pytest.approx(300e6 / b.stacks_wall_ns, rel=0.01)   # of the placed time only
    # a whole stack through the C library is not cut short; nor is another thread's
    from mysqlprobe.analysis.index_build import cut_short
    assert not cut_short([CONN, "[libc.so.6]", "pfs_spawn_thread", "handle_one_connection", "poll_[k]"])
    assert not cut_short(["mysqld/io_handler_thread", "[unknown]", "__select", "do_select_[k]"])
    assert cut_short([CONN, "[libc.so.6]", "futex_wait_[k]"])
    assert not cut_short([CONN, "entry_SYSCALL_64_after_hwframe_[k]", "do_fsync_[k]"])   # no user stack taken
    assert "withheld" not in note and "leave it out" in note
    # below a twentieth of the build, nothing is said
    stacks["off_cpu"].stacks[cut] = 50_000
    assert not [n for n in Profile(doc, stacks).index_build.notes if "cut short" in n]
    # a quarter of the build's time or more unplaced: its shares are withheld, not printed
    stacks["off_cpu"].stacks[cut] = 30_000_000   # the kernel blocked 550 ms: most of it, scaled
    stacks["cpu_profile"].stacks[";".join(LOOP + ["dispatch_command", "mysql_parse"])] = 2700   # CPU elsewhere
    p = Profile(doc, stacks)
    b = p.index_build
    (note,) = [n for n in b.notes if "cut short" in n]
    assert "shares are withheld" in note, note
    assert all(ph.share is None and ph.ns_per_row is None for ph in b.phases) and b.mechanisms == ()
    assert all(ph["share"] is None for ph in p.to_json()["index_build"]["phases"])


def test_the_off_cpu_picture_of_the_load_keeps_the_statements_waits_only():
    """offcpu.svg shows the load's threads inside their statements: a
    connection's wait for its next statement is not the load's time."""
    from mysqlprobe.reports import in_statements

    thread = "sql/one_connection"
    idle = ";".join([thread, *LOOP, "my_net_read_packet", "vio_read", "vio_socket_io_wait", "poll",
                     "do_sys_poll_[k]"])
    fsync = ";".join([thread, *LOOP, "dispatch_command", "mysql_execute_command", "trans_commit",
                      "log_write_up_to", "fsync", "do_fsync_[k]"])
    load = ";".join([thread, *LOOP, "dispatch_command", "mysql_load", "my_net_read", "vio_read", "poll_[k]"])
    folded = Folded()
    folded.stacks.update({idle: 300_000, fsync: 1_200, load: 800})
    shown, left_out = in_statements(folded)
    assert dict(shown.stacks) == {fsync: 1_200, load: 800} and left_out == 300_000
