"""Shared test fixtures: compiled stand-in binaries with MySQL's names, and
the tiers (unit tests run anywhere; `root` and `server` tests need root, BPF
and, for `server`, the MariaDB sandboxes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mysqlprobe.lab.known_cost import build_known_cost

import pytest

HERE = Path(__file__).parent
FIXTURE_SRC = HERE / "fixtures" / "mysqld_fixture.cc"
# the installed console script: what a user runs (python -m from the source
# tree would import the unmapped source layout instead)
MYSQLPROBE = str(Path(sys.executable).with_name("mysqlprobe"))
MYSQL_LINES = {"5.6": "MYSQL_56", "5.7": "MYSQL_57", "8.0": "MYSQL_80"}


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (BPF and uprobes)")
    for item in items:
        if "root" in item.keywords or "server" in item.keywords:
            item.add_marker(skip)


def compile_fixture(out_dir: Path, line: str, *extra: str, name: str | None = None) -> Path:
    """g++ the stand-in mysqld for a MySQL line ('5.6', '5.7', '8.0')."""
    gxx = shutil.which("g++")
    assert gxx, "the tests need g++ to build their fixture binaries"
    out = out_dir / (name or f"mysqld-{line}")
    subprocess.run([gxx, "-O2", "-g", f"-D{MYSQL_LINES[line]}", *extra, "-o", str(out), str(FIXTURE_SRC)],
                   check=True)
    return out


def strip_with_debug_file(src: Path, dest_dir: Path, debuglink: bool = True) -> tuple[Path, Path]:
    """A stripped copy of src (dest_dir/mysqld) and its debug info split off
    (dest_dir/mysqld.debug), as distributions ship them: same build-id."""
    objcopy = shutil.which("objcopy")
    assert objcopy, "the tests need binutils (objcopy)"
    debug = dest_dir / "mysqld.debug"
    stripped = dest_dir / "mysqld"
    subprocess.run([objcopy, "--only-keep-debug", str(src), str(debug)], check=True)
    args = [objcopy, "--strip-all"]
    if debuglink:
        args.append(f"--add-gnu-debuglink={debug}")
    subprocess.run(args + [str(src), str(stripped)], check=True)
    return stripped, debug


@pytest.fixture(scope="session", autouse=True)
def working_dir(tmp_path_factory):
    """Runs without -o save into a new directory of the working directory
    (like perf.data): the suite works in a directory of its own."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(before)


# what a person looks at after the run (screenshots of the reports): kept, not in git
ARTEFACTS = Path(os.environ.get("MYSQLPROBE_TEST_ARTEFACTS", HERE.parent / ".test-artefacts"))


@pytest.fixture(scope="session")
def artefacts() -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    return ARTEFACTS


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def mysql_fixtures(fixture_dir) -> dict[str, Path]:
    """Stand-in binaries for MySQL 5.6, 5.7 and 8.0 (PIE, with .symtab)."""
    return {line: compile_fixture(fixture_dir, line) for line in MYSQL_LINES}


@pytest.fixture(scope="session")
def known_cost_binary(fixture_dir) -> Path:
    """The target whose functions cost ~100 ns, ~1 us, ~10 us (tests/fixtures/known_cost.cc)."""
    # frame pointers, as in the MariaDB builds: the off-CPU test reads its user stacks
    return build_known_cost(HERE / "fixtures", fixture_dir)


@pytest.fixture
def known_cost(known_cost_binary):
    """The known-cost target running, ready for commands on its stdin."""
    proc = subprocess.Popen([str(known_cost_binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert json.loads(proc.stdout.readline())["ready"]
    yield proc
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    proc.wait(timeout=10)


DASHBOARD = Path(__file__).parent.parent / "docs" / "grafana" / "mysqlprobe-dashboard.json"


def dashboard_queries(instance: str = ".*", stage: str = "innodb.row_insert", rate: str = "30s") -> dict[str, str]:
    """The Grafana dashboard's PromQL, by panel title and refId, with its
    variables as Grafana would fill them in."""
    doc = json.loads(DASHBOARD.read_text())
    fill = {"$instance": instance, "$stage": stage, "$__rate_interval": rate}
    queries = {}
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in fill.items():
                expr = expr.replace(name, value)
            queries[f"{panel['title']} / {target['refId']}"] = expr
    return queries


MIN_PROBED_CYCLES = 5          # analysis/profile.py's, restated: a mean per call rests on this many cycles
MEAN_WITH_ZERO_P50_NS = 1000   # a mean of a microsecond or more has no 0-ns median


def impossible_figures(capture_dir: Path, hostile: bool = False) -> list[str]:
    """What a capture's printed figures (those not withheld) break of the
    physical bounds, checked here afresh from the saved document: no stage
    longer than its threads x the window, percentiles not negative and in
    order, no 0-ns median under a mean of a microsecond or more, a callee
    whose every call is inside its caller's no slower per call, a sampled
    mean per call from enough duty cycles; the wall-time account's parts
    adding up to its threads' time, which is no more than threads x the
    window. A document the Profile cannot take is itself a failure, but
    where the test wrote it to be refused (hostile)."""
    from mysqlprobe.analysis.model import Profile
    from mysqlprobe.analysis.per_call import SAMPLED_METHODS
    from mysqlprobe.capture import read_profile
    from mysqlprobe.errors import MysqlprobeError
    from mysqlprobe.reports import capture_dir_stacks

    try:
        doc = read_profile(str(capture_dir))
    except MysqlprobeError:
        return []      # not a capture (a test's hostile file, a directory): the test's own assertions judge it
    try:
        profile = Profile(doc, capture_dir_stacks(str(capture_dir), doc))
    except MysqlprobeError as e:   # a refusal in one line (exit 7, or 11 for a file that is not regular)
        return [] if hostile else [f"the Profile refuses it: {e}"]
    except Exception as e:  # noqa: BLE001 - a crash of the analysis on a document: always a failure
        return [f"the Profile cannot be built: {type(e).__name__}: {e}"]
    held = {(v.stage, v.figure) for v in profile.consistency}
    window_ns = doc["window"]["duration_s"] * 1e9
    threads: dict[str, set] = {}
    parents: dict[str, set] = {}
    stage_of = {p["id"]: p.get("stage") or f"probe:{p['name']}" for p in doc.get("probes", [])}
    for p in doc.get("probes", []):
        for c in p.get("callers", []):
            threads.setdefault(stage_of[p["id"]], set()).add(c["tid"])
            parents.setdefault(stage_of[p["id"]], set()).add(stage_of.get(c["parent"]))
    cycles = (doc.get("sampling") or {}).get("calls_per_cycle") or []
    seen_in: dict[str, int] = {}
    for p in doc.get("probes", []):
        n = sum(1 for c in cycles if p["id"] < len(c.get("calls", [])) and c["calls"][p["id"]])
        seen_in[stage_of[p["id"]]] = max(seen_in.get(stage_of[p["id"]], 0), n)
    broken = []
    figures = {f.stage: f for f in profile.figures}
    percentiles = {s.stage: s.percentiles() for s in profile.stages}
    for name, f in figures.items():
        n = len(threads.get(name, ())) or (doc.get("process") or {}).get("threads") or 0
        if (name, "total") not in held and n and f.total_ns > n * window_ns * 1.02:
            broken.append(f"{name}: total {f.total_ns:.0f}ns over {n} thread(s) x {window_ns:.0f}ns")
        values = [x for x in percentiles.get(name, {}).values() if x is not None]
        if (name, "percentiles") not in held and (any(v < 0 for v in values) or values != sorted(values)):
            broken.append(f"{name}: percentiles {values}")
        p50 = percentiles.get(name, {}).get("p50")
        if ((name, "percentiles") not in held and (name, "mean") not in held and f.mean_ns
                and f.mean_ns >= MEAN_WITH_ZERO_P50_NS and p50 == 0):
            broken.append(f"{name}: mean {f.mean_ns:.0f}ns with a 0-ns median")
        if (cycles and (name, "mean") not in held and f.mean_ns and f.per_call.method not in SAMPLED_METHODS
                and seen_in.get(name, 0) < MIN_PROBED_CYCLES):
            broken.append(f"{name}: a mean per call from {seen_in.get(name, 0)} duty cycles")
        callers = parents.get(name) or set()
        parent = next(iter(callers)) if len(callers) == 1 else None
        p = figures.get(parent) if parent else None
        if (p and (name, "mean") not in held and (parent, "mean") not in held and f.mean_ns
                and p.mean_ns and f.calls >= p.calls * 0.98
                and f.mean_ns > p.mean_ns * p.calls / f.calls * 1.05 + 1):
            broken.append(f"{name}: {f.mean_ns:.0f}ns a call inside {parent}'s {p.mean_ns:.0f}ns")
    a = (profile.to_json().get("account") or {})
    span_ns = max(window_ns, ((doc.get("process") or {}).get("seconds") or 0) * 1e9)  # the threads' times' span
    if a:
        parts = sum(m["ns_per_row"] for m in a["mechanisms"]) * (a["rows"] or 0)
        if a["rows"] and abs(parts + a["idle_ns"] + a["probes_ns"] - a["window_wall_ns"]) > 0.01 * a["window_wall_ns"]:
            broken.append(f"account: parts {parts:.0f} + idle + probes != the threads' wall {a['window_wall_ns']}")
        if a["window_wall_ns"] > a["threads"] * span_ns * 1.02:
            broken.append(f"account: {a['window_wall_ns']}ns over {a['threads']} thread(s) x the window")
        if a["on_cpu_ns"] + a["blocked_ns"] + a["runq_ns"] != a["window_wall_ns"]:
            broken.append("account: on CPU + blocked + run queue != wall")
    return broken


# every capture checked once: (path, mtime) of those seen
_CHECKED: set[tuple[str, float]] = set()
_IN_HOSTILE_TEST = [False]   # whether the test running writes documents made to be refused


@pytest.fixture(autouse=True)
def captures_are_physically_possible(request, tmp_path_factory):
    """Every capture any test leaves under pytest's temporary directories
    (a module's or a session's as well as its own tmp_path) keeps the bounds
    in what it prints: checked after each test, each capture once."""
    _IN_HOSTILE_TEST[0] = request.node.get_closest_marker("hostile_captures") is not None
    yield
    base = tmp_path_factory.getbasetemp()
    broken = []
    for p in base.rglob("profile.json"):
        try:
            key = (str(p), p.stat().st_mtime)
        except OSError:
            continue
        if key in _CHECKED:
            continue
        _CHECKED.add(key)
        hostile = request.node.get_closest_marker("hostile_captures") is not None
        broken += [f"{p.parent}: {b}" for b in impossible_figures(p.parent, hostile)]
    assert not broken, broken


# scripts/capture_schema.py's corpus: with MYSQLPROBE_TYPES_CORPUS=DIR, every document a Profile accepts in
# this run (the tests' own synthetic ones as well as the captures) is kept in DIR/N/profile.json
if os.environ.get("MYSQLPROBE_TYPES_CORPUS"):
    from mysqlprobe.analysis import model as _model

    _accepting = _model.Profile.__init__
    _kept = [0]

    def _keep_document(self, doc, stacks=None, recorded_here=False):
        _accepting(self, doc, stacks, recorded_here)
        if _IN_HOSTILE_TEST[0]:
            return
        where = Path(os.environ["MYSQLPROBE_TYPES_CORPUS"]) / f"{os.getpid()}-{_kept[0]}"
        _kept[0] += 1
        where.mkdir(parents=True, exist_ok=True)
        (where / "profile.json").write_text(json.dumps(doc))

    _model.Profile.__init__ = _keep_document  # type: ignore[method-assign]
