"""Compile probes/*.bpf.c with clang -target bpf, and the calibration helper
calibrate.c with cc: `python3 probes/build.py OUT_DIR`.

Used by setup.py when the package builds, so the database host needs neither
LLVM nor kernel headers at run time; only the uapi headers of linux-libc-dev
and libbpf-dev's bpf_helpers.h at build time."""

import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bpf_command(src: str, obj: str) -> list[str]:
    """The clang command that compiles one BPF source into an object."""
    clang = os.environ.get("CLANG") or shutil.which("clang")
    if not clang:
        raise SystemExit("building mysqlprobe needs clang (Debian: apt-get install clang libbpf-dev)")
    gcc = shutil.which("gcc")
    multiarch = subprocess.run([gcc, "-print-multiarch"], capture_output=True, text=True).stdout.strip() if gcc else ""
    cmd = [clang, "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", HERE, "-c", src, "-o", obj]
    if multiarch:
        cmd[1:1] = ["-idirafter", f"/usr/include/{multiarch}"]
    return cmd


def compile_probes(out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    built: list[str] = []
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("building mysqlprobe needs a C compiler for its calibration helper")
    helper = os.path.join(out_dir, "calibrate")
    cmd = [cc, "-O2", "-Wall", "-Werror", "-o", helper, os.path.join(HERE, "calibrate.c")]
    print(" ".join(cmd))
    subprocess.run(cmd, check=True)
    built.append(helper)
    for src in sorted(glob.glob(os.path.join(HERE, "*.bpf.c"))):
        obj = os.path.join(out_dir, os.path.basename(src)[:-2] + ".o")
        cmd = bpf_command(src, obj)
        print(" ".join(cmd))
        subprocess.run(cmd, check=True)
        built.append(obj)
    return built


if __name__ == "__main__":
    compile_probes(sys.argv[1] if len(sys.argv) > 1 else HERE)
