"""Dependencies point one way: commands -> recorder -> collectors -> probes,
and analysis/ and flamegraphs/ need nothing from collectors/, recorder/ or
commands/, so reports run without root on saved captures. Every import in
the source tree is parsed, those inside functions too; only imports for
type checkers (under `if TYPE_CHECKING:`) are left out."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# source folder -> package, as setup.py maps them
PACKAGES = {"mysqlprobe": "mysqlprobe", "collectors": "mysqlprobe.collectors", "analysis": "mysqlprobe.analysis",
            "flamegraphs": "mysqlprobe.flamegraphs", "probes": "mysqlprobe.probes"}
BASE = ("mysqlprobe.errors", "mysqlprobe.files")  # and `mysqlprobe` itself (its version), to everyone
# what each layer may import from mysqlprobe (module prefixes)
ALLOWED = {
    "mysqlprobe": BASE,
    "mysqlprobe.__main__": ("*",),
    "mysqlprobe.errors": BASE,
    "mysqlprobe.files": ("mysqlprobe.errors",),
    "mysqlprobe.catalog": BASE,
    "mysqlprobe.elfsections": BASE,
    "mysqlprobe.probes": BASE + ("mysqlprobe.probes", "mysqlprobe.elfsections"),
    "mysqlprobe.flamegraphs": BASE + ("mysqlprobe.flamegraphs",),
    "mysqlprobe.collectors": BASE + ("mysqlprobe.collectors", "mysqlprobe.probes", "mysqlprobe.catalog", "mysqlprobe.sqltext",
                                     "mysqlprobe.elfsections",
                                     "mysqlprobe.flamegraphs.folded", "mysqlprobe.flamegraphs.stacks"),
    "mysqlprobe.analysis": BASE + ("mysqlprobe.analysis", "mysqlprobe.flamegraphs", "mysqlprobe.catalog", "mysqlprobe.sqltext",
                                   "mysqlprobe.probes.abi", "mysqlprobe.probes.histogram"),
    "mysqlprobe.capture": BASE + ("mysqlprobe.flamegraphs.folded",),
    "mysqlprobe.recorder": BASE + ("mysqlprobe.recorder", "mysqlprobe.collectors", "mysqlprobe.probes",
                                   "mysqlprobe.catalog", "mysqlprobe.capture", "mysqlprobe.caches"),
    "mysqlprobe.reports": BASE + ("mysqlprobe.analysis", "mysqlprobe.flamegraphs", "mysqlprobe.capture"),
    "mysqlprobe.output": BASE + ("mysqlprobe.analysis", "mysqlprobe.capture", "mysqlprobe.reports"),
    "mysqlprobe.caches": BASE,
    "mysqlprobe.sqltext": BASE,
    "mysqlprobe.lab": ("*",),
    "mysqlprobe.commands": ("*",),
    "mysqlprobe.cli": ("*",),
}


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(path: Path, module: str) -> set[str]:
    """mysqlprobe modules that module imports when it runs."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking_only(node)
            for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package
                base = module.rsplit(".", node.level)[0]
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module
            found.add(name)
            found |= {f"{name}.{a.name}" for a in node.names}
    return {n for n in found if n == "mysqlprobe" or n.startswith("mysqlprobe.")}


def layer(module: str) -> str:
    return max((k for k in ALLOWED if module == k or module.startswith(k + ".")), key=len)


def _allowed(target: str, prefixes) -> bool:
    if target == "mysqlprobe" or target.startswith("mysqlprobe.__") or "*" in prefixes:
        return True
    # `from mysqlprobe.flamegraphs import folded` names the package, then its module
    return any(target == p or target.startswith(p + ".") or p.startswith(target + ".") for p in prefixes)


ALL = modules()


def test_every_module_has_a_layer():
    assert len(ALL) > 40
    for module in ALL:
        assert layer(module), module


@pytest.mark.parametrize("module", sorted(ALL))
def test_imports_point_one_way(module):
    allowed = ALLOWED[layer(module)]
    wrong = sorted(t for t in imports(ALL[module], module) if not _allowed(t, allowed))
    assert not wrong, f"{module} ({layer(module)}) imports {wrong}"


def test_the_check_catches_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from mysqlprobe.capture import write_capture\n")
    assert not _allowed("mysqlprobe.capture.write_capture", ALLOWED["mysqlprobe.collectors"])
    assert "mysqlprobe.capture" in imports(bad, "mysqlprobe.collectors.bad")
    guarded = tmp_path / "guarded.py"
    guarded.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mysqlprobe.catalog import X\n")
    assert imports(guarded, "mysqlprobe.collectors.guarded") == set()
