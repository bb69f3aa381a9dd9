"""What one probe hit costs on this host, measured at start.

A uprobe costs a trap at the function's first instruction and one at its
return. The kernel emulates some first instructions (push, jmp, call) and
single-steps the others out of line, which takes a second trap: on a
virtual machine that can cost ten times more. So each probed function is
classed by its first instruction, and each class is calibrated on a helper
process (probes/calibrate.c) whose functions do nothing:

  entry_ns   wall time one entry probe adds (runs with entry probes only)
  return_ns  wall time the return probe adds (entry+return runs, minus entry)
  inside_ns  the part of both that the probe's own timestamps enclose
             (the latency the probes report for a function that does nothing)

A probed call's corrected latency is its raw latency minus its own
inside_ns and minus entry_ns + return_ns of every probed call nested in it;
the BPF program does the subtraction per call (see uprobe_latency.h)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from mysqlprobe.collectors.uprobes.session import UprobeSession

from typing import Any

import subprocess
import threading
import time

from mysqlprobe import probes
from mysqlprobe.collectors.base import Collector, Cost, Facts, Phases, Section, opened
from mysqlprobe.collectors.kernel.process import cpu_seconds
from mysqlprobe.collectors.target.symbols import load_binary
from mysqlprobe.collectors.uprobes.session import ProbeGroup, ProbeSpec
from mysqlprobe.errors import BpfError
from dataclasses import asdict, dataclass, field

ENDBR64 = b"\xf3\x0f\x1e\xfa"
EMULATED, SINGLE_STEP = "emulated", "single-step"
HELPER_FUNCTION = {EMULATED: "cal_push", SINGLE_STEP: "cal_step"}


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the middle two); the statistics module
    imports fractions and decimal, on the path to the probes' attach."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return float(ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2)


def entry_class(code: bytes) -> str:
    """How the kernel handles a uprobe on the instruction that code starts with."""
    if not code:
        return SINGLE_STEP
    op = code[0]
    if 0x50 <= op <= 0x57 or (op == 0x41 and len(code) > 1 and 0x50 <= code[1] <= 0x57):
        return EMULATED  # push
    if op in (0xE8, 0xE9, 0xEB):
        return EMULATED  # call, jmp
    if op == 0x90:
        return EMULATED  # nop, a USDT site: a hit costs what a push's does (6.18: 600 ns, as bpftrace saw)
    return SINGLE_STEP


def entry_point(path: str, offset: int) -> tuple[int, str]:
    """(bytes to skip, class) for a function at a file offset.

    An endbr64 does nothing unless user-space IBT is enforced, which Linux
    does not do: probing the instruction after it is the same entry, and
    avoids single-stepping it."""
    with open(path, "rb") as f:
        f.seek(offset)
        code = f.read(8)
    skip = 4 if code.startswith(ENDBR64) else 0
    return skip, entry_class(code[skip:])


COST_CLASS = {EMULATED: 1, SINGLE_STEP: 2}  # rows of the BPF costs map


@dataclass
class ClassCost:
    """What a probe of one cost class adds to each call, as calibrated."""

    entry_ns: float
    return_ns: float
    inside_ns: float
    spread_ns: float  # largest distance of a burst's entry + return from their median

    @property
    def pair_ns(self) -> float:
        return self.entry_ns + self.return_ns


@dataclass
class Calibration:
    """The probes' own cost per class, from bursts of a known helper."""

    classes: dict[str, ClassCost]
    bursts: int
    seconds: float
    in_window: int = 0  # bursts taken while the window was open
    # per class, the lowest and highest whole ns the kernel took off: {"own": (lo, hi), "pair": (lo, hi)}
    applied: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    # what the probes cost the target over what the helper measured (duty
    # cycles with a row counter measure it); None when unmeasured
    in_situ: float | None = None
    # bursts of an earlier run on this kernel and CPU the medians started from:
    # {"bursts": n, "taken": unix time}; None when all were measured in this run
    reused: dict[str, Any] | None = None

    def own(self, klass: str) -> float:
        return self.classes[klass].inside_ns if klass in self.classes else 0.0

    def pair(self, klass: str) -> float:
        return self.classes[klass].pair_ns if klass in self.classes else 0.0

    def own_of(self, spec: ProbeSpec) -> float:
        """own() for a probed function: its share of its class's (an entry-only stage probe's is half)."""
        return self.own(spec.entry_class) * spec.cost_share

    def pair_of(self, spec: ProbeSpec) -> float:
        """pair() for a probed function, as own_of()."""
        return self.pair(spec.entry_class) * spec.cost_share

    def to_json(self) -> dict[str, Any]:
        return {"method": "helper process probed in the same BPF session; bursts of timed runs without "
                          "probes, with an entry probe, with entry and return probes; medians of the last "
                          f"{ROLLING} bursts, kept up to date while the window is open",
                "bursts": self.bursts, "bursts_in_window": self.in_window, "seconds": round(self.seconds, 3),
                "in_situ_factor": None if self.in_situ is None else round(self.in_situ, 3), "reused": self.reused,
                "classes": {k: {**{kk: round(vv, 1) for kk, vv in asdict(v).items()},
                                **({"applied_ns": {m: list(r) for m, r in self.applied[k].items()}}
                                   if k in self.applied else {})}
                            for k, v in self.classes.items()}}


ROLLING = 9
FIRST_BURSTS = 5
# a burst agrees with an earlier run's when its entry + return cost is within
# this share of their median, or within three of their median deviations (a
# noisy host's bursts differ more among themselves). A correction is good
# to the share its calibration is off by: at 25% (and three times the
# widest deviation, which one slow burst set) a calibration of 1,185 ns
# taken minutes earlier stood for one of 1,430 here, a 1-us call's
# corrected mean then 20% over
REUSE_TOLERANCE = 0.08
# the one burst that checks an earlier run's calibration: a start's cost
# (10 ms took 25 ms here, on the way to the probes), and about 2,500 probe
# hits a class, against the window's 2 ms bursts that follow every second
REUSE_CHECK_S = 0.004
# check bursts at most before the earlier run's are set aside: on this VM the
# first disagreed in 11 of 43 warm starts, and the second agreed in 8 of those
REUSE_CHECKS = 2


class _Helper:
    def __init__(self) -> None:
        path = probes.helper_path("calibrate")
        try:
            self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        except OSError as e:
            raise BpfError(f"cannot start the calibration helper {path}: {e.strerror}") from None
        # pipes asked for are there
        self.requests, self.replies = opened(self.proc.stdin, "stdin"), opened(self.proc.stdout, "stdout")
        if self.replies.readline().strip() != "ready":
            raise BpfError("the calibration helper did not start")
        self.path = path

    def ns_per_call(self, name: str, calls: int) -> float:
        self.requests.write(f"run {name} {calls}\n")
        self.requests.flush()
        reply = self.replies.readline().split()
        if len(reply) != 2 or reply[0] != "ns":
            raise BpfError(f"calibration helper: unexpected reply {' '.join(reply)!r}")
        return int(reply[1]) / calls

    def close(self) -> None:
        if self.proc.poll() is None:
            self.requests.close()
            self.proc.wait(timeout=10)


class Calibrator:
    """Keeps the kernel's correction calibrated. Its probes on the helper go
    into the same BPF session as the target's (`group`), so a burst measures
    the probes as they cost right then; the costs map follows the rolling
    medians. Use as a context manager around the session."""

    def __init__(self, first_index: int):
        self.started = time.monotonic()
        self.helper = _Helper()
        symbols = load_binary(self.helper.path).symbols
        specs: list[ProbeSpec] = []
        self.index: dict[str, int] = {}
        for klass, name in HELPER_FUNCTION.items():
            for suffix, with_return in (("_entry", False), ("_both", True)):
                (sym,) = symbols.lookup(name + suffix)
                self.index[name + suffix] = first_index + len(specs)
                specs.append(ProbeSpec(first_index + len(specs), sym, with_return=with_return,
                                       entry_class=klass))
        pid = self.helper.proc.pid
        self.group = ProbeGroup(pid, f"/proc/{pid}/exe", tuple(specs))
        self.samples: dict[str, dict[str, list[float]]] = {
            k: {"entry": [], "both": [], "inside": []} for k in HELPER_FUNCTION}
        self.bursts = 0
        self.in_window = 0
        self.applied: dict[str, dict[str, tuple[int, int]]] = {}
        self.in_situ: float | None = None
        self.reused: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # held through the duty cycles' quiet phases: no burst runs in them
        self.gate = threading.Lock()

    def __enter__(self) -> "Calibrator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def burst(self, session: UprobeSession, budget_s: float, in_window: bool = False) -> None:
        """One timed run of each kind per class; each lasts about budget_s."""
        h = self.helper
        for klass, name in HELPER_FUNCTION.items():
            calls = max(20, int(budget_s * 1e9 / max(h.ns_per_call(name + "_both", 20), 1.0)))
            base = h.ns_per_call(name, calls * 10)
            entry = h.ns_per_call(name + "_entry", calls)
            before = session.probe_counts(self.index[name + "_both"])
            both = h.ns_per_call(name + "_both", calls)
            after = session.probe_counts(self.index[name + "_both"])
            n = after.calls - before.calls
            runs = self.samples[klass]
            runs["entry"].append(entry - base)
            runs["both"].append(both - base)
            runs["inside"].append((after.total_ns - before.total_ns) / n - base if n else 0.0)
        self.bursts += 1
        self.in_window += in_window

    def current(self) -> Calibration:
        """Rolling medians. The return probe costs the same whatever the first
        instruction: it is taken where it is most precise, on the emulated class."""
        med = {k: {m: median(v[-ROLLING:]) for m, v in runs.items()}
               for k, runs in self.samples.items() if runs["both"]}
        out = {}
        if EMULATED in med:
            return_ns = max(med[EMULATED]["both"] - med[EMULATED]["entry"], 0.0)
            for klass, m in med.items():
                entry = m["entry"] if klass == EMULATED else max(m["both"] - return_ns, 0.0)
                spread = max(abs(x - m["both"]) for x in self.samples[klass]["both"][-ROLLING:])
                out[klass] = ClassCost(entry, return_ns, max(m["inside"], 0.0), spread)
        return Calibration(out, self.bursts, time.monotonic() - self.started, self.in_window,
                           {k: dict(r) for k, r in self.applied.items()}, self.in_situ, self.reused)

    def apply(self, session: UprobeSession) -> Calibration:
        """Hand the kernel the current costs, in whole ns, and remember their range."""
        cal = self.current()
        for klass, row in COST_CLASS.items():
            if klass in cal.classes:
                own, pair = max(int(cal.own(klass)), 0), max(int(cal.pair(klass)), 0)
                session.set_cost(row, own, pair)
                ranges = self.applied.setdefault(klass, {"own": (own, own), "pair": (pair, pair)})
                for name, v in (("own", own), ("pair", pair)):
                    lo, hi = ranges[name]
                    ranges[name] = (min(lo, v), max(hi, v))
        cal.applied = {k: dict(r) for k, r in self.applied.items()}
        return cal

    def calibrate(self, session: UprobeSession, earlier: dict[str, Any] | None = None, budget_s: float = 0.01) -> Calibration:
        """FIRST_BURSTS bursts; or, given an earlier run's (same kernel and
        CPU: see mysqlprobe.caches), a short burst that the earlier medians
        must agree with, a second where the first did not (one burst that a
        busy moment slowed must not cost a start the whole calibration), else
        the rest are taken too."""
        checks = 0
        while earlier and checks < REUSE_CHECKS:
            self.burst(session, min(budget_s, REUSE_CHECK_S))
            checks += 1
            if self._agrees(earlier["samples"]):
                for klass, runs in self.samples.items():
                    for kind, xs in runs.items():
                        runs[kind] = list(earlier["samples"][klass][kind][-(ROLLING - checks):]) + xs
                self.reused = {"bursts": min(len(r["both"]) for r in self.samples.values()) - checks,
                               "taken": round(earlier["taken"])}
                return self.apply(session)
        for _ in range(FIRST_BURSTS - checks):
            self.burst(session, budget_s)
        return self.apply(session)

    def _agrees(self, earlier: dict[str, Any]) -> bool:
        if set(earlier) != set(self.samples):
            return False
        for klass, runs in self.samples.items():
            past = earlier[klass]["both"][-ROLLING:]
            if not past:
                return False
            middle = median(past)
            spread = median(abs(x - middle) for x in past)
            if abs(runs["both"][-1] - middle) > max(REUSE_TOLERANCE * abs(middle), 3 * spread):
                return False
        return True

    def kept(self) -> dict[str, Any]:
        """The bursts the medians stand on now: for the next run to start from."""
        return {k: {kind: [round(x, 2) for x in xs[-ROLLING:]] for kind, xs in runs.items()}
                for k, runs in self.samples.items() if runs["both"]}

    def follow(self, session: UprobeSession, interval_s: float = 1.0, budget_s: float = 0.002) -> None:
        """Keep calibrating in the background while the window is open."""
        def loop() -> None:
            while not self._stop.wait(interval_s):
                with self.gate:
                    if self._stop.is_set():
                        return
                    try:
                        self.burst(session, budget_s, in_window=True)
                        self.apply(session)
                    except (BpfError, OSError, ValueError):
                        return
        self._thread = threading.Thread(target=loop, name="mysqlprobe-calibrate", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        self.helper.close()



class CalibrationCollector(Collector):
    """The calibration as a collector: prepare() starts the helper (the
    latency collector probes it in its own session and calibrates through
    calibrate()), start() keeps calibrating while the window is open, and
    collect() gives the final figures and the helper's CPU time.

    Quieted: no burst runs in the duty cycles' quiet phases. A burst keeps
    a CPU busy for 5-10 ms a second, preempting the server's threads; in a
    quiet phase that would slow the reference the measured slowdown is set
    against, and its cost would go unseen."""

    name = "calibration"
    # prepared once the samplers run (the probes' cost measured as in the window),
    # before the probes it calibrates; started first, its helper's bursts go on
    phases = Phases(begin=20, prepare=40, start=0, collect=30)
    quiets = True

    def __init__(self, first_index: int, earlier: dict[str, Any] | None = None):
        super().__init__()
        self.first_index = first_index
        self.earlier = earlier  # an earlier run's bursts on this host (mysqlprobe.caches), to start from
        self.calibrator: Calibrator | None = None
        self.session: UprobeSession | None = None
        self._cpu_s: float | None = None
        self._cpu0: float | None = None

    def begin(self) -> None:
        """The helper starts first: the latency collector's load probes it."""
        self.calibrator = Calibrator(self.first_index)

    def prepare(self) -> None:
        if self.calibrator is None:
            self.begin()

    @property
    def live(self) -> Calibrator:
        return opened(self.calibrator, "the calibration helper")

    @property
    def group(self) -> ProbeGroup:
        return self.live.group

    def calibrate(self, session: UprobeSession) -> Calibration:
        self.session = session
        return self.live.calibrate(session, self.earlier)

    def record_in_situ(self, factor: float | None) -> None:
        """What the on-phases showed the probes cost in the target against
        their calibration (None: not measured), for the capture."""
        if factor is not None and self.calibrator is not None:
            self.calibrator.in_situ = factor

    def kept(self) -> dict[str, Any]:
        """The bursts to keep for the next run (after stop())."""
        return self.calibrator.kept() if self.calibrator else {}

    def current(self) -> Calibration:
        return self.live.current()

    def start(self) -> None:
        self._cpu0 = self._helper_cpu_s()
        self.live.follow(opened(self.session, "the session calibrate() is given"))

    def _silence(self, on: bool) -> bool:
        # waits for a burst under way to end: a few ms
        self.live.gate.acquire() if on else self.live.gate.release()
        return True

    def stop(self) -> None:
        self.quiet(False)  # a quiet phase still open ends (nothing if none is)
        cpu = self._helper_cpu_s()
        self._cpu_s = cpu - self._cpu0 if cpu is not None and self._cpu0 is not None else None
        self.live.close()

    def _helper_cpu_s(self) -> float | None:
        return cpu_seconds(self.live.helper.proc.pid)

    def collect(self, facts: Facts) -> Section:
        cost = Cost(cpu_s=self._cpu_s, method="the calibration helper's CPU time in the window (its bursts "
                                              "run on this host, not in the target)")
        return Section(self.name, {"calibration": self.current().to_json()}, list(self.notes), cost)

    def close(self) -> None:
        self.quiet(False)  # a window that failed in a quiet phase: back on
        if self.calibrator:
            self.calibrator.close()
