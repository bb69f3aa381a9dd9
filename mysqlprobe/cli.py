"""Command line: `mysqlprobe [record options]` or `mysqlprobe COMMAND ...`.

Errors the user can act on print one line on stderr and exit with their own
code (mysqlprobe/errors.py); -v adds the traceback."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import os
import sys
import threading

from mysqlprobe import __version__
from mysqlprobe.errors import (EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, Interrupted, MysqlprobeError, exit_help,
                               take_notes)
from mysqlprobe.recorder.priority import START_PRIORITY, asked_start_nice
from mysqlprobe.recorder.window import RunSignals

DESCRIPTION = ("Where an INSERT's time goes inside mysqld: eBPF uprobe latency histograms of the "
               "partitioning layer, InnoDB row insert, page checksums and compression, per partition.")


# captures hold statement digests, thread names and the server's setup: private unless asked
PRIVATE_UMASK, SHARED_UMASK = 0o077, 0o022
WRITES_CAPTURES = ("record", "report", "compare", "flamegraph", "demo", "bench", "watch")


def command_module(command: str):
    """Only the command run is imported: a recording's start does not wait
    for the modules of bench, sandbox, compare and the others."""
    if command in LAB_COMMANDS:
        return importlib.import_module(f"mysqlprobe.lab.commands.{command}")
    return importlib.import_module(f"mysqlprobe.commands.{command}")


# one line a command, for the top-level help (known without importing the commands' modules)
SUMMARIES = {
    "record": "profile a running server (the default: `mysqlprobe -p PID`)",
    "report": "the report of a saved capture again: text, --json, --prometheus, --html",
    "compare": "two runs (or repeats of each) per row inserted: what changed and why",
    "flamegraph": "flame graph of a capture or folded file; with two, the differential one; --pprof",
    "watch": "profile all the time within a budget; serve /metrics to Prometheus",
    "sandbox": "start, stop or inspect a sandbox MariaDB (10.1.23, 10.2.11, 10.11.5)",
    "load": "run the seed load on a server",
    "demo": "the sandbox, the seed load, profiled: what `make demo` runs",
    "bench": "a load matrix on one or two servers, a capture per run (A and B alternated)",
}


def commands_help() -> str:
    out = ["commands:"]
    out += [f"  mysqlprobe {name:<12} {SUMMARIES[name]}" for name in COMMANDS]
    out += [f"  mysqlprobe lab {name:<8} {SUMMARIES[name]}" for name in LAB_COMMANDS]
    return "\n".join(out) + "\n  mysqlprobe COMMAND --help   a command's own options\n"


def description(module) -> str:
    """A command module's first paragraph, as one line."""
    first = (module.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(first.split()).removeprefix(f"mysqlprobe {module.__name__.rsplit('.', 1)[-1]}: ")


def build_parser(command: str, module) -> argparse.ArgumentParser:
    prog = ("mysqlprobe" if command == "record" else f"mysqlprobe lab {command}" if command in LAB_COMMANDS
            else f"mysqlprobe {command}")
    epilog = "\n".join(part for part in ((commands_help() if command == "record" else None),
                                         getattr(module, "EXAMPLES", None), exit_help()) if part)
    p = argparse.ArgumentParser(prog=prog, description=description(module) if command != "record" else DESCRIPTION,
                                epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="tracebacks and libbpf messages on errors")
    p.add_argument("--version", action="version", version=f"mysqlprobe {__version__}")
    if command in WRITES_CAPTURES:
        p.add_argument("--shared-output", action="store_true",
                       help="files written 0644 and directories 0755 (default: 0600 and 0700, readable by "
                            "their owner only)")
    module.add_arguments(p)
    return p


COMMANDS = ("record", "report", "compare", "flamegraph", "watch")
# the lab's (mysqlprobe/lab/): sandbox servers and loads, not the product's own
LAB_COMMANDS = ("sandbox", "load", "demo", "bench")
PROFILING_COMMANDS = ("record", "watch")
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 128 * 1024  # mallopt's parameter; glibc's default threshold


def steady_heap() -> bool:
    """Large blocks mapped on their own, and given back whole when freed.

    glibc raises its mmap threshold each time a mapped block is freed (up
    to 32 MB), so that after a few windows the symbol tables, BTF and
    stack tables a window reads land in the heap instead, and the heap's
    holes are not given back: watch with the BPF sampler grew 33 -> 72 MB
    in 20 windows of 4 s. A fixed threshold turns that adjustment off.
    False where the C library has no mallopt (not glibc)."""
    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def lab_argv(argv: list[str]) -> list[str]:
    """`mysqlprobe lab COMMAND ...` as COMMAND ...; the lab's commands given
    at the top level, as before, still run, with a line saying so."""
    if argv and argv[0] == "lab":
        if len(argv) < 2 or argv[1] not in LAB_COMMANDS:
            usage = (f"usage: mysqlprobe lab {{{','.join(LAB_COMMANDS)}}} ...\n\nthe lab: sandbox servers and "
                     "loads to profile, apart from the product\n\n"
                     + "".join(f"  mysqlprobe lab {n:<8} {SUMMARIES[n]}\n" for n in LAB_COMMANDS)
                     + "  mysqlprobe lab COMMAND --help   a command's own options\n")
            if len(argv) == 2 and argv[1] in ("-h", "--help"):
                sys.stdout.write(usage)
                raise SystemExit(0)
            sys.stderr.write(usage)
            raise SystemExit(EXIT_USAGE)
        return argv[1:]
    if argv and argv[0] in LAB_COMMANDS:
        print(f"mysqlprobe: '{argv[0]}' is a lab command now: mysqlprobe lab {argv[0]} (this spelling will go)",
              file=sys.stderr)
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = lab_argv(list(sys.argv[1:] if argv is None else argv))
    command = argv[0] if argv and argv[0] in COMMANDS + LAB_COMMANDS else "record"
    # a recording stopped while its modules load says so in one line, like one stopped later
    signals = RunSignals(threading.Event()) if command == "record" else contextlib.nullcontext()
    try:
        with signals:
            return _main(command, argv)
    except Interrupted as e:
        print(f"mysqlprobe: {e}", file=sys.stderr)
        return e.exit_code


def _main(command: str, argv: list[str]) -> int:
    try:
        return _command(command, argv)
    finally:
        START_PRIORITY.settle()  # called in-process (tests, bench): the caller's thread as it was


def _command(command: str, argv: list[str]) -> int:
    if command in PROFILING_COMMANDS:
        START_PRIORITY.raise_to(asked_start_nice(argv))  # from here: the imports are a part of the start
        steady_heap()
    module = command_module(command)
    if command != "record" or (argv and argv[0] == "record"):
        argv = argv[1:]
    parser = build_parser(command, module)
    args = parser.parse_args(argv)
    if command in PROFILING_COMMANDS:
        START_PRIORITY.raise_to(args.start_nice)
    umask = os.umask(PRIVATE_UMASK)  # the caller's, read by setting one
    if command in WRITES_CAPTURES:
        os.umask(SHARED_UMASK if args.shared_output else PRIVATE_UMASK)  # perf inherits it for perf.data
    else:
        os.umask(umask)
    try:
        return _run(module, args, parser)
    finally:
        os.umask(umask)  # called in-process (tests, bench): leave the caller's as it was


def print_traceback() -> None:
    import traceback  # with -v only: 6 ms of imports
    traceback.print_exc()


def _run(command, args, parser) -> int:
    try:
        code = command.run(args, parser)
    except MysqlprobeError as e:
        take_notes()   # a refusal is one line: what was noticed on the way is not news then
        if args.verbose:
            print_traceback()
        print(f"mysqlprobe: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        take_notes()
        print("mysqlprobe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        take_notes()
        return EXIT_FAILURE
    except Exception as e:  # a bug: still one line unless -v
        take_notes()
        if args.verbose:
            print_traceback()
        print(f"mysqlprobe: internal error: {type(e).__name__}: {e} (run with -v for the traceback)",
              file=sys.stderr)
        return EXIT_FAILURE
    for line in take_notes():
        print(f"mysqlprobe: {line}", file=sys.stderr)
    return int(code)
