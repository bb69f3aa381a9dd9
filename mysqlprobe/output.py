"""Where a capture goes: the output directory is checked before anything
is attached (created, writable, room for the capture), and should it fail
at the end anyway (the disk filled), the capture is saved in a fallback
directory that the last line names: one typo or a full disk never costs
the window."""

from __future__ import annotations

import os
import sys
import time

from mysqlprobe.capture import Capture, write_capture
from mysqlprobe.errors import CaptureError, OutputError
from mysqlprobe.files import make_dir

MIN_FREE_BYTES = 64 << 20  # profile.json, folded stacks, SVGs and the HTML page of a long window


def check_output_dir(path: str, need_bytes: int = MIN_FREE_BYTES) -> None:
    """Create path and prove it writable with room to spare, or say in one line why not."""
    make_dir(path)
    try:
        # a name of this process's own, made new (O_EXCL): tempfile's import is 7 ms of the start
        probe = os.path.join(path, f".mysqlprobe-check-{os.getpid()}-{time.monotonic_ns()}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
        st = os.statvfs(path)
    except OSError as e:
        raise OutputError(f"-o {path}: cannot write there: {e.strerror}") from None
    free = st.f_bavail * st.f_frsize
    if free < need_bytes:
        raise OutputError(f"-o {path}: only {free >> 20} MiB free, a capture needs up to {need_bytes >> 20} MiB")


def fallback_dir() -> str:
    """A new private directory for a capture that could not go where it was asked."""
    import tempfile
    base = os.environ.get("MYSQLPROBE_FALLBACK_DIR") or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix=time.strftime("mysqlprobe-%Y%m%d-%H%M%S-"), dir=base)


def _write(cap: Capture, out_dir: str, profile, all_threads: bool = False) -> None:
    from mysqlprobe.reports import write_visuals
    # the figures withheld, and why, are kept with what was recorded
    cap.doc["consistency"] = [v.to_json() for v in profile.consistency]
    paths = write_capture(out_dir, cap)
    paths += write_visuals(out_dir, profile, all_threads)
    print(f"wrote {', '.join(paths)}", file=sys.stderr)


def save_capture(cap: Capture, out_dir: str, profile=None, all_threads: bool = False) -> OutputError | None:
    """Write the capture and its pictures (from profile, the capture's
    Profile, made here when not given) into out_dir, else into a fallback
    directory. After a fallback, the error for the caller to end with once
    the report is out (its message names where the capture went)."""
    if profile is None:
        # the analysis is imported once the window is over, not before the
        # probes go on (0.03-0.07 s of a start)
        from mysqlprobe.reports import capture_profile
        profile = capture_profile(cap)
    try:
        _write(cap, out_dir, profile, all_threads)
        return None
    except CaptureError as e:
        why = str(e)
    elsewhere = fallback_dir()
    _write(cap, elsewhere, profile, all_threads)
    return OutputError(f"{why}; the capture was saved in {elsewhere} instead")
