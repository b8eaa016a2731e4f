"""Where a URL points, as credentials care: its origin (scheme, host, port), and which URLs may carry secrets.

One rule for every source: two URLs are the same origin when scheme, host (case-folded) and port
agree, an absent port counting as the scheme's default (``https://h`` is ``https://h:443``).
A secret travels over TLS, or over plain HTTP to this machine only when the person asked for HTTP.
Pure: no IO.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "OCI_SCHEMES",
    "Origin",
    "is_loopback_host",
    "is_oci_url",
    "may_carry_credentials",
    "origin_of",
    "same_origin",
]

#: URL schemes naming an OCI registry: TLS (plain HTTP on loopback), plain HTTP asked for, TLS asked for.
OCI_SCHEMES: Final[tuple[str, ...]] = ("oci://", "oci+http://", "oci+https://")
_DEFAULT_PORTS: Final[dict[str, int]] = {"https": 443, "http": 80}
_LOOPBACK_NAMES: Final[frozenset[str]] = frozenset({"localhost", "localhost.localdomain"})


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port of a URL (the port is the scheme's default when the URL names none).

    Attributes:
        scheme: Lower-case scheme.
        host: Lower-case host, without brackets for IPv6.
        port: The port; ``-1`` when the URL's port is not a number.
    """

    scheme: str
    host: str
    port: int | None

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = _DEFAULT_PORTS.get(self.scheme)
        return f"{self.scheme}://{shown}" + ("" if self.port in (None, default) else f":{self.port}")


def origin_of(url: str) -> Origin:
    """The origin of ``url`` (never raises: a malformed port is ``-1``, which matches nothing real)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return Origin(scheme, (parts.hostname or "").lower(), _DEFAULT_PORTS.get(scheme) if port is None else port)


def same_origin(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` share scheme, host and port (default ports normalised)."""
    return origin_of(a) == origin_of(b)


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def may_carry_credentials(url: str) -> bool:
    """Whether a secret may travel to ``url`` at all: over https, or plain http to this machine."""
    origin = origin_of(url)
    return origin.scheme == "https" or (origin.scheme == "http" and is_loopback_host(origin.host))


def is_oci_url(url: str) -> bool:
    """Whether ``url`` names an OCI registry (one of :data:`OCI_SCHEMES`)."""
    return url.startswith(OCI_SCHEMES)
