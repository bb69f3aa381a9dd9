"""The guard processes' plumbing: how mysqlprobe starts one and hands it
what to put back, and how the guard reads that.

A guard starts while mysqlprobe starts, on the same CPUs, so both sides
keep its start small: the guard is run with -c (not -m, whose runpy
imports importlib.util and contextlib), and its state travels as one line
of hex-encoded marshal (json's import brings re and enum: the two cost a
guard 25-30 ms of CPU before it waited for anything). The state is plain
data (dicts, lists, strings, numbers, None) from this process's own pipe.

Protocol on the guard's stdin: the state line; then any number of
"+" lines, each a part of the state learnt since (what is about to change,
before it changes); then "done" when mysqlprobe put everything back itself,
or end of file without it when mysqlprobe is gone."""

from __future__ import annotations

import marshal
import sys

# typing is not imported at run time: a guard waits on two CPUs and imports no more than it needs
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any


def command(module: str, *python_flags: str) -> list[str]:
    """The guard's command line: its module's main(), in an isolated interpreter."""
    return [sys.executable, "-I", *python_flags, "-c", f"import sys; from {module} import main; sys.exit(main())"]


def encode(state: dict[str, Any]) -> str:
    """The state line mysqlprobe writes."""
    return marshal.dumps(state).hex() + "\n"


def receive(stream: IO[str]) -> dict[str, Any]:
    """The state line, in the guard."""
    state: dict[str, Any] = marshal.loads(bytes.fromhex(stream.readline().strip()))
    return state


def told_done(stream: IO[str], state: dict[str, Any] | None = None) -> bool:
    """Wait for mysqlprobe's word (or its end), in the guard; the updates
    meanwhile go into state."""
    for line in stream:
        line = line.strip()
        if line == "done":
            return True
        if line.startswith("+") and state is not None:
            state.update(marshal.loads(bytes.fromhex(line[1:])))
    return False


class GuardProcess:
    """One guard, started with its state."""

    def __init__(self, module: str, state: dict[str, Any]):
        import subprocess  # imported by the caller already; not by the guard
        self.proc = subprocess.Popen(command(module), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.to_guard.write(encode(state))
        self.to_guard.flush()

    @property
    def to_guard(self) -> IO[str]:
        assert self.proc.stdin is not None   # asked for: PIPE
        return self.proc.stdin

    def send(self, update: dict[str, Any]) -> None:
        """More of the state, for the guard to act on should this process die."""
        try:
            self.to_guard.write("+" + encode(update))
            self.to_guard.flush()
        except (OSError, ValueError):  # the guard is gone (or finished): nothing to tell
            pass

    def hand_over(self) -> None:
        """Leave the rest to the guard (no "done"), and do not wait for it:
        it runs on, in a session of its own, until its work is done."""
        try:
            self.to_guard.close()
        except OSError:
            pass

    def finish(self, done: bool, timeout: float = 30) -> None:
        """Tell the guard whether it has anything left to do, and wait for it."""
        if self.proc.poll() is None:
            try:
                self.to_guard.write("done\n" if done else "")
                self.to_guard.close()
            except OSError:
                pass
        self.proc.wait(timeout=timeout)
