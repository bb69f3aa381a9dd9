"""bench/ as a tool: every script starts (its imports resolve through the
installed library, none through another script) and says its options; the
one results page keeps each script's section in place and in order; the
page and its figures file hold a section for every script."""

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mysqlprobe.lab import benchkit

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "phase_log.py")


def subcommands(help_text: str) -> list[str]:
    """The subcommands a script's --help lists (none: a script of one measurement)."""
    listed = help_text.partition("\nsubcommands:\n")[2]
    return re.findall(r"^  ([a-z][a-z-]*) ", listed, re.M)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_starts_and_says_its_options(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    for sub in subcommands(done.stdout):     # and each measurement a script holds
        each = subprocess.run([sys.executable, str(script), sub, "--help"], capture_output=True, text=True,
                              timeout=60)
        assert each.returncode == 0 and f"{script.name} {sub}" in each.stdout, (sub, each.stderr)


def test_about_ten_scripts_each_a_question():
    # the measurements of one kind are one script's subcommands; phase_log.py is a helper phases.py runs
    assert len(SCRIPTS) <= 12, [p.name for p in SCRIPTS]
    listed = (BENCH / "README.md").read_text()
    assert all(f"| {p.name} |" in listed for p in SCRIPTS)


def test_no_script_imports_another():
    names = {p.stem for p in BENCH.glob("*.py")}
    for script in SCRIPTS:
        imported = set(re.findall(r"^\s*(?:from|import) (\w+)", script.read_text(), re.M))
        assert not imported & names, f"{script.name} imports {imported & names}"


def test_a_section_is_replaced_in_place_and_new_ones_keep_the_order(tmp_path):
    benchkit.publish("per_call", {"x": 1}, "# Short functions\n\nold figures\n## a table\n", tmp_path)
    benchkit.publish("overhead", {"x": 2}, "# Seed load\n\nfigures\n", tmp_path)
    benchkit.publish("soak", None, "# Soak\n\nan hour\n", tmp_path)
    benchkit.publish("per_call", {"x": 3}, "# Short functions\n\nnew figures\n", tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.startswith(benchkit.RESULTS_HEAD)
    titles = re.findall(r"^## .*$", text, re.M)
    assert titles == ["## 1. Seed load (bench/overhead.py)", "## 3. Short functions (bench/per_call.py)",
                      "## 19. Soak (bench/lifecycle.py soak)"]
    assert "new figures" in text and "old figures" not in text and "### a table" not in text
    assert json.loads((tmp_path / "results.json").read_text()) == {"per_call": {"x": 3}, "overhead": {"x": 2}}


def test_the_page_has_a_section_for_every_script_and_its_figures():
    text = (BENCH / "RESULTS.md").read_text()
    keys = re.findall(r"^<!-- section: (\S+) -->$", text, re.M)
    assert keys == [k for k, _ in benchkit.SECTIONS]
    figures = json.loads((BENCH / "results.json").read_text())
    assert set(figures) == set(keys)
    for _key, script in benchkit.SECTIONS:
        path, *sub = script.split()
        assert (BENCH / path.removeprefix("bench/")).exists(), script
    # one page: no other results file beside it
    assert sorted(p.name for p in BENCH.iterdir() if p.suffix in (".md", ".json")) == \
        ["README.md", "RESULTS.md", "results.json"]


def test_a_build_phase_is_the_innermost_open_one_on_its_thread():
    """PhaseTimer's arithmetic: the build (label 0) holds the scan, which holds an
    insert (a build whose tuples fit one buffer inserts from inside the scan);
    another thread's events stay its own."""
    from mysqlprobe.lab.benchkit.truth import innermost_shares
    labels = ["rest", "scan", "insert"]
    events = [("E", 0, 7, 0), ("E", 1, 7, 10), ("E", 2, 7, 40), ("R", 2, 7, 60), ("R", 1, 7, 90),
              ("R", 0, 7, 100),
              ("E", 0, 8, 1000), ("R", 0, 8, 1100)]      # another build, on another thread
    shares = innermost_shares(list(reversed(events)), labels)   # bpftrace's order is not time's
    assert shares == pytest.approx({"rest": (10 + 10 + 100) / 200, "scan": (30 + 30) / 200, "insert": 20 / 200})
    assert innermost_shares([], labels) == {}


# perf script's text of a CPU-wide switch record (`-F pid,tid,time,event,trace,ip,sym,dso
# --show-switch-events`): the server is pid 100; pid 200 is another process on the same CPUs
SWITCH_SCRIPT = """\
100/101 10.000000: sched:sched_switch: prev_comm=mysqld prev_pid=101 prev_prio=120 prev_state=D ==> next_comm=x next_pid=0 next_prio=120
\tffffffff81000001 __schedule+0x1 ([kernel.kallsyms])
\tffffffff81000002 io_schedule+0x2 ([kernel.kallsyms])
\tffffffff81000003 ext4_sync_file+0x3 ([kernel.kallsyms])
\t7f0000000001 fsync+0x1 (/usr/lib/libc.so.6)
\t555500000001 log_write_up_to+0x10 (/usr/sbin/mysqld)
\t555500000002 do_command+0x10 (/usr/sbin/mysqld)
100/101 10.000010: PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:     0/0
200/201 10.000500: PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:     0/0
100/101 10.002010: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:     0/0
100/101 10.003000: PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:     0/0
200/201 10.004000: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:     0/0
100/101 10.007000: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:     0/0
100/101 10.007900: sched:sched_switch: prev_comm=mysqld prev_pid=101 prev_prio=120 prev_state=R ==> next_comm=x next_pid=201 next_prio=120
\tffffffff81000001 __schedule+0x1 ([kernel.kallsyms])
\t555500000003 row_ins_step+0x10 (/usr/sbin/mysqld)
\t555500000002 do_command+0x10 (/usr/sbin/mysqld)
100/101 10.008000: PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:   200/201
100/101 10.009000: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:   200/201
100/102 10.000000: PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:     0/0
100/102 10.500000: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:     0/0
100/101 10.010000: PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:     0/0
"""


def test_the_truths_waits_are_timed_by_the_switch_records_and_spread_over_the_sampled_stacks():
    """Every wait of a server thread timed from its switch-out record to its
    switch-in (another process's ignored, a wait not ended not counted);
    the sampled switch-outs' stacks carry a thread's waits of their kind in
    proportion; a kind with no sampled switch is unsampled, in no stack."""
    from mysqlprobe.lab.benchkit.truth import WAITING_FOR_CPU, waits_by_thread
    waits = waits_by_thread(SWITCH_SCRIPT.splitlines(keepends=True), server=100)
    assert set(waits) == {101, 102}
    blocked, preempted = waits[101][False], waits[101][True]
    fsync = "do_command;log_write_up_to;fsync;ext4_sync_file_[k];io_schedule_[k]"
    assert blocked.total_ns == 2_000_000 + 4_000_000
    assert blocked.sampled == {fsync: 2_000_000}
    assert blocked.by_stack() == {fsync: 6_000_000} and blocked.unsampled_ns == 0
    assert preempted.total_ns == 1_000_000
    assert preempted.by_stack() == {f"do_command;row_ins_step;{WAITING_FOR_CPU}": 1_000_000}
    idle = waits[102][False]
    assert idle.total_ns == 500_000_000 and idle.by_stack() == {} and idle.unsampled_ns == 500_000_000


def test_the_truth_leaves_unsampled_waits_out_of_every_mechanism():
    """A load thread's unsampled wait is the truth's unsampled_ns, in no
    mechanism; a thread that never ran a connection's loop is not the load's."""
    from mysqlprobe.lab.benchkit.truth import WallTruth
    truth = WallTruth(on_cpu={1: Counter({"do_command;row_ins_step": 300}), 2: Counter({"srv_master_thread": 50})},
                      off_cpu={1: Counter({"do_command;log_write_up_to;fsync": 700})}, unsampled={1: 9000, 2: 400})
    assert truth.load_threads() == {1}
    assert truth.unsampled_ns() == 9000
    assert sum(truth.mechanisms().values()) == 1000


SLOW_LOG_TEXT = """\
/usr/sbin/mysqld, Version: 10.1.23-MariaDB (MariaDB Server). started with:
# Time: 261129  8:29:41
# User@Host: root[root] @ localhost []
# Thread_id: 3  Schema: mysqlprobe_load  QC_hit: No
# Query_time: 0.001002  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 0
SET timestamp=1795939781;
CREATE TABLE emp_range_100 (
  id int
) PARTITION BY RANGE (store_id) (
  PARTITION p0 VALUES LESS THAN (2)
);
# User@Host: root[root] @ localhost []
# Query_time: 0.204328  Lock_time: 0.006829  Rows_sent: 0  Rows_examined: 30011
# Rows_affected: 30011
SET timestamp=1795939781;
INSERT INTO emp_range_100 SELECT * FROM emp_src;
# Query_time: 0.000036  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
use mysqlprobe_load;
SET timestamp=1795939782;
SELECT COUNT(*) FROM emp_range_100;
# Query_time: 1.250000  Lock_time: 0.000100  Rows_sent: 0  Rows_examined: 30011
SET timestamp=1795939783;
INSERT INTO emp_range_100 SELECT * FROM emp_src;
"""


def test_the_slow_log_gives_each_statement_the_servers_time_in_order(tmp_path):
    from mysqlprobe.lab.benchkit.truth import server_seconds
    log = tmp_path / "slow.log"
    log.write_text(SLOW_LOG_TEXT)
    assert server_seconds(log, "INSERT INTO emp_range_100 SELECT") == [0.204328, 1.25]
    # a statement's time is its own: the CREATE's is not the SELECT's, nor a time the next header replaced
    assert server_seconds(log, "CREATE TABLE emp_range_100") == [0.001002]
    assert server_seconds(log, "SELECT COUNT(*)") == [0.000036]
    assert server_seconds(log, "DROP TABLE") == []


def test_mechanisms_the_pairs_cannot_rank_below_the_top_are_tied_with_it():
    from mysqlprobe.lab.benchkit.truth import tied_with_top
    # free page search and latch waits, each pair's B - A: about equal, ranked both ways;
    # the redo log's well below in every pair, and 'other' never a mechanism to name
    pairs = [{"free page search": 610, "latch waits": 410, "redo log": 90, "other": 900},
             {"free page search": 420, "latch waits": 640, "redo log": 110, "other": 900},
             {"free page search": 480, "latch waits": 450, "redo log": 70, "other": 900},
             {"free page search": 530, "latch waits": 500, "redo log": 100, "other": 900}]
    per = {n: sum(p[n] for p in pairs) / len(pairs) for n in pairs[0]}
    assert tied_with_top(pairs, per, unnamed=("other",)) == ["free page search", "latch waits"]
    # one clearly ahead in every pair stands alone
    apart = [{**p, "latch waits": p["latch waits"] / 3} for p in pairs]
    per = {n: sum(p[n] for p in apart) / len(apart) for n in apart[0]}
    assert tied_with_top(apart, per, unnamed=("other",)) == ["free page search"]
    # a fall (negative deltas) is ranked by size alike
    fall = [{n: -v for n, v in p.items()} for p in apart]
    per = {n: sum(p[n] for p in fall) / len(fall) for n in fall[0]}
    assert tied_with_top(fall, per, unnamed=("other",)) == ["free page search"]
