"""BPF programs (C). The build compiles each *.bpf.c next to this file."""

import os

# beside this file: the package is installed as files (importlib.resources
# would import typing, 7 ms of every start)
HERE = os.path.dirname(os.path.abspath(__file__))


def object_path(name: str) -> str:
    """Path of a compiled BPF object, e.g. object_path('uprobe_latency')."""
    return os.path.join(HERE, f"{name}.bpf.o")


def helper_path(name: str) -> str:
    """Path of a compiled helper program, e.g. helper_path('calibrate')."""
    return os.path.join(HERE, name)
