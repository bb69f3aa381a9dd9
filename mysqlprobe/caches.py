"""What mysqlprobe keeps between runs, under the cache root
($MYSQLPROBE_CACHE, else $XDG_CACHE_HOME/mysqlprobe, else ~/.cache/mysqlprobe):

  calibration/  the probes' cost bursts of the last run on this kernel and
                CPU, so the next start needs one burst, not five
  plans/        the probes planned for a build of the server (by build-id)
                and the stages asked for: the next start on that build
                reads no symbol table
  jars/, mariadb/, sandbox/  the test servers (mysqlprobe lab sandbox)

A cache file that cannot be read, written or trusted is ignored: the run
measures afresh and says so."""

from __future__ import annotations

import contextlib
import json
import importlib.util
import os
import pickle
import stat
import time
from pathlib import Path

from mysqlprobe import __version__

try:  # CPython's built-in sha256 (3.12: _sha2, 3.11: _sha256): hashlib loads OpenSSL's, 6 ms of every start
    from _sha2 import sha256
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256

CALIBRATION_MAX_AGE_S = 7 * 24 * 3600


def cache_root() -> Path:
    base = os.environ.get("MYSQLPROBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mysqlprobe")
    return Path(base)


def cache_dirs() -> list[Path]:
    """mysqlprobe's own caches (not the sandbox servers)."""
    return [cache_root() / "calibration", cache_root() / "plans"]


def temporary_file(directory: Path) -> tuple[int, str]:
    """A new file (mode 0600) to be renamed into place."""
    import tempfile  # 10 ms with shutil's imports, off the start: only saving needs it
    return tempfile.mkstemp(dir=directory, prefix=".tmp-")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        return "?"


def host_key(helper_path: str) -> str:
    """What a probe's cost depends on: the kernel, the CPU, the helper and this version."""
    try:
        helper = f"{os.stat(helper_path).st_size}:{os.stat(helper_path).st_mtime_ns}"
    except OSError:
        helper = "?"
    uname = os.uname()
    text = "\n".join([uname.release, uname.version, uname.machine, _cpu_model(), str(os.cpu_count()),
                      helper, __version__])
    return sha256(text.encode()).hexdigest()[:20]


class CalibrationCache:
    """The calibration bursts of the last run with the same host_key()."""

    def __init__(self, helper_path: str, root: Path | None = None):
        self.path = (root or cache_root()) / "calibration" / f"{host_key(helper_path)}.json"

    def load(self) -> dict | None:
        """{"taken": unix time, "samples": {class: {kind: [ns, ...]}}}, or None
        when there is none, it is older than a week, or it is not one."""
        try:
            doc = json.loads(self.path.read_text())
            taken, samples = float(doc["taken"]), doc["samples"]
            if not (0 <= time.time() - taken <= CALIBRATION_MAX_AGE_S):
                return None
            for runs in samples.values():
                if set(runs) != {"entry", "both", "inside"} or not all(
                        isinstance(x, (int, float)) for xs in runs.values() for x in xs):
                    return None
            return {"taken": taken, "samples": samples}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self, samples: dict) -> bool:
        """Written whole or not at all (a rename); False if it could not be."""
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = temporary_file(self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"taken": time.time(), "samples": samples}, f)
            os.replace(tmp, self.path)
            return True
        except OSError:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False


PLAN_CACHE_ENTRIES = 32  # plan files kept, the newest
# what a plan is made by: a change to any of them makes earlier plans unused
PLANNING_MODULES = ("mysqlprobe.catalog", "mysqlprobe.recorder.plan", "mysqlprobe.collectors.target.symbols",
                    "mysqlprobe.collectors.target.elf", "mysqlprobe.collectors.uprobes.session",
                    "mysqlprobe.collectors.uprobes.calibration", "mysqlprobe.collectors.target.debuginfo")


def planning_code() -> str:
    """A digest of the code that makes plans."""
    digest = sha256(__version__.encode())
    for name in PLANNING_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"planning code {name} not found")
        with open(spec.origin, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


class PlanCache:
    """Planned probes by build-id: a second start on the same build (the same
    stages, options and mysqlprobe) takes them from here instead of reading
    the binary's symbol table (about 0.3 s for a 297 MB mariadbd). The files
    are pickles, so only those this user owns and no one else may write are
    read."""

    def __init__(self, root: Path | None = None):
        self.dir = (root or cache_root()) / "plans"

    def key(self, build_id: str, *parts) -> str:
        text = "\n".join([build_id, planning_code(), *map(repr, parts)])
        return sha256(text.encode()).hexdigest()[:32]

    def load(self, key: str):
        path = self.dir / f"{key}.pickle"
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return None
                found = pickle.load(f)
            os.utime(path)  # kept among the newest
            return found
        except Exception:  # noqa: BLE001 - unreadable, foreign or from other code: plan afresh
            return None

    def save(self, key: str, value) -> bool:
        tmp = None
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = temporary_file(self.dir)  # mode 0600
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.dir / f"{key}.pickle")
            self._prune()
            return True
        except (OSError, pickle.PicklingError):
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False

    def _prune(self) -> None:
        files = sorted(self.dir.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[PLAN_CACHE_ENTRIES:]:
            with contextlib.suppress(OSError):
                old.unlink()
