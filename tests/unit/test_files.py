"""Files named by the user: bounded reads of regular files only, and
output directories another user cannot turn against root."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from mysqlprobe import files
from mysqlprobe.errors import EXIT_INPUT_FILE, EXIT_OUTPUT, InputFileError, OutputError

NOBODY = 65534


def test_a_regular_file_is_read_whole(tmp_path):
    p = tmp_path / "pw"
    p.write_bytes(b"s3cret\n")
    assert files.read_bounded(str(p), 64, "--password-file") == b"s3cret\n"


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_a_file_that_is_no_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "fifo"), "directory": str(tmp_path)}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    result: list[BaseException] = []
    reader = threading.Thread(target=lambda: _read_into(path, result), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "the read blocked"
    (e,) = result
    assert isinstance(e, InputFileError) and e.exit_code == EXIT_INPUT_FILE
    expected = {"/dev/zero": "a character device", "fifo": "a FIFO", "directory": "a directory"}[kind]
    assert f"--password-file {path}: {expected}; give a regular file" == str(e)


def _read_into(path: str, result: list[BaseException]) -> None:
    try:
        files.read_bounded(path, 1024, "--password-file")
    except BaseException as e:  # noqa: BLE001 - what the reader raised is the result
        result.append(e)


def test_a_file_over_its_bound_is_refused_with_the_bound(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * (64 << 10) + b"y")
    with pytest.raises(InputFileError) as e:
        files.read_bounded(str(p), 64 << 10, "--defaults-file")
    assert str(e.value) == f"--defaults-file {p}: {(64 << 10) + 1} bytes, over the 64 KiB a --defaults-file may have"
    p.write_bytes(b"x" * (64 << 10))
    assert len(files.read_bounded(str(p), 64 << 10, "--defaults-file")) == 64 << 10


def _foreign_dir(path) -> None:
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o755)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    _foreign_dir(tmp_path / "theirs")
    with pytest.raises(OutputError) as e:
        files.make_dir(str(tmp_path / "theirs"))
    assert e.value.exit_code == EXIT_OUTPUT
    assert f"is owned by uid {NOBODY}, not root or the user running mysqlprobe" in str(e.value)
    with pytest.raises(OutputError):   # nor anything made below it
        files.make_dir(str(tmp_path / "theirs" / "sub"))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_symlink_owned_by_another_user_is_refused(tmp_path):
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(private)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(OutputError) as e:
        files.make_dir(str(link / "run"))
    assert f"{link} is a symlink owned by uid {NOBODY}" in str(e.value)
    os.lchown(link, 0, 0)   # the same link, root's: followed
    files.make_dir(str(link / "run"))
    assert (private / "run").is_dir()


def test_a_directory_others_can_write_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(OutputError) as e:
        files.make_dir(str(open_dir))
    assert "is writable by other users (mode 0777)" in str(e.value)


def test_writes_replace_symlinks_and_precreated_files_and_never_write_through(tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("root's own file\n")
    (out / "report.html").symlink_to(victim)
    pre = out / "stacks.folded"
    pre.write_text("left by someone\n")
    pre.chmod(0o666)
    old = os.umask(0o077)
    try:
        files.write_new(str(out), "report.html", "<html/>")
        files.write_new(str(out), "stacks.folded", b"a;b 1\n")
    finally:
        os.umask(old)
    assert victim.read_text() == "root's own file\n"
    assert not (out / "report.html").is_symlink() and (out / "report.html").read_text() == "<html/>"
    assert stat.S_IMODE(os.stat(out / "stacks.folded").st_mode) == 0o600
    assert (out / "stacks.folded").read_bytes() == b"a;b 1\n"
    assert sorted(os.listdir(out)) == ["report.html", "stacks.folded"]   # no staging directory left


def test_a_moved_file_lands_new_in_place(tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    src = tmp_path / "perf.data"
    src.write_bytes(b"PERFILE2")
    (out / "perf.data").symlink_to(tmp_path / "victim")
    files.link_in(str(out), "perf.data", str(src))
    assert (out / "perf.data").read_bytes() == b"PERFILE2" and not (out / "perf.data").is_symlink()
    assert src.exists() and not (tmp_path / "victim").exists()   # the source is kept until the capture is whole
