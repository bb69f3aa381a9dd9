"""watch's /metrics server cannot be held: a slowloris client of 1,000
half-sent requests and 500 concurrent scrapes at once, and every scrape
is answered, by one thread, with the open connections capped; a client
that leaves is no traceback. And watch's own limits: pprof files kept to
--pprof-keep, and no window without the privileges to attach."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import MYSQLPROBE
from mysqlprobe.commands.watch import prune_profiles
from mysqlprobe.errors import EXIT_PERMISSION, PermissionProblem
from mysqlprobe.httpserve import MetricsServer, answer
from mysqlprobe.privileges import NEEDED, require_attach_privileges

BODY = b"mysqlprobe_up 1\n"


def _get(address, path="/metrics", method="GET", timeout=5.0) -> bytes:
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.fixture
def server():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))   # the test's own 1,500 sockets
    srv = MetricsServer("127.0.0.1", 0, {"/metrics": ("text/plain", lambda: BODY)}, max_connections=64).start()
    yield srv
    srv.shutdown()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_it_answers_get_and_head_and_refuses_the_rest(server):
    assert _get(server.address).endswith(b"\r\n\r\n" + BODY) and _get(server.address).startswith(b"HTTP/1.1 200 OK")
    assert _get(server.address, method="HEAD").endswith(b"Connection: close\r\n\r\n")
    assert _get(server.address, "/other").startswith(b"HTTP/1.1 404")
    assert _get(server.address, method="POST").startswith(b"HTTP/1.1 405")
    assert answer(b"garbage", {}).startswith(b"HTTP/1.1 400")
    with socket.create_connection(server.address) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"y" * (16 << 10))
        assert s.recv(100).startswith(b"HTTP/1.1 431")


def test_slow_senders_and_500_scrapes_at_once_do_not_hold_it(server):
    threads_before = threading.active_count()
    slow = []
    for _ in range(1000):                       # a request head never finished
        s = socket.create_connection(server.address)
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        slow.append(s)
    answered, longest = [], []

    def scrape(_):
        began = time.monotonic()
        reply = _get(server.address)
        longest.append(time.monotonic() - began)
        answered.append(reply.endswith(BODY))
    try:
        with ThreadPoolExecutor(50) as pool:
            list(pool.map(scrape, range(500)))
        assert answered.count(True) == 500
        assert len(server.open) <= 64            # the cap held while 1,000 waited
        assert threading.active_count() == threads_before    # no thread a connection
        assert max(longest) < 1.0, f"a scrape took {max(longest):.2f}s"
    finally:
        for s in slow:
            s.close()


def test_a_half_sent_request_is_closed_at_its_deadline(server):
    s = socket.create_connection(server.address)
    s.sendall(b"GET /metr")
    s.settimeout(10)
    began = time.monotonic()
    assert s.recv(100) == b""                   # closed by the server, unanswered
    assert 1.5 < time.monotonic() - began < 5 and server.dropped >= 1
    s.close()


def test_a_client_that_leaves_is_no_traceback(server, capfd):
    for _ in range(200):
        s = socket.create_connection(server.address)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")   # RST on close
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        s.close()
    assert _get(server.address).endswith(BODY)
    assert "Traceback" not in capfd.readouterr().err


def test_pprof_files_past_the_newest_n_are_removed(tmp_path):
    for minute in range(7):
        for kind in ("cpu", "offcpu"):
            (tmp_path / f"{kind}-2026-11-28T10{minute:02d}00.000Z.pb.gz").write_bytes(b"x")
    (tmp_path / "cpu-notes.txt").write_text("not ours")
    removed = prune_profiles(str(tmp_path), 3)
    assert len(removed) == 8
    assert sorted(os.listdir(tmp_path)) == sorted(["cpu-notes.txt"] + [f"{k}-2026-11-28T10{m:02d}00.000Z.pb.gz"
                                                                      for k in ("cpu", "offcpu") for m in (4, 5, 6)])


def test_without_the_capabilities_a_run_ends_at_once_with_exit_4():
    with pytest.raises(PermissionProblem, match="lacks CAP_BPF") as e:
        require_attach_privileges("watch", effective=1 << NEEDED["CAP_SYS_ADMIN"] | 1 << NEEDED["CAP_PERFMON"])
    assert e.value.exit_code == EXIT_PERMISSION
    require_attach_privileges("watch", effective=sum(1 << b for b in NEEDED.values()))


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's capabilities with setpriv")
@pytest.mark.parametrize("command", [["watch", "-p", "1", "--listen", "127.0.0.1:0"], ["-p", "1"]])
def test_watch_and_record_without_privileges_exit_4_naming_them(command):
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                        MYSQLPROBE, *command], capture_output=True, text=True, timeout=30)
    assert p.returncode == EXIT_PERMISSION, p.stderr
    assert p.stderr.count("\n") == 1 and "CAP_BPF" in p.stderr
