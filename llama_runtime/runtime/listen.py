"""Where a llama-server listens, who else listens there, and whether it is really ours.

llama-server's ``--host`` takes an IP address (IPv4 or IPv6), a UNIX socket
path (a value ending in ``.sock``, tools/server/server.cpp since 2024), and
since ggml-org/llama.cpp#28690 (Sep 2026) a comma-separated list of both, or
the flag repeated; every TCP address shares ``--port``. All forms are parsed
here, never rejected: the server itself is the judge of its arguments.

Invariant: "healthy" is never decided by an answer on a port alone. The
answer counts only when the process we started (pid and start time checked by
the caller) is itself a listener of that address: on a shared host someone
else's server may answer on the same port.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from llama_runtime.runtime.fsutil import decimal, parse_record

if TYPE_CHECKING:
    from urllib.error import HTTPError

__all__ = [
    "DEFAULT_HOST",
    "Endpoint",
    "arg_value",
    "describe_holder",
    "endpoint_in_use",
    "free_port",
    "listen_address",
    "listen_endpoints",
    "listens_on",
    "loopback_for",
    "probe_endpoint",
    "probe_unix_health",
    "with_listen_args",
]


# -- listen ------------------------------------------------------------------------------------------------------

#: The address a managed server listens on unless the caller passes --host:
#: loopback only, because llama-server has no API key by default.
DEFAULT_HOST: Final = "127.0.0.1"

#: llama-server treats a --host value ending in this as a UNIX socket path.
UNIX_SOCKET_SUFFIX: Final = ".sock"
#: Wildcard addresses are reached through loopback of the same family.
_LOOPBACK_FOR: Final = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}
_ADDR_IN_USE: Final = frozenset({errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", errno.EADDRINUSE)})


@dataclass(frozen=True)
class Endpoint:
    """One address llama-server listens on: a TCP host and port, or a UNIX socket path."""

    kind: Literal["tcp", "unix"]
    host: str
    port: int | None = None

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.host}"
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}" if self.port is not None else host


def _values(args: Sequence[str], flag: str) -> list[str]:
    found: list[str] = []
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith(flag + "="):
            found.append(arg[len(flag) + 1 :])
    return found


def arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``; last wins)."""
    values = _values(args, flag)
    return values[-1] if values else None


def listen_endpoints(args: Sequence[str], *, default_host: str) -> list[Endpoint]:
    """Every address ``args`` make llama-server listen on, in order.

    ``--host`` may be repeated and each value may be a comma-separated list;
    the last ``--port`` applies to every TCP address (``None`` when absent or
    not a port number).
    """
    ports = _values(args, "--port")
    port: int | None = None
    number = decimal(ports[-1]) if ports else None
    if number is not None and number < 65536:
        port = number
    hosts = [h.strip() for value in _values(args, "--host") for h in value.split(",") if h.strip()]
    endpoints: list[Endpoint] = []
    for host in hosts or [default_host]:
        if host.endswith(UNIX_SOCKET_SUFFIX):
            endpoints.append(Endpoint("unix", host))
        else:
            endpoints.append(Endpoint("tcp", host.removeprefix("[").removesuffix("]"), port))
    return endpoints


def listen_address(args: Sequence[str], *, default_host: str) -> tuple[str, int | None]:
    """The first address the server will listen on (host or socket path, and port), as ``args`` say."""
    first = listen_endpoints(args, default_host=default_host)[0]
    return first.host, first.port


def with_listen_args(args: list[str], *, host: str, port: int | None) -> list[str]:
    """``args`` plus ``--host``/``--port`` where missing (a free port when ``port`` is None)."""
    if arg_value(args, "--port") is not None:
        return args
    extra: list[str] = []
    if arg_value(args, "--host") is None:
        extra += ["--host", host]
    tcp = [e for e in listen_endpoints(args, default_host=host) if e.kind == "tcp"]
    if not tcp:
        return [*args, *extra]  # UNIX sockets only: no port to pick
    extra += ["--port", str(port if port is not None else free_port(tcp[0].host or host))]
    return [*args, *extra]


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nothing listens on right now (another process may still take it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def probe_endpoint(endpoints: Sequence[Endpoint]) -> Endpoint | None:
    """The endpoint health is asked on: the first TCP one with a port, else the first socket."""
    tcp = [e for e in endpoints if e.kind == "tcp" and e.port]
    if tcp:
        return tcp[0]
    unix = [e for e in endpoints if e.kind == "unix"]
    return unix[0] if unix else None


def loopback_for(host: str) -> str:
    """The address a client on this machine reaches ``host`` at."""
    return _LOOPBACK_FOR.get(host, host)


def endpoint_in_use(endpoint: Endpoint) -> bool:
    """Whether something already listens on ``endpoint`` (so llama-server could not bind it).

    TCP: a bind with ``SO_REUSEADDR`` (what llama-server's cpp-httplib sets)
    fails only while another socket is bound there. UNIX: the path exists and
    accepts a connection. An address this machine does not have is not "in
    use": llama-server reports that itself.
    """
    if endpoint.kind == "unix":
        if not os.path.exists(endpoint.host) or not hasattr(socket, "AF_UNIX"):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            try:
                sock.connect(endpoint.host)
            except OSError:
                return False
            return True
    if not endpoint.port:
        return False
    host = endpoint.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if sys.platform != "win32":  # on Windows SO_REUSEADDR would let us steal a bound port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, endpoint.port))
        except OSError as exc:
            return exc.errno in _ADDR_IN_USE
    return False


def _matches(endpoint: Endpoint, laddr: object) -> bool:
    if endpoint.kind == "unix":
        return isinstance(laddr, str) and os.path.realpath(laddr) == os.path.realpath(endpoint.host)
    port = getattr(laddr, "port", None)
    ip = getattr(laddr, "ip", None)
    if port != endpoint.port:
        return False
    wanted = endpoint.host
    # "localhost" and wildcard binds: the port decides.
    return wanted in {"", "0.0.0.0", "::", "localhost"} or ip in {wanted, "0.0.0.0", "::"}


def _kind(endpoint: Endpoint) -> str:
    return "unix" if endpoint.kind == "unix" else "inet"


def listens_on(pid: int, endpoint: Endpoint) -> bool:
    """Whether process ``pid`` (or a process it started) holds a listening socket on ``endpoint``.

    Reads only the process's own sockets (psutil), which a user may always
    do for their own processes.
    """
    import psutil  # deferred: only process control needs it

    try:
        process = psutil.Process(pid)
        # A server run in a sandbox listens from below its launcher (bubblewrap, the confined launcher).
        tree = [process, *process.children(recursive=True)]
    except (psutil.Error, OSError):
        return False
    for member in tree:
        try:
            connections = member.net_connections(kind=_kind(endpoint))
        except (psutil.Error, OSError):
            continue
        for conn in connections:
            listening = endpoint.kind == "unix" or conn.status == psutil.CONN_LISTEN
            if listening and _matches(endpoint, conn.laddr):
                return True
    return False


def describe_holder(endpoint: Endpoint) -> str:
    """Who listens on ``endpoint``, for people: ``pid 4242 (python3, user alice)``.

    The process table may hide another user's sockets (Linux without root,
    macOS): then it says so rather than guess.
    """
    import psutil  # deferred: only process control needs it

    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind=_kind(endpoint)):
            listening = endpoint.kind == "unix" or conn.status == psutil.CONN_LISTEN
            if not listening or not _matches(endpoint, conn.laddr):
                continue
            if conn.pid is None:
                break
            try:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({proc.name()}, user {proc.username()})"
            except (psutil.Error, OSError):
                return f"pid {conn.pid}"
    return "a process this user cannot see (probably another user's)"


def probe_unix_health(path: str, timeout: float) -> tuple[bool, str]:
    """``GET /health`` over the UNIX socket ``path``: (answered 200, what was seen)."""
    import http.client  # deferred: only a server on a socket needs it

    class _UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            if sys.platform == "win32":  # Python has no AF_UNIX there: the probe answers "no answer"
                raise OSError("UNIX sockets are not available on Windows")
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                sock.connect(path)
                self.sock = sock

    connection = _UnixConnection("localhost", timeout=max(timeout, 0.01))
    try:
        connection.request("GET", "/health")
        status = connection.getresponse().status
        return status == 200, f"HTTP {status}"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"no answer from unix:{path}: {exc}"
    finally:
        connection.close()


# -- health: Asking a llama-server over TCP whether it is healthy: ``GET /health``. ------------------------------

#: One /health probe (seconds). llama-server answers /health from its HTTP
#: thread even while a model loads; 2 s only fails for a wedged or unreachable server.
HEALTH_PROBE_TIMEOUT_SECONDS: Final = 2.0
#: Bytes of an error body read for its message: llama-server's are a line of JSON.
_ERROR_BODY_BYTES: Final = 4096


#: What llama-server says on every route while it loads its model: HTTP 503 with
#: ``{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}``
#: (llama.cpp ``tools/server/server.cpp``, the server-state middleware, through
#: ``format_error_response(..., ERROR_TYPE_UNAVAILABLE)``).
LOADING_MESSAGE: Final = "Loading model"


@dataclass(frozen=True)
class Health:
    """One /health answer: ``ok`` only for HTTP 200.

    Attributes:
        ok: HTTP 200.
        detail: What the answer was, for people.
        loading: llama-server said it is still loading its model (alive, not yet ready).
    """

    ok: bool
    detail: str
    loading: bool = False


def http_netloc(host: str, port: int) -> str:
    """``HOST:PORT`` to connect to a server bound to ``host`` (a wildcard means loopback)."""
    probe_host = loopback_for(host)
    return f"[{probe_host}]:{port}" if ":" in probe_host else f"{probe_host}:{port}"


def probe_health(host: str, port: int, timeout: float) -> Health:
    """``GET /health``: 200 is healthy; 503 means loading; anything else is not."""
    import urllib.error  # deferred: http.client and email (~20 modules) only when a server is probed
    import urllib.request

    netloc = http_netloc(host, port)
    # No proxies: an http_proxy from the environment must not see local traffic.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{netloc}/health", timeout=max(timeout, 0.01)) as response:
            return Health(ok=response.status == 200, detail=f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        message = _error_message(exc)
        loading = exc.code == 503 and message == LOADING_MESSAGE
        return Health(ok=False, detail=f"HTTP {exc.code}: {message}", loading=loading)
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Health(ok=False, detail=f"no answer from {netloc}: {reason}")


def _error_message(exc: HTTPError) -> str:
    """llama-server's ``{"error": {"message": ...}}`` text, else the HTTP reason."""
    try:
        body = parse_record(exc.read(_ERROR_BODY_BYTES), what="the error body")
        message = body["error"]["message"]
        if isinstance(message, str):
            return message
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return str(exc.reason)
