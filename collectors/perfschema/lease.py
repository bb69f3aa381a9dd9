"""Profilers of one server share its Performance Schema setup. The first
to arrive records how the rows it changes were; each later one adds the
rows it changes (the earliest record of a row wins); the last to leave
puts them all back. So the setup is restored once, to the state from
before the first, and no profiler's window loses its consumers because
another one ended.

The record lives beside the server, on its host (the probes need the same
host): /run/mysqlprobe/ps-<pid>-<start time>.json, under an exclusive
flock. A restarted server has a new start time, and a fresh setup: its
record starts anew. A holder is a mysqlprobe process (pid and start time,
so a reused pid is not mistaken for it); one that died without leaving is
dropped by whoever looks next, and its guard leaves on its behalf."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

# typing is not imported at run time: a guard waits on two CPUs and imports no more than it needs
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any
    from mysqlprobe.collectors.perfschema.settings import PerfSchema

LEASE_DIR = "/run/mysqlprobe"


def start_time(pid: int, running: bool = False) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22); None where there is none, and with running=True where the
    process has exited: a killed one its parent has not reaped yet (a zombie)
    keeps its /proc entry and start time, and is gone all the same."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if running and fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(holder: list[int]) -> bool:
    return start_time(holder[0], running=True) == holder[1]


class SetupLease:
    def __init__(self, path: Path, holder: list[int]):
        self.path, self.holder = path, list(holder)

    @classmethod
    def for_server(cls, server_pid: int, holder_pid: int | None = None) -> "SetupLease | None":
        """The lease of a running server; None where its directory cannot be made."""
        lease_dir = Path(os.environ.get("MYSQLPROBE_LEASE_DIR", LEASE_DIR))
        started, me = start_time(server_pid), holder_pid or os.getpid()
        if started is None:
            return None
        try:
            lease_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
        _forget_gone_servers(lease_dir)
        _forget_stale_locks(lease_dir)
        return cls(lease_dir / f"ps-{server_pid}-{started}.json", [me, start_time(me) or 0])

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "holder": self.holder}

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> "SetupLease":
        return cls(Path(state["path"]), state["holder"])

    @property
    def lock_path(self) -> str:
        return str(self.path) + ".lock"

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        fd = _lock(self.lock_path)
        try:
            try:
                record = json.loads(self.path.read_text())
            except (OSError, ValueError):
                record = {"saved": None, "holders": []}
            record["holders"] = [h for h in record["holders"] if h != self.holder and _alive(h)]
            yield record
            self._write(record)
        finally:
            os.close(fd)

    def _write(self, record: dict[str, Any]) -> None:
        """The record, or none with no holder left: then the lock file goes
        too (under the lock; _lock's inode check keeps that safe)."""
        if record["holders"]:
            # whole or not at all: a record cut short by a kill mid-write would read as
            # no record, and lose the setup it saved; readers without the lock see one or the other
            tmp = f"{self.path}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(record))
            os.replace(tmp, self.path)
        else:
            self.path.unlink(missing_ok=True)
            _unlink_quietly(f"{self.path}.tmp")   # one a kill left mid-write
            _unlink_quietly(self.lock_path)

    def join(self, ps: PerfSchema) -> int:
        """Enable ps's setup (plan, then apply) and record what it changes;
        how many rows it changed. The record, this holder in it, is written
        before any row changes: a guard that finds this one killed midway
        puts back all it may have changed.
        ps then restores the merged record, should it be last."""
        with self._locked() as record:
            earlier = record["saved"]
            ps.plan()
            record["saved"] = merge(earlier, ps.saved_state())
            record["holders"].append(self.holder)
            self._write(record)
            changed = ps.apply()
            record["saved"] = merge(earlier, ps.saved_state())  # apply may have kept the threads' history
            ps.adopt(record["saved"])
        return changed

    def if_alone(self, change: Callable[[], object]) -> bool:
        """Call change() if this is the server's only profiler now (under the
        lock, so none joins meanwhile); whether it did."""
        with self._locked() as record:
            others = bool(record["holders"])  # _locked takes this one out
            record["holders"].append(self.holder)
            if others:
                return False
            change()
            return True

    def leave(self, restore: Callable[[dict[str, Any]], object]) -> bool:
        """Leave; the last to leave calls restore(saved) with the merged
        record. True if this one restored."""
        with self._locked() as record:
            if record["holders"] or record["saved"] is None:
                return False
            restore(record["saved"])
            return True


def _lock(path: str) -> int:
    """An exclusive flock on the file at path, held by the descriptor
    returned. The file may be unlinked by its holder once it is done: a
    waiter that then gets the lock on the unlinked file sees that the path
    names another file (or none) and takes the lock again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _forget_stale_locks(lease_dir: Path) -> None:
    """Lock files with no record beside them, left by a profiler killed
    while it held one: removed under their own lock, unless in use."""
    for lock in lease_dir.glob("ps-*-*.json.lock"):
        try:
            fd = os.open(str(lock), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(lock).st_ino == os.fstat(fd).st_ino and not os.path.exists(str(lock)[:-len(".lock")]):
                os.unlink(lock)
        except OSError:
            pass   # held by a running profiler, or gone meanwhile
        finally:
            os.close(fd)


def _forget_gone_servers(lease_dir: Path) -> None:
    """Records of servers that are no longer running: their setup went with them."""
    for record in lease_dir.glob("ps-*-*.json*"):
        try:
            pid, started = (int(x) for x in record.name.split(".")[0].split("-")[1:3])
        except ValueError:
            continue
        if start_time(pid, running=True) != started:
            record.unlink(missing_ok=True)


def merge(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    """Two records of the rows changed: a row's earliest record wins."""
    if earlier is None:
        return later
    history_off = earlier.get("background_history_off")
    return {"consumers": {**later["consumers"], **earlier["consumers"]},
            "instruments": {**later["instruments"], **earlier["instruments"]},
            "background_history_off": later.get("background_history_off") if history_off is None else history_off}
