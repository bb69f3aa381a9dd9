"""CPU bursts: perf script's samples summed per probed function."""

from mysqlprobe.collectors.cpu_bursts import self_time

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
    (functions, ns), samples = self_time(SCRIPT.splitlines(), {"_Z27get_partition_id_hash_nosubP14partition_infoPjPx",
                                                            "_Z20row_insert_for_mysqlPKhP14row_prebuilt_t"})
    hash_nosub = functions["_Z27get_partition_id_hash_nosubP14partition_infoPjPx"]
    assert hash_nosub == {"samples": 3, "self_ns": 200040 * 2 + 199980}
    assert functions["_Z20row_insert_for_mysqlPKhP14row_prebuilt_t"] == {"samples": 0, "self_ns": 0}
    assert samples == 6 and ns == 200040 * 5 + 199980
