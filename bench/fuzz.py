"""The readers' coverage-guided fuzzing campaign (atheris, libFuzzer's
engine): inputs are a capture's profile.json and stacks.folded, mutated
from real captures, put through report (text, --json=all, --prometheus),
compare and flamegraph in-process (mysqlprobe/lab/fuzzkit.py). Any run
that ends other than in exit 0, 7 or 11 in one line, or prints a number
that is not finite, is a crash: its input is kept and the campaign stops.
libFuzzer's -rss_limit_mb holds every input to the readers' memory
ceiling.

    make fuzz                                # 10 minutes, the "fuzz" section of bench/RESULTS.md
    .venv/bin/python bench/fuzz.py --seconds 60 --no-results
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mysqlprobe.lab.benchkit import bench_parser, machine, run_line, write_results

ROOT = Path(__file__).resolve().parents[1]
SEPARATOR = b"\n#mysqlprobe-fuzz: stacks.folded follows#\n"
CEILING_MB = 512
MAX_LEN = 1 << 20      # libFuzzer's default largest input
COMMANDS = (("report", "DIR"), ("report", "DIR", "--json=all"), ("report", "DIR", "--prometheus"),
            ("compare", "DIR", "DIR"), ("flamegraph", "DIR", "-o", "OUT/f.svg"))


def seeds(into: Path) -> int:
    """Seed inputs: the test fixtures' captures, and the bench's real ones where this machine has them."""
    stacks = b"sql/one_connection;do_command;row_insert_for_mysql 7\nsql/one_connection;[k] schedule 3\n"
    docs = [p.read_bytes() for p in sorted((ROOT / "tests" / "fixtures").glob("profile_*.json"))]
    real = [p for p in sorted(Path(tempfile.gettempdir()).glob("*/*/range-100/*/profile.json"))
            if p.stat().st_size < MAX_LEN - 30000]     # whole: a cut one is only a JSON error
    for p in real[:6]:
        folded = p.with_name("stacks.folded")
        docs.append(p.read_bytes() + SEPARATOR + (folded.read_bytes()[:20000] if folded.exists() else stacks))
    into.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(docs):
        (into / f"seed-{i}").write_bytes(doc if SEPARATOR in doc else doc + SEPARATOR + stacks)
    return len(docs)


def target() -> None:
    """Run by libFuzzer in this process: one input, judged."""
    import atheris
    # what the readers run, loaded first, then instrumented for coverage (the commands import lazily)
    import mysqlprobe.analysis.html_report  # noqa: F401
    import mysqlprobe.analysis.prometheus  # noqa: F401
    import mysqlprobe.analysis.report  # noqa: F401
    import mysqlprobe.commands.compare  # noqa: F401
    import mysqlprobe.commands.flamegraph  # noqa: F401
    import mysqlprobe.commands.report  # noqa: F401
    from mysqlprobe.lab import fuzzkit
    atheris.instrument_all()

    def one_input(data: bytes) -> None:
        profile, _, stacks = data.partition(SEPARATOR)
        found = [f"{' '.join(o.command)}: {o.problem}"
                 for o in fuzzkit.run_readers(profile, stacks, COMMANDS) if o.problem]
        if found:
            raise AssertionError("; ".join(found))

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


def campaign(seconds: int, work: Path) -> dict:
    corpus = work / "corpus"
    n_seeds = seeds(corpus)
    began = time.monotonic()
    p = subprocess.run([sys.executable, __file__, "--target", f"-max_total_time={seconds}",
                        f"-rss_limit_mb={CEILING_MB}", "-timeout=60", f"-artifact_prefix={work}/",
                        "-print_final_stats=1", str(corpus)],
                       capture_output=True, text=True, cwd=work)
    log = p.stdout + p.stderr
    (work / "fuzz.log").write_text(log)
    done = re.findall(r"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+).*?rss: (\d+)Mb", log)
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", log))
    crashes = sorted(str(c) for c in work.glob("crash-*")) + sorted(str(c) for c in work.glob("oom-*")) \
        + sorted(str(c) for c in work.glob("timeout-*"))
    last = done[-1] if done else ("0", "0", "0", "0")
    return {"seconds": round(time.monotonic() - began), "seeds": n_seeds,
            "inputs": int(stats.get("number_of_executed_units", last[0])), "coverage_edges": int(last[1]),
            "features": int(last[2]), "peak_rss_mb": int(stats.get("peak_rss_mb", last[3])),
            "corpus": len(list(corpus.iterdir())), "crashes": crashes, "exit": p.returncode,
            "exit_1s": sum("exit 1:" in line for line in log.splitlines() if "AssertionError" in line)}


def markdown(result: dict) -> str:
    held = not result["crashes"] and result["peak_rss_mb"] < CEILING_MB
    return "\n".join([
        "# Fuzzing the capture readers (atheris)",
        "",
        run_line(result),
        "",
        "Inputs: profile.json and stacks.folded of a capture, mutated by libFuzzer from "
        f"{result['seeds']} seeds (the test fixtures and real captures); each through report (text, "
        "--json=all, --prometheus), compare and flamegraph in-process. A crash is any run that ends "
        "other than in exit 0, 7 or 11 in one line, or prints a number that is not finite. "
        f"libFuzzer's -rss_limit_mb={CEILING_MB} holds each input to the readers' memory ceiling.",
        "",
        "| inputs run | time | coverage (edges / features) | corpus kept | crashes (exit 1 or other) | peak RSS | |",
        "|---|---|---|---|---|---|---|",
        f"| {result['inputs']:,} | {result['seconds']} s | {result['coverage_edges']:,} / {result['features']:,} | "
        f"{result['corpus']} | {len(result['crashes'])} | {result['peak_rss_mb']} MB of {CEILING_MB} | "
        f"{'held' if held else 'NOT held'} |",
    ])


def main() -> None:
    if "--target" in sys.argv:
        sys.argv.remove("--target")
        target()
        return
    ap = bench_parser(__doc__ or "", seconds=600)
    ap.add_argument("--no-results", action="store_true", help="print the section; leave RESULTS.md as it is")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mysqlprobe-fuzz-campaign-"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result = {**campaign(args.seconds, work), "machine": machine(), "started": started,
              "command": f"bench/fuzz.py --seconds {args.seconds}"}
    print(json.dumps(result, indent=1))
    if args.no_results:
        print(markdown(result))
    else:
        write_results(args.out, "fuzz", result, markdown)
    if result["crashes"]:
        print(f"crash inputs kept in {work}; add each to tests/unit/test_fuzz_readers.py REGRESSIONS",
              file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
