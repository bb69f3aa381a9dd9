"""Build: compiles probes/*.bpf.c with clang -target bpf into the package, so
the database host needs neither LLVM nor kernel headers at run time."""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_probes(out_dir):
    clang = os.environ.get("CLANG") or shutil.which("clang")
    if not clang:
        raise SystemExit("building mysqlprobe needs clang (Debian: apt-get install clang libbpf-dev)")
    multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    os.makedirs(out_dir, exist_ok=True)
    for src in sorted(glob.glob(os.path.join(HERE, "probes", "*.bpf.c"))):
        obj = os.path.join(out_dir, os.path.basename(src)[:-2] + ".o")
        cmd = [clang, "-O2", "-g", "-Wall", "-Werror", "-target", "bpf",
               "-I", os.path.join(HERE, "probes"), "-c", src, "-o", obj]
        if multiarch:
            cmd[1:1] = ["-idirafter", f"/usr/include/{multiarch}"]
        print(" ".join(cmd))
        subprocess.run(cmd, check=True)


class BuildWithProbes(build_py):
    def run(self):
        super().run()
        compile_probes(os.path.join(self.build_lib, "mysqlprobe", "probes"))


setup(
    name="mysqlprobe",
    version="0.1.0",
    description="Where an INSERT's time goes inside mysqld: eBPF uprobe latency, "
                "per partition, for MySQL and MariaDB",
    python_requires=">=3.11",
    packages=["mysqlprobe", "mysqlprobe.commands", "mysqlprobe.probes",
              "mysqlprobe.collectors", "mysqlprobe.analysis", "mysqlprobe.flamegraphs"],
    package_dir={
        "mysqlprobe": "mysqlprobe",
        "mysqlprobe.probes": "probes",
        "mysqlprobe.collectors": "collectors",
        "mysqlprobe.analysis": "analysis",
        "mysqlprobe.flamegraphs": "flamegraphs",
    },
    package_data={"mysqlprobe.probes": ["*.bpf.c", "*.h"]},
    install_requires=[
        "pyelftools>=0.29",
        "psutil>=5.9",
        "PyMySQL>=1.0",
    ],
    extras_require={"test": ["pytest>=7.0"]},
    entry_points={"console_scripts": ["mysqlprobe=mysqlprobe.cli:main"]},
    cmdclass={"build_py": BuildWithProbes},
)
