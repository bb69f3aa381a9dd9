"""Does switching the quiet phases' Performance Schema setup stall the load?

Under a load of bench/oltp.py (default: oltp_write_only, 8 clients,
MariaDB 10.2.11), the window's setup on (PerfSchema.enable); then, again
and again: a second of the load as it is, the quiet phases' part switched
off (PerfSchema.quiet(True)), a second, switched back on, a second. The
server's rows changed are read every 50 ms throughout; each step after a
switch is set against the median step of the steady seconds. A switch
that stalled the load would show as steps well under 1 right after it.

    sudo .venv/bin/python bench/ps_switch.py [--switches 12] [--shape 3]

writes its section of bench/RESULTS.md (and results.json)."""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone

from mysqlprobe.lab.benchkit.loads import Load, SHAPES
from mysqlprobe.lab.benchkit import bench_parser, log, machine, run_line, write_results
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.perfschema.perfschema import PerfSchema, rows_changed

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


def main() -> None:
    ap = bench_parser(__doc__, switches=12, shape=3)
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
              "command": f"bench/ps_switch.py --switches {args.switches} --shape {args.shape}",
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


if __name__ == "__main__":
    main()
