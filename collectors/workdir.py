"""Private working directories for the collectors' helper files (perf.data)."""

from __future__ import annotations

import glob
import os

from mysqlprobe.collectors.kernel.process import alive


def work_dir(kind: str) -> str:
    """A private directory for perf's files, named with this process's PID.
    Those a killed mysqlprobe left behind (kill -9 runs no cleanup; perf.data
    can be megabytes) are removed first: their PID is gone."""
    import shutil  # these two import the compressors: for perf record only, 7 ms of other starts
    import tempfile
    base = tempfile.gettempdir()
    for d in glob.glob(os.path.join(base, f"mysqlprobe-{kind}-*-*")):
        pid = os.path.basename(d).split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"mysqlprobe-{kind}-{os.getpid()}-")
