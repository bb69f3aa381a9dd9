"""BPF programs (C). The build compiles each *.bpf.c next to this file."""

from importlib.resources import files


def object_path(name: str) -> str:
    """Path of a compiled BPF object, e.g. object_path('uprobe_latency')."""
    return str(files(__package__) / f"{name}.bpf.o")


def helper_path(name: str) -> str:
    """Path of a compiled helper program, e.g. helper_path('calibrate')."""
    return str(files(__package__) / name)
