"""A profiler's attaching and detaching, bare: uprobe_multi links of an
empty program on many functions of a library in one process, made and
dropped over and over until this process is killed. With --guard it
starts mysqlprobe's breakpoint guard first and prints its pid.

    python attach_loop.py PID LIBRARY OFFSET[,OFFSET...] [--guard]"""

import os
import sys

from mysqlprobe.collectors import libbpf
from mysqlprobe.collectors.safety.breakpoints import BreakpointGuard


def main() -> None:
    pid, library, offsets = int(sys.argv[1]), sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    guard = BreakpointGuard(pid, library, offsets) if "--guard" in sys.argv else None
    program = libbpf.load_empty_uprobe_program()
    print(f"ready {guard.proc.pid if guard else 0}", flush=True)
    while True:
        os.close(libbpf.uprobe_multi_link(program, pid, library, offsets, [0] * len(offsets)))


if __name__ == "__main__":
    main()
