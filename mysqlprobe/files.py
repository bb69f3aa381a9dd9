"""Files named by the user, read and written as root without harm.

Reads: regular files only, opened without blocking (a FIFO never hangs a
run) and bounded in size, so /dev/zero as a password file cannot grow
mysqlprobe until the OOM killer picks mysqld.

Writes: into a directory that only root or the invoking user can change
(an -o owned by someone else could hold symlinks that make root write
over its own files). Every file is created new (O_CREAT|O_EXCL|O_NOFOLLOW)
in a private staging directory inside the output directory and renamed
into place: a rename replaces a symlink or a pre-created file, never
writes through it, and the file's mode is the one asked for."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

from mysqlprobe.errors import InputFileError, OutputError

SECRET_FILE_LIMIT = 64 << 10      # a password or defaults file
CAPTURE_FILE_LIMIT = 1 << 30      # profile.json, folded stacks
STAGING_PREFIX = ".mysqlprobe-staging-"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str, limit: int, what: str, follow: bool) -> int:
    """A read-only descriptor of a regular file of at most `limit` bytes.
    With follow=False a symlink is refused (ELOOP), as a capture's own files
    are: a capture another user made could point them at root's files."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise InputFileError(f"{what} {path}: a symbolic link; a capture's files are read only as "
                                 "the regular files in it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputFileError(f"{what} {path}: {_kind(st.st_mode)}; give a regular file")
    if st.st_size > limit:
        os.close(fd)
        raise InputFileError(f"{what} {path}: {st.st_size} bytes, over the {_size(limit)} a {what} may have")
    return fd


def read_lines_bounded(path: str, limit: int, line_limit: int, what: str, follow: bool = True) -> Iterator[str]:
    """The lines of a regular file of at most `limit` bytes, read a chunk at
    a time: a line over `line_limit` bytes is never held whole; it comes
    out cut to line_limit + 1 bytes, so the reader sees that it was long.
    Invalid UTF-8 in a kept line is UnicodeDecodeError."""
    fd = _open_regular(path, limit, what, follow)
    try:
        pending, long_line, read = b"", False, 0
        while True:
            chunk = os.read(fd, 1 << 20)
            read += len(chunk)
            if read > limit:
                raise InputFileError(f"{what} {path}: over the {_size(limit)} a {what} may have")
            if not chunk:
                break
            pieces = chunk.split(b"\n")
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                if not long_line:
                    pending += piece
                    if len(pending) > line_limit:
                        pending, long_line = pending[:line_limit + 1], True
                if last:
                    break
                yield pending.decode(errors="replace") if long_line else pending.decode()
                pending, long_line = b"", False
        if pending:
            yield pending.decode(errors="replace") if long_line else pending.decode()
    finally:
        os.close(fd)


def read_bounded(path: str, limit: int, what: str, follow: bool = True) -> bytes:
    """The whole of a regular file of at most `limit` bytes, or one InputFileError.

    FileNotFoundError and PermissionError pass through for the caller's own words."""
    fd = _open_regular(path, limit, what, follow)
    try:
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew while read (procfs, a file being written)
            raise InputFileError(f"{what} {path}: over the {_size(limit)} a {what} may have")
        return data
    finally:
        os.close(fd)


def read_bounded_text(path: str, limit: int, what: str, follow: bool = True) -> str:
    return read_bounded(path, limit, what, follow).decode()


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _trusted(own: int, env: str) -> set[int]:
    ids = {0, own}
    called_by = os.environ.get(env, "")
    if called_by.isdigit():
        ids.add(int(called_by))
    return ids


def trusted_owners() -> set[int]:
    """root, this process's user, and the user sudo was called by."""
    return _trusted(os.getuid(), "SUDO_UID")


def _untrusted_component(path: str, owners: set[int], groups: set[int]) -> str | None:
    """Why path cannot be trusted: a symlink on the way owned by someone
    else, or a directory on the way that another user owns, or can write
    to without the sticky bit (/tmp's, which keeps them from renaming
    what is not theirs); the directory itself not even with it."""
    absolute = os.path.abspath(path)
    parts = absolute.strip("/").split("/") if absolute != "/" else []
    current = "/"
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None  # the rest is made new, by us (or cannot be: makedirs says so)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in owners:
                return f"{current} is a symlink owned by uid {st.st_uid}"
            current = os.path.realpath(current)
            try:
                st = os.stat(current)
            except (FileNotFoundError, NotADirectoryError):
                return None
        if not stat.S_ISDIR(st.st_mode):
            return None if i < len(parts) - 1 else f"{absolute} is not a directory"
        if st.st_uid not in owners:
            return f"{current} is owned by uid {st.st_uid}, not root or the user running mysqlprobe"
        others_write = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid not in groups)
        if others_write and (i == len(parts) - 1 or not st.st_mode & stat.S_ISVTX):
            return f"{current} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_trusted_dir(path: str, flag: str = "-o") -> None:
    """Refuse, in one line, an output directory another user could change under us."""
    why = _untrusted_component(path, trusted_owners(), _trusted(os.getgid(), "SUDO_GID"))
    if why:
        raise OutputError(f"{flag} {path}: refused: {why}; choose a directory only root or you can write to")


def make_dir(path: str, flag: str = "-o") -> None:
    """Create path (with its parents) after checking it can be trusted."""
    check_trusted_dir(path, flag)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write there: {e.strerror}") from None
    check_trusted_dir(path, flag)  # what was made is checked too (a race with another user's mkdir)


def _staging(out_dir: str) -> str:
    import tempfile
    return tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir)


def staging_dir(out_dir: str) -> str:
    """A new private directory in out_dir, for a capture written whole before it is published."""
    return _staging(out_dir)


def _new_file(path: str):
    """A file made new: never one that stood there, never through a symlink."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), "wb")


def _create(path: str, data: bytes) -> None:
    with _new_file(path) as f:
        f.write(data)


def write_new(out_dir: str, name: str, data: str | bytes) -> str:
    """out_dir/name holds data: made new in a staging directory and renamed
    over whatever stood there. The mode is 0666 less the umask."""
    staging = _staging(out_dir)
    try:
        staged = os.path.join(staging, name)
        _create(staged, data.encode() if isinstance(data, str) else data)
        target = os.path.join(out_dir, name)
        os.rename(staged, target)
        return target
    finally:
        _remove_staging(staging)


def link_in(out_dir: str, name: str, source: str) -> str:
    """A file made elsewhere (perf.data) put at out_dir/name the same way,
    the source kept (a capture that fails to be written can be written
    elsewhere from it): hard-linked, or across file systems copied into
    the staging directory first."""
    import shutil
    staging = _staging(out_dir)
    try:
        staged = os.path.join(staging, name)
        try:
            os.link(source, staged)
        except OSError:
            with open(source, "rb") as src, _new_file(staged) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        target = os.path.join(out_dir, name)
        os.rename(staged, target)
        return target
    finally:
        _remove_staging(staging)


def publish(staging: str, out_dir: str, last: str) -> list[str]:
    """The files of a whole capture, written in `staging` (a directory in
    out_dir), renamed into out_dir: `last` (the file that says the capture
    is whole) after all the others. Renames in one file system: no room
    is needed and no file is ever seen half-written."""
    names = sorted(os.listdir(staging), key=lambda n: n == last)
    out = []
    for name in names:
        os.rename(os.path.join(staging, name), os.path.join(out_dir, name))
        out.append(os.path.join(out_dir, name))
    os.rmdir(staging)
    return out


def discard(directory: str) -> None:
    """A staging directory and what is in it, after a failure."""
    import shutil
    shutil.rmtree(directory, ignore_errors=True)


def _remove_staging(staging: str) -> None:
    for left in os.listdir(staging):
        os.unlink(os.path.join(staging, left))
    os.rmdir(staging)


def write_output_file(path: str, data: str | bytes) -> str:
    """A single output file (flamegraph -o F.svg): its directory checked, then written new."""
    directory = os.path.dirname(os.path.abspath(path))
    check_trusted_dir(directory, "-o")
    return write_new(directory, os.path.basename(path), data)
