"""perf script output to folded stacks, and the choice of unwinding from a
binary's prologues (fixtures built here, with and without frame pointers)."""

import io
import os
import subprocess
from pathlib import Path

import pytest

from mysqlprobe.collectors.cpu.perf import fold_script, short_frame
from mysqlprobe.collectors.cpu.perf_record import choose_unwinding
from mysqlprobe.collectors.perfschema.collector import thread_names
from mysqlprobe.collectors.target.elf import read_elf
from mysqlprobe.flamegraphs import folded

HERE = Path(__file__).parents[1]
NAMES = {4242: "sql/one_connection", 4243: "innodb/page_cleaner_thread"}


def _fold():
    with open(HERE / "fixtures" / "perf_script.txt") as f:
        return fold_script(f, NAMES)


def test_perf_script_folds_as_the_golden_file():
    stacks, samples = _fold()
    assert samples == 7 and stacks.total == 7
    out = io.StringIO()
    folded.write(stacks, out)
    # scripts/update_goldens.py writes it again, for a person to review; no test writes it
    assert out.getvalue() == (HERE / "golden" / "perf_stacks.folded").read_text()


def test_roots_are_thread_names_and_frames_run_root_to_leaf():
    stacks, _ = _fold()
    conn = "sql/one_connection;start_thread;handle_one_connection;ha_partition::write_row;" \
           "ha_innobase::write_row;row_insert_for_mysql;row_ins_clust_index_entry_low"
    assert stacks.stacks[conn] == 2
    cleaner = [s for s in stacks.stacks if s.startswith("innodb/page_cleaner_thread;")]
    assert cleaner and cleaner[0].endswith("os_file_io;__libc_pwrite64;__x64_sys_pwrite64_[k];"
                                           "copy_user_enhanced_fast_string_[k]")
    assert "mariadbd;[unknown];[libjemalloc.so.2];row_ins_clust_index_entry_low" in stacks.stacks  # no P_S name
    assert "busy;_start;__libc_start_main;__libc_start_call_main;main;mid;leaf" in stacks.stacks
    # no P_S name, an unnamed thread: named by the function it started in, even where unwinding fell short
    started = "mariadbd/handle_one_connection"
    assert stacks.stacks[f"{started};__clone3;start_thread;pfs_spawn_thread;handle_one_connection;"
                         "row_insert_for_mysql"] == 1
    assert stacks.stacks[f"{started};row_insert_for_mysql"] == 1


@pytest.mark.parametrize("symbol,dso,frame", [
    ("ha_partition::write_row(unsigned char const*)", "/usr/sbin/mariadbd", "ha_partition::write_row"),
    ("page_zip_compress+0x1f", "/usr/sbin/mariadbd", "page_zip_compress"),
    ("__libc_start_main@@GLIBC_2.34", "/lib/libc.so.6", "__libc_start_main"),
    ("[unknown]", "/usr/lib/libjemalloc.so.2", "[libjemalloc.so.2]"),
    ("[unknown]", "[unknown]", "[unknown]"),
    ("schedule", "[kernel.kallsyms]", "schedule_[k]"),
    ("bpf_prog_f17b38b184e5035b_probe_return", "[unknown]", "bpf_prog_f17b38b184e5035b_probe_return_[k]"),
    ("std::vector<int, std::allocator<int> >::push_back(int const&)", "/x", "std::vector<int, std::allocator<int> >::push_back"),
])
def test_short_frames(symbol, dso, frame):
    assert short_frame(symbol, dso) == frame


def test_a_comm_with_spaces_keeps_its_tid():
    stacks, samples = fold_script(io.StringIO("my worker 77 \n\t 1 f (/x)\n\n"), {})
    assert samples == 1 and list(stacks.stacks) == ["my worker;f"]


@pytest.fixture(scope="module")
def prologue_fixtures(tmp_path_factory):
    src = tmp_path_factory.mktemp("fp") / "funcs.c"
    # functions that call another: compilers keep no frame pointer in leaves
    src.write_text("__attribute__((noinline)) int g(int *p, int k) { return p[k] ^ k; }\n"
                   + "".join(f"__attribute__((noinline)) int f{i}(int *p, int n) {{ int s = {i};"
                             f" for (int k = 0; k < n; k++) s += g(p, k) * {i + 1}; return s; }}\n" for i in range(40))
                   + "int main(void) { return 0; }\n")
    out = {}
    for name, flag in (("fp", "-fno-omit-frame-pointer"), ("nofp", "-fomit-frame-pointer")):
        exe = src.with_name(name)
        subprocess.run(["cc", "-O2", flag, "-o", str(exe), str(src)], check=True)
        out[name] = read_elf(str(exe))
    return out


def test_unwinding_follows_the_binarys_prologues(prologue_fixtures):
    assert prologue_fixtures["fp"].frame_pointer_share > 0.9
    assert prologue_fixtures["nofp"].frame_pointer_share < 0.1
    assert choose_unwinding(prologue_fixtures["fp"]).mode == "fp"
    chosen = choose_unwinding(prologue_fixtures["nofp"])
    assert chosen.mode == "dwarf" and "frame pointer" in chosen.reason
    assert choose_unwinding(prologue_fixtures["fp"], "dwarf").mode == "dwarf"


def test_thread_names_come_from_the_perf_schema_record():
    ps = {"threads": [{"thread_id": 1, "name": "thread/sql/one_connection", "processlist_id": 5, "os_tid": 4242},
                      {"thread_id": 4, "name": "thread/innodb/page_cleaner_thread", "processlist_id": None,
                       "os_tid": 4243},
                      {"thread_id": 9, "name": "thread/sql/main", "processlist_id": None, "os_tid": None}]}
    assert thread_names(ps) == NAMES
    assert thread_names({"status": "off"}) == {}


def test_work_dirs_of_killed_runs_are_swept_and_live_ones_kept(tmp_path, monkeypatch):
    import tempfile
    from mysqlprobe.collectors.workdir import work_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    child = subprocess.Popen(["true"])
    child.wait()                                        # a PID that has ended
    dead = tmp_path / f"mysqlprobe-perf-{child.pid}-abc"
    live = tmp_path / "mysqlprobe-perf-1-xyz"           # init's: alive
    old_style, kept_data = tmp_path / "mysqlprobe-perf-q1w2e3", tmp_path / "mysqlprobe-perf-data-k9"
    for d in (dead, live, old_style, kept_data):
        d.mkdir()
        (d / "perf.data").write_bytes(b"x" * 64)
    made = Path(work_dir("perf"))
    assert made.parent == tmp_path and made.name.startswith(f"mysqlprobe-perf-{os.getpid()}-")
    assert not dead.exists()
    assert live.exists() and old_style.exists() and kept_data.exists()
