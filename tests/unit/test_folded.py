import io
from pathlib import Path

from mysqlprobe.flamegraphs import folded
from mysqlprobe.flamegraphs.folded import Folded

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


def test_the_probes_machinery_folds_into_one_frame_and_never_into_user_frames():
    from mysqlprobe.flamegraphs.stacks import PROBES, fold_probe_frames
    f = Folded()
    user = ["sql/one_connection", "do_command", "write_record", "ha_partition::write_row"]
    f.add(user + ["entry_SYSCALL_64_after_hwframe_[k]", "do_syscall_64_[k]", "__x64_sys_uretprobe_[k]",
                  "uprobe_handle_trampoline_[k]", "uprobe_prog_run_[k]", "bpf_prog_16db_probe_return_[k]"], 3)
    f.add(user + ["asm_exc_int3_[k]", "exc_int3_[k]", "uprobe_notify_resume_[k]"], 2)
    f.add(user + ["entry_SYSCALL_64_after_hwframe_[k]", "__x64_sys_pwrite64_[k]"], 5)   # the server's own
    f.add(user + ["row_insert_for_mysql"], 7)
    # at a return trampoline the kernel named do_command's slot after write_row's caller: impossible
    wrong = ["sql/one_connection", "do_handle_one_connection", "handler::ha_write_row", "dispatch_command",
             "mysql_parse", "write_record", "[uprobes]"]
    f.add(wrong + ["entry_SYSCALL_64_after_hwframe_[k]", "do_syscall_64_[k]"], 4)
    f.add(user + ["entry_SYSCALL_64_after_hwframe_[k]", "__x64_sys_write_[k]", "bpf_prog_9f_on_exit_[k]"], 1)
    out, folded = fold_probe_frames(f)
    assert folded == 10 and out.total == f.total
    # at a breakpoint or a trampoline: the thread and the probes, no frame the chain may have misnamed
    assert out.stacks["sql/one_connection;" + PROBES] == 9
    assert not any("handler::ha_write_row;dispatch_command" in k for k in out.stacks)
    # a tracepoint's BPF program: the user frames are whole there, only the kernel's are folded
    assert out.stacks[";".join(user + [PROBES])] == 1
    assert out.stacks[";".join(user + ["entry_SYSCALL_64_after_hwframe_[k]", "__x64_sys_pwrite64_[k]"])] == 5
    assert out.stacks[";".join(user + ["row_insert_for_mysql"])] == 7
