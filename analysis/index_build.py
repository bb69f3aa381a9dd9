"""An index build (CREATE INDEX, ALTER TABLE ... ADD INDEX) in figures:
its counts from the probes of --index-profile (catalog.INDEX_STAGES), its
phases' shares of the build's wall time from the account's stacks.

What InnoDB does (row0merge.cc, MariaDB 10.1/10.2/10.11, MySQL 5.6/5.7):
row_merge_read_clustered_index reads every row of the clustered index
(row_build makes each the new index's columns) into a sort buffer; a full
buffer is sorted in memory and written as one block of the temporary sort
file (row_merge_write): a run. Where all the tuples fit one buffer, no
file is written and they are inserted from inside the scan. row_merge_sort
merges the runs pairwise, pass after pass, until one is left:
ceil(log2(runs)) passes, each reading and writing the whole file.
row_merge_insert_index_tuples then inserts the sorted tuples: bottom-up a
page at a time on the 5.7 line and MariaDB 10.2+ (BtrBulk::insert, level 0
the leaf tuples, above it the node pointers), one by one through the
B-tree on the 5.6 line and MariaDB 10.1 (btr_cur_optimistic_insert; a
tuple that does not fit splits its page, btr_cur_pessimistic_insert, and
the split inserts a node pointer). On 10.2-10.4 and 5.7 the new pages skip
the redo log and are written out before the build commits
(FlushObserver::flush). MariaDB 10.11 inlines the scan into
row_merge_build_indexes: there the build's own time is the scan.

Counts are the probes' (--index-profile counts every call; index.*
stages named with --stage in sampled mode give the duty cycles' estimates,
and then no merge pass count). A figure the probes did not see is None
and says why, never a guess."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mysqlprobe.analysis.account import wall_stacks
from mysqlprobe.analysis.mechanisms import BUILD_FUNCTION, frame_name, of_folded
from mysqlprobe.analysis.views import Probe
from mysqlprobe.catalog import INDEX_STAGES

if TYPE_CHECKING:
    from mysqlprobe.analysis.model import Profile

BUILD = "index.build"
STAGE_PREFIX = "stage/innodb/"   # P_S's InnoDB stages, as the capture records their names
INDEX_STAGE_NAMES = tuple(s.name for s in INDEX_STAGES)
# (phase, its stage, the function that is it on a stack), in the order they run
PHASES = (("scan", "index.scan", "row_merge_read_clustered_index"),
          ("merge sort", "index.merge_sort", "row_merge_sort"),
          ("insert", "index.insert", "row_merge_insert_index_tuples"),
          ("flush", "index.flush", "FlushObserver::flush"))
PHASE_OF = {function: name for name, _, function in PHASES}
OTHER_PHASE = "rest of the build"
INLINED_SCAN = "scan (inlined: the build's own code)"
SORTED = "sorted, bottom-up (BtrBulk)"
TUPLE_BY_TUPLE = "tuple by tuple through the B-tree"
STACKS_SOURCE = "the account's stacks (on and off CPU), the probes' frames left out"
CONNECTION_THREAD = "one_connection"   # a client connection's thread, as P_S names it (sql/one_connection)
CUT_SHORT_FRAMES = 3   # user frames of a stack that stopped in the C library: [unknown], the libc call
CUT_SHORT_NOTED = 0.05  # of the build's stacks' time: said beside the phases from here
CUT_SHORT_WITHHELD = 0.25  # of the build's time, cut short included: its shares withheld from here
SUBJECT = "index build"   # what a capture profiles where a build ran and the server counted no row inserted


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    stage: str | None
    calls: float | None          # the phase function's calls (one per index built, for most)
    ns_per_row: float | None     # its share of the build's wall time per row scanned
    share: float | None          # of the build's wall time (the account's stacks; else the probes' spans)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "stage": self.stage, "calls": _count(self.calls),
                "ns_per_row": None if self.ns_per_row is None else round(self.ns_per_row, 1),
                "share": None if self.share is None else round(self.share, 4)}


@dataclass(frozen=True, slots=True)
class StageProgress:
    """One stage of the build as the server's own progress reports showed it."""

    stage: str
    max_percent: float
    first_s: float   # seconds into the window it was first and last seen
    last_s: float

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "max_percent": round(self.max_percent, 2),
                "first_s": round(self.first_s, 3), "last_s": round(self.last_s, 3)}


@dataclass(frozen=True, slots=True)
class ServerProgress:
    """The build's progress, read once a second: the server's report
    (collectors/perfschema/build_progress.py), or the probes' counts where
    it has none (collectors/uprobes/build_progress.py)."""

    source: str | None   # performance_schema, processlist, probes, or None: nothing reports it
    reads: int
    stages: tuple[StageProgress, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "reads": self.reads, "stages": [s.to_json() for s in self.stages]}


def server_progress(record: dict[str, Any] | None, stage_events: list[dict[str, Any]],
                    window_ps: tuple[int, int] | None) -> ServerProgress | None:
    """The stages the reads saw, each at the most it reached; with the
    InnoDB alter stages P_S recorded in the window and the work each did
    against its estimate when it ended (seconds from the P_S timer)."""
    if not record:
        return None
    stages: dict[str, list[float]] = {}
    for at_s, stage, percent in record.get("readings") or []:
        seen = stages.setdefault(stage, [percent, at_s, at_s])
        seen[0], seen[2] = max(seen[0], percent), at_s
    for e in stage_events:
        name = e.get("event_name") or ""
        if not name.startswith(STAGE_PREFIX + "alter") or not e.get("work_estimated") or window_ps is None:
            continue
        percent = 100.0 * min(e.get("work_completed") or 0, e["work_estimated"]) / e["work_estimated"]
        start = (e["timer_start"] - window_ps[0]) / 1e12
        end = ((e.get("timer_end") or window_ps[1]) - window_ps[0]) / 1e12
        seen = stages.setdefault(name.removeprefix(STAGE_PREFIX), [percent, start, end])
        seen[0], seen[1], seen[2] = max(seen[0], percent), min(seen[1], start), max(seen[2], end)
    return ServerProgress(record.get("source"), record.get("reads") or 0,
                          tuple(StageProgress(name, *v) for name, v in stages.items()))


@dataclass(frozen=True, slots=True)
class IndexBuild:
    method: str | None            # SORTED or TUPLE_BY_TUPLE (None: neither insert probe was planned)
    builds: float | None          # row_merge_build_indexes calls in the window (None: not probed)
    wall_ns: float | None         # the build's wall time (its probe's span, summed; else its stacks')
    rows_scanned: float | None    # rows of the clustered index made into tuples (row_build under the scan)
    tuples_inserted: float | None  # leaf tuples put in the new index
    node_pointers: float | None   # tuples above the leaves (sorted build)
    pages: float | None           # pages finished (sorted build: BtrBulk::pageCommit)
    runs: float | None            # sort buffers written: blocks the scan wrote (None: no block write probed)
    merge_passes: int | None      # ceil(log2(runs)): the pairwise merge InnoDB does
    blocks_written: dict[str, float] = field(default_factory=dict)  # temporary-file blocks by phase
    compressions: float | None = None  # page_zip_compress calls in the build
    # InnoDB's own count over the window (INNODB_CMP): compressions, and those that did not fit
    # (the page is then split or reorganized and compressed again)
    server_compressions: int | None = None
    compression_failures: int | None = None
    phases: tuple[Phase, ...] = ()
    share_source: str = ""
    progress: ServerProgress | None = None
    notes: tuple[str, ...] = ()
    # the build's wall time by mechanism (its stacks, each charged as the account charges it), largest first
    mechanisms: tuple[tuple[str, float], ...] = ()
    block_bytes: int | None = None  # a temporary-file block: innodb_sort_buffer_size (row_merge_write writes one)
    # the wall time of the threads' stacks inside the build, the probes' frames left out: what the
    # phases and mechanisms per row are shares of (None: no stacks)
    stacks_wall_ns: float | None = None

    @property
    def shares_of_ns(self) -> float | None:
        """The wall time the phases' shares are of: the stacks' (the probes'
        frames out) where there are stacks, else the build probe's span."""
        return self.stacks_wall_ns or self.wall_ns

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "builds": _count(self.builds),
                "wall_ns": None if self.wall_ns is None else round(self.wall_ns),
                "rows_scanned": _count(self.rows_scanned), "tuples_inserted": _count(self.tuples_inserted),
                "node_pointers": _count(self.node_pointers), "pages": _count(self.pages),
                "runs": _count(self.runs), "merge_passes": self.merge_passes,
                "blocks_written": {k: _count(v) for k, v in self.blocks_written.items()},
                "block_bytes": self.block_bytes,
                "bytes_written": {k: round(v) * self.block_bytes for k, v in self.blocks_written.items()}
                if self.block_bytes else None,
                "compressions": _count(self.compressions), "server_compressions": self.server_compressions,
                "compression_failures": self.compression_failures,
                "phases": [p.to_json() for p in self.phases], "share_source": self.share_source,
                "server_progress": self.progress.to_json() if self.progress else None,
                "mechanisms": [{"name": n, "share": round(share, 4),
                                "ns_per_row": round(share * self.stacks_wall_ns / self.rows_scanned, 1)
                                if self.stacks_wall_ns and self.rows_scanned else None}
                               for n, share in self.mechanisms],
                "stacks_wall_ns": None if self.stacks_wall_ns is None else round(self.stacks_wall_ns),
                "notes": list(self.notes)}


def _count(x: float | None) -> int | None:
    return None if x is None else round(x)


def build(profile: Profile) -> IndexBuild | None:
    """The window's index build; None where none ran in it. Its counts are
    the probes' (--index-profile); without them (a run with no probes, or
    the default mode) the build is its phases from the account's stacks."""
    by_stage = _by_stage(profile)
    if not by_stage.get(BUILD):
        return _from_stacks(profile)
    builds = _calls(profile, by_stage[BUILD]) or 0.0
    if not builds:
        return None
    notes: list[str] = []
    method = SORTED if by_stage.get("index.bulk_insert") else TUPLE_BY_TUPLE if by_stage.get("index.tuple_insert") \
        else None
    rows = _rows_scanned(profile, by_stage)
    if rows is None:
        notes.append("rows scanned: row_build was not probed")
    node_pointers = tuples = None
    if method == SORTED:
        levels: dict[int, float] = defaultdict(float)
        for j, p in by_stage["index.bulk_insert"]:
            for part in p.partitions:
                levels[part.id] += part.calls * _scale(profile, j, p)
        tuples = levels.get(0, 0.0)
        node_pointers = sum(n for level, n in levels.items() if level > 0)
    elif method == TUPLE_BY_TUPLE:
        tuples = _under(profile, by_stage, "index.tuple_insert", "index.insert")
        node_pointers = _under(profile, by_stage, "index.tuple_insert", "index.tuple_split")
    scan = "index.scan" if by_stage.get("index.scan") else BUILD   # 10.11 inlines the scan into the build
    runs = _under(profile, by_stage, "index.block_write", scan)
    passes = None
    if runs is not None and not profile.sampled:   # an estimate of runs makes no count of passes
        passes = math.ceil(math.log2(runs)) if runs > 1 else 0
    blocks = {phase: n for phase, stage in (("scan", scan), ("merge sort", "index.merge_sort"))
              if (n := _under(profile, by_stage, "index.block_write", stage)) is not None}
    wall = _span(by_stage[BUILD])
    stacks, cut_ns = _build_stacks(profile)
    stacks_wall = sum(ns for _, ns in stacks) or None
    phases, source = _phases(profile, by_stage, stacks_wall or wall, rows, stacks)
    phases, mechanisms, cut_notes = _placed(phases, stacks, stacks_wall or 0.0, cut_ns)
    server_ops, failures = _server_compressions(profile)
    return IndexBuild(method, builds, wall, rows, tuples, node_pointers,
                      _calls(profile, by_stage.get("index.page_commit", [])), runs, passes, blocks,
                      _under(profile, by_stage, "innodb.page_compress", *INDEX_STAGE_NAMES), server_ops, failures,
                      tuple(phases), source, _server_progress(profile), tuple(notes + cut_notes),
                      mechanisms, _block_bytes(profile), stacks_wall)


def rows_scanned(profile: Profile) -> float | None:
    """The rows the probes saw the window's build scan (row_build under the
    scan); None without those probes. What a build's figures per row divide by."""
    by_stage = _by_stage(profile)
    return _rows_scanned(profile, by_stage) if by_stage.get(BUILD) else None


def _rows_scanned(profile: Profile, by_stage: dict[str, list[tuple[int, Probe]]]) -> float | None:
    return _under(profile, by_stage, "index.row_build", "index.scan", BUILD)


def _by_stage(profile: Profile) -> dict[str, list[tuple[int, Probe]]]:
    by_stage: dict[str, list[tuple[int, Probe]]] = defaultdict(list)
    for j, p in enumerate(profile.probes):
        by_stage[p.stage].append((j, p))
    return by_stage


def _under(profile: Profile, by_stage: dict[str, list[tuple[int, Probe]]], stage: str, *parent: str) -> float | None:
    """Calls of stage's functions whose nearest probed caller is one of the
    parent stages', scaled as the stage's calls are; None: not probed."""
    probes, parents = by_stage.get(stage), {p.id for s in parent for _, p in by_stage.get(s, [])}
    if not probes or not parents:
        return None
    return sum(sum(c.calls for c in p.callers if c.parent in parents) * _scale(profile, j, p) for j, p in probes)


def _block_bytes(profile: Profile) -> int | None:
    """The size of a block of the build's temporary sort file: innodb_sort_buffer_size, as the server had it."""
    value = (profile.perf_schema.settings or {}).get("innodb_sort_buffer_size")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _server_compressions(profile: Profile) -> tuple[int | None, int | None]:
    """InnoDB's own compressions over the window (INNODB_CMP), and those that failed."""
    cmp = (profile.doc.get("perf_schema") or {}).get("compressions")
    if cmp is None:
        return None, None
    return sum(c["compress_ops"] for c in cmp), sum(c["compress_ops"] - c["compress_ops_ok"] for c in cmp)


def _from_stacks(profile: Profile) -> IndexBuild | None:
    """A build seen by the account's stacks alone (no build probe): its
    method from the functions on them, its wall time theirs, its phases'
    shares of it, per row of the load's own count where the capture has one."""
    stacks, cut_ns = _build_stacks(profile)
    if not stacks:
        return None
    wall = float(sum(ns for _, ns in stacks))
    names = {frame_name(f) for frames, _ in stacks for f in frames if "Bulk::" in f or "btr_cur_" in f}
    method = SORTED if any(n.startswith(("BtrBulk::", "PageBulk::")) for n in names) else \
        TUPLE_BY_TUPLE if "btr_cur_optimistic_insert" in names else None
    rows = profile.workload.rows or None
    phases, _ = _phases(profile, {}, wall, rows, stacks)
    phases, mechanisms, cut_notes = _placed(phases, stacks, wall, cut_ns)
    server_ops, failures = _server_compressions(profile)
    return IndexBuild(method, None, wall, rows, None, None, None, None, None,
                      server_compressions=server_ops, compression_failures=failures, phases=tuple(phases),
                      share_source=STACKS_SOURCE, progress=_server_progress(profile),
                      mechanisms=mechanisms, stacks_wall_ns=wall,
                      notes=("counts: no probe of the build in this capture (mysqlprobe --index-profile counts "
                             "its rows, tuples, runs and pages); its wall time and phases from the account's "
                             "stacks" + ("" if rows else ", and no count of rows to put them per row"),
                             *cut_notes))


def _calls(profile: Profile, probes: list[tuple[int, Probe]]) -> float | None:
    """The window's calls of these probes (counted, or estimated); None: none planned."""
    return sum(profile.probe_calls(j).value for j, _ in probes) if probes else None


def _scale(profile: Profile, j: int, p: Probe) -> float:
    """What a counted call of the j-th probe stands for in the window (1 with every call counted)."""
    return profile.probe_calls(j).value / p.calls if p.calls else 0.0


def _server_progress(profile: Profile) -> ServerProgress | None:
    ps = profile.doc.get("perf_schema") or {}
    start, end = ps.get("timer_start_ps"), ps.get("timer_end_ps")
    return server_progress(ps.get("build_progress"), ps.get("stages") or [],
                           (start, end) if start is not None and end is not None else None)


def _span(probes: list[tuple[int, Probe]]) -> float | None:
    """The wall time of a once-per-index function's calls, entry to return."""
    total = sum(p.total_ns for _, p in probes)
    return float(total) if any(p.calls for _, p in probes) else None


def _phases(profile: Profile, by_stage: dict[str, list[tuple[int, Probe]]], wall: float | None,
            rows: float | None, stacks: list[tuple[list[str], float]]) -> tuple[list[Phase], str]:
    """Each phase's share of the build's wall time: from the account's
    stacks (on CPU and off it, without the probes' own frames) where the
    capture has them, else from the phase functions' probed spans; per row
    of `wall` (the stacks' own where there are stacks)."""
    shares = phase_shares(stacks)
    source = STACKS_SOURCE
    if shares is None:
        spans = {name: _span(by_stage.get(stage, [])) for name, stage, _ in PHASES}
        if not wall or not any(spans.values()):
            return [], "no stacks and no probed phase spans"
        shares = {name: ns / wall for name, ns in spans.items() if ns is not None}
        shares[OTHER_PHASE] = max(1.0 - sum(shares.values()), 0.0)
        source = "the phase functions' probed spans (no stacks in the capture)"
    out = []
    # MariaDB 10.11: the build's own code is the scan (no scan probe; without probes, no scan stack)
    inlined_scan = "index.scan" not in by_stage if by_stage else "scan" not in shares
    for name, stage, _ in PHASES + ((OTHER_PHASE, None, ""),):
        share = shares.get(name)
        if share is None and stage not in by_stage:
            continue
        if name == OTHER_PHASE and inlined_scan:
            name = INLINED_SCAN
        per_row = share * wall / rows if share is not None and wall and rows else None
        out.append(Phase(name, stage, _calls(profile, by_stage.get(stage or "", [])), per_row, share))
    return out, source


def _build_stacks(profile: Profile) -> tuple[list[tuple[list[str], float]], float]:
    """The account's wall-time stacks (ns; on CPU and off it, the probes'
    frames and the waits for the client left out) inside a build; and the
    ns of connection threads' stacks cut short in the C library, which no
    phase can be told of (cut_short)."""
    account = profile.account
    if account is None or not profile.stacks["cpu_profile"].collected:
        return [], 0.0
    wall = wall_stacks(account, profile.folded.get("cpu_profile"), profile.folded.get("off_cpu"))
    inside: list[tuple[list[str], float]] = []
    cut_ns = 0.0
    for stack, ns in wall.stacks.items():
        frames = stack.split(";")
        if phase_of(frames) is not None:
            inside.append((frames, float(ns)))
        elif cut_short(frames):
            cut_ns += ns
    return inside, cut_ns


def cut_short(frames: list[str]) -> bool:
    """A connection thread's stack (its name first) whose user frames end in
    the C library: glibc keeps no frame pointers, so a wait inside it (a
    select(), a futex) loses every caller above it, the build's too, where
    the off-CPU program could not recover them (probes/user_stack.h). A
    stack with no user frame at all is not one: its user stack was not
    taken (off_cpu.dropped), which says nothing of where it was."""
    if CONNECTION_THREAD not in frames[0]:
        return False
    user = [f for f in frames[1:] if not f.endswith("_[k]") and not f.startswith("[waiting")]
    return 0 < len(user) <= CUT_SHORT_FRAMES and all(f.startswith(("[", "__")) for f in user)


def _placed(phases: list[Phase], stacks: list[tuple[list[str], float]], build_ns: float,
            cut_ns: float) -> tuple[list[Phase], tuple[tuple[str, float], ...], list[str]]:
    """The build's phases and mechanisms as its stacks place them, and what
    they leave out: past a twentieth of the build, a note of the time cut
    short; where a quarter or more of the build's time (cut short included)
    cannot be placed, the shares withheld."""
    if not build_ns or cut_ns < CUT_SHORT_NOTED * build_ns:
        return phases, mechanism_shares(stacks), []
    withhold = cut_ns >= CUT_SHORT_WITHHELD * (build_ns + cut_ns)
    note = (f"{cut_ns / 1e6:,.0f} ms of connection threads' time ({cut_ns / build_ns:.0%} of the build's own "
            "stacks) has stacks cut short in the C library, which keeps no frame pointers, and the "
            "off-CPU program's scan for their callers found none (off_cpu.recovered_s): which phase "
            "waited there cannot be told" +
            (f", so the phases' and mechanisms' shares are withheld ({CUT_SHORT_WITHHELD:.0%} or more of the "
             "build's time unplaced)" if withhold else ", and the phases' shares leave it out") +
            " (docs/index-build.md)")
    if withhold:
        return [Phase(ph.name, ph.stage, ph.calls, None, None) for ph in phases], (), [note]
    return phases, mechanism_shares(stacks), [note]


def phase_of(frames: list[str]) -> str | None:
    """The build's phase a stack (root first) is in: the innermost phase
    function on it (on the 5.7 line a build whose tuples fit one sort
    buffer inserts them from inside the scan); None outside a build."""
    if not any(BUILD_FUNCTION in f for f in frames):   # most stacks: before any frame is named
        return None
    names = [frame_name(f) for f in frames]   # arguments and clone suffixes off, as perf may print them
    if BUILD_FUNCTION not in names:
        return None
    return next((PHASE_OF[f] for f in reversed(names) if f in PHASE_OF), OTHER_PHASE)


def mechanism_shares(stacks: Iterable[tuple[list[str], float]]) -> tuple[tuple[str, float], ...]:
    """The mechanisms' shares of the weight of the stacks inside a build
    (the thread's name first; off-CPU stacks may end waiting for a CPU),
    charged by the account's catalog; largest first."""
    per: dict[str, float] = defaultdict(float)
    for frames, weight in stacks:
        if phase_of(frames) is not None:
            per[of_folded(";".join(frames), off_cpu=True)[0].mechanism] += weight
    total = sum(per.values())
    return tuple(sorted(((n, w / total) for n, w in per.items()), key=lambda kv: -kv[1])) if total else ()


def phase_shares(stacks: Iterable[tuple[list[str], float]]) -> dict[str, float] | None:
    """Each phase's share of the weight of the stacks inside a build."""
    per: dict[str, float] = defaultdict(float)
    for frames, weight in stacks:
        phase = phase_of(frames)
        if phase is not None:
            per[phase] += weight
    total = sum(per.values())
    return {name: w / total for name, w in per.items()} if total else None
