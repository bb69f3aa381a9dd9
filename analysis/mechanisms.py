"""What the functions on a changed path do, in a DBA's words, and the
server settings that govern it: a small catalog keyed by function names,
each checked present in MariaDB 10.1.23 (XtraDB, the 5.6 line) and
10.2.11 (the 5.7 line's InnoDB) with nm, and described from the InnoDB
and SQL-layer source. compare names the mechanism of the deepest catalog
function on the path that carries a change, and the settings that differ
between the two sides."""

from __future__ import annotations

from typing import Any

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class Mechanism:
    name: str
    what: str
    functions: tuple[str, ...]      # qualified names or globs
    settings: tuple[str, ...]       # SHOW GLOBAL VARIABLES names (absent on a side: shown as -)
    stages: tuple[str, ...] = ()    # catalog stages that are this mechanism


CATALOG = (
    Mechanism("tablespace extension",
              "InnoDB grows a data file when its free extents run out (fsp_try_extend_data_file), writing or "
              "allocating the new pages (fil_space_extend on the 5.7 line, fil_extend_space_to_desired_size on "
              "5.6); the file grows by innodb_autoextend_increment MB once it is past its first extents",
              ("fsp_try_extend_data_file", "fil_space_extend", "fil_extend_space_to_desired_size"),
              ("innodb_autoextend_increment", "innodb_file_per_table", "innodb_use_fallocate")),
    Mechanism("page split",
              "an insert into a full B-tree page splits it (btr_page_split_and_insert) or raises the root "
              "(btr_root_raise_and_insert), through the pessimistic insert path",
              ("btr_page_split_and_insert", "btr_root_raise_and_insert", "btr_cur_pessimistic_insert"),
              ("innodb_fill_factor", "innodb_page_size")),
    Mechanism("adaptive hash index",
              "InnoDB's hash index over hot B-tree pages: looked up (btr_search_guess_on_hash) and kept up to "
              "date on every insert (btr_search_update_hash_on_insert, ha_insert_for_fold_func)",
              ("btr_search_guess_on_hash", "btr_search_update_hash_on_insert", "ha_insert_for_fold_func"),
              ("innodb_adaptive_hash_index", "innodb_adaptive_hash_index_parts",
               "innodb_adaptive_hash_index_partitions")),
    Mechanism("redo log write and flush",
              "the redo log written and synced up to a commit's LSN (log_write_up_to, "
              "log_buffer_flush_to_disk), and file syncs (fil_flush)",
              ("log_write_up_to", "log_buffer_flush_to_disk", "fil_flush"),
              ("innodb_flush_log_at_trx_commit", "innodb_log_buffer_size", "innodb_flush_method", "sync_binlog")),
    Mechanism("buffer pool reads and flushes",
              "pages read into the buffer pool (buf_read_page), a free block found by evicting or flushing "
              "others (buf_LRU_get_free_block, buf_flush_page, buf_flush_list)",
              ("buf_read_page", "buf_LRU_get_free_block", "buf_flush_page", "buf_flush_list"),
              ("innodb_buffer_pool_size", "innodb_io_capacity", "innodb_lru_scan_depth")),
    Mechanism("lock waits",
              "a row lock taken (lock_rec_lock) or waited for (lock_wait_suspend_thread)",
              ("lock_rec_lock", "lock_wait_suspend_thread"),
              ("innodb_lock_wait_timeout", "tx_isolation", "transaction_isolation")),
    Mechanism("page checksums",
              "a page's checksum computed as it is written (buf_calc_page_crc32) and checked as it is read "
              "(buf_page_is_corrupted)",
              ("buf_calc_page_crc32", "buf_page_is_corrupted"),
              ("innodb_checksum_algorithm",), ("innodb.page_checksum", "innodb.page_verify")),
    Mechanism("page compression",
              "ROW_FORMAT=COMPRESSED pages compressed (page_zip_compress) and decompressed "
              "(page_zip_decompress) as rows go in",
              ("page_zip_compress", "page_zip_decompress"),
              ("innodb_compression_level", "innodb_compression_failure_threshold_pct"),
              ("innodb.page_compress", "innodb.page_decompress")),
    Mechanism("partition lookup and routing",
              "the partitioning layer finds each row's partition (get_partition_id_*) and hands it to that "
              "partition's handler (ha_partition::write_row; Partition_helper::ph_write_row on 5.7 and 8.0)",
              ("get_partition_id_*", "ha_partition::write_row", "Partition_helper::ph_write_row",
               "ha_innopart::write_row_in_part"),
              (), ("partition.write_row", "partition.get_partition_id", "partition.get_subpartition_id")),
    Mechanism("row insert into the clustered index",
              "InnoDB inserts the row's record into its primary key's B-tree page "
              "(row_ins_clust_index_entry_low, btr_cur_optimistic_insert, page_cur_insert_rec_low)",
              ("row_ins_clust_index_entry_low", "btr_cur_optimistic_insert", "page_cur_insert_rec_low"),
              ("innodb_page_size",), ("innodb.row_insert", "innodb.write_row")),
)


def _matches(frame: str, pattern: str) -> bool:
    name = frame.split("(")[0].removesuffix("_[k]")
    return fnmatch.fnmatchcase(name, pattern)


def of_function(frame: str) -> Mechanism | None:
    return next((m for m in CATALOG if any(_matches(frame, p) for p in m.functions)), None)


def of_stage(stage: str) -> Mechanism | None:
    return next((m for m in CATALOG if stage in m.stages), None)


def of_path(path: list[str]) -> Mechanism | None:
    """The mechanism of the deepest catalog function on a path (root first)."""
    for frame in reversed(path):
        found = of_function(frame) or of_stage(frame)
        if found:
            return found
    return None


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
