"""Build: compiles probes/*.bpf.c into the package (probes/build.py)."""

import os
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "probes"))
from build import compile_probes  # noqa: E402


class BuildWithProbes(build_py):
    def run(self):
        super().run()
        compile_probes(os.path.join(self.build_lib, "mysqlprobe", "probes"))


class BuiltHere(Distribution):
    """The BPF objects (CO-RE: one build serves every kernel with BTF) and
    the calibration helper are built here, for x86-64 Linux: installed as
    a platform's files are, so that a wheel carries them to a database host
    with no compiler."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """Tagged for the platform only: no extension module ties it to one Python."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


# collectors/ by concern (docs/architecture.md)
COLLECTOR_ROOMS = ("uprobes", "cpu", "kernel", "perfschema", "safety", "target")

setup(
    name="mysqlprobe",
    version="0.1.0",
    description="Where an INSERT's time goes inside mysqld: eBPF uprobe latency, "
                "per partition, for MySQL and MariaDB",
    python_requires=">=3.11",
    packages=["mysqlprobe", "mysqlprobe.commands", "mysqlprobe.recorder", "mysqlprobe.probes", "mysqlprobe.lab",
              "mysqlprobe.lab.commands", "mysqlprobe.lab.benchkit",
              "mysqlprobe.collectors", *(f"mysqlprobe.collectors.{room}" for room in COLLECTOR_ROOMS),
              "mysqlprobe.analysis", "mysqlprobe.flamegraphs"],
    package_dir={
        "mysqlprobe": "mysqlprobe",
        "mysqlprobe.probes": "probes",
        "mysqlprobe.collectors": "collectors",
        "mysqlprobe.analysis": "analysis",
        "mysqlprobe.flamegraphs": "flamegraphs",
    },
    package_data={"mysqlprobe.probes": ["*.bpf.c", "*.h"], "mysqlprobe.analysis": ["capture_types.json"]},
    install_requires=[
        "PyMySQL>=1.0",
    ],
    # pyelftools and psutil: what the ELF and /proc readers are checked against; ruff and mypy: `make lint`
    extras_require={"test": ["pytest>=7.0", "pyelftools>=0.29", "psutil>=5.9", "ruff>=0.6", "mypy>=1.10",
                             "hypothesis>=6.0"]},
    entry_points={"console_scripts": ["mysqlprobe=mysqlprobe.cli:main"]},
    cmdclass={"build_py": BuildWithProbes, "bdist_wheel": PlatformWheel},
    distclass=BuiltHere,
)
