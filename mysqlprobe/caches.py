"""What mysqlprobe keeps between runs, under the cache root
($MYSQLPROBE_CACHE, else $XDG_CACHE_HOME/mysqlprobe, else ~/.cache/mysqlprobe):

  calibration/  the probes' cost bursts of the last run on this kernel and
                CPU, so the next start needs one burst, not five
  jars/, mariadb/, sandbox/  the test servers (mysqlprobe sandbox)

A cache file that cannot be read, written or trusted is ignored: the run
measures afresh and says so."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from mysqlprobe import __version__

CALIBRATION_MAX_AGE_S = 7 * 24 * 3600


def cache_root() -> Path:
    base = os.environ.get("MYSQLPROBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mysqlprobe")
    return Path(base)


def cache_dirs() -> list[Path]:
    """mysqlprobe's own caches (not the sandbox servers)."""
    return [cache_root() / "calibration"]


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
    uname = platform.uname()
    text = "\n".join([uname.release, uname.version, uname.machine, _cpu_model(), str(os.cpu_count()),
                      helper, __version__])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


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
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump({"taken": time.time(), "samples": samples}, f)
            os.replace(tmp, self.path)
            return True
        except OSError:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False
