"""The shared record of P_S setup rows changed: the earliest record of a
row wins, and a holder is a live process, not a reused pid."""

import json
import os
import subprocess
import sys
import time

from mysqlprobe.collectors.perfschema.lease import SetupLease, _alive, merge, start_time


def test_the_earliest_record_of_a_row_wins():
    first = {"consumers": {"events_stages_history": "NO"}, "instruments": {"stage/sql/init": ["NO", "NO"]},
             "background_history_off": [3]}
    # the second saw the first's changes as the state: its record of those rows is wrong
    second = {"consumers": {"events_stages_history": "YES", "events_waits_current": "NO"},
              "instruments": {"stage/sql/init": ["YES", "YES"], "wait/synch/mutex/x": ["NO", "NO"]},
              "background_history_off": [1, 2, 3]}
    merged = merge(first, second)
    assert merged["consumers"] == {"events_stages_history": "NO", "events_waits_current": "NO"}
    assert merged["instruments"] == {"stage/sql/init": ["NO", "NO"], "wait/synch/mutex/x": ["NO", "NO"]}
    assert merged["background_history_off"] == [3]
    assert merge(None, second) == second
    assert merge({**first, "background_history_off": None}, second)["background_history_off"] == [1, 2, 3]


def test_a_holder_is_a_live_process_with_its_start_time(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path / "leases"))
    lease = SetupLease.for_server(os.getpid())
    assert lease.path.parent == tmp_path / "leases" and oct(lease.path.parent.stat().st_mode)[-3:] == "700"
    assert lease.holder == [os.getpid(), start_time(os.getpid())]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    started = start_time(child.pid)
    child.wait()
    assert started is not None and start_time(child.pid) is None
    assert SetupLease.from_json(lease.to_json()).holder == lease.holder
    assert SetupLease.for_server(2 ** 22 + 12345) is None      # no such server process


def test_records_of_servers_gone_are_forgotten(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    gone = tmp_path / f"ps-{child.pid}-{start_time(child.pid)}.json"
    child.wait()
    gone.write_text("{}")
    (tmp_path / (gone.name + ".lock")).write_text("")
    SetupLease.for_server(os.getpid())
    assert not list(tmp_path.glob("ps-*"))


def test_a_change_is_made_only_while_this_is_the_only_profiler(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path))
    me = SetupLease.for_server(os.getpid())

    class Setup:
        def plan(self):
            pass

        def apply(self):
            return 1

        def saved_state(self):
            return {"consumers": {}, "instruments": {}, "background_history_off": None}

        def adopt(self, saved):
            pass

    changed = []
    me.join(Setup())
    assert me.if_alone(lambda: changed.append("alone"))
    other = SetupLease(me.path, [os.getppid(), start_time(os.getppid())])  # a live process
    other.join(Setup())
    assert not me.if_alone(lambda: changed.append("with another"))
    assert changed == ["alone"]
    assert not other.leave(lambda saved: None)      # this one is still in: the other does not restore
    assert me.if_alone(lambda: changed.append("alone again"))
    assert me.leave(lambda saved: changed.append("restored"))
    assert changed == ["alone", "alone again", "restored"] and not me.path.exists()


def test_a_holder_killed_but_not_yet_reaped_is_gone():
    """A zombie keeps its /proc entry and start time: it holds nothing, and
    its guard must not wait on it as if it ran (it would leave P_S changed)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = start_time(child.pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        assert start_time(child.pid) == started is not None    # still there, not reaped
        assert start_time(child.pid, running=True) is None
        assert not _alive([child.pid, started])
        assert _alive([os.getpid(), start_time(os.getpid())])
    finally:
        child.wait()


def test_the_record_is_written_before_the_setup_changes(tmp_path, monkeypatch):
    """Killed while it changes the rows, a profiler has its holder and the
    rows' old state in the record already: its guard puts them back."""
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path))
    me = SetupLease.for_server(os.getpid())
    seen = []
    saved = {"consumers": {"events_stages_current": "NO"}, "instruments": {}, "background_history_off": [4]}

    class Setup:
        def plan(self):
            self.state = dict(saved)

        def apply(self):
            seen.append(json.loads(me.path.read_text()))
            self.state["background_history_off"] = None  # no right to change the threads' history
            return 1

        def saved_state(self):
            return self.state

        def adopt(self, record):
            self.adopted = record

    setup = Setup()
    assert me.join(setup) == 1
    assert seen == [{"saved": saved, "holders": [me.holder]}]
    after = json.loads(me.path.read_text())
    assert after["saved"]["background_history_off"] is None and setup.adopted == after["saved"]


def test_a_lock_file_left_by_a_killed_profiler_goes_with_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path))
    me = SetupLease.for_server(os.getpid())
    stale = tmp_path / (me.path.name + ".lock")
    stale.write_text("")                      # its holder was killed; no record beside it
    SetupLease.for_server(os.getpid())
    assert not stale.exists()


def test_a_lock_in_use_is_kept_and_the_last_holder_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLPROBE_LEASE_DIR", str(tmp_path))
    me = SetupLease.for_server(os.getpid())
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({me.lock_path!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(1)")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    SetupLease.for_server(os.getpid())        # the lock is held: not removed under its holder
    assert os.path.exists(me.lock_path)
    holder.wait()
    assert me.if_alone(lambda: None) is True  # waited for the lock, held it, and left no holder
    me.leave(lambda saved: None)
    assert not list(tmp_path.glob("ps-*"))
