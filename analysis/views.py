"""Typed views of a capture's parts, as the Profile gives them to the
reporters (analysis/model.py): the target, the window, the probed
functions, how the probes ran and what the collectors cost. A reporter
reads these, not the document's dicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from mysqlprobe.analysis.sampling import MAX_READ_SHARE
from mysqlprobe.catalog import family_name
from mysqlprobe.probes.histogram import Histogram
from mysqlprobe.sqltext import normalized

if TYPE_CHECKING:   # per_call.py reads the Calibration view
    from mysqlprobe.analysis.per_call import PerCall


@dataclass(frozen=True, slots=True)
class Target:
    """The server the capture was taken of."""

    pid: int
    binary: str
    symbols: str
    family: str | None
    version: str | None
    build_id: str | None = None
    line: str | None = None       # the catalog's server line

    @classmethod
    def of(cls, target: dict[str, Any]) -> Target:
        server = target.get("server") or {}
        return cls(target["pid"], target["binary"], target.get("symbols") or "?", server.get("family"),
                   server.get("version"), target.get("build_id"), server.get("line"))

    @property
    def server(self) -> str:
        """'MariaDB 10.2.11', as the reports name it."""
        return f"{family_name(self.family)} {self.version or '?'}"


@dataclass(frozen=True, slots=True)
class Window:
    """When the probes were on the target, and what the server did meanwhile."""

    start: str
    duration_s: float
    ended_by: str
    requested_s: float | None = None
    rows_changed: int | None = None     # the server's rows written, updated or deleted
    rows_counter: str | None = None     # what rows_changed sums (or memory:VARIABLE)
    own_cpu_s: float | None = None      # mysqlprobe's own process over the window
    start_monotonic_s: float | None = None  # its opening on the host's CLOCK_MONOTONIC

    @classmethod
    def of(cls, window: dict[str, Any]) -> Window:
        return cls(window.get("start") or "?", window["duration_s"], window.get("ended_by") or "?",
                   window.get("requested_s"), window.get("rows_changed"), window.get("rows_counter"),
                   window.get("own_cpu_s"), window.get("start_monotonic_s"))

    @property
    def duration_ns(self) -> float:
        return self.duration_s * 1e9

    @property
    def start_ns(self) -> int:
        """The window's opening, ns since the epoch (0: not known)."""
        try:
            return int(datetime.fromisoformat(self.start.replace("Z", "+00:00")).timestamp() * 1e9)
        except ValueError:
            return 0


@dataclass(frozen=True, slots=True)
class Host:
    """The machine the capture was taken on."""

    hostname: str | None = "?"
    kernel: str | None = "?"
    machine: str | None = "?"
    cpus: int | None = None

    @classmethod
    def of(cls, host: dict[str, Any] | None) -> Host:
        h = host or {}
        return cls(h.get("hostname", "?"), h.get("kernel", "?"), h.get("machine", "?"), h.get("cpus"))


@dataclass(frozen=True, slots=True)
class Engine:
    """How the probes went on: entries and returns attached, the kind of
    link, the latency program's own counters (entries, returns, and what
    it dropped), whether the calls' waits for a CPU are out of their times
    (and the run time of the program that takes them out)."""

    probes_attached: int | None = None
    links: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    cpu_waits_left_out: bool = False
    switch_program_s: float = 0.0

    @classmethod
    def of(cls, engine: dict[str, Any] | None) -> Engine:
        e = engine or {}
        return cls(e.get("probes_attached"), e.get("links"), e.get("counters") or {},
                   bool(e.get("cpu_waits_left_out")), (e.get("switch_program") or {}).get("s") or 0.0)


@dataclass(frozen=True, slots=True)
class ThreadTime:
    """One thread's wall time in the window as the kernel counted it
    (schedstat): on a CPU, runnable on a run queue, and the rest blocked;
    its context switches; what it was blocked in when the window opened
    ('S 7': state and system call), if it was."""

    tid: int
    comm: str
    wall_ns: int
    on_cpu_ns: int
    runq_ns: int
    voluntary: int = 0
    involuntary: int = 0
    born_in_window: bool = False
    blocked_at_start: str | None = None
    blocked_in: tuple[str, ...] = ()     # its callers then, innermost first, scanned from its stack

    @classmethod
    def of(cls, r: dict[str, Any]) -> ThreadTime:
        return cls(int(r["tid"]), str(r.get("comm") or "?"), int(r["wall_ns"]), int(r["on_cpu_ns"]),
                   int(r["runq_ns"]), int(r.get("voluntary") or 0), int(r.get("involuntary") or 0),
                   bool(r.get("born_in_window")), r.get("blocked_at_start"),
                   tuple(str(f) for f in r.get("blocked_in") or ()))

    @property
    def blocked_ns(self) -> int:
        """Off a CPU and not runnable: the wall time less on CPU and the run queue."""
        return max(self.wall_ns - self.on_cpu_ns - self.runq_ns, 0)


@dataclass(frozen=True, slots=True)
class Process:
    """The target process and the host over the window (/proc), as far as
    the figures use it: its threads, the host's CPU time by state, each
    thread's times (the kernel's), and the bytes the process wrote."""

    threads: int | None = None
    host_cpu_share: dict[str, float | None] = field(default_factory=dict)   # user, system, idle, iowait, steal
    thread_times: tuple[ThreadTime, ...] = ()
    threads_ended: int = 0
    write_bytes: int | None = None
    read_bytes: int | None = None
    recorded: bool = False               # the capture has the section (the figures below with it)
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    cpu_cores: float = 0.0
    rss_bytes: int | None = None
    voluntary_switches: int = 0
    involuntary_switches: int = 0
    busiest: tuple[tuple[int, str, float], ...] = ()   # (tid, name, CPU s), busiest first

    @classmethod
    def of(cls, process: dict[str, Any] | None) -> Process:
        p = process or {}
        return cls(p.get("threads"), p.get("host_cpu_share") or {},
                   tuple(ThreadTime.of(t) for t in p.get("thread_times") or ()), int(p.get("threads_ended") or 0),
                   p.get("write_bytes"), p.get("read_bytes"), bool(p), p.get("cpu_user_s") or 0.0,
                   p.get("cpu_system_s") or 0.0, p.get("cpu_cores") or 0.0, p.get("rss_bytes"),
                   p.get("ctx_switches_voluntary") or 0, p.get("ctx_switches_involuntary") or 0,
                   tuple((t["tid"], t["name"], t["cpu_s"]) for t in p.get("busiest_threads") or ()))


@dataclass(frozen=True, slots=True)
class ThreadShare:
    """What a collector of stacks saw of one thread: its samples (CPU) or
    its traced ns blocked and waiting for a CPU (off-CPU), and whether any
    of its stacks ran a client connection's loop."""

    tid: int
    samples: int = 0
    blocked_ns: int = 0
    runq_ns: int = 0
    connection: bool = False

    @classmethod
    def of(cls, r: dict[str, Any]) -> ThreadShare:
        return cls(int(r["tid"]), int(r.get("samples") or 0), int(r.get("blocked_ns") or 0),
                   int(r.get("runq_ns") or 0), bool(r.get("connection")))


@dataclass(frozen=True, slots=True)
class Workload:
    """The load as the lab's driver (bench, demo) ran and timed it, where
    the capture has it: rows, seconds, the table, and the same load timed
    with nothing attached."""

    rows: int | None = None
    seconds: float | None = None
    ddl: str | None = None
    unprobed_rows: int | None = None
    unprobed_seconds: float | None = None
    run: str | None = None              # lab bench: "wall" (sampled only, no probe) or "profiled"
    pair: int | None = None             # lab bench on two servers: the repeat whose two runs were adjacent
    interleaved: bool = False           # the two servers' runs alternated
    unprobed_started: str | None = None
    statement: str | None = None

    @classmethod
    def of(cls, workload: dict[str, Any] | None) -> Workload:
        w = workload or {}
        twin = w.get("unprobed") or {}
        pair = w.get("pair") or {}
        return cls(w.get("rows"), w.get("seconds"), w.get("ddl"), twin.get("rows"), twin.get("seconds"),
                   w.get("run"), pair.get("index"), bool(pair.get("interleaved")), w.get("unprobed_started"),
                   w.get("statement"))

    @property
    def unprobed_ns_per_row(self) -> float | None:
        if self.unprobed_rows and self.unprobed_seconds:
            return self.unprobed_seconds * 1e9 / self.unprobed_rows
        return None


@dataclass(frozen=True, slots=True)
class Latency:
    """Calls' summed time and their histogram (ns)."""

    total_ns: int
    histogram: Histogram

    @classmethod
    def of(cls, record: dict[str, Any]) -> Latency:
        return cls(record["total_ns"], Histogram.of_record(record.get("histogram") or []))

    def figures(self, calls: int) -> dict[str, Any]:
        """The mean and percentiles `report --json` gives beside a record."""
        return {"mean_ns": self.total_ns / calls if calls else None, "percentiles_ns": self.histogram.percentiles()}


@dataclass(frozen=True, slots=True)
class PartitionLatency:
    """A probe's calls into one partition, corrected and raw."""

    id: int
    calls: int
    latency: Latency
    raw: Latency

    @classmethod
    def of(cls, record: dict[str, Any]) -> PartitionLatency:
        return cls(record["id"], record["calls"], Latency.of(record), Latency.of(record.get("raw", record)))


@dataclass(frozen=True, slots=True)
class CallerEdge:
    """A probe's calls on one thread under one probed caller (None: no
    probed function was running on the thread)."""

    tid: int
    parent: int | None
    calls: int
    total_ns: int        # corrected
    raw_total_ns: int

    @classmethod
    def of(cls, record: dict[str, Any]) -> CallerEdge:
        return cls(record["tid"], record.get("parent"), record["calls"], record["total_ns"],
                   record.get("raw_total_ns", record["total_ns"]))


# what schema 1 captures stored of a probe's derived figures: derived again
DERIVED_PROBE_FIELDS = ("estimated_calls", "mean_ns", "percentiles_ns", "overhead_ns", "threads")


@dataclass(frozen=True, slots=True)
class Probe:
    """One probed function and what the kernel counted of it: its calls,
    their latency (corrected for the probes' own cost, and raw), per
    partition and per (thread, probed caller); the calibrated cost of its
    probes; its calls' waits for a CPU (out of their latency)."""

    id: int
    stage: str                # its catalog stage, or probe:NAME for a --probe function
    name: str
    symbol: str
    mangled: str
    calls: int
    latency: Latency
    raw: Latency
    overhead_ns: float        # calls x the calibrated cost of a call's probes
    entry_class: str | None   # how its first instruction is taken (calibration's class)
    own_cost_ns: float
    pair_cost_ns: float
    partition_source: str | None
    partitions: tuple[PartitionLatency, ...]
    callers: tuple[CallerEdge, ...]
    cpu_wait_calls: int
    cpu_wait_ns: int
    nested_probe_hits: int    # other probes' hits inside its calls: it has probed callees
    recorded: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def of(cls, p: dict[str, Any]) -> Probe:
        recorded = {k: v for k, v in p.items() if k not in DERIVED_PROBE_FIELDS}
        entry = p.get("entry") or {}
        calls = p["calls"]
        overhead = p.get("overhead_ns")  # schema 1 kept it unrounded
        if overhead is None:
            overhead = round(calls * entry.get("pair_cost_ns", 0))
        waits = p.get("cpu_waits") or {}
        return cls(p["id"], p.get("stage") or f"probe:{p['name']}", p["name"], p["symbol"],
                   p.get("mangled") or p["symbol"], calls, Latency.of(p), Latency.of(p.get("raw", p)), overhead,
                   entry.get("class"), entry.get("own_cost_ns", 0.0), entry.get("pair_cost_ns", 0.0),
                   p.get("partition_source"), tuple(PartitionLatency.of(part) for part in p.get("partitions", [])),
                   tuple(CallerEdge.of(c) for c in p.get("callers", [])), waits.get("calls") or 0,
                   waits.get("total_ns") or 0, p.get("nested_probe_hits") or 0, recorded)

    @property
    def total_ns(self) -> int:
        return self.latency.total_ns

    @property
    def top_level(self) -> bool:
        """Called, and never under another probed function."""
        return bool(self.calls and self.callers) and all(c.parent is None for c in self.callers)

    def threads(self) -> list[dict[str, Any]]:
        """Per thread: the caller edges summed over the callers, largest first."""
        per: dict[int, list[int]] = {}
        for c in self.callers:
            t = per.setdefault(c.tid, [0, 0, 0])
            t[0] += c.calls
            t[1] += c.raw_total_ns
            t[2] += c.total_ns
        return [{"tid": tid, "calls": n, "total_ns": total, "raw_total_ns": raw}
                for tid, (n, raw, total) in sorted(per.items(), key=lambda kv: -kv[1][2])]

    def to_json(self) -> dict[str, Any]:
        """The recorded probe with its derived figures, as `report --json` gives it."""
        recorded = self.recorded
        return {**recorded, **self.latency.figures(self.calls),
                "raw": {**recorded["raw"], **self.raw.figures(self.calls)}, "overhead_ns": self.overhead_ns,
                "partitions": [{**rec, **part.latency.figures(part.calls), "raw": {**rec["raw"],
                                                                                  **part.raw.figures(part.calls)}}
                               for rec, part in zip(recorded.get("partitions", []), self.partitions)],
                "threads": self.threads()}


@dataclass(frozen=True, slots=True)
class OffPart:
    """A part of an off-phase: its start in the window, length and rows;
    quiet: every collector off, else CPU sampling on."""

    at_s: float
    s: float
    rows: int | None
    quiet: bool

    @classmethod
    def of(cls, part: dict[str, Any]) -> OffPart:
        return cls(part["at_s"], part["s"], part.get("rows"), bool(part.get("quiet")))


@dataclass(frozen=True, slots=True)
class Cycle:
    """One duty cycle: its on-phase (seconds, the probes' calibrated cost in
    it, their calls per probe), the server's rows counted in it over row_s
    between two reads of the calls read_s wide, the calls made meanwhile
    (row_calls), the calls' corrected ns, and the off-phase parts after it.
    Older captures lack the later fields (None, or empty)."""

    on_s: float
    probe_s: float
    calls: tuple[int, ...]                    # per probe, in the probes' order
    rows: int | None = None
    row_s: float | None = None
    read_s: tuple[float, ...] = ()
    row_calls: tuple[float, ...] | None = None  # (a call may count half: begun between the reads)
    ns: tuple[int, ...] | None = None
    at_s: float | None = None
    off: tuple[OffPart, ...] = ()

    @classmethod
    def of(cls, c: dict[str, Any]) -> Cycle:
        return cls(c["on_s"], c["probe_s"], tuple(c["calls"]), c.get("rows"), c.get("row_s"),
                   tuple(c.get("read_s") or ()), None if c.get("row_calls") is None else tuple(c["row_calls"]),
                   None if c.get("ns") is None else tuple(c["ns"]), c.get("at_s"),
                   tuple(OffPart.of(o) for o in c.get("off") or ()))

    @property
    def misread(self) -> bool:
        """Whether its rows may be set against calls of another part of it:
        the row counter is read between two reads of the calls, and a read
        that took long (the query held up, this process preempted) leaves
        the rows anywhere in it."""
        if not self.read_s:  # captures before the widths were kept
            return False
        span = self.row_s
        return not span or span <= 0 or sum(self.read_s) / 2 > MAX_READ_SHARE * span


# the off-phase kinds whose rows and seconds a sampled capture sums
PHASE_KINDS = ("off", "quiet", "quiet_tail", "burst")


@dataclass(frozen=True, slots=True)
class SpanEdge:
    """The reads around the row counter's first or last change: the load ran
    for part of their seconds only (rows / its unprobed rate, where the
    probes were off between them)."""

    seconds: float
    rows: int
    probed: bool

    @classmethod
    def of(cls, edge: dict[str, Any] | None) -> SpanEdge | None:
        return None if not edge else cls(edge["s"], edge["rows"], bool(edge["probed"]))

    def idle_s(self, unprobed_rate: float | None) -> float:
        """Of its seconds, those the load did not run in: none where the
        probes were on in it (the load ran slower there: its rows say less
        of when it began) or the rate is unknown."""
        if self.probed or not unprobed_rate:
            return 0.0
        return min(max(self.seconds - self.rows / unprobed_rate, 0.0), self.seconds)


@dataclass(frozen=True, slots=True)
class Sampling:
    """How the probes ran: every call counted ("exact"), or duty cycles
    ("sampled": the cycles, their on-time, the budget they kept to, the
    span the load ran in, the collectors quieted in the quiet phases, each
    cycle's counts, the rows and seconds of each kind of off-phase)."""

    mode: str
    cycles: int = 0
    on_s: float = 0.0
    overhead_budget: float | None = None
    load_s: float | None = None         # from the row counter's first move to its last
    load_rows: int | None = None
    quieted: tuple[str, ...] = ()
    per_cycle: tuple[Cycle, ...] = ()
    cost_uncertainty: float = 0.0       # the probes' calibrated cost's relative doubt
    lost_s: float | None = None         # the time the cycles lost, one by one (older captures)
    phases: dict[str, tuple[int | None, float | None]] = field(default_factory=dict)  # kind -> (rows, s)
    # the reads around the counter's first change and around its last (where reads after it saw none)
    load_edges: tuple[SpanEdge | None, SpanEdge | None] = (None, None)

    @classmethod
    def of(cls, sampling: dict[str, Any] | None) -> Sampling:
        s = sampling or {}
        if s.get("mode") != "sampled":
            return cls("exact")
        edges = s.get("load_edges") or {}
        return cls("sampled", s.get("cycles") or 0, s.get("on_s") or 0.0, s.get("overhead_budget"),
                   s.get("load_s"), s.get("load_rows"), tuple(s.get("quieted") or ()),
                   tuple(Cycle.of(c) for c in s.get("calls_per_cycle") or ()), s.get("cost_uncertainty", 0.0),
                   s.get("lost_s"), {k: (s.get(f"{k}_rows"), s.get(f"{k}_s")) for k in PHASE_KINDS},
                   (SpanEdge.of(edges.get("start")), SpanEdge.of(edges.get("end"))))

    @property
    def sampled(self) -> bool:
        return self.mode == "sampled"

    def phase(self, kind: str) -> tuple[int | None, float | None]:
        """The rows and seconds of the off-phases of a kind (PHASE_KINDS)."""
        return self.phases.get(kind, (None, None))


# the collectors whose sections name folded stacks files
STACK_SECTIONS = ("cpu_profile", "off_cpu", "io", "cpu_bursts")
SCHEMA_1_CPU_FILE = "stacks.folded"   # the CPU stacks of a schema-1 capture, which did not name them


@dataclass(frozen=True, slots=True)
class StackSection:
    """A collector of stacks as the capture keeps it: whether it
    collected, its folded files by field (stacks_file; I/O's bytes_file
    and calls_file), its sampling rate, and the part of the window it saw
    (on_s: the on-phases only; quiet_s: off in the quiet phases)."""

    name: str
    status: str
    files: dict[str, str] = field(default_factory=dict)
    frequency_hz: float | None = None
    on_s: float | None = None
    quiet_s: float | None = None
    threads: tuple[ThreadShare, ...] = ()
    # the CPU samples by slice of time (slices_file): each slice_s long, slice 0 from slices_origin_s
    # on the host's CLOCK_MONOTONIC
    slice_s: float | None = None
    slices_origin_s: float | None = None

    @classmethod
    def of(cls, name: str, section: dict[str, Any] | None, schema_version: Any = None) -> StackSection:
        sec = section or {}
        files = {k: v for k, v in sec.items() if k.endswith("_file") and isinstance(v, str)}
        if name == "cpu_profile" and schema_version == 1 and "stacks_file" not in files:
            files["stacks_file"] = SCHEMA_1_CPU_FILE
        return cls(name, sec.get("status") or "absent", files, sec.get("frequency_hz"), sec.get("on_s"),
                   sec.get("quiet_s"), tuple(ThreadShare.of(t) for t in sec.get("by_thread") or ()),
                   sec.get("slice_s"), sec.get("slices_origin_s"))

    @property
    def collected(self) -> bool:
        return self.status == "collected"

    def scale(self, window_s: float) -> float:
        """What the window holds over what the collector saw of it."""
        if not window_s:
            return 1.0
        if self.on_s:
            return float(window_s / self.on_s)
        if self.quiet_s and window_s > self.quiet_s:
            return float(window_s / (window_s - self.quiet_s))
        return 1.0


@dataclass(frozen=True, slots=True)
class ShapeCall:
    """Probed calls inside a statement shape's executions: of one probe,
    under one probed caller (None: none), begun in one P_S stage (its key
    in perf_schema.stage_names, 1-based; None: not known)."""

    probe: int
    parent: int | None
    stage: int | None
    calls: int
    total_ns: int

    @classmethod
    def of(cls, c: dict[str, Any]) -> ShapeCall:
        return cls(c["probe"], c.get("parent"), c.get("stage"), c["calls"], c["total_ns"])


@dataclass(frozen=True, slots=True)
class StatementShape:
    """A statement shape the statement probe timed: its text (normalized:
    literals made ?), executions, latency, and the probes inside them."""

    text: str
    executions: int
    latency: Latency
    probe_cost_ns: int
    calls: tuple[ShapeCall, ...]

    @classmethod
    def of(cls, s: dict[str, Any], normalize: Callable[[str], str] | None) -> StatementShape:
        return cls(normalize(s["text"]) if normalize else s["text"], s["executions"], Latency.of(s),
                   s.get("probe_cost_ns") or 0, tuple(ShapeCall.of(c) for c in s.get("calls") or ()))


@dataclass(frozen=True, slots=True)
class Statements:
    """The statement probe's shapes (none: not probed), and the probe that timed them."""

    probe: int | None = None
    shapes: tuple[StatementShape, ...] = ()

    @classmethod
    def of(cls, st: dict[str, Any] | None) -> Statements:
        if not st or not st.get("shapes"):
            return cls()
        normalize = None if st.get("text") == "normalized" else normalized
        return cls(st.get("probe"), tuple(StatementShape.of(s, normalize) for s in st["shapes"]))


@dataclass(frozen=True, slots=True)
class PsStatement:
    """A statement Performance Schema's history kept (timers in ps; end None: still running)."""

    thread_id: int
    event_id: int
    event_name: str
    sql_text: str
    timer_start: int | None
    timer_end: int | None
    timer_wait: int | None

    @classmethod
    def of(cls, r: dict[str, Any]) -> PsStatement:
        return cls(r["thread_id"], r["event_id"], r.get("event_name") or "", r.get("sql_text") or "",
                   r.get("timer_start"), r.get("timer_end"), r.get("timer_wait"))

    @property
    def key(self) -> tuple[int, int]:
        return self.thread_id, self.event_id


@dataclass(frozen=True, slots=True)
class PsStage:
    """A stage event of a statement (its thread and event id)."""

    thread_id: int
    statement_event_id: int
    event_name: str
    timer_start: int | None
    timer_end: int | None
    timer_wait: int | None

    @classmethod
    def of(cls, r: dict[str, Any]) -> PsStage:
        return cls(r["thread_id"], r["statement_event_id"], r["event_name"], r.get("timer_start"),
                   r.get("timer_end"), r.get("timer_wait"))

    @property
    def statement(self) -> tuple[int, int]:
        return self.thread_id, self.statement_event_id


@dataclass(frozen=True, slots=True)
class PsThread:
    """A server thread: its P_S id, Linux thread id (None: not known) and TYPE (FOREGROUND, BACKGROUND)."""

    thread_id: int
    os_tid: int | None
    type: str | None
    name: str | None = None     # 'thread/innodb/page_cleaner_thread'

    @classmethod
    def of(cls, r: dict[str, Any]) -> PsThread:
        return cls(r["thread_id"], r.get("os_tid"), r.get("type"), r.get("name"))


@dataclass(frozen=True, slots=True)
class PerfSchema:
    """What the Performance Schema collector read: the statements and stage
    events of the window, the threads, the summaries' and server counters'
    changes over it (`deltas`: per kind, rows of name and counts, as
    recorded), the settings, the instruments it turned off in the quiet
    phases, and what its own connections cost."""

    status: str
    connection: str | None = None
    statements: tuple[PsStatement, ...] = ()
    stages: tuple[PsStage, ...] = ()
    threads: tuple[PsThread, ...] = ()
    timer_start_ps: int | None = None
    timer_end_ps: int | None = None
    deltas: dict[str, Any] = field(default_factory=dict)
    stage_names: tuple[str, ...] = ()
    settings: dict[str, str] | None = None
    quieted_instruments: tuple[str, ...] = ()
    quiet_s: float = 0.0
    own_rows_changed: int = 0
    own_connections_cpu_s: float = 0.0
    own_os_tids: tuple[int, ...] = ()

    @classmethod
    def of(cls, ps: dict[str, Any] | None) -> PerfSchema:
        p = ps or {}
        quieted = p.get("quieted") or {}
        return cls(p.get("status") or "absent", p.get("connection"),
                   tuple(PsStatement.of(r) for r in p.get("statements") or ()),
                   tuple(PsStage.of(r) for r in p.get("stages") or ()),
                   tuple(PsThread.of(r) for r in p.get("threads") or ()), p.get("timer_start_ps"),
                   p.get("timer_end_ps"), p.get("deltas") or {}, tuple(p.get("stage_names") or ()),
                   p.get("settings"), tuple(quieted.get("instruments") or ()), quieted.get("quiet_s") or 0.0,
                   p.get("own_rows_changed") or 0, p.get("own_connections_cpu_s") or 0.0,
                   tuple(int(t) for t in p.get("own_os_tids") or ()))

    @property
    def collected(self) -> bool:
        return self.status == "collected"

    @property
    def server_status(self) -> dict[str, int]:
        """The server's counters' changes over the window (Innodb_rows_inserted, Handler_write...)."""
        return self.deltas.get("status") or {}


@dataclass(frozen=True, slots=True)
class CpuBursts:
    """The CPU bursts of the ordinary off-phases (probes off): their
    samples of the target, per stage with its functions on the stack
    (samples, ns; None: taken without stacks) and per function in its own
    code (samples, self ns), at their rate."""

    status: str = "absent"
    samples: int | None = None
    frequency_hz: float | None = None
    stages: dict[str, tuple[int, int]] | None = None
    functions: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, bursts: dict[str, Any] | None) -> CpuBursts:
        b = bursts or {}
        stages = b.get("stages")
        return cls(b.get("status") or "absent", b.get("samples"), b.get("frequency_hz"),
                   None if stages is None else {k: (v.get("samples", 0), v.get("ns", 0)) for k, v in stages.items()},
                   {k: (v.get("samples", 0), v.get("self_ns", 0)) for k, v in (b.get("functions") or {}).items()})


@dataclass(frozen=True, slots=True)
class ClassCost:
    """What calibration measured a probe hit of one entry class to cost."""

    entry_ns: float
    return_ns: float
    spread_ns: float | None


MIN_COST_DOUBT = 0.10       # the calibration's own doubt, at least (its bursts' spread where larger)
# where the in-situ factor was not measured (--exact, no server connection): a hit in
# a large server costs up to about twice its calibration (1.1-1.9x measured on 10.2.11)
UNMEASURED_IN_SITU = 2.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """The probes' calibrated cost as the latencies were corrected by it:
    whether they were (not with --raw, nor without a calibration), the
    cost per entry class, and how much more than calibrated a hit may
    cost in the server (the on-phases' in-situ factor where measured)."""

    corrected: bool
    classes: dict[str, ClassCost] = field(default_factory=dict)
    in_situ_high: float = UNMEASURED_IN_SITU
    in_situ_factor: float | None = None   # as recorded (None: not measured)

    @classmethod
    def of(cls, doc: dict[str, Any], sampled: bool) -> Calibration:
        """From the capture's calibration and how it recorded latencies;
        sampled: duty cycles ran, whose on-phases measure the in-situ factor."""
        cal = doc.get("calibration") or {}
        classes = {k: ClassCost(c.get("entry_ns") or 0.0, c.get("return_ns") or 0.0, c.get("spread_ns"))
                   for k, c in (cal.get("classes") or {}).items()}
        factor = cal.get("in_situ_factor") if sampled else None
        return cls(bool(doc.get("calibration")) and doc.get("latencies") != "raw", classes,
                   float(max(factor, 1.0)) if factor else UNMEASURED_IN_SITU, cal.get("in_situ_factor"))

    def cost_doubt(self, classes: set[str]) -> float:
        """Relative doubt on the probes' calibrated cost for these entry classes."""
        rel = [c.spread_ns / (c.entry_ns + c.return_ns) for k in classes if (c := self.classes.get(k))
               and c.entry_ns + c.return_ns > 0 and c.spread_ns is not None]
        return float(max([MIN_COST_DOUBT] + rel))


@dataclass(frozen=True, slots=True)
class Overhead:
    """What the collectors cost the load: the probes' calibrated cost, the
    slowdown the duty cycles measured (None: not measured) and what each
    collector measured itself to cost."""

    estimated_ns: float
    share_of_window: float | None
    measured_slowdown: float | None    # as printed: 1.0 or more, else None (not measurable)
    measured_against: str | None       # "quiet", "quiet_tail", "off" or None
    phase_slowdown: float | None
    standing_slowdown: float | None
    standing_cpu_s: float | None
    always_on_slowdown: float | None
    estimated_slowdown: float | None
    by_collector: dict[str, dict[str, Any]] = field(default_factory=dict)
    slowdown_estimate: float | None = None   # the measure itself, below 1.0 too
    slowdown_interval: tuple[float, float] | None = None   # 95%, from the reference phases' spread
    slowdown_doubt: float | None = None      # the ± printed beside 'not measurable'
    note: str = "probe hits x calibrated cost per hit: thread time the probes added"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


UNRESOLVED = "*"   # a stage's percentiles within the probes' doubt per call
WITHHELD = "?"     # a figure the data cannot support, in its place


@dataclass(frozen=True, slots=True)
class StageFigure:
    """What every reporter prints of a stage (analysis/figures.py): calls
    (estimated in sampled mode, with their interval), those the probes
    counted, the window's total and share, the mean per call as its
    interval allows ("<X": a bound) and the percentiles of the calls timed
    ("-": none), mark "*" where they are within the probes' doubt."""

    stage: str
    calls: float
    calls_low: float | None
    calls_high: float | None
    counted: int
    total_ns: float
    total_bound: bool
    share: float | None
    mean_ns: float | None
    mean: str
    per_call: PerCall
    mark: str
    p50: str
    p90: str
    p99: str
