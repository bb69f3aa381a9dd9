"""The pictures of a capture, written beside it: the CPU, off-CPU and I/O
flame graphs (SVG) and report.html, all drawn from its Profile."""

from __future__ import annotations

from pathlib import Path

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.histogram import format_ns
from mysqlprobe.analysis.html_report import render_html
from mysqlprobe.analysis.model import Profile
from mysqlprobe.analysis.time_slices import time_slices
from mysqlprobe.analysis.stage_trees import CPU_NS, IO_NS, OFFCPU_NS, SOURCES, read_capture_stacks, stage_trees
from mysqlprobe.capture import Capture, read_member_stacks, read_profile
from mysqlprobe.errors import CaptureError, OutputError
from mysqlprobe.files import write_new
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import connection_stacks, fold_probe_frames
from mysqlprobe.flamegraphs import pprof
from mysqlprobe.flamegraphs.svg import render

FLAMEGRAPH_FILE = "flamegraph.svg"
OFFCPU_SVG = "offcpu.svg"
IO_SVG = "io.svg"
HTML_FILE = "report.html"


def _head(profile: Profile) -> str:
    return f"PID {profile.target.pid}, {profile.window.start}"


def flamegraph_title(profile: Profile) -> tuple[str, str]:
    perf = profile.cpu_summary
    sub = (f"{_head(profile)}, {perf.samples} samples ({perf.event} "
           f"{'?' if perf.section.frequency_hz is None else perf.section.frequency_hz} Hz, {perf.unwinding})")
    return f"{profile.target.server}: CPU flame graph", sub


def offcpu_title(profile: Profile) -> tuple[str, str]:
    off = profile.off_cpu_summary
    sub = (f"{_head(profile)}: blocked {off.blocked_s:.3f}s, "
           f"waiting for a CPU {off.waiting_for_cpu_s:.3f}s (widths in us)")
    return f"{profile.target.server}: off-CPU flame graph", sub


def io_title(profile: Profile) -> tuple[str, str]:
    io = profile.io_summary.every
    sub = f"{_head(profile)}: {io.calls} I/O system calls, {io.s:.3f}s in them (widths in us)"
    return f"{profile.target.server}: I/O flame graph", sub


def stage_pictures(profile: Profile, stacks: dict[str, Folded]) -> list[tuple[str, str]]:
    """A flame graph per stage, rooted at its function: the CPU and off-CPU
    time of the stacks that pass through it, in microseconds of the window
    (what a collector saw in part of it scaled up), largest first."""
    out: list[tuple[str, str]] = []
    for stage, tree in sorted(stage_trees(profile, stacks, rows=1).items(), key=lambda kv: -kv[1].wall_ns):
        folded = tree.folded((CPU_NS, OFFCPU_NS), stage, scale=1e-3)
        if folded.total:
            out.append((stage, render(folded, f"{profile.target.server}: below {stage}",
                                      "CPU and off-CPU time of the stacks through it (us, whole window)",
                                      unit="us", element_id=f"stage-{len(out)}")))
    return out


def pprof_of(profile: Profile, stacks: Folded, off_cpu: bool, comments: tuple[str, ...] = ()) -> bytes:
    """A capture's CPU (or off-CPU) stacks as a gzipped pprof profile,
    stamped with its binary and its window."""
    t, w = profile.target, profile.window
    return pprof.encode(stacks, pprof.capture_kind(profile.stacks["cpu_profile"].frequency_hz, off_cpu), t.binary, t.build_id,
                        time_ns=w.start_ns, duration_ns=int(w.duration_ns), comments=comments)


# the stacks the wall-time account reads, by the section that keeps them
ACCOUNT_STACKS = ("cpu_profile", "off_cpu")


def capture_dir_stacks(path: str, doc: dict) -> dict[str, Folded]:
    """The account's folded stacks from a capture's directory (path: it, or
    its profile.json), those its document names and the directory has."""
    base = Path(path)
    if not base.is_dir():
        base = base.parent
    out = {}
    for section in ACCOUNT_STACKS:
        name = (doc.get(section) or {}).get("stacks_file")
        if not name and section == "cpu_profile" and doc.get("schema_version") == 1:
            name = "stacks.folded"
        stacks = read_member_stacks(base, name)
        if stacks is not None:
            out[section] = stacks
    return out


def pending_stacks(cap: Capture) -> dict[str, Folded]:
    """The account's folded stacks of a capture not written yet."""
    return {f.section: f.content for f in cap.files
            if f.section in ACCOUNT_STACKS and f.field == "stacks_file" and isinstance(f.content, Folded)}


def capture_profile(cap: Capture) -> Profile:
    """The Profile of a capture just recorded, its stacks in memory."""
    return Profile(cap.doc, pending_stacks(cap), recorded_here=True)


def checked_profile(doc: dict, where: str) -> Profile:
    """The Profile of a capture read from `where` (with the stacks beside it);
    a document whose fields do not fit the schema is one CaptureError that
    names the file."""
    try:
        profile = Profile(doc)   # the document is checked before the files it names are read
    except CaptureError as e:
        raise CaptureError(f"{where}: {e}") from None
    profile.folded = capture_dir_stacks(where, doc)
    return profile


def load_profile(path: str) -> Profile:
    return checked_profile(read_profile(path), path)


LOAD_THREADS = "the load's threads (client connections)"


def scoped(folded: Folded, all_threads: bool) -> tuple[Folded, str]:
    """Off-CPU and I/O stacks of the load's threads (the server's idle
    background threads would fill the picture), unless all_threads; all
    where no stack is a client connection's. And the scope, in words."""
    if all_threads:
        return folded, "all threads"
    mine = connection_stacks(folded)
    if not mine.total:
        return folded, "all threads (none is a client connection's)"
    return mine, f"{LOAD_THREADS}; --all-threads for every thread"


def in_statements(folded: Folded) -> tuple[Folded, int]:
    """The off-CPU stacks of the load's threads inside their statements: the
    waits for the client between statements (a connection's socket read or
    poll outside any statement, as the account charges them) left out, and
    their weight."""
    out, idle = Folded(), 0
    for stack, weight in folded.stacks.items():
        if M.of_folded(stack, off_cpu=True)[0].mechanism == M.IDLE:
            idle += weight
        else:
            out.stacks[stack] += weight
    return out, idle


def write_visuals(out_dir: str, profile: Profile, all_threads: bool = False, capture_dir: str | None = None) -> list[str]:
    """DIR/flamegraph.svg, DIR/offcpu.svg and DIR/io.svg (when the capture
    has their stacks) and DIR/report.html, the stacks read from capture_dir
    (by default DIR itself). Each folded file is read once: its own picture
    and the stages' are drawn from it. The off-CPU and I/O pictures show the
    load's threads unless all_threads."""
    path = Path(out_dir)
    written = []
    stacks = read_capture_stacks(capture_dir or out_dir, profile, read_member_stacks, kinds=(CPU_NS, OFFCPU_NS, IO_NS))

    def picture(kind: str, svg_file: str, titles, **style) -> str | None:
        section = SOURCES[kind][0]
        if not profile.stacks[section].files.get("stacks_file") or kind not in stacks:
            return None
        shown, _ = fold_probe_frames(stacks[kind])  # the probes' machinery as one [mysqlprobe] frame
        title, sub = titles(profile)
        if kind != CPU_NS:
            shown, scope = scoped(shown, all_threads)
            sub = f"{sub}; {scope}"
            if kind == OFFCPU_NS and scope.startswith(LOAD_THREADS):
                shown, idle = in_statements(shown)
                sub += f"; {format_ns(idle * 1e3)} waiting for the client between statements left out"
        svg = render(shown, title, sub, **style)
        written.append(write_new(out_dir, svg_file, svg))
        return svg

    try:
        cpu = picture(CPU_NS, FLAMEGRAPH_FILE, flamegraph_title)
        waits = picture(OFFCPU_NS, OFFCPU_SVG, offcpu_title, unit="us", element_id="offcpu")
        io = picture(IO_NS, IO_SVG, io_title, unit="us", element_id="io")
        by_time = read_member_stacks(capture_dir or out_dir, profile.stacks["cpu_profile"].files.get("slices_file"))
        slices = time_slices(profile, by_time) if by_time is not None else None
        written.append(write_new(out_dir, HTML_FILE, render_html(profile, cpu, waits, io,
                                                                  stage_pictures(profile, stacks), all_threads,
                                                                  slices)))
    except OSError as e:
        raise OutputError(f"cannot write into {path}: {e.strerror}") from None
    return written
