"""CPU bursts: perf script's samples summed per probed function, and with
stacks per stage with its functions anywhere on the stack."""

from types import SimpleNamespace

from mysqlprobe.collectors.cpu.cpu_bursts import burst_stages, burst_time, sample_stacks

HASH = "_Z27get_partition_id_hash_nosubP14partition_infoPjPx"
ROW_INSERT = "_Z20row_insert_for_mysqlPKhP14row_prebuilt_t"

SCRIPT = """\
    200040            994948 _Z27get_partition_id_hash_nosubP14partition_infoPjPx
    200040            afb05d _Z12row_ins_stepP9que_thr_t
    200040            994950 _Z27get_partition_id_hash_nosubP14partition_infoPjPx
    200040      7f3a1c2b3d4e [unknown]
    199980            994951 _Z27get_partition_id_hash_nosubP14partition_infoPjPx
    200040  ffffffff821f4dab pv_native_safe_halt
garbage line
"""


def test_samples_in_probed_functions_are_summed_with_their_periods():
    read, samples = burst_time(SCRIPT.splitlines(), {"partition.get_partition_id": [HASH],
                                                     "innodb.row_insert": [ROW_INSERT]})
    assert read.functions == {HASH: {"samples": 3, "self_ns": 200040 * 2 + 199980}}
    assert samples == read.samples == 6 and read.target_ns == 200040 * 5 + 199980
    assert read.stages == {"partition.get_partition_id": {"samples": 3, "ns": 200040 * 2 + 199980}}
    assert [frames for _, frames in sample_stacks(SCRIPT.splitlines())].count([""]) == 1  # [unknown] is no name


# perf script -F period,ip,sym of samples taken with --call-graph fp: a line of
# the period, then a frame a line from the sampled one outwards
STACKS = f"""\
    200040
\t          994948 {HASH}
\t          afb05d _ZN12ha_partition9write_rowEPh
\t          afb100 {ROW_INSERT}

    200040
\t          e4f000 _Z23page_cur_insert_rec_lowPhP12dict_index_tPKhPmP5mtr_t
\t          e4e200 {ROW_INSERT}
\t          e4e300 {ROW_INSERT}
\t          e4e400 _Z17mysql_execute_commandP3THD

    199980
\t    7f3a1c2b3d4e [unknown]
\t          e4e200 {ROW_INSERT}

    200040
\t ffffffff821f4dab pv_native_safe_halt
"""


def test_with_stacks_a_stage_counts_each_sample_with_its_functions_on_the_stack_once():
    read, samples = burst_time(STACKS.splitlines(), {"partition.get_partition_id": [HASH],
                                                     "innodb.row_insert": [ROW_INSERT]})
    assert samples == 4 and read.target_ns == 200040 * 3 + 199980
    assert read.functions == {HASH: {"samples": 1, "self_ns": 200040}}    # own code: only the sampled frame
    # twice on one stack (recursion) is one sample; a callee outside mysqld's names still counts
    assert read.stages == {"partition.get_partition_id": {"samples": 1, "ns": 200040},
                           "innodb.row_insert": {"samples": 3, "ns": 200040 * 2 + 199980}}


def test_a_stage_groups_its_functions_and_a_probe_without_one_is_named_as_the_analysis_names_it():
    spec = lambda stage, mangled, name: SimpleNamespace(stage=stage, symbol=SimpleNamespace(  # noqa: E731
        mangled=mangled, name=name))
    specs = [spec("partition.get_partition_id", HASH, "get_partition_id_hash_nosub"),
             spec("partition.get_partition_id", "_Z22get_partition_id_rangeP14partition_infoPjPx",
                  "get_partition_id_range"),
             spec(None, "_Z23page_cur_insert_rec_lowPhP12dict_index_tPKhPmP5mtr_t", "page_cur_insert_rec_low")]
    assert burst_stages(specs) == {
        "partition.get_partition_id": [HASH, "_Z22get_partition_id_rangeP14partition_infoPjPx"],
        "probe:page_cur_insert_rec_low": ["_Z23page_cur_insert_rec_lowPhP12dict_index_tPKhPmP5mtr_t"]}
