"""The output directory is checked before anything is attached, and a
capture that cannot be written where asked goes to a fallback directory."""

import os

import pytest

from mysqlprobe import capture
from mysqlprobe.errors import EXIT_OUTPUT, OutputError
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.output import check_output_dir, save_capture
from test_report import synthetic_run


@pytest.mark.parametrize("where", ["/proc/1/x", "{file}/sub"])
def test_an_unwritable_output_is_refused_in_one_line(tmp_path, where):
    f = tmp_path / "a-file"
    f.write_text("")
    with pytest.raises(OutputError) as e:
        check_output_dir(where.format(file=f))
    assert e.value.exit_code == EXIT_OUTPUT and "\n" not in str(e.value) and "cannot write there" in str(e.value)


def test_a_disk_without_room_is_refused(tmp_path):
    with pytest.raises(OutputError, match="MiB free, a capture needs"):
        check_output_dir(str(tmp_path), need_bytes=1 << 62)
    check_output_dir(str(tmp_path / "new" / "dir"))
    assert (tmp_path / "new" / "dir").is_dir() and not os.listdir(tmp_path / "new" / "dir")


def test_a_capture_that_cannot_go_where_asked_is_saved_elsewhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MYSQLPROBE_FALLBACK_DIR", str(tmp_path))
    blocker = tmp_path / "was-a-dir"
    blocker.write_text("")          # the output turned into a file during the window
    stacks = Folded()
    stacks.add(["sql/one_connection", "row_insert_for_mysql"], 3)
    cap = capture.Capture(synthetic_run(), [capture.PendingFile("cpu_profile", "stacks_file", "stacks.folded", stacks)])
    failure = save_capture(cap, str(blocker / "run"))
    assert isinstance(failure, OutputError) and f"cannot write into {blocker / 'run'}" in str(failure)
    saved = str(failure).rsplit("saved in ", 1)[1].split(" instead")[0]
    doc = capture.read_profile(saved)
    assert doc["cpu_profile"]["stacks_file"] == "stacks.folded"
    assert capture.read_stacks(saved).total == 3 and os.path.exists(os.path.join(saved, "report.html"))
    assert capsys.readouterr().err.startswith(f"wrote {saved}/profile.json")


def test_a_capture_that_fails_half_written_leaves_nothing_claiming_to_be_whole(tmp_path, monkeypatch, capsys):
    """The disk fills while the pictures are written: the -o directory keeps
    nothing of this capture (no profile.json naming files it lacks), and the
    fallback has all of it: the document, the stacks it names, the page."""
    import errno
    from mysqlprobe import reports
    monkeypatch.setenv("MYSQLPROBE_FALLBACK_DIR", str(tmp_path))
    out = tmp_path / "out"
    real = reports.write_visuals
    calls = []

    def fills_up(out_dir, *args, **kwargs):
        calls.append(out_dir)
        if len(calls) == 1:
            raise capture.CaptureError(f"cannot write into {out_dir}: {os.strerror(errno.ENOSPC)}")
        return real(out_dir, *args, **kwargs)
    monkeypatch.setattr(reports, "write_visuals", fills_up)
    stacks = Folded()
    stacks.add(["sql/one_connection", "row_insert_for_mysql"], 3)
    cap = capture.Capture(synthetic_run(), [capture.PendingFile("cpu_profile", "stacks_file", "stacks.folded", stacks)])
    failure = save_capture(cap, str(out))
    assert isinstance(failure, OutputError) and "No space left on device" in str(failure)
    assert os.listdir(out) == []                          # nothing half-written, no staging left
    saved = str(failure).rsplit("saved in ", 1)[1].split(" instead")[0]
    assert sorted(os.listdir(saved)) == ["flamegraph.svg", "profile.json", "report.html", "stacks.folded"]
    assert capture.read_stacks(saved).total == 3 and cap.files == []
