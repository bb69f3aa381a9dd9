"""What a start keeps of its calibration for the next start on this host."""

import json

from mysqlprobe.collectors.calibration import KEEP_S, ROLLING, agrees, host_key, read_kept, write_kept


def _samples(both_ns):
    return {k: {"entry": [both_ns / 2] * 12, "both": [both_ns] * 12, "inside": [both_ns / 4] * 12}
            for k in ("emulated", "single-step")}


def test_the_last_bursts_are_kept_for_a_week(tmp_path):
    path = str(tmp_path / "calibration" / f"{host_key()}.json")
    write_kept(path, _samples(1000.0), now=1e9)
    kept = read_kept(path, now=1e9 + KEEP_S - 1)
    assert kept == {k: {m: v[-ROLLING:] for m, v in runs.items()} for k, runs in _samples(1000.0).items()}
    assert read_kept(path, now=1e9 + KEEP_S + 1) is None                # too old: calibrate afresh
    (tmp_path / "calibration" / f"{host_key()}.json").write_text(json.dumps({"saved": 1e9}))
    assert read_kept(path, now=1e9) is None                             # not whole
    assert read_kept(str(tmp_path / "none.json"), now=1e9) is None


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path):
    (tmp_path / "file").write_text("")
    write_kept(str(tmp_path / "file" / "calibration" / "k.json"), _samples(1000.0), now=1e9)


def test_kept_bursts_are_used_only_while_a_fresh_one_agrees_with_them():
    kept = _samples(1000.0)
    assert agrees(kept, {"emulated": 1400.0, "single-step": 700.0})
    assert not agrees(kept, {"emulated": 1600.0, "single-step": 1000.0})   # the emulated class moved
    assert not agrees(_samples(0.0), {"emulated": 0.0, "single-step": 0.0})


def test_the_host_key_is_stable():
    assert host_key() == host_key() and len(host_key()) == 24
