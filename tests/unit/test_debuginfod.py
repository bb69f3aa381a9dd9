"""The debuginfod client against an HTTP server laid out as debuginfod's
(/buildid/ID/debuginfo): fetch, check, cache, and offline from the cache."""

import http.server
import threading
from contextlib import contextmanager
from functools import partial

import pytest

from conftest import compile_fixture, strip_with_debug_file
from mysqlprobe.collectors.target import debuginfod
from mysqlprobe.collectors.target import symbols as S
from mysqlprobe.collectors.target.elf import read_elf
from mysqlprobe.errors import NoSymbolsError
from mysqlprobe.recorder.plan import check_symbols, plan_probes


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serving(root):
    """A static HTTP server on a loopback port, serving root; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def stripped(fixture_dir, tmp_path_factory):
    """A stripped 8.0 stand-in, its debug file and its build-id."""
    src = compile_fixture(fixture_dir, "8.0", name="debuginfod-src")
    out = tmp_path_factory.mktemp("stripped")
    binary, debug = strip_with_debug_file(src, out, debuglink=False)
    return binary, debug, read_elf(str(binary)).build_id


def publish(root, build_id, path):
    entry = root / "buildid" / build_id
    entry.mkdir(parents=True)
    (entry / "debuginfo").write_bytes(path.read_bytes())


def test_fetched_once_then_served_from_the_cache_offline(stripped, tmp_path, monkeypatch):
    binary, debug, build_id = stripped
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(cache))
    publish(tmp_path / "srv", build_id, debug)
    with serving(tmp_path / "srv") as url:
        loaded = S.load_binary(str(binary), debuginfod_urls=[url])
    assert loaded.debug_source == f"debuginfod {url}"
    assert loaded.debug_file == str(cache / build_id / "debuginfo")
    assert loaded.symbols.lookup("row_insert_for_mysql")
    # the server gone: the cache serves, and no temporary file was left beside it
    again = S.load_binary(str(binary), debuginfod_urls=["http://127.0.0.1:9"])
    assert again.debug_source == "debuginfod cache" and again.symbols.lookup("row_insert_for_mysql")
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)   # no server named: still the cache
    assert S.load_binary(str(binary)).debug_source == "debuginfod cache"
    assert [p.name for p in (cache / build_id).iterdir()] == ["debuginfo"]


def test_a_file_of_another_build_is_refused_and_not_cached(stripped, fixture_dir, tmp_path):
    binary, _, build_id = stripped
    other = compile_fixture(fixture_dir, "5.6", name="debuginfod-other")
    publish(tmp_path / "srv", build_id, other)
    cache = tmp_path / "cache"
    with serving(tmp_path / "srv") as url:
        got = debuginfod.fetch_debuginfo(build_id, [url], read_elf, cache=cache)
    assert got.path is None and "not the debug file of build-id" in got.errors[0]
    assert not list((cache / build_id).iterdir())


def test_the_next_server_is_asked_when_one_has_not_it_or_is_down(stripped, tmp_path):
    binary, debug, build_id = stripped
    (tmp_path / "empty").mkdir()
    publish(tmp_path / "srv", build_id, debug)
    with serving(tmp_path / "empty") as empty, serving(tmp_path / "srv") as url:
        got = debuginfod.fetch_debuginfo(build_id, ["http://127.0.0.1:9", empty, url], read_elf,
                                         cache=tmp_path / "cache", timeout=5)
    assert got.path and got.source == url
    assert len(got.errors) == 1 and got.errors[0].startswith("http://127.0.0.1:9: ")  # a 404 is no error


def test_a_large_download_reports_its_progress(stripped, tmp_path, monkeypatch):
    _, debug, build_id = stripped
    publish(tmp_path / "srv", build_id, debug)
    monkeypatch.setattr(debuginfod, "PROGRESS_EVERY", 4096)
    seen = []
    with serving(tmp_path / "srv") as url:
        debuginfod.fetch_debuginfo(build_id, [url], read_elf, cache=tmp_path / "cache",
                                   progress=lambda u, done, total: seen.append((u, done, total)))
    size = debug.stat().st_size
    assert seen and seen[-1] == (url, size, size)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)


def test_nothing_found_says_what_was_asked_and_how_to_get_symbols(stripped, tmp_path, monkeypatch):
    binary, _, _ = stripped
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    with serving(tmp_path / "empty") as url:
        loaded = S.load_binary(str(binary), debuginfod_urls=[url])
    assert loaded.debug_file is None and loaded.debuginfod_errors == []
    plan = plan_probes(loaded, ["partition.write_row"], [])
    error = check_symbols(loaded, plan, ["partition.write_row"])
    assert isinstance(error, NoSymbolsError) and "no debuginfod server asked has it" in str(error)
    assert error.lost == ["partition.write_row"] and "no debuginfod server asked has it" in error.fix
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)
    unasked = S.load_binary(str(binary))
    error = check_symbols(unasked, plan_probes(unasked, ["partition.write_row"], []), ["partition.write_row"])
    assert "set DEBUGINFOD_URLS" in str(error)


def test_urls_and_what_is_printed_of_them():
    env = {"DEBUGINFOD_URLS": "https://a.example/ ftp://no  http://u:secret@b.example"}
    assert debuginfod.server_urls(env=env) == ["https://a.example", "http://u:secret@b.example"]
    assert debuginfod.server_urls("http://c.example", env=env) == ["http://c.example"]
    assert debuginfod.shown("http://u:secret@b.example/buildid/x") == "http://b.example/buildid/x"
    assert debuginfod.cache_dir({"XDG_CACHE_HOME": "/x"}).as_posix() == "/x/debuginfod_client"


def test_the_distribution_server_comes_from_os_release(tmp_path):
    (tmp_path / "os-release").write_text('ID=ubuntu\nID_LIKE=debian\n')
    assert debuginfod.distribution_server(str(tmp_path / "os-release")) == debuginfod.DISTRIBUTION_SERVERS["ubuntu"]
    (tmp_path / "os-release").write_text('ID="rocky"\nID_LIKE="rhel centos fedora"\n')
    assert debuginfod.distribution_server(str(tmp_path / "os-release")) == debuginfod.DISTRIBUTION_SERVERS["fedora"]
    assert debuginfod.distribution_server(str(tmp_path / "missing")) is None


def test_the_owning_package_from_dpkg_then_rpm(tmp_path):
    from mysqlprobe.recorder.plan import DEBUG_PACKAGE, owning_package

    binary = tmp_path / "usr/sbin/mariadbd"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"")
    info = tmp_path / "dpkg-info"
    info.mkdir()
    (info / "mariadb-server-core.list").write_text(f"/.\n{binary}\n")
    assert owning_package(str(binary), str(info)) == ("dpkg", "mariadb-server-core")
    # an rpm host: no dpkg lists; rpm -qf answers (this Debian machine has no rpm database, so a
    # script stands in for it, answering as rpm does)
    rpm = tmp_path / "rpm"
    rpm.write_text(f'#!/bin/sh\n[ "$4" = "{binary}" ] && printf mariadb-server && exit 0\n'
                   'echo "file $4 is not owned by any package"; exit 1\n')
    rpm.chmod(0o755)
    found = owning_package(str(binary), str(tmp_path / "none"), rpm=str(rpm))
    assert found == ("rpm", "mariadb-server")
    assert DEBUG_PACKAGE[found[0]].format(found[1]) == "install its debug info (dnf debuginfo-install mariadb-server)"
    assert owning_package(str(tmp_path / "other"), str(tmp_path / "none"), rpm=str(rpm)) is None
