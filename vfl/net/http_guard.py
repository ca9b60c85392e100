"""An HTTP server that holds under hostile clients: a bounded worker pool, a connection cap, per-client rate limits
and a request-body check made before anything is read (issue 29; docs/serving.md, "Online service").

The standard library's :class:`http.server.ThreadingHTTPServer` starts one thread per connection, with no cap, and
:class:`http.server.BaseHTTPRequestHandler` leaves the body to the handler. Here:

* :class:`BoundedHTTPServer` hands every accepted connection to a fixed pool of ``workers`` daemon threads. At most
  ``max_connections`` connections are open (being served or waiting for a worker); one more is answered
  ``503 Service Unavailable`` from the accepting thread and closed, so threads and sockets stay bounded whatever
  number of clients connect. A connection idle for ``idle_timeout`` seconds (no request line, a body that stalls)
  is closed, which frees its worker, and a request (its line, headers and body) must arrive within ``read_timeout``
  seconds in all (:class:`DeadlineRequestHandler`): a client that sends one byte just inside every idle timeout
  (slowloris) cannot keep a worker.
* :class:`RateLimiter`: a token bucket per client address (``rate`` requests per second, ``burst`` at once); a
  request over it is answered ``429 Too Many Requests`` with ``Retry-After``. The table of clients is bounded.
* :func:`body_length`: ``Content-Length`` is required (411 without it), must be a non-negative decimal integer
  (400) and at most the cap (413), and is checked *before* the body is read: a negative or absent length can never
  make the handler read to the end of the stream.
"""

from __future__ import annotations

import io
import ipaddress
import math
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from email.message import Message as HeaderMessage
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

__all__ = ["BoundedHTTPServer", "DeadlineRequestHandler", "RateLimiter", "body_length", "HTTPRefusal"]

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 38\r\n"
         b"Retry-After: 1\r\nConnection: close\r\n\r\n" + b'{"error": "too many open connections"}')


class HTTPRefusal(Exception):
    """A request refused before its body is read: ``status`` and a one-line ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def body_length(headers: Mapping[str, str] | HeaderMessage, cap: int) -> int:
    """The request body's length from its headers, or :class:`HTTPRefusal` -- decided before anything is read:
    411 without ``Content-Length`` (chunked bodies are not accepted), 400 when it is not one non-negative decimal
    integer, 413 above ``cap`` bytes. ``headers``: a request handler's ``self.headers`` (an
    :class:`email.message.Message`) or a plain mapping."""
    if headers.get("Transfer-Encoding") is not None:
        raise HTTPRefusal(411, "send the body with a Content-Length, not Transfer-Encoding")
    text = headers.get("Content-Length")
    if text is None:
        raise HTTPRefusal(411, "a Content-Length header is required")
    text = text.strip()
    repeated = len(headers.get_all("Content-Length") or []) > 1 if hasattr(headers, "get_all") else False
    if repeated or not (text.isascii() and text.isdigit()):
        raise HTTPRefusal(400, "Content-Length must be one non-negative decimal integer")
    if len(text) > 18 or int(text) > cap:
        raise HTTPRefusal(413, f"request body over {cap} bytes")
    return int(text)


class RateLimiter:
    """Token bucket per client: ``rate`` requests per second on average, ``burst`` at once (``rate <= 0``: off).

    At most ``max_clients`` buckets are kept (least recently used dropped; a dropped client starts with a full
    bucket, which is what a new client gets anyway)."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000) -> None:
        if rate < 0 or burst < 1 or not math.isfinite(rate):
            raise ValueError(f"rate must be >= 0 and burst >= 1, got {rate}, {burst}")
        self.rate, self.burst, self.max_clients = float(rate), int(burst), int(max_clients)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, client: str) -> float:
        """0.0 if ``client`` may send one more request now (it is counted), else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
            self._buckets[client] = (tokens - 1.0 if wait == 0.0 else tokens, now)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
        return wait


class BoundedHTTPServer(HTTPServer):
    """:class:`http.server.HTTPServer` with a pool of ``workers`` daemon threads and at most ``max_connections``
    open connections (the next is answered 503 and closed by the accepting thread); idle connections close after
    ``idle_timeout`` seconds."""

    request_queue_size = 64   # listen backlog

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, workers: int = 8,
                 max_connections: int = 64, idle_timeout: float = 10.0, read_timeout: float = 30.0) -> None:
        if not 1 <= workers <= max_connections:
            raise ValueError(f"need 1 <= workers <= max_connections, got {workers}, {max_connections}")
        if not 0 < idle_timeout <= read_timeout:
            raise ValueError(f"need 0 < idle_timeout <= read_timeout, got {idle_timeout}, {read_timeout}")
        self.workers, self.max_connections, self.idle_timeout = int(workers), int(max_connections), idle_timeout
        self.read_timeout = float(read_timeout)
        self._pending: queue.Queue[tuple[Any, Any] | None] = queue.Queue()
        self._open = 0
        self._lock = threading.Lock()
        #: connections answered 503 because the cap was reached (for the operator's log and the tests)
        self.refused_connections = 0
        super().__init__(address, handler)
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"vfl-http-{i}")
                         for i in range(self.workers)]
        for t in self._threads:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            busy = self._open >= self.max_connections
            if not busy:
                self._open += 1
        if busy:
            self.refused_connections += 1
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        request.settimeout(self.idle_timeout)
        self._pending.put((request, client_address))

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:          # a client that vanished, timed out or sent garbage: its connection only
                pass
            finally:
                self.shutdown_request(request)
                with self._lock:
                    self._open -= 1

    def server_close(self) -> None:
        super().server_close()
        for _ in self._threads:
            self._pending.put(None)

    @property
    def open_connections(self) -> int:
        return self._open


class _DeadlineSocketIO(socket.SocketIO):
    """The raw reads of one connection: each waits at most the idle timeout and never past the deadline of the
    request being read (``deadline`` None: no deadline)."""

    def __init__(self, sock: socket.socket, idle: float) -> None:
        super().__init__(sock, "rb")
        self.idle, self.deadline = idle, None
        sock._io_refs += 1   # type: ignore[attr-defined]  # as socket.makefile does: closing this file decrefs

    def readinto(self, b: Any) -> int | None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not received within the read timeout")
            self._sock.settimeout(min(self.idle, left))
        return super().readinto(b)


class DeadlineRequestHandler(BaseHTTPRequestHandler):
    """A request handler whose request (line, headers and, until :meth:`request_read`, its body) must arrive within
    the server's ``read_timeout`` in all, not only within ``idle_timeout`` per read."""

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        idle = getattr(self.server, "idle_timeout", None) or 10.0
        self._raw_in = _DeadlineSocketIO(self.connection, idle)
        self.rfile = io.BufferedReader(self._raw_in)

    def handle_one_request(self) -> None:
        self._raw_in.deadline = time.monotonic() + float(getattr(self.server, "read_timeout", 30.0))
        try:
            super().handle_one_request()
        finally:
            self.request_read()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.connection.settimeout(self._raw_in.idle)   # replies are written under the idle timeout
        return ok

    def request_read(self) -> None:
        """The request's body is in: later reads (none) and the reply wait only the idle timeout."""
        self._raw_in.deadline = None
        self.connection.settimeout(self._raw_in.idle)


def client_key(address: Any) -> str:
    """The rate limiter's key of a client address: its IPv4 host, or the /64 network of an IPv6 host (one end site
    holds a whole /64 and could otherwise take a fresh bucket per address); other addresses as given."""
    host = str(address[0]) if isinstance(address, tuple) and address else str(address)
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)

