"""Summaries of folded stacks: samples per thread, the functions with the
most samples on CPU themselves (self) and under them (total)."""

from __future__ import annotations

from typing import Any

import re
from collections import Counter

from mysqlprobe.flamegraphs.folded import Folded

TOP = 15


def function_samples(folded: Folded) -> tuple[Counter[Any], Counter[Any]]:
    """(self, total) samples per function; the root frame (the thread) is
    not a function, and a recursive function counts once per stack."""
    own: Counter[Any] = Counter()
    total: Counter[Any] = Counter()
    for stack, count in folded.stacks.items():
        frames = stack.split(";")[1:]
        if not frames:
            continue
        own[frames[-1]] += count
        for name in set(frames):
            total[name] += count
    return own, total


def thread_samples(folded: Folded) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for stack, count in folded.stacks.items():
        out[stack.split(";", 1)[0]] += count
    return out


def _share(n: int, all_samples: int) -> float:
    return round(n / all_samples, 4) if all_samples else 0.0


def _ranked(counter: Counter[Any], other: Counter[Any], other_name: str, all_samples: int, top: int) -> list[dict[str, Any]]:
    rows = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [{"function": f, "samples": n, "share": _share(n, all_samples),
             f"{other_name}_samples": other[f], f"{other_name}_share": _share(other[f], all_samples)} for f, n in rows]


def stacks_summary(folded: Folded, top: int = TOP) -> dict[str, Any]:
    """Samples per thread, and the top functions by self and by total
    samples (each row with the other measure too)."""
    own, total = function_samples(folded)
    n = folded.total
    return {"threads": [{"thread": t, "samples": c} for t, c in sorted(thread_samples(folded).items(),
                                                                        key=lambda kv: (-kv[1], kv[0]))],
            "top_self": _ranked(own, total, "total", n, top), "top_total": _ranked(total, own, "self", n, top)}


# the probes' own machinery on a stack: the int3 or uretprobe entry into the
# kernel, the uprobe handlers and the BPF programs they run
PROBE_FRAME = re.compile(r"uprobe|uretprobe|bpf_prog|exc_int3|exc_debug|bpf_trampoline")
# of that, what runs at a probed function's breakpoint, its single-step out of line
# (exc_debug) or its return trampoline (the page named [uprobes]), not a BPF program
# on a tracepoint
BREAKPOINT_FRAME = re.compile(r"uprobe|uretprobe|exc_int3|exc_debug")
PROBES = "[mysqlprobe]"


def fold_probe_frames(folded: Folded) -> tuple[Folded, int]:
    """The stacks with the probes' machinery as one [mysqlprobe] frame, the
    samples so folded being the probes' own cost, never the server's work
    (the stacks, and how many samples were folded):

    - taken at a probe's breakpoint or return trampoline: the thread's root
      and [mysqlprobe] only. There the frame-pointer chain is not whole (the
      function's frame is not set up yet, or already gone) while its return
      address is the trampoline's, so the kernel's fixup of pending return
      addresses hands each trampoline on the stack the next one's caller:
      a frame is named for a caller that never called what sits on it;
    - ending in another BPF program (a tracepoint's): its kernel frames,
      from the last user frame on, as [mysqlprobe]."""
    out, folded_samples = Folded(), 0
    for stack, count in folded.stacks.items():
        frames = stack.split(";")
        user = max((i for i, f in enumerate(frames) if not f.endswith("_[k]")), default=-1)
        tail = frames[user + 1:]
        at_breakpoint = (user >= 0 and BREAKPOINT_FRAME.search(frames[user]) and user > 0) or \
            any(BREAKPOINT_FRAME.search(f) for f in tail)
        if at_breakpoint:
            frames = frames[:1] + [PROBES]
            folded_samples += count
        elif tail and any(PROBE_FRAME.search(f) for f in tail):
            frames = frames[:user + 1] + [PROBES]
            folded_samples += count
        key = ";".join(frames)
        out.stacks[key] = out.stacks.get(key, 0) + count
    out.ignored = folded.ignored
    return out, folded_samples


# frames of a client connection's thread: the load's, not the server's background threads
CONNECTION_FRAMES = ("do_handle_one_connection", "handle_one_connection", "do_command", "tp_callback")


# the root of the stacks of mysqlprobe's own connections to the server (its P_S reads): not the load's
OWN_CONNECTION = "mysqlprobe/connection"
# the leaf of an off-CPU stack whose thread was switched out still runnable: it waited for a CPU
WAITING_FOR_CPU = "[waiting for a CPU]"
# the only frame of a wait under way when the off-CPU tracing switched on again after a quiet
# phase (its stack was not taken): the system call the thread was blocked in then, by name or
# number, or '?' where it was not blocked at that moment (runnable)
UNDER_WAY = "[in {}() as tracing switched on]"
_UNDER_WAY = re.compile(r"\[in (.+)\(\) as tracing switched on\]\Z")


def under_way_call(frame: str) -> str | None:
    """The system call an UNDER_WAY frame names, else None."""
    m = _UNDER_WAY.match(frame)
    return m.group(1) if m else None


def is_connection_stack(stack: str) -> bool:
    """A stack of a client connection's thread (its root names it, or a frame
    of the connection loop is on it), mysqlprobe's own connections left out."""
    frames = stack.split(";")
    if frames[0] == OWN_CONNECTION:
        return False
    return "one_connection" in frames[0] or any(f in CONNECTION_FRAMES for f in frames)


def connection_stacks(folded: Folded) -> Folded:
    """The stacks of the client connections' threads only: the load's."""
    out = Folded()
    for stack, count in folded.stacks.items():
        if is_connection_stack(stack):
            out.stacks[stack] += count
    return out
