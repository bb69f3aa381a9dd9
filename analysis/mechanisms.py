"""What the server's threads were doing, in a DBA's words: a catalog of
mechanisms, each the functions that are it in MariaDB 10.1 (XtraDB, the
MySQL 5.6 line), 10.2 (the 5.7 line's InnoDB) and 10.11, and MySQL
5.6/5.7/8.0 where the names differ, with the settings that govern it.

A stack, user and kernel frames, is charged to the innermost mechanism
on it (`of_stack`): a tablespace extension under a page split under a
row insert is the extension. The names were read from the server source
and the binaries (nm); a stack that meets none is "other", named by its
innermost function. Two kinds are not a row's work: the connection
waiting for its client between statements (off CPU in the network read),
and mysqlprobe's own probes."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mysqlprobe.flamegraphs.stacks import PROBES, WAITING_FOR_CPU, under_way_call

IDLE = "waiting for the client"        # between statements (its reply sent, its next not come): not the row's
PROBES_MECHANISM = "mysqlprobe's probes"
OTHER = "other"
KERNEL_SUFFIX = "_[k]"


@dataclass(frozen=True, slots=True)
class Mechanism:
    name: str
    what: str
    functions: tuple[str, ...]      # qualified names or globs, user or kernel (`name_[k]`)
    settings: tuple[str, ...]       # SHOW GLOBAL VARIABLES names (absent on a side: shown as -)
    stages: tuple[str, ...] = ()    # catalog stages that are this mechanism
    # a scoped mechanism: it applies only to a stack with one of these functions on it
    within: tuple[str, ...] = ()
    # there (scoped), or beneath one of its functions (in the catalog), what the catalog
    # charges to these mechanisms is this one's
    takes: tuple[str, ...] = ()


CATALOG = (
    Mechanism("tablespace extension",
              "InnoDB grows a data file when its free extents run out (fsp_try_extend_data_file), writing "
              "zero-filled pages and syncing them, or calling posix_fallocate (fil_space_extend and "
              "os_file_set_size on the 5.7 line and later, fil_extend_space_to_desired_size on 5.6); the file "
              "grows by an extent at a time, then by innodb_autoextend_increment MB for the system tablespace",
              ("fsp_try_extend_data_file", "fsp_try_extend_data_file_with_pages", "fil_space_extend",
               "fil_space_extend_must_retry", "fil_extend_space_to_desired_size", "os_file_set_size",
               "fsp_try_extend_data_file_with_pages*", "fsp_get_pages_to_extend_ibd"),
              ("innodb_autoextend_increment", "innodb_file_per_table", "innodb_use_fallocate")),
    Mechanism("page split",
              "an insert into a full B-tree page splits it (btr_page_split_and_insert) or raises the root "
              "(btr_root_raise_and_insert), through the pessimistic insert path",
              ("btr_page_split_and_insert", "btr_root_raise_and_insert", "btr_cur_pessimistic_insert",
               "btr_insert_on_non_leaf_level_func", "btr_attach_half_pages", "btr_page_get_split_rec*"),
              ("innodb_fill_factor", "innodb_page_size")),
    Mechanism("page allocation",
              "a new page taken from the tablespace's free extents for a B-tree or the undo log and "
              "initialised in the buffer pool (fseg_alloc_free_page_general, fsp_alloc_free_page, "
              "buf_page_create)",
              ("fseg_alloc_free_page*", "fsp_alloc_free_page", "fsp_alloc_free_extent", "fseg_create*",
               "fsp_page_create", "buf_page_create", "fsp_fill_free_list", "fseg_fill_free_list",
               "btr_page_alloc", "btr_page_alloc_low"),
              ("innodb_page_size",)),
    Mechanism("adaptive hash index",
              "InnoDB's hash index over hot B-tree pages: looked up (btr_search_guess_on_hash) and kept up to "
              "date on every insert (btr_search_update_hash_on_insert, ha_insert_for_fold_func)",
              ("btr_search_guess_on_hash", "btr_search_update_hash_on_insert", "btr_search_update_hash_node_on_insert",
               "ha_insert_for_fold_func", "btr_search_info_update_slow", "btr_search_build_page_hash_index",
               "btr_search_drop_page_hash_index", "btr_search_move_or_delete_hash_entries",
               "btr_search_update_hash_ref", "btr_search_info_update*"),
              ("innodb_adaptive_hash_index", "innodb_adaptive_hash_index_parts",
               "innodb_adaptive_hash_index_partitions")),
    Mechanism("B-tree descent",
              "finding the leaf page a record goes in, from the root down (btr_cur_search_to_nth_level; "
              "btr_cur_t::search_leaf in 10.6 and later), latching each page on the way",
              ("btr_cur_search_to_nth_level*", "btr_cur_t::search_leaf", "btr_cur_t::pessimistic_search_leaf",
               "btr_cur_open_at_index_side*", "btr_pcur_open*", "page_cur_search_with_match*",
               "btr_cur_search_to_nth_level_func"),
              ("innodb_adaptive_hash_index",)),
    Mechanism("undo logging",
              "the insert's undo record written so that the transaction can roll back "
              "(trx_undo_report_row_operation), and undo pages assigned as the log grows",
              ("trx_undo_report_row_operation", "trx_undo_page_report_insert", "trx_undo_assign_undo",
               "trx_undo_add_page", "trx_undo_assign", "trx_undo_assign_low*", "trx_undo_report_insert*"),
              ("innodb_undo_tablespaces", "innodb_undo_logs")),
    Mechanism("redo log write and flush",
              "the redo log written and synced up to a commit's LSN (log_write_up_to, log_buffer_flush_to_disk, "
              "log_write_and_flush), or waited for while another thread does it; on commit as "
              "innodb_flush_log_at_trx_commit says",
              ("log_write_up_to", "log_buffer_flush_to_disk", "log_write_and_flush", "log_write_flush_to_disk_low",
               "log_group_write_buf", "log_write_buf", "log_flush", "log_buffer_sync_in_background",
               "trx_flush_log_if_needed*", "log_write_low*", "log_t::write_buf*", "log_free_check",
               "log_check_margins", "log_checkpoint_margin", "log_margin_checkpoint_age"),
              ("innodb_flush_log_at_trx_commit", "innodb_log_buffer_size", "innodb_log_file_size",
               "innodb_flush_method", "innodb_flush_log_at_timeout")),
    Mechanism("mini-transaction log and commit",
              "a mini-transaction's redo records written as it changes pages (mlog_* on 10.1/10.2, mtr_t::write "
              "and memcpy on 10.5+), copied into the log buffer at its commit, its latches released and its "
              "dirty pages added to the flush list (mtr_commit on 10.1, mtr_t::commit since)",
              ("mtr_t::commit", "mtr_t::Command::*", "mtr_t::finish_write", "mtr_t::do_write", "mtr_commit",
               "mtr_memo_slot_release_func", "mtr_memo_release", "mtr_memo_pop_all", "mtr_add_dirtied_pages_to_flush_list",
               "mtr_memo_slot_t::release", "mtr_t::release", "mtr_t::process_freed_pages", "mtr_t::memcpy*",
               "mtr_t::memset", "mtr_t::memmove", "mtr_t::write*", "mtr_write_log", "mlog_*", "log_reserve_and_open",
               "log_reserve_and_write_fast", "log_close", "buf_flush_note_modification",
               "buf_flush_insert_into_flush_list", "mtr_t::release_resources", "log_write_low"),
              ("innodb_log_buffer_size",)),
    Mechanism("free page search and foreground flush",
              "the inserting thread needs a free buffer-pool page and finds none: it scans the LRU list, "
              "flushes a dirty page itself (buf_flush_single_page_from_LRU on 10.1/10.2, buf_flush_LRU on "
              "10.5+) or sleeps until the page cleaner frees one (buf_LRU_get_free_block); each try takes "
              "the buffer pool's mutex again, which the page cleaner's LRU flush holds meanwhile: its "
              "waits for that mutex are this mechanism's, not a latch's",
              ("buf_LRU_get_free_block", "buf_LRU_get_free_only", "buf_flush_single_page_from_LRU",
               "buf_LRU_scan_and_free_block", "buf_flush_LRU", "buf_LRU_free_from_common_LRU_list",
               "buf_LRU_free_from_unzip_LRU_list", "buf_LRU_free_page", "buf_flush_wait_batch_end*",
               "buf_flush_wait_flushed", "buf_flush_sync_for_checkpoint", "buf_flush_ahead"),
              ("innodb_buffer_pool_size", "innodb_lru_scan_depth", "innodb_lru_flush_size",
               "innodb_empty_free_list_algorithm", "innodb_io_capacity", "innodb_max_dirty_pages_pct"),
              takes=("latch and mutex waits",)),
    Mechanism("doublewrite",
              "pages written first to the doublewrite buffer and synced, so that a torn page can be restored "
              "(buf_dblwr_add_to_batch, buf_dblwr_flush_buffered_writes, buf_dblwr_write_single_page; "
              "buf_dblwr_t:: on 10.5+)",
              ("buf_dblwr_*", "buf_dblwr_t::*"),
              ("innodb_doublewrite", "innodb_use_atomic_writes")),
    Mechanism("page flush",
              "dirty pages written to the data files (buf_flush_page, buf_flush_write_block_low, "
              "buf_flush_do_batch)",
              ("buf_flush_page", "buf_flush_write_block_low", "buf_flush_do_batch", "buf_flush_batch",
               "buf_flush_try_neighbors", "buf_flush_page_and_try_neighbors", "buf_flush_list",
               "buf_flush_page_cleaner*", "pc_flush_slot", "buf_flush_LRU_list*", "buf_page_t::flush"),
              ("innodb_io_capacity", "innodb_flush_neighbors", "innodb_page_cleaners",
               "innodb_max_dirty_pages_pct")),
    Mechanism("page reads",
              "a page not in the buffer pool read from its data file (buf_read_page, buf_read_ahead_*)",
              ("buf_read_page*", "buf_read_ahead_*", "buf_page_read*", "fil_io*"),
              ("innodb_buffer_pool_size", "innodb_read_ahead_threshold", "innodb_random_read_ahead")),
    Mechanism("page checksums",
              "a page's checksum computed as it is written (buf_flush_init_for_writing, buf_calc_page_crc32) "
              "and checked as it is read (buf_page_is_corrupted)",
              ("buf_calc_page_crc32", "buf_calc_page_new_checksum", "buf_calc_page_old_checksum",
               "buf_flush_init_for_writing", "buf_page_is_corrupted", "ut_crc32*", "my_crc32c*", "crc32c_*",
               "buf_flush_update_zip_checksum", "page_zip_calc_checksum"),
              ("innodb_checksum_algorithm",), ("innodb.page_checksum", "innodb.page_verify")),
    Mechanism("page compression",
              "ROW_FORMAT=COMPRESSED pages compressed (page_zip_compress) and decompressed "
              "(page_zip_decompress) as rows go in; a failed compression splits the page and tries again",
              ("page_zip_compress*", "page_zip_decompress*", "page_zip_reorganize", "btr_page_reorganize*",
               "page_zip_copy_recs", "page_zip_write_rec"),
              ("innodb_compression_level", "innodb_compression_failure_threshold_pct",
               "innodb_compression_pad_pct_max", "innodb_log_compressed_pages"),
              ("innodb.page_compress", "innodb.page_decompress")),
    Mechanism("row locks",
              "a row lock taken for the insert (lock_rec_insert_check_and_lock, lock_rec_lock) or waited for "
              "(lock_wait_suspend_thread; lock_wait on 10.6+)",
              ("lock_rec_lock", "lock_rec_insert_check_and_lock", "lock_wait_suspend_thread", "lock_wait",
               "lock_rec_lock_slow", "lock_rec_add_to_queue", "lock_rec_create*", "lock_table",
               "lock_clust_rec_read_check_and_lock*", "lock_sec_rec_read_check_and_lock"),
              ("innodb_lock_wait_timeout", "tx_isolation", "transaction_isolation",
               "innodb_locks_unsafe_for_binlog")),
    Mechanism("latch and mutex waits",
              "a thread spinning on or sleeping for an InnoDB mutex or page latch held by another "
              "(sync_array_wait_event, the TTAS mutexes' spin and wait, srw_lock on 10.6+); a wait on an event "
              "(os_event_wait_low) is charged to the mechanism that waits",
              ("sync_array_wait_event", "sync_array_reserve_cell", "TTASEventMutex*", "PolicyMutex*::enter",
               "rw_lock_s_lock_spin", "rw_lock_x_lock_func", "rw_lock_sx_lock_func", "rw_lock_x_lock_wait*",
               "mutex_spin_wait", "mutex_enter_func", "srw_mutex_impl*::wait_and_lock", "srw_lock_impl*::*_wait*",
               "ssux_lock_impl*::*wait*", "srw_mutex_impl*::wait", "ut_delay"),
              ("innodb_sync_spin_loops", "innodb_spin_wait_delay", "innodb_thread_concurrency")),
    Mechanism("binlog",
              "the transaction's events written to the binary log at commit, in a group commit "
              "(MYSQL_BIN_LOG::write_transaction_to_binlog, trx_group_commit_leader) and synced as "
              "sync_binlog says",
              ("MYSQL_BIN_LOG::*", "binlog_*", "THD::binlog_*", "Log_event::write*", "*_log_event::write*"),
              ("log_bin", "sync_binlog", "binlog_format", "binlog_cache_size")),
    Mechanism("Performance Schema instrumentation",
              "the Performance Schema's own work timing the server's waits, stages and statements",
              ("pfs_*", "PFS_*::*", "*_wait_v1", "start_*_v1", "end_*_v1", "insert_events_*", "find_or_create_*",
               "aggregate_thread*", "get_thread_*_locker_v1", "*_locker_v1", "my_timer_cycles",
               "my_timer_nanoseconds", "my_timer_microseconds", "my_timer_milliseconds", "my_timer_ticks"),
              ("performance_schema", "performance_schema_instrument")),
    Mechanism("partition lookup and routing",
              "the partitioning layer finds each row's partition (get_partition_id_*) and hands it to that "
              "partition's handler (ha_partition::write_row; Partition_helper::ph_write_row on 5.7 and 8.0)",
              ("get_partition_id_*", "ha_partition::write_row", "Partition_helper::ph_write_row",
               "ha_innopart::write_row_in_part", "partition_info::*", "get_part_id_*"),
              (), ("partition.write_row", "partition.get_partition_id", "partition.get_subpartition_id")),
    Mechanism("record conversion",
              "a row converted between the SQL layer's format and InnoDB's: the values stored into the record "
              "(fill_record, row_mysql_store_col_in_innobase_format, rec_convert_dtuple_to_rec) and read back "
              "(row_sel_store_mysql_rec)",
              ("fill_record*", "row_mysql_store_col_in_innobase_format", "row_mysql_convert_row_to_innobase",
               "rec_convert_dtuple_to_rec*", "row_sel_store_mysql_rec", "row_sel_store_mysql_field*",
               "row_sel_field_store_in_mysql_format*", "Field_*::store*", "Field::do_field*",
               "do_copy*", "Copy_field::*", "rec_get_offsets_func", "rec_init_offsets*", "row_build_index_entry*",
               "rec_get_converted_size*", "row_ins_index_entry_set_vals", "save_field_in_field"),
              ()),
    Mechanism("SELECT side of INSERT ... SELECT",
              "the rows read from the source table: the scan and its InnoDB reads (row_search_mvcc; "
              "row_search_for_mysql on 10.1/5.6), the join loop that hands them to the insert",
              ("row_search_mvcc", "row_search_for_mysql", "row_sel_*", "ha_innobase::rnd_next",
               "ha_innobase::index_next*", "ha_innobase::general_fetch", "ha_innobase::index_read",
               "ha_innobase::index_first", "handler::ha_rnd_next", "handler::ha_index_next*", "rr_sequential",
               "rr_from_pointers", "btr_pcur_move_to_next_page", "row_prebuild_sel_graph", "ha_partition::rnd_next",
               "ha_partition::handle_*scan*", "READ_RECORD::*"),
              ("read_buffer_size",)),
    Mechanism("SQL layer insert path",
              "the SQL layer's own part of writing a row: the INSERT's loop and the handler call "
              "(mysql_insert, select_insert::send_data, write_record, handler::ha_write_row), less what "
              "the storage engine and the conversion do beneath it",
              ("select_insert::send_data", "select_insert::store_values", "write_record", "handler::ha_write_row",
               "mysql_insert", "end_send", "select_send::send_data", "handler::ha_write_tmp_row",
               "TABLE::update_default_fields", "TABLE::verify_constraints", "restore_record*",
               "Sql_cmd_insert*", "handler::update_auto_increment", "handler::ha_start_bulk_insert",
               "handler::ha_end_bulk_insert"),
              ("bulk_insert_buffer_size", "unique_checks", "foreign_key_checks")),
    Mechanism("row insert into the clustered index",
              "InnoDB inserts the row's record into its primary key's B-tree page "
              "(row_ins_clust_index_entry_low, btr_cur_optimistic_insert, page_cur_insert_rec_low), and the "
              "rest of its insert path (row_insert_for_mysql, ha_innobase::write_row)",
              ("row_ins_clust_index_entry*", "btr_cur_optimistic_insert", "page_cur_insert_rec_low",
               "page_cur_tuple_insert", "page_cur_insert_rec_write_log", "row_insert_for_mysql", "row_ins_step",
               "row_ins", "row_ins_index_entry*", "row_ins_sec_index_entry*", "ha_innobase::write_row",
               "btr_cur_ins_lock_and_undo", "page_cur_insert_rec_zip", "page_mem_alloc_heap",
               "row_ins_alloc_row_id_step", "dict_sys_get_new_row_id", "page_dir_split_slot",
               "page_cur_insert_rec_low*"),
              ("innodb_page_size",), ("innodb.row_insert", "innodb.write_row")),
    Mechanism("transaction commit",
              "the statement's transaction committed and its resources released: trx_commit, the two-phase "
              "commit's coordination, the row locks freed (the redo flush it waits for is its own mechanism)",
              ("trx_commit*", "ha_commit_trans", "ha_commit_one_phase", "commit_one_phase_2",
               "innobase_commit*", "trans_commit*", "trx_release_impl_and_expl_locks", "lock_trx_release_locks",
               "lock_release*", "trx_write_serialisation_history", "trx_undo_set_state_at_finish",
               "trx_purge_add_update_undo_to_history", "trx_undo_update_cleanup", "TC_LOG_*"),
              ("innodb_flush_log_at_trx_commit", "sync_binlog", "autocommit")),
    Mechanism("SQL layer: parse, open and plan",
              "the statement parsed, its tables opened and locked, the query planned "
              "(MYSQLparse, open_tables, JOIN::optimize) and its results sent",
              ("MYSQLparse", "ORAparse", "parse_sql", "Lex_input_stream::*", "lex_one_token*", "open_tables*",
               "open_table*", "lock_tables", "mysql_lock_tables", "JOIN::optimize*", "JOIN::prepare",
               "mysql_prepare_insert", "setup_fields*", "find_field_in_*", "close_thread_tables*",
               "mysql_reset_thd_for_next_command", "THD::cleanup_after_query", "Query_cache::*",
               "alloc_root", "free_root", "check_table_access", "check_access", "MDL_context::*", "tdc_*",
               "Item_*::fix_fields*", "mysql_select", "JOIN::init", "make_join_statistics"),
              ("query_cache_type", "table_open_cache")),
    Mechanism("client protocol",
              "the connection reading the client's request and writing the reply (my_net_read_packet, "
              "my_net_write, vio_write) while it runs",
              ("my_net_read*", "my_net_write", "net_write_command", "net_flush", "net_write_buff",
               "net_real_write", "vio_read*", "vio_write*", "vio_io_wait", "vio_socket_io_wait", "my_real_read*",
               "net_read_packet*", "Protocol::*", "my_ok", "net_send_ok", "net_send_eof", "Diagnostics_area::*",
               # glibc's socket calls keep no frame pointer: a stack stopped in one is cut there
               "__send", "send", "__libc_send", "sendto", "__libc_sendto", "__sendmsg", "sendmsg",
               "__libc_recv", "__recv", "recv", "recvfrom", "__libc_recvfrom", "__poll", "poll", "__GI___poll",
               "ppoll", "__ppoll"),
              ("net_buffer_length", "max_allowed_packet")),
)

BUILD_FUNCTION = "row_merge_build_indexes"   # an index build (CREATE INDEX, ALTER TABLE ... ADD INDEX)
_SPLITS = ("btr_page_split_and_insert", "btr_root_raise_and_insert", "BtrBulk::pageSplit", "page_zip_reorganize",
           "btr_page_reorganize", "btr_page_reorganize_low", "btr_page_reorganize_block")

# Inside an index build (row0merge.cc). The phases are its mechanisms: the
# catalog's INSERT words (the SELECT side, record conversion) pass to the
# phase function outside them, and the clustered index's row insert is the
# 5.6 line's tuple-by-tuple insert into the new index. What InnoDB does
# beneath a phase (a page split, compression, allocation, the redo log, page
# I/O) stays its own mechanism, innermost as anywhere.
SCOPED = (
    Mechanism("index build: clustered index scan",
              "the build reads every row of the clustered index (row_merge_read_clustered_index) and makes "
              "each the new index's columns (row_build) into a sort buffer (row_merge_buf_add); MariaDB 10.11 "
              "inlines the scan into row_merge_build_indexes",
              ("row_merge_read_clustered_index", "row_build", "row_build_low", "row_build_w_add_vcol",
               "row_merge_buf_add", BUILD_FUNCTION),
              ("innodb_sort_buffer_size",), ("index.scan", "index.row_build"), within=(BUILD_FUNCTION,)),
    Mechanism("index build: runs sorted and written",
              "a full sort buffer sorted in memory (row_merge_buf_sort, row_merge_tuple_sort) and laid out as "
              "one block of the temporary sort file (row_merge_buf_write): a run; innodb_sort_buffer_size sets "
              "the rows a run holds",
              ("row_merge_buf_sort", "row_merge_tuple_sort", "row_merge_tuple_cmp", "row_merge_buf_write"),
              ("innodb_sort_buffer_size",), within=(BUILD_FUNCTION,)),
    Mechanism("index build: temporary sort file I/O",
              "blocks of the temporary sort file written (row_merge_write) and read back (row_merge_read), "
              "in innodb_tmpdir (else tmpdir)",
              ("row_merge_write", "row_merge_read", "row_merge_file_create", "row_merge_file_create_low",
               "row_merge_file_create_if_needed"),
              ("innodb_tmpdir", "tmpdir", "innodb_sort_buffer_size"), ("index.block_write", "index.block_read"),
              within=(BUILD_FUNCTION,)),
    Mechanism("index build: merge sort",
              "the runs merged pairwise (row_merge_sort, row_merge_blocks), pass after pass, ceil(log2(runs)) "
              "passes each reading and writing the whole file; fewer runs (a larger innodb_sort_buffer_size) "
              "make fewer passes",
              ("row_merge_sort", "row_merge", "row_merge_blocks", "row_merge_blocks_copy", "row_merge_write_rec",
               "row_merge_write_rec_low"),
              ("innodb_sort_buffer_size",), ("index.merge_sort",), within=(BUILD_FUNCTION,)),
    Mechanism("index build: sorted tuples read back",
              "the sorted tuples read back from the sort file (row_merge_read_rec) and handed to the new "
              "index one by one (row_merge_insert_index_tuples' own loop)",
              # row_merge_read_rec is the merge's too: it is the phase its caller is in
              ("row_merge_insert_index_tuples", "row_merge_mtuple_to_dtuple", "row_rec_to_index_entry",
               "row_rec_to_index_entry_low"),
              (), ("index.insert",), within=(BUILD_FUNCTION,)),
    Mechanism("sorted index build",
              "the sorted tuples put in the new index bottom-up, a page at a time, leaves first, node pointers "
              "above them (BtrBulk::insert, PageBulk::insert, BtrBulk::pageCommit): the 5.7 line and MariaDB "
              "10.2+; innodb_fill_factor leaves room in each page",
              ("BtrBulk::*", "*PageBulk::*"),
              ("innodb_fill_factor", "innodb_page_size"), ("index.bulk_insert", "index.page_commit"),
              within=(BUILD_FUNCTION,)),
    Mechanism("tuple-by-tuple index insert",
              "the sorted tuples inserted one by one through the new index's B-tree (btr_cur_optimistic_insert, "
              "page_cur_tuple_insert; a tuple that does not fit splits its page): the 5.6 line and MariaDB 10.1",
              (), ("innodb_page_size",), ("index.tuple_insert",), within=(BUILD_FUNCTION,),
              takes=("row insert into the clustered index",)),
    Mechanism("index build: new pages flushed",
              "the new index's pages written out before the build commits, its pages having skipped the redo "
              "log (FlushObserver::flush; MariaDB 10.2-10.4 and the 5.7 line)",
              ("FlushObserver::*",), ("innodb_log_optimize_ddl", "innodb_io_capacity"), ("index.flush",),
              within=(BUILD_FUNCTION,)),
    Mechanism("page re-compression",
              "a compressed page compressed again, whole: its modification log full, it is reorganized and "
              "recompressed (page_zip_reorganize, btr_page_reorganize: rows inserted one by one into a "
              "compressed page, as 10.1's index build does), or its compression failed (the page did not fit "
              "its KEY_BLOCK_SIZE) and it was split and compressed anew (btr_page_split_and_insert, "
              "BtrBulk::pageSplit); INNODB_CMP counts the failures, and innodb_compression_pad_pct_max leaves "
              "room to make them rarer",
              (), ("innodb_compression_failure_threshold_pct", "innodb_compression_pad_pct_max",
                   "innodb_compression_level"), within=_SPLITS, takes=("page compression",)),
)
# what the catalog names an INSERT's work, which inside a build is its phase's
_BUILD_PASSES = ("SELECT side of INSERT ... SELECT", "record conversion", "SQL layer insert path")

# off CPU in these, under the connection's command loop, the thread waits for
# its next statement; a new connection's thread parks in the thread cache
# the system calls a connection waits for its client in (a wait under way as the tracing switched on
# names its call alone: flamegraphs/stacks.py's UNDER_WAY)
CLIENT_WAIT_CALLS = {"read", "poll", "ppoll", "recvfrom", "recvmsg", "epoll_wait", "epoll_pwait"}
_IDLE_FRAMES = ("vio_read", "vio_read_buff", "vio_io_wait", "vio_socket_io_wait", "my_net_read", "my_net_read_packet",
                "my_net_read_packet_reallen", "net_read_packet", "my_real_read", "cache_thread",
                "Thread_cache::park", "one_thread_per_connection_end",
                # a connection blocked in a socket read or poll whose stack the libc wrapper cut
                "__libc_recv", "__recv", "recv", "recvfrom", "__libc_recvfrom", "__poll", "poll", "__GI___poll",
                "ppoll", "__ppoll")

# where a connection's thread is preempted once its reply is in the client's socket
_REPLY_SENT = ("__send", "send", "__libc_send", "sendto", "__libc_sendto", "__sendmsg", "sendmsg")

_CLONE = re.compile(r"(\.(isra|constprop|part|cold|lto_priv|clone)(\.\d+)?)+$")


@lru_cache(maxsize=65536)
def frame_name(frame: str) -> str:
    """A frame as the catalog names functions: no arguments, no clone suffix
    (`.isra.0`), a kernel frame keeping its `_[k]`."""
    kernel = frame.endswith(KERNEL_SUFFIX)
    name = frame.removesuffix(KERNEL_SUFFIX) if kernel else frame
    if "(" in name and not name.startswith("("):
        name = name[:name.index("(")]
    name = _CLONE.sub("", name.strip())
    return name + KERNEL_SUFFIX if kernel else name


def _index() -> tuple[dict[str, Mechanism], list[tuple[str, Mechanism]]]:
    exact: dict[str, Mechanism] = {}
    globs: list[tuple[str, Mechanism]] = []
    for m in CATALOG:
        for p in m.functions:
            if any(c in p for c in "*?["):
                globs.append((p, m))
            else:
                exact.setdefault(p, m)
    return exact, globs


_EXACT, _GLOBS = _index()
BY_NAME = {m.name: m for m in CATALOG + SCOPED}
_SCOPES = frozenset(w for m in SCOPED for w in m.within)
_TAKEN = frozenset(t for m in CATALOG for t in m.takes)   # what a catalog mechanism takes beneath it


@lru_cache(maxsize=65536)
def of_function(frame: str) -> Mechanism | None:
    """The mechanism a function is part of, or None. Exact names first: a
    glob of one mechanism does not take a name another lists itself."""
    name = frame_name(frame)
    found = _EXACT.get(name)
    if found:
        return found
    return next((m for p, m in _GLOBS if fnmatch.fnmatchcase(name, p)), None)


def of_stage(stage: str) -> Mechanism | None:
    return next((m for m in CATALOG + SCOPED if stage in m.stages), None)


def of_path(path: list[str]) -> Mechanism | None:
    """The mechanism of the deepest catalog function on a path (root first)."""
    for frame in reversed(path):
        found = of_function(frame) or of_stage(frame)
        if found:
            return found
    return None


@dataclass(frozen=True, slots=True)
class Charge:
    """What one stack is charged to: a mechanism's name (or IDLE, the
    probes, OTHER), and the stack's innermost function: what in the
    mechanism ran (a system call's wrapper, a zlib routine), or what names
    OTHER."""

    mechanism: str
    function: str = ""


def innermost_function(frames: list[str]) -> str:
    """The innermost named user function on a stack (root first), else its
    leaf (a kernel stack whose user stack could not be taken)."""
    for f in reversed(frames[1:]):
        if under_way_call(f):
            return f
        if not f.endswith(KERNEL_SUFFIX) and not f.startswith("["):
            return frame_name(f)
    return f"[kernel] {frame_name(frames[-1]).removesuffix(KERNEL_SUFFIX)}" if len(frames) > 1 else "?"


def of_stack(frames: list[str], off_cpu: bool = False, runnable: bool = False) -> Charge:
    """The charge of one stack (root first: the thread's name, then its frames):
    the probes' machinery, the wait for a client between statements (off CPU
    only), else the innermost catalog mechanism, else OTHER. runnable: off
    CPU waiting for one; preempted in the system call that sent the reply
    (the client it woke took the CPU), the statement is over for its client."""
    if PROBES in frames:
        return Charge(PROBES_MECHANISM)
    if off_cpu and any(frame_name(f) in _IDLE_FRAMES or under_way_call(f) in CLIENT_WAIT_CALLS for f in frames) \
            and not _in_statement(frames):
        return Charge(IDLE)
    if runnable and innermost_function(frames) in _REPLY_SENT:
        return Charge(IDLE)
    names = [frame_name(f) for f in frames[1:]]
    scoped = [m for m in SCOPED if any(w in names for w in m.within)] if _SCOPES.intersection(names) else []
    in_build = BUILD_FUNCTION in names
    for at in range(len(names) - 1, -1, -1):
        m = _of_scoped(names[at], scoped) or of_function(names[at])
        if m is None:
            continue
        taker = next((s for s in scoped if m.name in s.takes), None) or _taker(m, names[:at])
        if taker:
            m = taker
        elif in_build and m.name in _BUILD_PASSES:
            continue
        return Charge(m.name, innermost_function(frames))
    return Charge(OTHER, innermost_function(frames))


def _taker(m: Mechanism, outer: list[str]) -> Mechanism | None:
    """A catalog mechanism further out on the stack that takes m's time
    (a latch waited for inside the free page search), else None."""
    if m.name not in _TAKEN:
        return None
    return next((o for name in reversed(outer) if (o := of_function(name)) is not None and m.name in o.takes), None)


def _of_scoped(name: str, scoped: list[Mechanism]) -> Mechanism | None:
    return next((m for m in scoped for p in m.functions if fnmatch.fnmatchcase(name, p)), None)


def of_folded(stack: str, off_cpu: bool = False) -> tuple[Charge, bool]:
    """The charge of a folded stack (the thread's name first) and whether it
    is a wait for a CPU: an off-CPU stack ending in WAITING_FOR_CPU."""
    frames = stack.split(";")
    waiting = off_cpu and frames[-1] == WAITING_FOR_CPU
    return of_stack(frames[:-1] if waiting else frames, off_cpu=off_cpu, runnable=waiting), waiting


# frames that run a statement: a network read beneath one is the statement's (LOAD DATA LOCAL, a cursor)
_STATEMENT_FRAMES = ("dispatch_command", "mysql_execute_command")


def _in_statement(frames: list[str]) -> bool:
    return any(frame_name(f) in _STATEMENT_FRAMES for f in frames)


def differing_settings(m: Mechanism, a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """(setting, A's value, B's value) for the mechanism's settings that differ; '-' where a side lacks it."""
    if a is None or b is None:
        return []
    out = []
    for name in m.settings:
        va, vb = a.get(name, "-"), b.get(name, "-")
        if va != vb:
            out.append((name, str(va), str(vb)))
    return out


def settings_of(m: Mechanism, settings: dict[str, str] | None) -> dict[str, str]:
    """The mechanism's governing settings as the server had them (those it has)."""
    if not settings:
        return {}
    return {name: str(settings[name]) for name in m.settings if name in settings}
