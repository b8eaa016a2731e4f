"""Asking a llama-server over TCP whether it is healthy: ``GET /health``.

llama-server answers 200 once it can serve, 503 while a model loads, and an
error body ``{"error": {"message": ...}}`` otherwise. Whether the answer came
from *our* process is not decided here: the caller checks that its pid
listens on the address (:func:`llama_runtime.runtime.listen.listens_on`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final

from llama_runtime.runtime.listen import loopback_for

#: One /health probe (seconds). llama-server answers /health from its HTTP
#: thread even while a model loads; 2 s only fails for a wedged or unreachable server.
HEALTH_PROBE_TIMEOUT_SECONDS: Final = 2.0
#: Bytes of an error body read for its message: llama-server's are a line of JSON.
_ERROR_BODY_BYTES: Final = 4096


@dataclass(frozen=True)
class Health:
    """One /health answer: ``ok`` only for HTTP 200."""

    ok: bool
    detail: str


def http_netloc(host: str, port: int) -> str:
    """``HOST:PORT`` to connect to a server bound to ``host`` (a wildcard means loopback)."""
    probe_host = loopback_for(host)
    return f"[{probe_host}]:{port}" if ":" in probe_host else f"{probe_host}:{port}"


def probe_health(host: str, port: int, timeout: float) -> Health:
    """``GET /health``: 200 is healthy; 503 means loading; anything else is not."""
    netloc = http_netloc(host, port)
    # No proxies: an http_proxy from the environment must not see local traffic.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{netloc}/health", timeout=max(timeout, 0.01)) as response:
            return Health(ok=response.status == 200, detail=f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        return Health(ok=False, detail=f"HTTP {exc.code}: {_error_message(exc)}")
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Health(ok=False, detail=f"no answer from {netloc}: {reason}")


def _error_message(exc: urllib.error.HTTPError) -> str:
    """llama-server's ``{"error": {"message": ...}}`` text, else the HTTP reason."""
    try:
        body = json.loads(exc.read(_ERROR_BODY_BYTES))
        message = body["error"]["message"]
        if isinstance(message, str):
            return message
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return str(exc.reason)
