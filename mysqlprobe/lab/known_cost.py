"""The known-cost target (tests/fixtures/known_cost.cc) built for the tests
and the bench alike: with its library without frame pointers
(tests/fixtures/frameless.S, libframeless.so beside it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def build_known_cost(fixtures: Path, out_dir: Path, frame_pointers: bool = True) -> Path:
    """g++ known_cost.cc into out_dir/known_cost, linked to out_dir/libframeless.so
    (found there at run time); with frame pointers, as the MariaDB builds keep them."""
    gxx = shutil.which("g++")
    if not gxx:
        raise RuntimeError("building the known-cost target needs g++")
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([gxx, "-shared", "-o", str(out_dir / "libframeless.so"), str(fixtures / "frameless.S")], check=True)
    exe = out_dir / "known_cost"
    subprocess.run([gxx, "-O2", *(["-fno-omit-frame-pointer"] if frame_pointers else []), "-o", str(exe),
                    str(fixtures / "known_cost.cc"), f"-L{out_dir}", "-lframeless", f"-Wl,-rpath,{out_dir}"],
                   check=True)
    return exe
