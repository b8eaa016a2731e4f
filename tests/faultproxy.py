"""A small reverse proxy on 127.0.0.1 that injects faults in front of a real server (a registry, the fake GitHub).

``FaultProxy(upstream)`` forwards every request to ``upstream`` unchanged (redirects not followed,
bodies streamed both ways) and records it; a :class:`Rule` matching a request's method and path
answers in the upstream's place: a status with headers and a body (a 502, a 429 with
``Retry-After``, a 401 naming a token realm on another host, a 307 to another origin), for the
first ``times`` matches. Requests are recorded with their headers, so a test can say which
carried ``Authorization`` and what ``User-Agent`` they sent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

import httpx

#: Hop-by-hop headers (RFC 9110 §7.6.1) a proxy never forwards.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"})


@dataclass
class Rule:
    """Answer ``status`` (with ``headers`` and ``body``) for requests whose method and path match, ``times`` times."""

    method: str
    path: str  # a regular expression searched in the path and query
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    times: int | None = 1  # None: every match
    used: int = 0


@dataclass(frozen=True)
class Seen:
    """One request the proxy received."""

    method: str
    path: str
    headers: dict[str, str]


class FaultProxy:
    """A reverse proxy to ``upstream`` (``http://host:port``) with injectable faults."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=30)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def requests(self, method: str | None = None, path: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method) and re.search(path, s.path)]

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def _rule_for(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                left = rule.times is None or rule.used < rule.times
                if rule.method == method and re.search(rule.path, path) and left:
                    rule.used += 1
                    return rule
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.seen.append(Seen(method, path, headers))
        length = int(headers.get("content-length", "0") or 0)
        body = handler.rfile.read(length) if length else b""
        rule = self._rule_for(method, path)
        if rule is not None:
            handler.send_response(rule.status)
            for key, value in rule.headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(rule.body)))
            handler.end_headers()
            if method != "HEAD":
                handler.wfile.write(rule.body)
            return
        sent = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
        request = self._client.build_request(method, self.upstream + path, headers=sent, content=body)
        response = self._client.send(request, stream=True, follow_redirects=False)
        try:
            handler.send_response(response.status_code)
            for key, value in response.headers.multi_items():
                if key.lower() in _HOP_BY_HOP or key.lower() == "content-length":
                    continue
                if key.lower() == "location":
                    value = value.replace(self.upstream, self.url)
                handler.send_header(key, value)
            data = b"".join(_chunks(response)) if method != "HEAD" else b""
            length_out = response.headers.get("content-length") if method == "HEAD" else str(len(data))
            handler.send_header("Content-Length", length_out or "0")
            handler.end_headers()
            if data:
                handler.wfile.write(data)
        finally:
            response.close()


def _chunks(response: httpx.Response) -> Iterator[bytes]:
    yield from response.iter_raw()
