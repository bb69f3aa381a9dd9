"""One error type per way a run can fail, each with its own exit code.

The CLI prints the message as one line on stderr (the traceback only with -v)
and exits with the code, so scripts can tell the cases apart."""

import signal

EXIT_OK = 0
EXIT_FAILURE = 1          # unexpected internal error
EXIT_USAGE = 2            # bad command line (argparse uses 2 too)
EXIT_NO_TARGET = 3        # no such process, or not a mysqld
EXIT_PERMISSION = 4       # not root / missing CAP_BPF, CAP_PERFMON
EXIT_NO_SYMBOLS = 5       # stripped binary without debug symbols
EXIT_BPF = 6              # the BPF object failed to load or attach
EXIT_CAPTURE = 7          # a saved capture cannot be read
EXIT_SANDBOX = 8          # a sandbox server could not be fetched or started
EXIT_WORKLOAD = 9         # the load driver failed
EXIT_OUTPUT = 10          # the output directory cannot be written (checked before attaching; at the
                          # end the capture goes to a fallback directory the message names)
EXIT_INPUT_FILE = 11      # a named input is a FIFO, device or directory, or over its size bound
EXIT_INTERRUPTED = 130    # Ctrl-C before the window opened (128 + SIGINT); SIGTERM gives 143,
                          # SIGHUP 129: a run stopped before its window records nothing


# code -> what it means, for docs/cli.md's table and the commands' --help (scripts/exit_codes.py writes the table)
EXIT_MEANINGS: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "internal error (a bug: please report it with `-v` output)",
    EXIT_USAGE: "bad command line",
    EXIT_NO_TARGET: "no such process, not a MySQL/MariaDB server, or its binary cannot be read",
    EXIT_PERMISSION: "permission: attaching needs root (CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN); "
                     "the line names what is missing",
    EXIT_NO_SYMBOLS: "stripped binary and no debug symbols (with `--strict` or `--list`), or a debug file "
                     "that is not the binary's: the line names the stages lost and what to install",
    EXIT_BPF: "BPF load or attach failed",
    EXIT_CAPTURE: "a capture that cannot be read: not a capture, a field of the wrong shape, a number out of "
                  "its range, or nested too deep; the line names the field",
    EXIT_SANDBOX: "sandbox server could not be fetched or started (lab)",
    EXIT_WORKLOAD: "load driver failed (lab)",
    EXIT_OUTPUT: "output cannot be written: `-o` is checked before anything is attached; should writing fail "
                 "at the end anyway (a full disk), the capture is saved whole in a fallback directory the "
                 "message names",
    EXIT_INPUT_FILE: "an input that is no regular file (a FIFO, a device, a directory, a symbolic link inside "
                     "a capture) or over its size bound",
    EXIT_INTERRUPTED: "stopped by SIGINT (129 SIGHUP, 143 SIGTERM) before the window opened, or by a second "
                      "signal while the capture is written: nothing recorded, nothing left attached",
}


def exit_table() -> str:
    """The exit codes as docs/cli.md's Markdown table."""
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {code} | {meaning} |" for code, meaning in sorted(EXIT_MEANINGS.items())]
    return "\n".join(rows) + "\n"


def exit_help() -> str:
    """The exit codes, a line each, for the end of a command's --help."""
    return "exit codes:\n" + "".join(f"  {code:<4} {meaning.split(':')[0].split(' (')[0]}\n"
                                     for code, meaning in sorted(EXIT_MEANINGS.items()))


class MysqlprobeError(Exception):
    """An error the user can act on; its message is the whole story."""

    exit_code = EXIT_FAILURE
    errno: int | None = None   # the system's error number, where one is behind it


class UsageError(MysqlprobeError):
    exit_code = EXIT_USAGE


class TargetError(MysqlprobeError):
    exit_code = EXIT_NO_TARGET


class PermissionProblem(MysqlprobeError):
    exit_code = EXIT_PERMISSION


class NoSymbolsError(MysqlprobeError):
    """lost: the stages that cannot be probed; fix: what would give the symbols."""
    exit_code = EXIT_NO_SYMBOLS

    def __init__(self, message: str, lost: list[str] | None = None, fix: str = ""):
        super().__init__(message)
        self.lost, self.fix = lost or [], fix


class BpfError(MysqlprobeError):
    exit_code = EXIT_BPF


class CaptureError(MysqlprobeError):
    exit_code = EXIT_CAPTURE


class SandboxError(MysqlprobeError):
    exit_code = EXIT_SANDBOX


class WorkloadError(MysqlprobeError):
    exit_code = EXIT_WORKLOAD


class OutputError(MysqlprobeError):
    exit_code = EXIT_OUTPUT


class InputFileError(MysqlprobeError):
    exit_code = EXIT_INPUT_FILE


class Interrupted(MysqlprobeError):
    """A signal before the window opened (or a second one while the capture
    was written): the run stops; the collectors have closed on the way out."""

    def __init__(self, signum: int, phase: str):
        self.signum, self.phase = signum, phase
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name} while {phase}; nothing was recorded")


# what a reader noticed about its input (lines skipped, stacks cut): said once the command has done its work,
# and not at all when it fails, so that a refusal is one line (cli.py)
_NOTES: list[str] = []


def note(message: str) -> None:
    _NOTES.append(message)


def take_notes() -> list[str]:
    out = _NOTES[:]
    _NOTES.clear()
    return out
