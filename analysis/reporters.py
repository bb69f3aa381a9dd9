"""The reports a capture prints on a stream, behind one protocol: each takes
the typed Profile and the stream, and the commands pick one by name from
STREAM_REPORTERS (record, report and the lab's demo alike). The pictures
written beside a capture (report.html, the flame graphs) are
mysqlprobe/reports.py's."""

from __future__ import annotations

import json
from typing import Protocol, TextIO

from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.prometheus import exposition
from mysqlprobe.analysis.report import render_text


class StreamReporter(Protocol):
    def __call__(self, profile: Profile, out: TextIO) -> None: ...


def write_text(profile: Profile, out: TextIO) -> None:
    """The text report, as `mysqlprobe report DIR` prints it."""
    out.write(render_text(profile))


def write_json(profile: Profile, out: TextIO) -> None:
    """The whole capture with everything derived from it."""
    json.dump(profile.to_json(), out, indent=1)
    out.write("\n")


def write_stage_json(profile: Profile, out: TextIO) -> None:
    """The stage summaries alone."""
    json.dump(profile.stage_records, out, indent=1)
    out.write("\n")


def write_prometheus(profile: Profile, out: TextIO) -> None:
    """The figures in Prometheus's text exposition format."""
    out.write(exposition(profile))


STREAM_REPORTERS: dict[str, StreamReporter] = {
    "text": write_text,
    "json": write_json,
    "json-stages": write_stage_json,
    "prometheus": write_prometheus,
}
