"""The /metrics endpoint's server: one thread and a selector, so no client
can hold it. A connection has HEAD_TIMEOUT_S to send its request head (of
at most HEAD_LIMIT bytes) and as long again to take the answer; at most
MAX_CONNECTIONS are open, and a new one past that closes the one that
has waited longest (a slow sender, since a scrape takes milliseconds).
A client that goes away is closed in silence, never a traceback.

Answers GET (and HEAD) of the paths it is given; 404 for any other path,
405 for another method, 400 for what is not HTTP."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

HEAD_TIMEOUT_S = 2.0
HEAD_LIMIT = 8 << 10
MAX_CONNECTIONS = 256
BACKLOG = 512

# path -> (content type, a function giving the body)
Routes = dict[str, tuple[str, Callable[[], bytes]]]


@dataclass
class _Connection:
    sock: socket.socket
    opened: float
    received: bytes = b""
    reply: bytes = b""
    answered: bool = False
    deadline: float = field(default=0.0)


def _response(status: str, content_type: str, body: bytes, head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    return head if head_only else head + body


def answer(request_head: bytes, routes: Routes) -> bytes:
    """The whole response to one request head."""
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", "text/plain", b"not an HTTP request\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", "text/plain", b"only GET is served here\n")
    route = routes.get(target)
    if route is None:
        return _response("404 Not Found", "text/plain",
                         f"only {', '.join(sorted(routes))} is served here\n".encode(), method == "HEAD")
    content_type, body = route
    return _response("200 OK", content_type, body(), method == "HEAD")


class MetricsServer:
    """Serves routes on (host, port) from a thread of its own until shutdown()."""

    def __init__(self, host: str, port: int, routes: Routes, max_connections: int = MAX_CONNECTIONS,
                 head_timeout_s: float = HEAD_TIMEOUT_S):
        self.routes, self.max_connections, self.head_timeout_s = routes, max_connections, head_timeout_s
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((host, port))
            self.listener.listen(BACKLOG)
        except OSError:
            self.listener.close()
            raise
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.open: dict[int, _Connection] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="metrics", daemon=True)
        self.dropped = 0   # connections closed unanswered (timed out, or evicted by a newer one)

    def start(self) -> "MetricsServer":
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in list(self.open.values()):
            self._close(conn)
        self.selector.close()
        self.listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, events in self.selector.select(timeout=0.2):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    conn = self.open.get(key.fd)
                    if conn is not None:
                        self._step(conn, events)
            now = time.monotonic()
            for conn in [c for c in self.open.values() if now > c.deadline]:
                self.dropped += not conn.answered
                self._close(conn)

    def _accept(self) -> None:
        for _ in range(64):   # what the backlog holds, a batch at a time
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:    # out of descriptors, or the client left: the next turn tries again
                return
            if len(self.open) >= self.max_connections:
                self.dropped += 1
                self._close(min(self.open.values(), key=lambda c: c.opened))
            sock.setblocking(False)
            now = time.monotonic()
            conn = _Connection(sock, now, deadline=now + self.head_timeout_s)
            self.open[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ)

    def _step(self, conn: _Connection, events: int) -> None:
        try:
            if events & selectors.EVENT_READ and not conn.answered:
                chunk = conn.sock.recv(4096)
                if not chunk:
                    self._close(conn)
                    return
                conn.received += chunk
                end = conn.received.find(b"\r\n\r\n")
                if end < 0 and len(conn.received) <= HEAD_LIMIT:
                    return
                head = conn.received[:end] if 0 <= end <= HEAD_LIMIT else b""
                conn.reply = (answer(head, self.routes) if head else
                              _response("431 Request Header Fields Too Large", "text/plain", b"too long\n"))
                conn.answered = True
                conn.deadline = time.monotonic() + self.head_timeout_s
                self.selector.modify(conn.sock, selectors.EVENT_WRITE)
            if conn.answered and conn.reply:
                sent = conn.sock.send(conn.reply)
                conn.reply = conn.reply[sent:]
            if conn.answered and not conn.reply:
                self._close(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:   # reset, broken pipe: the client went away
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self.open.pop(fd, None)
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.sock.close()
