"""The online scoring service: ``vfl score --http HOST:PORT`` (issue 22; docs/serving.md).

The hub keeps its serving parties connected and answers

* ``POST /score`` with ``{"ids": [...]}`` (1 to ``--max-query-ids`` IDs) -> 200 ``{"ids", "scores", "labels"
  (logistic), "status"}`` in the request's order (``null`` score and ``"missing"`` for an ID some party does not
  hold); 400 for a bad request (not JSON, duplicate / empty IDs, too many, a Content-Length that is not one
  non-negative integer), 411 without a Content-Length, 413 for a body over the limit (all three before the body is
  read), 429 over the client's rate limit, 503 while the parties are not all connected or when one fails (the
  reason names it), or when the connection cap is reached;
* ``GET /healthz`` -> 200 while the process runs; ``GET /readyz`` -> 200 when every party is connected and the keys
  are agreed, else 503 with the parties it waits for. A route with the wrong method answers 405 with ``Allow``.

Connections are served by a fixed pool of worker threads under a connection cap, each client address under a token
bucket (:mod:`vfl.net.http_guard`).

HTTP stack: the standard library's :class:`http.server.HTTPServer` with a bounded pool (:mod:`vfl.net.http_guard`).
The service has three routes, small JSON bodies and a handful of clients (a model-serving front end, batch jobs);
the standard library carries no extra dependency into a package whose parties must audit what they install, and
the measured single-ID latency (docs/serving.md) is dominated by the parties' round trip, not by HTTP parsing. Put
a TLS-terminating reverse proxy in front of it for anything beyond loopback: it speaks plain HTTP.

Threads: the HTTP handler threads only queue requests; the one service thread owns the ZeroMQ socket, answers the
queue one query at a time, and in between keeps heartbeats and liveness going. A party that fails (killed,
disconnected, silent for ``--timeout``) ends the session at once: requests fail fast with its name, and when it (or
its replacement with the same name and identity) registers again, every party agrees fresh keys and the service is
ready again -- the hub is never restarted.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from vfl.exceptions import ConfigurationError, DataValidationError, PartyFailure, VFLError
from vfl.net.http_guard import (
    BoundedHTTPServer,
    DeadlineRequestHandler,
    HTTPRefusal,
    RateLimiter,
    body_length,
    client_key,
)
from vfl.net.notices import shown
from vfl.net.scoring import Scores, ScoringHubNode

__all__ = ["ScoringService", "HTTPLimits", "parse_http_address", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 64 * 1024 * 1024
_ROUTES = {"/score": "POST", "/healthz": "GET", "/readyz": "GET"}


@dataclass(frozen=True)
class HTTPLimits:
    """What one hostile client can take: worker threads, open connections, requests per second and at once per
    client address (``rate`` 0: no rate limit), seconds an idle connection is kept, seconds one request (line,
    headers, body) may take to arrive in all."""

    workers: int = 8
    max_connections: int = 64
    rate: float = 100.0
    burst: int = 200
    idle_timeout: float = 10.0
    read_timeout: float = 30.0


def parse_http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ConfigurationError (one line) otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigurationError(f"--http must be HOST:PORT (e.g. 127.0.0.1:8080), got {text!r}")
    return host, int(port)


@dataclass
class _Request:
    ids: list[Any]
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 500
    reply: dict = field(default_factory=dict)


def scores_json(scores: Scores) -> dict:
    """The JSON answer of one query, in its order."""
    values: list[float | None] = [None if m else float(v) for v, m in zip(scores.value, scores.missing, strict=True)]
    out: dict[str, Any] = {"ids": scores.ids, "scores": values,
                           "status": ["missing" if m else "scored" for m in scores.missing]}
    if scores.label is not None:
        out["labels"] = [None if m else int(v) for v, m in zip(scores.label, scores.missing, strict=True)]
    return out


class ScoringService:
    """Serve ``hub`` (already started: every party connected) over HTTP at ``host:port`` until :meth:`stop`."""

    def __init__(self, hub: ScoringHubNode, host: str, port: int, *, log: Callable[[str], None] | None = None,
                 request_timeout: float | None = None, limits: HTTPLimits | None = None) -> None:
        self.hub, self.log = hub, log or (lambda s: None)
        self.requests: queue.Queue[_Request] = queue.Queue()
        self.request_timeout = request_timeout if request_timeout is not None else hub.timeout + 10.0
        self.problem: str | None = None
        self._stop = threading.Event()
        self.limits = limits or HTTPLimits()
        if not 1 <= self.limits.workers <= self.limits.max_connections:
            raise ConfigurationError(f"--http-workers must lie in [1, --http-max-connections "
                                     f"{self.limits.max_connections}], got {self.limits.workers}")
        self.limiter = RateLimiter(self.limits.rate, self.limits.burst)
        self.httpd = BoundedHTTPServer((host, port), self._handler(), workers=self.limits.workers,
                                       max_connections=self.limits.max_connections,
                                       idle_timeout=self.limits.idle_timeout,
                                       read_timeout=self.limits.read_timeout)
        self.address = f"http://{host}:{self.httpd.server_address[1]}"

    # ------------------------------------------------------------------ service thread
    def serve(self) -> None:
        """Run the HTTP server on a thread and the hub here until :meth:`stop` (or Ctrl-C / SIGTERM)."""
        server = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        server.start()
        lim = self.limits
        self.log(f"scoring service on {self.address} (POST /score, GET /healthz, GET /readyz); {lim.workers} "
                 f"workers, at most {lim.max_connections} connections, " +
                 (f"{lim.rate:g} requests/s per client (burst {lim.burst})" if lim.rate > 0 else "no rate limit"))
        try:
            while not self._stop.is_set():
                self._once()
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()

    def stop(self) -> None:
        self._stop.set()

    def _once(self) -> None:
        try:   # wakes at once for a request; otherwise every 10 ms for the parties' heartbeats and liveness
            req = self.requests.get(timeout=0.01)
        except queue.Empty:
            req = None
        try:
            if req is not None:
                self._answer(req)
                return
            if not self.hub.ready and not self.hub.waiting_for() and not self.hub.plan_sent:
                self.hub.new_session()           # every party is back: agree fresh keys
            self.hub.pump(0.0)
            if self.hub.ready and self.problem is not None:
                self.log(f"scoring session ready again: {', '.join(self.hub.names)}")
                self.problem = None
        except PartyFailure as exc:
            self._lost(exc)
        except VFLError as exc:                  # a stale or malformed message: the session starts afresh
            self.log(f"scoring session reset: {shown(exc)}")
            self.hub.drop("")
            self.problem = str(exc)

    def _answer(self, req: _Request) -> None:
        if not self.hub.ready:
            waiting = self.hub.waiting_for()
            reason = self.problem or "the parties are agreeing keys"
            req.status, req.reply = 503, {"error": reason + (f"; waiting for {', '.join(waiting)} to rejoin"
                                                             if waiting else "")}
            req.done.set()
            return
        try:
            scores = self.hub.score(req.ids)
            req.status, req.reply = 200, scores_json(scores)
        except DataValidationError as exc:
            req.status, req.reply = 400, {"error": str(exc)}
        except PartyFailure as exc:
            req.status, req.reply = 503, {"error": str(exc)}
            self._lost(exc)
        except VFLError as exc:
            req.status, req.reply = 503, {"error": str(exc)}
            raise
        finally:
            req.done.set()

    def _lost(self, exc: PartyFailure) -> None:
        name = self.hub.lost
        self.problem = str(exc)
        self.log(f"scoring session ended: {exc}")
        self.hub.drop(name or "")
        self.hub.lost = None

    # ------------------------------------------------------------------ HTTP
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this service."""
        return type("Handler", (ServiceRequestHandler,), {"service": self})


class ServiceRequestHandler(DeadlineRequestHandler):
    """One HTTP request of :class:`ScoringService` (GET /healthz, /ready; POST /score): route, method, the
    client's rate limit, the body's length and value count before parsing; the query itself is answered by the
    service's scoring thread. ``service`` is set on the subclass the service binds (:meth:`ScoringService._handler`)."""

    service: ScoringService
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: no IDs in logs
        pass

    def _reply(self, status: int, doc: dict, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(doc, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _admit(self, method: str) -> bool:
        """Route, method and the client's rate limit; False when answered already (405/404/429)."""
        path = self.path.split("?", 1)[0]
        allowed = _ROUTES.get(path)
        if allowed is None:
            self.close_connection = method == "POST"   # its body is not read
            self._reply(404, {"error": f"no route {path}"})
            return False
        if allowed != method:
            self.close_connection = method == "POST"
            self._reply(405, {"error": f"{path} answers {allowed} only"}, {"Allow": allowed})
            return False
        wait = self.service.limiter.allow(client_key(self.client_address))
        if wait > 0:
            self.close_connection = method == "POST"
            self._reply(429, {"error": "too many requests from this client"},
                        {"Retry-After": str(max(1, int(wait + 0.999)))})
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802
        if not self._admit("GET"):
            return
        if self.path.split("?", 1)[0] == "/healthz":
            self._reply(200, {"status": "ok"})
            return
        hub = self.service.hub
        doc = {"ready": hub.ready, "parties": hub.names, "waiting_for": hub.waiting_for()}
        if self.service.problem and not hub.ready:
            doc["error"] = self.service.problem
        self._reply(200 if hub.ready else 503, doc)

    def _read_ids(self) -> list | None:
        """The query's ID list, or None when answered already (411/400/413): the length is checked before
        a byte of the body is read, the values are counted before they are parsed."""
        try:
            length = body_length(self.headers, MAX_BODY_BYTES)
        except HTTPRefusal as exc:
            self.close_connection = True
            self._reply(exc.status, {"error": exc.reason})
            return None
        raw = self.rfile.read(length)
        self.request_read()
        # before parsing: every JSON value but the first is preceded by ',', '[' or '{', so their count (in
        # strings too) bounds the values json.loads would build; a body with more than the hub's ID cap (+
        # the envelope's few) is refused without building them (a 16 MiB body of [] is ~23x its size parsed)
        if sum(raw.count(c) for c in (b",", b"[", b"{")) > self.service.hub.plan.max_ids + 8:
            self._reply(413, {"error": f"the body holds more values than this hub's --max-query-ids "
                                       f"({self.service.hub.plan.max_ids}) allows"})
            return None
        try:
            doc = json.loads(raw.decode("utf-8"))
            ids = doc["ids"]
            if not isinstance(ids, list):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            self._reply(400, {"error": 'the body must be JSON {"ids": [...]}'})
            return None
        return ids

    def do_POST(self) -> None:  # noqa: N802
        if not self._admit("POST"):
            return
        ids = self._read_ids()
        if ids is None:
            return
        req = _Request(ids)
        self.service.requests.put(req)
        if not req.done.wait(self.service.request_timeout):
            self._reply(503, {"error": "the query did not finish in time"})
            return
        self._reply(req.status, req.reply)
