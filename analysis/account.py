"""Where the load's threads' wall time went: one account, on CPU and off
it, by mechanism, that every figure of time reads.

The totals are the kernel's own per-thread counts over the window
(schedstat: ns on a CPU and ns runnable on a run queue; the rest of the
thread's wall time it was blocked). How each total splits is read from
the stacks: the CPU samples split the time on CPU, the traced switches
(sched_switch) the time off it, blocked and queued together: a traced
wait runs from switch-out to switch-in, a blocked one with the wait for
a CPU after its wake-up in it, as an off-CPU profiler times it.
Each stack is charged to the innermost mechanism on it
(analysis/mechanisms.py). So the parts add up to the threads' wall time
by construction, and what the stacks did not see is a part of its own:

- "waiting for the client": a connection between statements (not the
  row's time);
- "mysqlprobe's probes": the probes' own machinery on the stacks;
- "off CPU, not traced": blocked time the tracing never saw begin (a wait
  begun before the window opened, or in a quiet phase) on a thread that
  was not waiting for its client then;
- "other": stacks that meet no mechanism, named by their innermost
  function.

How far the samples and the traces agree with the kernel's counts is
printed beside it (`coverage`): the check that the picture is whole.

The load's threads are the client connections: threads whose stacks run
the connection loop, or that Performance Schema calls FOREGROUND, less
mysqlprobe's own connections. Every other thread is background, its CPU
counted per row apart."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mysqlprobe.analysis import mechanisms as M
from mysqlprobe.analysis.views import ThreadTime
from mysqlprobe.flamegraphs.folded import Folded
from mysqlprobe.flamegraphs.stacks import connection_stacks, fold_probe_frames

if TYPE_CHECKING:
    from mysqlprobe.analysis.model import Profile

NOT_TRACED = "off CPU, not traced"
NOT_ROW_TIME = (M.IDLE, M.PROBES_MECHANISM)
TOP_FUNCTIONS = 5       # a part's innermost functions kept (what in it ran; what names "other")
MAX_UNATTRIBUTED = 0.15  # of the row's time: above it the report says why


@dataclass(frozen=True, slots=True)
class Part:
    """One mechanism's share of the load threads' wall time, in ns over
    the window: on a CPU, blocked, waiting for a CPU."""

    name: str
    on_cpu_ns: float = 0.0
    blocked_ns: float = 0.0
    runq_ns: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)
    functions: tuple[tuple[str, float], ...] = ()   # its stacks' innermost functions, most ns first

    @property
    def ns(self) -> float:
        return self.on_cpu_ns + self.blocked_ns + self.runq_ns

    @property
    def off_cpu_ns(self) -> float:
        return self.blocked_ns + self.runq_ns

    def per_row(self, rows: int) -> dict[str, Any]:
        return {"name": self.name, "ns_per_row": _r(self.ns / rows), "on_cpu_ns_per_row": _r(self.on_cpu_ns / rows),
                "off_cpu_ns_per_row": _r(self.off_cpu_ns / rows), "blocked_ns_per_row": _r(self.blocked_ns / rows),
                "runq_ns_per_row": _r(self.runq_ns / rows), "settings": dict(self.settings),
                **({"functions": [{"function": f, "ns_per_row": _r(ns / rows)} for f, ns in self.functions]}
                   if self.functions else {})}


@dataclass(frozen=True, slots=True)
class Coverage:
    """The stacks against the kernel's counts: the CPU samples' time (samples
    times the period, scaled to the window) over the threads' time on CPU;
    the traced off-CPU time (scaled likewise) over their time off it; and
    the off-CPU time the tracing did not see that the threads' state at the
    window's opening charged (a wait begun before it: its blocked stack or
    system call) over that too. The two off-CPU shares near 1 together:
    the picture is whole."""

    on_cpu: float | None
    off_cpu: float | None
    off_cpu_by_state: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"on_cpu": _r(self.on_cpu, 4), "off_cpu": _r(self.off_cpu, 4),
                "off_cpu_by_state": _r(self.off_cpu_by_state, 4)}


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Per row, as the insert benchmark reports a load's efficiency: CPU
    (the load's threads and the background's, the kernel's counts), context
    switches, KB written, fsyncs and redo bytes (the server's counters)."""

    cpu_us_foreground: float | None
    cpu_us_background: float | None
    context_switches: float | None
    kb_written: float | None
    fsyncs: float | None
    redo_bytes: float | None

    def to_json(self) -> dict[str, Any]:
        return {"cpu_us_foreground": _r(self.cpu_us_foreground, 4), "cpu_us_background": _r(self.cpu_us_background, 4),
                "context_switches": _r(self.context_switches, 4), "kb_written": _r(self.kb_written, 4),
                "fsyncs": _r(self.fsyncs, 6), "redo_bytes": _r(self.redo_bytes, 2)}


@dataclass(frozen=True, slots=True)
class Account:
    """The load's threads' wall time over the window, whole: the kernel's
    totals and their split by mechanism (parts sum to wall_ns)."""

    threads: int
    wall_ns: int
    on_cpu_ns: int
    blocked_ns: int
    runq_ns: int
    parts: tuple[Part, ...]            # by mechanism, most first; idle, probes, not traced and other among them
    rows: int | None
    rows_from: str                     # Innodb_rows_inserted, the load's own count, or the probes' row inserts
    coverage: Coverage
    background_cpu_ns: int
    background: tuple[tuple[str, int], ...]   # background threads' CPU by name, ns
    efficiency: Efficiency | None
    notes: tuple[str, ...] = ()
    # what one unit of the stacks' weights is worth in the kernel's time: ns per CPU sample,
    # per traced us blocked, per traced us waiting for a CPU (wall_stacks)
    per_sample_ns: float = 0.0
    per_blocked_us: float = 0.0
    per_runq_us: float = 0.0

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)

    @property
    def mechanisms(self) -> list[Part]:
        """The row's parts: every part but the idle wait and the probes."""
        return [p for p in self.parts if p.name not in NOT_ROW_TIME]

    @property
    def row_time_ns(self) -> float:
        """The load threads' time doing the rows: the wall time less the
        waits for the client and the probes' own machinery."""
        return sum(p.ns for p in self.mechanisms)

    @property
    def unattributed_ns(self) -> float:
        return sum(p.ns for p in self.mechanisms if p.name in (M.OTHER, NOT_TRACED))

    @property
    def unattributed_share(self) -> float | None:
        return self.unattributed_ns / self.row_time_ns if self.row_time_ns else None

    def to_json(self) -> dict[str, Any]:
        rows = self.rows
        mechanisms = self.mechanisms

        def per(ns: float) -> float | None:
            return _r(ns / rows) if rows else None

        return {
            "threads": self.threads, "rows": rows, "rows_from": self.rows_from or None,
            "window_wall_ns": self.wall_ns, "on_cpu_ns": self.on_cpu_ns, "blocked_ns": self.blocked_ns,
            "runq_ns": self.runq_ns,
            "idle_ns": _r(self._ns(M.IDLE)), "probes_ns": _r(self._ns(M.PROBES_MECHANISM)),
            "wall_ns_per_row": per(self.row_time_ns),
            "on_cpu_ns_per_row": per(sum(p.on_cpu_ns for p in mechanisms)),
            "off_cpu_ns_per_row": per(sum(p.off_cpu_ns for p in mechanisms)),
            "unattributed_ns_per_row": per(self.unattributed_ns),
            "mechanisms": [p.per_row(rows) for p in mechanisms] if rows else [],
            "coverage": self.coverage.to_json(),
            "background_cpu_ns": self.background_cpu_ns,
            "background": [{"thread": name, "cpu_ns": ns} for name, ns in self.background],
            "per_row": self.efficiency.to_json() if self.efficiency else None,
            "notes": list(self.notes),
        }

    def _ns(self, name: str) -> float:
        p = self.part(name)
        return p.ns if p else 0.0


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


@dataclass
class _Split:
    """A total split by the weights of the stacks charged to each part."""

    weights: dict[str, float] = field(default_factory=dict)
    functions: dict[tuple[str, str], float] = field(default_factory=dict)   # (part, innermost function)

    def add(self, charge: M.Charge, weight: float) -> None:
        self.weights[charge.mechanism] = self.weights.get(charge.mechanism, 0.0) + weight
        key = (charge.mechanism, charge.function)
        self.functions[key] = self.functions.get(key, 0.0) + weight

    @property
    def total(self) -> float:
        return sum(self.weights.values())

    def shares(self, total_ns: float) -> dict[str, float]:
        w = self.total
        return {name: total_ns * v / w for name, v in self.weights.items()} if w else {}


def load_tids(profile: Profile) -> set[int]:
    """The load's threads: those whose stacks ran a client connection's
    loop, and Performance Schema's FOREGROUND threads, less mysqlprobe's own."""
    tids = {t.tid for name in ("cpu_profile", "off_cpu") for t in profile.stacks[name].threads if t.connection}
    tids |= {t.os_tid for t in profile.perf_schema.threads if t.type == "FOREGROUND" and t.os_tid}
    return tids - set(profile.perf_schema.own_os_tids)


def _client_wait(t: ThreadTime) -> bool:
    """Blocked in a socket read or poll when the window opened: waiting for its client."""
    if not t.blocked_at_start:
        return False
    state, _, call = t.blocked_at_start.partition(" ")
    return state == "S" and call.isdigit() and int(call) in CLIENT_WAIT_SYSCALLS


# read, poll, recvfrom, recvmsg, ppoll, epoll_wait, epoll_pwait (x86-64)
CLIENT_WAIT_SYSCALLS = {0, 7, 45, 47, 271, 232, 281}


def build(profile: Profile, cpu: Folded | None, off: Folded | None) -> Account | None:
    """The account of a capture, from its per-thread times and its CPU and
    off-CPU stacks; None where the capture lacks the kernel's per-thread
    times (recorded before they were kept, or /proc without schedstat)."""
    times = profile.process.thread_times
    if not times:
        return None
    tids = load_tids(profile)
    load = [t for t in times if t.tid in tids]
    notes: list[str] = []
    if not load:
        notes.append("no client connection's thread was seen in the window: the account has no load threads")
    window_s = profile.window.duration_s
    on = sum(t.on_cpu_ns for t in load)
    runq = sum(t.runq_ns for t in load)
    blocked = sum(t.blocked_ns for t in load)
    wall = sum(t.wall_ns for t in load)

    cpu_section, off_section = profile.stacks["cpu_profile"], profile.stacks["off_cpu"]
    cpu_scale, off_scale = cpu_section.scale(window_s), off_section.scale(window_s)
    traced = {t.tid: t for t in off_section.threads}
    # time off CPU the tracing never saw begin, thread by thread: charged by the stack the thread
    # was blocked in when the window opened (scanned from its memory), a client wait by its system
    # call, else not traced
    untraced_idle = untraced = 0.0
    untraced_parts: dict[str, float] = defaultdict(float)
    for t in load:
        seen = ((traced[t.tid].blocked_ns + traced[t.tid].runq_ns) * off_scale) if t.tid in traced else 0.0
        missing = max(t.blocked_ns + t.runq_ns - seen, 0.0)
        charge = M.of_stack(["thread", *reversed(t.blocked_in)], off_cpu=True).mechanism if t.blocked_in else None
        if charge == M.IDLE or (charge in (None, M.OTHER) and _client_wait(t)):
            untraced_idle += missing
        elif charge not in (None, M.OTHER, M.PROBES_MECHANISM):
            untraced_parts[charge] += missing
        else:
            untraced += missing
    if not off_section.collected:
        notes.append("no off-CPU stacks (the off-CPU collector did not run): the time off CPU is not split")

    on_split, blocked_split, runq_split = _Split(), _Split(), _Split()
    for _, count, on_charge, _ in charged(cpu, off_cpu=False):
        on_split.add(on_charge, count)
    for _, us, off_charge, waiting in charged(off, off_cpu=True):
        (runq_split if waiting else blocked_split).add(off_charge, us)

    # Each traced wait runs from its switch-out to its switch-in, as an off-CPU profiler times it:
    # a blocked wait's time holds the wait for a CPU after its wake-up, which the kernel counts
    # on the run queue. So the kernel's time off CPU, blocked and queued together, is spread
    # over both kinds of stacks at one rate; spread apart, the wake-ups' queueing (40 of 63 s
    # under 8 sysbench clients) went to the stacks switched out runnable (a mutex's spin),
    # not to the waits they ended (the client's next statement, a log flush)
    off_seen = max(blocked + runq - untraced - untraced_idle - sum(untraced_parts.values()), 0.0)
    traced_weights = blocked_split.total + runq_split.total
    off_rate = off_seen / traced_weights if traced_weights else 0.0
    parts: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    _spread(parts, "on_cpu_ns", on, on_split)
    _spread(parts, "blocked_ns", off_rate * blocked_split.total, blocked_split)
    _spread(parts, "runq_ns", off_rate * runq_split.total, runq_split)
    if not traced_weights:
        parts[NOT_TRACED]["blocked_ns"] += off_seen
    parts[M.IDLE]["blocked_ns"] += untraced_idle
    parts[NOT_TRACED]["blocked_ns"] += untraced
    for name, ns in untraced_parts.items():
        parts[name]["blocked_ns"] += ns
    functions = _functions(((on_split, on), (blocked_split, off_rate * blocked_split.total),
                            (runq_split, off_rate * runq_split.total)))

    settings = profile.perf_schema.settings
    out = []
    for name, v in parts.items():
        if not sum(v.values()):
            continue
        m = M.BY_NAME.get(name)
        out.append(Part(name, v["on_cpu_ns"], v["blocked_ns"], v["runq_ns"],
                        M.settings_of(m, settings) if m else {}, functions.get(name, ())))
    out.sort(key=lambda p: -p.ns)

    samples = sum(t.samples for t in cpu_section.threads if t.tid in tids)
    hz = cpu_section.frequency_hz
    sampled_on = samples * 1e9 / hz * cpu_scale if hz and cpu_section.threads else None
    traced_off = sum((traced[t].blocked_ns + traced[t].runq_ns) * off_scale for t in tids if t in traced) \
        if off_section.threads else None
    off_total = blocked + runq
    by_state = untraced_idle + sum(untraced_parts.values())
    coverage = Coverage(sampled_on / on if sampled_on is not None and on else None,
                        traced_off / off_total if traced_off is not None and off_total else None,
                        by_state / off_total if off_total else None)
    background = _background(times, tids, profile)
    rows, rows_from = profile.rows_inserted
    if rows is None and profile.perf_schema.collected and "Innodb_rows_inserted" not in profile.perf_schema.server_status:
        notes.append("the server keeps no Innodb_rows_inserted (MariaDB 10.6 and later) and no probe counted "
                     "InnoDB's row inserts: no figure per row; the account's totals stand for the window")
    return Account(len(load), wall, on, blocked, runq, tuple(out), rows, rows_from, coverage,
                   sum(ns for _, ns in background), background, _efficiency(profile, load, background, rows),
                   tuple(notes), _per(on, on_split), off_rate, off_rate)


def _per(total_ns: float, split: _Split) -> float:
    return total_ns / split.total if split.total else 0.0


def wall_stacks(a: Account, cpu: Folded | None, off: Folded | None) -> Folded:
    """The load threads' stacks weighted in ns of the window as the account
    counts them (on CPU and off it in one tree, as a wall-clock profiler
    draws it), without the waits for the client and the probes' frames."""
    out = Folded()
    for folded, off_cpu in ((cpu, False), (off, True)):
        for stack, weight, charge, waiting in charged(folded, off_cpu):
            if charge.mechanism in NOT_ROW_TIME:
                continue
            unit = a.per_runq_us if waiting else a.per_blocked_us if off_cpu else a.per_sample_ns
            ns = round(weight * unit)
            if ns > 0:
                out.stacks[stack] += ns
    return out


def charged(folded: Folded | None, off_cpu: bool) -> Iterator[tuple[str, int, M.Charge, bool]]:
    """(stack, weight, its charge, a wait for a CPU) of the client
    connections' stacks, the probes' machinery on them folded into one frame."""
    if folded is None:
        return
    for stack, weight in fold_probe_frames(connection_stacks(folded))[0].stacks.items():
        yield (stack, weight, *M.of_folded(stack, off_cpu))


def _spread(parts: dict[str, dict[str, float]], kind: str, total_ns: float, split: _Split) -> None:
    """A total over the parts by their stacks' weights; unseen where no stack was."""
    shares = split.shares(total_ns)
    if not shares and total_ns > 0:
        shares = {NOT_TRACED if kind != "on_cpu_ns" else M.OTHER: total_ns}
    for name, ns in shares.items():
        parts[name][kind] += ns


def _functions(splits: tuple[tuple[_Split, float], ...]) -> dict[str, tuple[tuple[str, float], ...]]:
    """Each part's innermost functions, in ns as each split turned its weights into ns, most first."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for split, total_ns in splits:
        w = split.total
        for (part, f), v in split.functions.items():
            out[part][f] += total_ns * v / w if w else 0.0
    return {part: tuple(sorted(fs.items(), key=lambda kv: -kv[1])[:TOP_FUNCTIONS]) for part, fs in out.items()}


def _background(times: tuple[ThreadTime, ...], tids: set[int], profile: Profile) -> tuple[tuple[str, int], ...]:
    """The other threads' CPU by their name (Performance Schema's where known, else comm)."""
    names = {t.os_tid: t.name for t in profile.perf_schema.threads if t.os_tid and t.name}
    by_name: dict[str, int] = defaultdict(int)
    own = set(profile.perf_schema.own_os_tids)
    for t in times:
        if t.tid in tids or t.on_cpu_ns <= 0:
            continue
        name = "mysqlprobe's connections" if t.tid in own else (names.get(t.tid) or t.comm or "?")
        by_name[name] += t.on_cpu_ns
    return tuple(sorted(by_name.items(), key=lambda kv: -kv[1]))


def _efficiency(profile: Profile, load: list[ThreadTime], background: tuple[tuple[str, int], ...],
                rows: int | None) -> Efficiency | None:
    if not rows:
        return None
    status = profile.perf_schema.server_status
    fg = sum(t.on_cpu_ns for t in load)
    bg = sum(ns for name, ns in background if name != "mysqlprobe's connections")
    switches = sum(t.voluntary + t.involuntary for t in load)
    written = profile.process.write_bytes

    def counter(name: str) -> float | None:
        return status[name] / rows if name in status else None

    return Efficiency(fg / 1e3 / rows, bg / 1e3 / rows, switches / rows,
                      written / 1024 / rows if written is not None else None,
                      counter("Innodb_data_fsyncs"), counter("Innodb_os_log_written"))
