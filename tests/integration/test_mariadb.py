"""The insert profile on real MariaDB servers (10.1.23 XtraDB / MySQL 5.6
line, 10.2.11 InnoDB / 5.7 line, 10.11.5 PIE), the stripped Debian build,
and kill -9 in the middle of a load."""

from __future__ import annotations

import os
import signal
import json
import subprocess
import sys
import threading

import pytest

from conftest import MYSQLPROBE

from helpers import Profiler, kill9_leaves_no_probe, partition_calls, stage, wait_until
from mysqlprobe import catalog, errors
from mysqlprobe.lab import sandbox, workload
from mysqlprobe.collectors.target.symbols import load_binary
from test_perfschema import setup_tables

pytestmark = [pytest.mark.root, pytest.mark.server]
ROWS = 10007           # prime
KILL_ROWS = 300007     # prime, and long enough to be killed in the middle of


@pytest.fixture(scope="module", params=sandbox.VERSIONS)
def server(request):
    sb = sandbox.Sandbox(request.param)
    with sb.serving(lambda m: print(m, file=sys.stderr)) as pid:
        yield sb, pid


@pytest.fixture
def conn(server):
    sb, _ = server
    c = workload.connect(sb.socket)
    yield c
    c.close()


EXPECTED = {
    # stage: (10.1.23, 10.2.11, 10.11.5) qualified names that must be probed
    "partition.write_row": ["ha_partition::write_row"] * 3,
    "innodb.write_row": ["ha_innobase::write_row"] * 3,
    "innodb.row_insert": ["row_insert_for_mysql"] * 3,
    "innodb.page_verify": ["buf_page_is_corrupted"] * 3,
    "innodb.page_compress": ["fil_compress_page", "fil_compress_page", "fil_page_compress"],
    "innodb.page_decompress": ["fil_decompress_page", "fil_decompress_page", "fil_page_decompress"],
}


def test_catalog_against_the_real_binary(server):
    sb, pid = server
    binary = load_binary(f"/proc/{pid}/exe")
    assert binary.server.family == "mariadb" and binary.server.version == sb.version
    assert binary.image.pie == (sb.version == "10.11.5")
    i = sandbox.VERSIONS.index(sb.version)
    for name, per_version in EXPECTED.items():
        res = catalog.resolve_stage(catalog.stage(name), binary.symbols, binary.server)
        assert per_version[i] in {s.name for _, s in res.probes}, name
    res = catalog.resolve_stage(catalog.stage("partition.get_partition_id"), binary.symbols, binary.server)
    names = {s.name for _, s in res.probes}
    assert {"get_partition_id_range", "get_partition_id_list", "get_partition_id_hash_nosub"} <= names
    assert ("vers_get_partition_id" in names) == (sb.version == "10.11.5")
    assert res.missing_expected == [] or res.missing_expected == ["vers_get_partition_id"]
    # the index build's insert method: tuple by tuple on 10.1, bottom-up after; the
    # tuple-by-tuple functions are every row insert's on 10.2+, and not probed there
    for name, function in (("index.tuple_insert", "btr_cur_optimistic_insert"),
                           ("index.bulk_insert", "BtrBulk::insert")):
        res = catalog.resolve_stage(catalog.stage(name), binary.symbols, binary.server)
        wanted = (name == "index.tuple_insert") == (sb.version == "10.1.23")
        assert [s.name for _, s in res.probes] == ([function] if wanted else []), name
    # USDT: only 10.11.5 is built with them; the row insert has 10 sites behind one semaphore
    starts = [p for p in binary.image.usdt if (p.provider, p.name) == ("mysql", "insert__row__start")]
    assert len(starts) == (10 if sb.version == "10.11.5" else 0)
    assert len({p.semaphore for p in starts}) <= 1 and all(p.semaphore and len(p.args) == 2 for p in starts)


@pytest.mark.parametrize("kind", ["range", "list"])
def test_insert_select_counts_match_the_table(server, conn, tmp_path, kind):
    _, pid = server
    t = workload.table(kind, 5)
    workload.prepare_source(conn, ROWS)
    workload.create_target(conn, t)
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact")
    affected, _ = workload.insert_select(conn, t)
    code, out, err = prof.stop()
    assert code == 0, err
    assert affected == ROWS
    truth = workload.partition_counts(conn, t)
    assert sum(truth) == ROWS and all(truth)
    doc = prof.profile()
    for name in ("partition.write_row", "partition.get_partition_id", "innodb.row_insert"):
        s = stage(doc, name)
        assert s["calls"] == ROWS, name
        assert partition_calls(s) == truth, name
    assert stage(doc, "innodb.write_row")["calls"] == ROWS
    assert "row_insert_for_mysql" in out


SAMPLED_ROWS = 2500009  # prime; 4-7 s of load: two duty cycles or more at a 10% budget
# (at the default 5% a first cycle that lost 0.1 s to attaching asks for 2-4 s
# off: such a window may hold one cycle, whose estimate has no interval)
SAMPLED_BUDGET = "10"


def test_default_mode_scales_counts_by_the_rows_the_server_changed(server, conn, tmp_path):
    _, pid = server
    t = workload.table("range", 5)
    workload.prepare_source(conn, SAMPLED_ROWS)
    workload.create_target(conn, t)
    prof = Profiler(pid, tmp_path, "--insert-profile", "--budget", SAMPLED_BUDGET)
    affected, _ = workload.insert_select(conn, t)
    code, out, err = prof.stop()
    assert code == 0, err
    assert affected == SAMPLED_ROWS
    doc = prof.profile()
    sampling = doc["sampling"]
    assert sampling["mode"] == "sampled" and sampling["cycles"] >= 2   # an interval needs two
    assert doc["window"]["rows_changed"] >= SAMPLED_ROWS           # Handler_write counts every row
    cycles = sampling["calls_per_cycle"]
    assert all(c["rows"] is not None for c in cycles)
    # each rows query's calls read on either side, that far apart: within its on-phase's span
    assert all(len(c["read_s"]) == 2 and 0 < min(c["read_s"]) and max(c["read_s"]) < c["on_s"] for c in cycles)
    # measured only where rows changed in the on-phase (an on-phase before the load wrote
    # its first row costs no off-phase), and not where they came 20x slower than unprobed
    # (a load getting under way: duty.MAX_PROBE_SLOWDOWN); a window that ends inside an
    # on-phase leaves that last cycle unpaced
    assert all("lost_s" in c for c in cycles[:-1])
    assert all(c["rows"] for c in cycles[1:] if c.get("lost_s") is not None)
    assert any(c.get("lost_s") is not None for c in cycles)
    factor = doc["calibration"]["in_situ_factor"]
    assert factor is not None                                     # the on-phases measured the probes' cost
    assert factor == 1.0 or "in the on-phases the probes cost the load" in out   # (1.0 read as unmeasured before)
    assert sampling["lost_s"] is not None and 0 <= sampling["lost_s"] < doc["window"]["duration_s"]
    s = stage(doc, "partition.write_row")
    assert s["calls"] < SAMPLED_ROWS                                # probes were off part of the time
    est = s["estimated_calls"]
    low, high = est["ci95"]
    assert abs(est["value"] - SAMPLED_ROWS) < 0.05 * SAMPLED_ROWS, est
    assert low <= SAMPLED_ROWS <= high or abs(est["value"] - SAMPLED_ROWS) < 0.01 * SAMPLED_ROWS, est
    assert "scaled by the server's rows changed" in out
    # CPU bursts sampled the ordinary off-phases; a quiet one only where the quiet
    # phases took more than half the off-time when it opened (the share may fall
    # back to a half later in the window), and then in its first part only
    bursts = doc["cpu_bursts"]
    assert bursts["status"] == "collected" and bursts["on_s"] > 0 and bursts["switch_failures"] == 0
    offs = [o for c in cycles for o in c.get("off", [])]
    assert any(o.get("burst") and not o["quiet"] for o in offs)
    for c in cycles:
        for i, o in enumerate(c.get("off", [])):
            if o.get("burst") and o["quiet"]:
                assert o["quiet_share"] > 0.5, (o, sampling)
                rest = c["off"][i + 1:]
                assert (rest and rest[0]["quiet"] and not rest[0].get("burst")) or o is c["off"][-1], c["off"]
    assert 0 < sampling["burst_rows"] < doc["window"]["rows_changed"]
    # one lookup a row: the calls in the bursts' off-phases are their share of the rows
    lookup = stage(doc, "partition.get_partition_id")["off_phase_cpu"]
    share = sampling["burst_rows"] / doc["window"]["rows_changed"]
    assert lookup["calls"]["value"] == pytest.approx(SAMPLED_ROWS * share, rel=0.1), lookup
    # a binary search over 5 bounds: some samples, tens of ns (a unit or period slip is 1000x off)
    assert lookup["samples"] > 0 and 0 < lookup["mean_ns"] < 1000, lookup
    # this build keeps frame pointers: the bursts took stacks, and a row insert's samples hold its
    # callees (hundreds of ns a call on this load), not its own code alone (about 10 ns)
    assert bursts["stacks"] == "frame pointers" and lookup["callees_included"]
    row_insert = stage(doc, "innodb.row_insert")["off_phase_cpu"]
    assert row_insert["callees_included"] and row_insert["mean_ns"] > 10 * lookup["mean_ns"], row_insert


def test_kill_9_mid_load_leaves_no_probe_and_the_load_completes(server, conn, tmp_path):
    sb, pid = server
    setup_before = setup_tables(sb)
    t = workload.table("range", 5)
    workload.prepare_source(conn, KILL_ROWS)
    workload.create_target(conn, t)
    prof = Profiler(pid, tmp_path, "--insert-profile", "--exact")
    result = {}
    loader = threading.Thread(target=lambda: result.update(rows=workload.insert_select(conn, t)[0]))
    loader.start()
    assert wait_until(lambda: insert_is_running(sb), timeout=10)
    assert loader.is_alive(), "the load ended before mysqlprobe could be killed in its middle"
    kill9_leaves_no_probe(prof, f"/proc/{pid}/", pid)
    loader.join(timeout=300)
    assert result["rows"] == KILL_ROWS
    check = workload.connect(sb.socket)
    assert workload.row_count(check, t) == KILL_ROWS
    check.close()
    # the P_S setup mysqlprobe changed is put back by its guard process
    assert wait_until(lambda: setup_tables(sb) == setup_before, timeout=30)


def insert_is_running(sb) -> bool:
    """The INSERT is running once the server reports it in its processlist."""
    c = workload.connect(sb.socket)
    try:
        with c.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO emp_%'")
            return cur.fetchone()[0] > 0
    finally:
        c.close()


DEBIAN_MARIADBD = "/usr/sbin/mariadbd"


@pytest.fixture(scope="module")
def debian_mariadbd(tmp_path_factory):
    """Debian's stripped mariadbd (package mariadb-server-core), on a private datadir."""
    assert os.path.exists(DEBIAN_MARIADBD), "install Debian's mariadb-server-core for the stripped-binary test"
    home = tmp_path_factory.mktemp("debian-mariadbd")
    sock = home / "sock"
    proc = subprocess.Popen([DEBIAN_MARIADBD, "--no-defaults", f"--datadir={home}", "--user=root",
                             "--skip-networking", f"--socket={sock}", "--skip-grant-tables",
                             f"--log-error={home}/error.log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_until(lambda: sock.exists() or proc.poll() is not None, timeout=60), "Debian mariadbd did not start"
    assert proc.poll() is None, (home / "error.log").read_text()
    yield proc.pid
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_stripped_debian_binary_with_strict_gives_one_clear_line(debian_mariadbd):
    proc = subprocess.run([MYSQLPROBE, "-p", str(debian_mariadbd), "--insert-profile", "--exact", "--strict"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == errors.EXIT_NO_SYMBOLS
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "/usr/sbin/mariadbd is stripped" in lines[0]
    assert "partition.write_row" in lines[0] and "innodb.row_insert" in lines[0]
    assert "mariadb-server-core-dbgsym" in lines[0]
    assert not proc.stdout


def test_stripped_debian_binary_still_records_what_needs_no_symbols(debian_mariadbd, tmp_path):
    proc = subprocess.run([MYSQLPROBE, "-p", str(debian_mariadbd), "--insert-profile", "-d", "2", "-q",
                           "-o", str(tmp_path / "cap")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("mysqlprobe: ")]
    lost = [line for line in said if line.endswith("not probed, no symbols in the stripped /usr/sbin/mariadbd")]
    assert any("innodb.row_insert" in line for line in lost) and any("partition.write_row" in line for line in lost)
    (fix,) = [line for line in said if line.startswith("mysqlprobe: to probe them:")]
    assert "mariadb-server-core-dbgsym" in fix and "--strict" in fix
    doc = json.loads((tmp_path / "cap" / "profile.json").read_text())
    probed = {p["stage"] for p in doc["probes"]}     # what .dynsym names (dispatch_command: statements)
    assert not probed & {"innodb.row_insert", "partition.write_row"}
    assert doc["off_cpu"]["status"] == "collected" and doc["io"]["status"] == "collected"
    assert doc["process"]["seconds"] > 0
    assert any("is stripped" in w for w in doc["warnings"])
    assert "Traceback" not in proc.stderr
