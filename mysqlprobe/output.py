"""Where a capture goes: the output directory is checked before anything
is attached (created, writable, room for the capture), and should it fail
at the end anyway (the disk filled), the capture is saved in a fallback
directory that the last line names: one typo or a full disk never costs
the window."""

from __future__ import annotations

import os
import sys
import time

from mysqlprobe.capture import PROFILE_FILE, Capture, discard_sources, write_capture
from mysqlprobe.errors import CaptureError, OutputError
from mysqlprobe.files import check_trusted_dir, discard, make_dir, publish, staging_dir

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
    """The whole capture into a staging directory inside out_dir, then
    published: profile.json, which says the capture is whole, last. A
    failure on the way (the disk filled) leaves nothing in out_dir."""
    from mysqlprobe.reports import write_visuals
    # the figures withheld, and why, are kept with what was recorded
    cap.doc["consistency"] = [v.to_json() for v in profile.consistency]
    try:
        check_trusted_dir(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        staging = staging_dir(out_dir)
    except (OSError, OutputError) as e:
        raise CaptureError(f"cannot write into {out_dir}: {getattr(e, 'strerror', None) or e}") from None
    try:
        write_capture(staging, cap)
        write_visuals(staging, profile, all_threads)
        paths = publish(staging, out_dir, PROFILE_FILE)
    except (OSError, CaptureError, OutputError) as e:
        discard(staging)
        why = e.strerror if isinstance(e, OSError) else str(e).replace(staging, out_dir)
        raise CaptureError(f"cannot write into {out_dir}: {why}") from None
    print(f"wrote {', '.join(sorted(paths, key=lambda p: not p.endswith(PROFILE_FILE)))}", file=sys.stderr)


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
        discard_sources(cap)
        return None
    except CaptureError as e:
        why = str(e)
    elsewhere = fallback_dir()
    _write(cap, elsewhere, profile, all_threads)
    discard_sources(cap)
    return OutputError(f"{why}; the capture was saved in {elsewhere} instead")
