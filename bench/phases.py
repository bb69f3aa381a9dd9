"""The duty cycles seen from outside: the load's speed through each phase, and whether switching P_S for the quiet phases stalls it.

    sudo .venv/bin/python bench/phases.py profile [--help]
    sudo .venv/bin/python bench/phases.py ps-switch [--help]

profile: The load's speed through mysqlprobe's duty cycles, seen from outside:
the server's rows changed (Handler_write + _update + _delete) polled about
50 times a second on a connection of its own, set against the times of
each phase that the mysqlprobe process logs (bench/phase_log.py wraps its
duty cycles and changes nothing else), and against unprobed blocks
between the profiled ones.

ps-switch: Does switching the quiet phases' Performance Schema setup stall the load?"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mysqlprobe.collectors.perfschema.settings import PerfSchema, rows_changed

from mysqlprobe.lab import sandbox, workload
from mysqlprobe.lab.benchkit import (HERE, Tool, bench_parser, derived, log, machine, measure_of, med, run_line,
                                     run_subcommand, spread, write_results)
from mysqlprobe.lab.benchkit.loads import SHAPES, Blocks, CounterPoll, Load, unprobed_block

# --------------------------------------------------------------------------- profile

DOC_PROFILE = """The load's speed through mysqlprobe's duty cycles, seen from outside:
the server's rows changed (Handler_write + _update + _delete) polled about
50 times a second on a connection of its own, set against the times of
each phase that the mysqlprobe process logs (bench/phase_log.py wraps its
duty cycles and changes nothing else), and against unprobed blocks
between the profiled ones.

It shows where a quiet phase's speed stands against the load unprobed,
and how it changes with the time since the probes came off: the reference
that the reported slowdown is set against.

    sudo .venv/bin/python bench/phases.py profile [--rounds 6] [--seconds 16] [--shape 0]
        [--variants 'default;--no-perf-schema']

--variants: mysqlprobe's options beyond --insert-profile, one set per
variant (`default`: none; `patch=NAME`: one of bench/phase_log.py's
PATCHES), taken in turn, a profiled block each. Writes its section of bench/RESULTS.md (and results.json) (--name: a section of its own)."""

POLL_S = 0.02
SETTLE_S = 1.0   # after a profiled block, before the unprobed one counts
SINCE = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.5, 60.0)  # bins of seconds since the probes came off
KINDS = ("probed", "quiet first half", "quiet second half", "ordinary", "burst")


class FinePoll(CounterPoll):
    """The server's rows changed as a RateLog, and as (time, rows) points,
    each at the middle of its query."""

    def __init__(self, socket: str):
        self.points: list[tuple[float, int]] = []
        super().__init__(socket, rows_changed, POLL_S)

    def reading(self, now: float, count: int) -> None:
        super().reading(now, count)
        self.points.append((now, count))


def profiled_block(pid: int, seconds: float, workdir: Path, variant: str) -> dict:
    """mysqlprobe's insert profile over `seconds` of the load, its phases
    logged: the events, the window's span and its overhead figures."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    events = out / "events.jsonl"
    words = [] if variant == "default" else variant.split()
    patches = [w[len("patch="):] for w in words if w.startswith("patch=")]
    patch = {"PHASE_LOG_PATCH": patches[-1]} if patches else {}
    extra = [w for w in words if not w.startswith("patch=")]
    tool = Tool([sys.executable, str(HERE / "phase_log.py"), "-p", str(pid), "--insert-profile", *extra, "-q", "-o",
                 str(out / "capture")], "Tracing PID", "stderr",
                env={**os.environ, "PHASE_LOG": str(events), **patch})
    time.sleep(seconds)
    tool.stop()
    overhead = derived(out / "capture")["overhead"]
    return {"variant": variant, "events": [json.loads(line) for line in events.read_text().splitlines()],
            "reported": measure_of(overhead), "reference": overhead.get("measured_against")}


def spans(events: list[dict]) -> list[tuple[float, float, str, float]]:
    """The window cut into (start, end, kind, seconds since the probes came
    off at start); kinds are KINDS."""
    out, t_off, quiet, burst, middle = [], None, False, None, None
    t_on = next(e["t"] for e in events if e["event"] == "window")  # the first on-phase is open then
    for e in events:
        ev, t = e["event"], e["t"]
        if ev == "detached" and t_on is not None:
            out.append((t_on, t, "probed", 0.0))
            t_on, t_off, quiet, burst, middle = None, t, False, None, None
        elif ev == "quiet" and e["on"] and e["took"]:
            quiet = True
        elif ev == "burst" and e["on"] and e["took"] and t_off is not None:
            burst = t
        elif ev == "burst" and not e["on"] and burst is not None:
            out.append((burst, t, "burst", burst - t_off))
            t_off, burst = t, None  # the rest of the off-phase is ordinary
        elif ev == "quiet_middle":
            middle = e["at"]
        elif ev in ("attach", "window_end") and t_off is not None:
            if burst is not None:
                out.append((burst, t, "burst", burst - t_off))
            elif quiet and middle:
                out.append((t_off, middle, "quiet first half", 0.0))
                out.append((middle, t, "quiet second half", middle - t_off))
            else:
                out.append((t_off, t, "quiet first half" if quiet else "ordinary", 0.0))
            t_off = None
            t_on = t if ev == "attach" else None
    return out


def classify(points: list[tuple[float, int]], cut: list[tuple[float, float, str, float]], off_starts: list[float]):
    """Each poll interval that lies inside one span: (kind, seconds since
    the probes last came off, seconds, rows)."""
    out, j = [], 0
    for (t0, r0), (t1, r1) in zip(points, points[1:]):
        while j < len(cut) and cut[j][1] < t0:
            j += 1
        if j < len(cut) and cut[j][0] <= t0 and t1 <= cut[j][1]:
            kind = cut[j][2]
            since = t0 - max((s for s in off_starts if s <= t0), default=t0)
            out.append((kind, since, t1 - t0, r1 - r0))
    return out


def block_figures(poll: FinePoll, block: dict, before: float, after: float) -> dict:
    """A profiled block's speeds by kind of phase (and by time since the
    probes came off, for quiet and ordinary phases) over the unprobed
    blocks' mean speed: above 1, slower than unprobed."""
    events = block["events"]
    cut = spans(events)
    off_starts = [e["t"] for e in events if e["event"] == "detached"]
    intervals = classify(poll.points, cut, off_starts)
    unprobed = (before + after) / 2
    w0 = next(e["t"] for e in events if e["event"] == "window")
    w1 = next(e["t"] for e in events if e["event"] == "window_end")
    by_kind, by_since = {}, {}
    for kind in KINDS:
        s = sum(i[2] for i in intervals if i[0] == kind)
        r = sum(i[3] for i in intervals if i[0] == kind)
        by_kind[kind] = {"s": round(s, 3), "rows": r, "lag": round(unprobed / (r / s), 4) if r and s else None}
    for kind in ("quiet", "ordinary"):
        for lo, hi in zip(SINCE, SINCE[1:]):
            sel = [i for i in intervals if i[0].startswith(kind) and lo <= i[1] < hi]
            s, r = sum(i[2] for i in sel), sum(i[3] for i in sel)
            by_since[f"{kind} {lo}-{hi}s"] = round(unprobed / (r / s), 4) if r and s else None
    window_rate = poll.log.rate(w0, w1)
    return {"variant": block["variant"],
            "felt": round(unprobed / window_rate, 4) if window_rate else None, "reported": block["reported"],
            "reference": block["reference"], "unprobed_rate": round(unprobed, 1), "by_kind": by_kind,
            "by_since": by_since}


def run(args) -> dict:
    shape = SHAPES[args.shape]
    workdir = Path(tempfile.mkdtemp(prefix="mysqlprobe-phases-"))
    sb = sandbox.Sandbox("10.2.11")
    result = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
              "command": f"bench/phases.py profile --rounds {args.rounds} --seconds {args.seconds} --shape {args.shape}"
                         + (f" --variants '{args.variants}'" if args.variants != "default" else ""),
              "shape": shape.name, "poll_s": POLL_S, "blocks": []}
    with sb.serving(log) as pid:
        load = Load(sb, shape)
        load.prepare()
        load.start()
        poll = FinePoll(sb.socket)
        try:
            blocks, profiled, variants = Blocks(), [], args.variants.split(";")
            unprobed_block(blocks, args.seconds, SETTLE_S)
            for i in range(args.rounds):
                load.check()
                profiled.append(profiled_block(pid, args.seconds, workdir, variants[i % len(variants)]))
                unprobed_block(blocks, args.seconds, SETTLE_S)
                log(f"round {i + 1}/{args.rounds}: unprobed {poll.log.rate(*blocks.spans[-2][1:3]):.0f} and "
                    f"{poll.log.rate(*blocks.spans[-1][1:3]):.0f} rows/s")
            unprobed = [poll.log.rate(t0, t1) for _, t0, t1, _ in blocks.spans]
            for i, block in enumerate(profiled):
                result["blocks"].append(block_figures(poll, block, unprobed[i], unprobed[i + 1]))
            result["noise"] = [round(((a + c) / 2) / b, 4) for a, b, c in zip(unprobed, unprobed[1:], unprobed[2:])]
        finally:
            poll.stop()
            load.close()
    return result


def render(result: dict) -> str:
    def cell(xs):
        xs = [x for x in xs if x is not None]
        return f"{med(xs):.3f} ({spread(xs)[0]:.3f}-{spread(xs)[1]:.3f})" if xs else "-"

    blocks = result["blocks"]
    lines = ["# The load's speed through the duty cycles, from outside", "",
             run_line(result), "",
             f"Load: {result['shape']} on MariaDB 10.2.11, one run without a break; {len(blocks)} profiled blocks "
             f"between unprobed ones. The server's rows changed polled every {result['poll_s']} s on a connection "
             "of the bench's; each poll interval that lies inside one phase counts for it. lag: the unprobed "
             "blocks' mean rate on either side over the rate in those intervals (above 1: slower than unprobed). "
             "Medians (min-max) over the blocks. "
             f"Noise (unprobed blocks against their neighbours): {cell(result.get('noise') or [])}."]
    for variant in dict.fromkeys(b.get("variant", "default") for b in blocks):
        mine = [b for b in blocks if b.get("variant", "default") == variant]
        lines += ["", f"## mysqlprobe --insert-profile {'' if variant == 'default' else variant}".rstrip()
                  + f" ({len(mine)} blocks)", "", "| phase | seconds a block | lag |", "|---|---|---|"]
        for kind in KINDS:
            lines.append(f"| {kind} | {med([b['by_kind'][kind]['s'] for b in mine]):.2f} | "
                         f"{cell([b['by_kind'][kind]['lag'] for b in mine])} |")
        lines += ["", f"Whole window (felt): {cell([b['felt'] for b in mine])}; mysqlprobe reported "
                  f"{cell([b['reported'] for b in mine])} (against "
                  f"{', '.join(sorted({str(b['reference']) for b in mine}))}).", "",
                  "By the time since the probes came off (off-phases only):", "",
                  "| since | quiet | ordinary |", "|---|---|---|"]
        for lo, hi in zip(SINCE, SINCE[1:]):
            lines.append(f"| {lo}-{hi} s | {cell([b['by_since'][f'quiet {lo}-{hi}s'] for b in mine])} | "
                         f"{cell([b['by_since'][f'ordinary {lo}-{hi}s'] for b in mine])} |")
    if result.get("note"):
        lines += ["", result["note"]]
    return "\n".join(lines) + "\n"


def main_profile() -> int:
    ap = bench_parser(DOC_PROFILE, rounds=6, seconds=16, shape=0)
    ap.add_argument("--variants", default="default")
    ap.add_argument("--name", default="phase_profile")
    ap.add_argument("--note")
    args = ap.parse_args()
    result = run(args)
    if args.note:
        result["note"] = args.note
    write_results(args.out, args.name, result, render)
    return 0



# --------------------------------------------------------------------------- ps-switch

DOC_PS_SWITCH = """Does switching the quiet phases' Performance Schema setup stall the load?

Under a load of bench/oltp.py (default: oltp_write_only, 8 clients,
MariaDB 10.2.11), the window's setup on (PerfSchema.enable); then, again
and again: a second of the load as it is, the quiet phases' part switched
off (PerfSchema.quiet(True)), a second, switched back on, a second. The
server's rows changed are read every 50 ms throughout; each step after a
switch is set against the median step of the steady seconds. A switch
that stalled the load would show as steps well under 1 right after it.

    sudo .venv/bin/python bench/phases.py ps-switch [--switches 12] [--shape 3]

writes its section of bench/RESULTS.md (and results.json)."""

STEP_S = 0.05
SHOWN_STEPS = 10  # the first half second after a switch


def steps(conn, seconds: float) -> list[int]:
    """Rows changed in each STEP_S for `seconds`."""
    out, end, prev = [], time.monotonic() + seconds, rows_changed(conn)
    while time.monotonic() < end:
        time.sleep(STEP_S)
        now = rows_changed(conn)
        out.append(now - prev)
        prev = now
    return out


def main_ps_switch() -> None:
    ap = bench_parser(DOC_PS_SWITCH, switches=12, shape=3)
    args = ap.parse_args()
    shape, sb = SHAPES[args.shape], sandbox.Sandbox("10.2.11")
    started = datetime.now(timezone.utc)
    steady, after_off, after_on, took = [], [], [], []
    with sb.serving(log):
        load = Load(sb, shape)
        load.prepare()
        load.start()
        ps = None
        try:
            time.sleep(4.0)  # past the load's start
            conn = workload.connect(sb.socket)
            ps = PerfSchema(workload.connect(sb.socket))
            ps.enable()
            for _ in range(args.switches):
                steady += steps(conn, 1.0)
                for on, into in ((True, after_off), (False, after_on)):
                    t0 = time.monotonic()
                    ps.quiet(on)
                    took.append(time.monotonic() - t0)
                    into.append(steps(conn, 1.0))
        finally:
            if ps:
                ps.restore()
            load.close()
    base = statistics.median(steady)

    def shares(runs: list[list[int]]) -> list[float]:
        return [round(statistics.median(step) / base, 3) for step in list(zip(*runs))[:SHOWN_STEPS]]

    result = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "shape": shape.name,
              "command": f"bench/phases.py ps-switch --switches {args.switches} --shape {args.shape}",
              "rows_per_step": base, "switch_ms": [round(t * 1000, 1) for t in took],
              "after_off": shares(after_off), "after_on": shares(after_on)}
    write_results(args.out, "ps_switch", result, markdown)


def markdown(r: dict) -> str:
    ms = r["switch_ms"]
    return "\n".join([
        "# Does switching the quiet phases' P_S setup stall the load?", "",
        run_line(r), "",
        f"Load: {r['shape']} on MariaDB 10.2.11, the window's Performance Schema setup on. The server's rows changed "
        f"read every {int(STEP_S * 1000)} ms; each step after a switch over the median step of the steady seconds "
        f"({r['rows_per_step']} rows), median over the {len(ms) // 2} switches each way. Under 1: the load slower "
        "than with the setup steadily on.", "",
        "| after | " + " | ".join(f"+{(i + 1) * int(STEP_S * 1000)} ms" for i in range(len(r["after_off"]))) + " |",
        "|---|" + "---|" * len(r["after_off"]),
        "| switched off (quiet) | " + " | ".join(f"{x:.2f}" for x in r["after_off"]) + " |",
        "| switched on again | " + " | ".join(f"{x:.2f}" for x in r["after_on"]) + " |", "",
        f"- the switch's statements took {statistics.median(ms):.1f} ms (median; {min(ms):.1f}-{max(ms):.1f})", ""])


SUBCOMMANDS = {"profile": (main_profile, DOC_PROFILE), "ps-switch": (main_ps_switch, DOC_PS_SWITCH)}


if __name__ == "__main__":
    raise SystemExit(run_subcommand(__doc__, SUBCOMMANDS))
