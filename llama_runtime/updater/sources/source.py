"""Where releases come from, as the rest of the updater sees it: two small protocols.

Every source of releases — the GitHub REST API, a static mirror served over
HTTP, a mirror directory read through ``file://`` — is one
:class:`ReleaseSource`. The installer, ``check``, ``plan`` and ``mirror sync``
ask it for releases, and :func:`~updater.fetch.download.download_asset`
fetches asset bytes through its :class:`AssetHost` half, never knowing which
source it is. The composition root (:class:`~updater.engine.Engine`) decides.

Invariant: an :class:`AssetHost` adds credentials only to URLs it vouches for
(the GitHub client: its API origin), never to a CDN or another host.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

import httpx

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.errors import NetworkError, RemoteDataError, RemoteError
from llama_runtime.runtime.fsutil import decimal

if TYPE_CHECKING:
    import httpx

    from llama_runtime.updater.release.release import Asset, Release

__all__ = [
    "ACCEPT_ENCODING",
    "API_BODY_DEADLINE_SECONDS",
    "MAX_API_BODY_BYTES",
    "AssetHost",
    "AssetTransport",
    "DirectoryListingError",
    "EtagCache",
    "PlainHttp",
    "RateLimit",
    "ReleaseSource",
    "read_capped",
    "too_slow",
]


# -- source ------------------------------------------------------------------------------------------------------


class DirectoryListingError(RemoteError):
    """A static server answered a release route with its directory listing, not release data (exit 7).

    Never read as "no releases": the places that fall back to ``releases/latest``
    when a source cannot list re-raise it, so the person learns what is wrong.
    """


@dataclass(frozen=True)
class RateLimit:
    """The rate-limit headers of the last API answer.

    Attributes:
        limit: Requests allowed per window, if sent.
        remaining: Requests left in the window, if sent.
        reset: UTC epoch seconds when the window resets, if sent.
    """

    limit: int | None
    remaining: int | None
    reset: int | None


class EtagCache(Protocol):
    """Stores the last ETag and JSON body per key, so a repeated question is a free conditional answer.

    A source keeps its answers here (GitHub: per URL, a free 304; a registry: per manifest), and
    ``resolve`` the small metadata files it read, keyed by their published fingerprint.
    """

    def get(self, url: str) -> tuple[str, Any] | None:
        """The stored ``(etag, decoded JSON)`` for ``url``, if any."""
        ...

    def put(self, url: str, etag: str, body: Any) -> None:
        """Remember ``etag`` and the decoded JSON ``body`` for ``url``."""
        ...


class AssetTransport(Protocol):
    """What a download needs of a source's HTTP client: a request built, then sent and streamed.

    Redirects are followed by the download itself (it decides, hop by hop, which
    headers may travel), so nothing here follows them.
    """

    def build_request(self, method: str, url: str, *, headers: Mapping[str, str]) -> httpx.Request:
        """A request for ``url`` with ``headers``, carrying the client's timeouts."""
        ...

    def send(self, request: httpx.Request, *, stream: bool, follow_redirects: bool) -> httpx.Response:
        """Send ``request``; the body stays unread when ``stream``."""
        ...


class AssetHost(Protocol):
    """Fetches asset bytes: a transport and the headers one URL may carry."""

    @property
    def http(self) -> AssetTransport:
        """The connection pool (with its timeouts) downloads use."""
        ...

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """Headers ``url`` may carry (a token only for the source's own origin)."""
        ...

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        """The URL to fetch ``asset`` from first, and its headers (a private repository's API URL)."""
        ...


class ReleaseSource(AssetHost, Protocol):
    """A repository's releases, and the host their assets come from."""

    @property
    def repo(self) -> str:
        """``owner/name`` of the repository."""
        ...

    def get_release(self, tag: str) -> Release:
        """The release whose tag is exactly ``tag`` (raises ``ReleaseNotFoundError``)."""
        ...

    def latest_release(self, channel: str = "stable") -> Release:
        """The build release ``channel`` calls latest (see :mod:`updater.release.channel`)."""
        ...

    def attestations(self, sha256: str) -> object:
        """The build attestations published for the file ``sha256`` (the API's JSON; ``[]`` for none).

        GitHub's client answers a :class:`~updater.sources.bundle_url.ResolvedAttestations`:
        the JSON with bundles listed by ``bundle_url`` fetched and put inline.
        """
        ...

    def default_branch(self) -> str | None:
        """The repository's default branch (``GET /repos/{owner}/{repo}``), or ``None`` when unknown."""
        ...

    def latest_published(self) -> Release:
        """The source's own ``releases/latest`` (the newest non-prerelease release)."""
        ...

    def recent_releases(self, per_page: int = 100, page: int = 1) -> list[Release]:
        """A page of releases, newest first (a static mirror may raise ``RemoteError``: it has no list)."""
        ...

    def version_tags(self) -> list[str] | None:
        """The source's semver release tags ``vX.Y.Z``, in no order (``None`` where it cannot say: a mirror)."""
        ...

    def read_small_asset(self, asset: Asset, max_bytes: int) -> bytes:
        """The whole body of a small asset (``nightly-tag.txt``), refused past ``max_bytes``."""
        ...

    @property
    def etag_cache(self) -> EtagCache | None:
        """Where conditional-request state (and small cached reads) persist, if anywhere."""
        ...

    @property
    def last_rate_limit(self) -> RateLimit | None:
        """The rate-limit headers of the last answer (``None``: none sent, e.g. a mirror)."""
        ...

    def close(self) -> None:
        """Release the connection pool."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class PlainHttp:
    """An :class:`AssetHost` over a bare ``httpx.Client``: no credentials for any URL.

    Args:
        http: The client; the caller closes it.
    """

    def __init__(self, http: httpx.Client) -> None:
        self._http = http

    @property
    def http(self) -> httpx.Client:
        """The wrapped client."""
        return self._http

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """Nothing: a plain client vouches for no host."""
        return {}

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        """``browser_download_url``, without credentials."""
        return asset.download_url, {"Accept": "application/octet-stream"}


# -- bounded_json: API answers read with a ceiling on decoded bytes and JSON nesting. ----------------------------

#: What API requests accept: gzip only, which :func:`read_capped` inflates itself
#: in bounded steps (httpx would also offer br/zstd when those modules exist).
ACCEPT_ENCODING: Final[str] = "gzip"
_ZLIB_ENCODINGS: Final[frozenset[str]] = frozenset({"gzip", "x-gzip", "deflate"})
# 32 + MAX_WBITS: zlib detects a gzip or a zlib header by itself.
_GZIP_OR_ZLIB_WBITS: Final[int] = 32 + zlib.MAX_WBITS

#: Largest decoded API body. The biggest answer we ask for is one page of 100
#: releases; a llama.cpp release has ~45 assets of ~1.8 KB JSON each (the
#: uploader object is most of it), so a page is ~8 MB. 16 MiB is twice that,
#: and a gzip bomb stops here instead of at the machine's memory.
MAX_API_BODY_BYTES: Final[int] = 16 * 1024 * 1024
#: Longest an API answer may take to arrive in full (seconds). A page of 100 releases is a
#: few MB; even at 50 KB/s it is in within a minute. A server that drips a byte at a time
#: (each read inside the read timeout) must not hold the update lock for hours.
API_BODY_DEADLINE_SECONDS: Final[float] = 120.0


def read_capped(
    response: httpx.Response,
    *,
    cap: int = MAX_API_BODY_BYTES,
    what: str,
    deadline_s: float = API_BODY_DEADLINE_SECONDS,
    clock: Clock = SYSTEM_CLOCK,
) -> bytes:
    """The decoded body of a streamed ``response``, refusing more than ``cap`` bytes.

    Decompression is done here, in steps of at most what the cap still allows
    (``max_length``): httpx would inflate a whole network read at once, and
    64 KiB of gzip can be 64 MiB of zeros.

    Raises:
        RemoteDataError: The decoded body exceeds ``cap`` (reading stops there),
            or it uses an encoding that was not asked for.
        NetworkError: The body took longer than ``deadline_s`` to arrive.
        httpx.HTTPError: The transfer failed (the caller maps it).
    """
    try:
        finished = response.content  # a transport that hands over a finished body (the file:// mirror)
    except httpx.ResponseNotRead:
        pass
    else:
        if len(finished) > cap:
            raise _too_big(what, cap)
        return finished
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in _ZLIB_ENCODINGS:
        inflater = zlib.decompressobj(_GZIP_OR_ZLIB_WBITS)
    else:
        raise RemoteDataError(f"The server sent {what} in the encoding {encoding[:40]!r}, which was not asked for.")
    declared = decimal(response.headers.get("content-length", ""))
    if inflater is None and declared is not None and declared > cap:
        raise _too_big(what, cap)
    pieces: list[bytes] = []
    total = 0
    give_up_at = clock.monotonic() + deadline_s
    try:
        for raw in response.iter_raw():
            if clock.monotonic() > give_up_at:
                raise too_slow(what, deadline_s)
            pending = raw
            while pending:
                if inflater is None:
                    out, pending = pending, b""
                else:
                    out = inflater.decompress(pending, cap + 1 - total)
                    pending = inflater.unconsumed_tail
                total += len(out)
                if total > cap:
                    raise _too_big(what, cap)
                pieces.append(out)
    except zlib.error as exc:
        raise RemoteDataError(f"The server sent {what} whose compression is corrupt ({exc}).") from exc
    return b"".join(pieces)


def too_slow(what: str, deadline_s: float) -> NetworkError:
    """The error for a body that did not arrive within ``deadline_s`` seconds."""
    return NetworkError(
        f"The server took longer than {deadline_s:g} s to send {what}; it is too slow or stalling. Try again later."
    )


def _too_big(what: str, cap: int) -> RemoteDataError:
    return RemoteDataError(
        f"The server sent {what} larger than {cap // (1024 * 1024)} MiB once decoded; "
        "no release answer is that big, so it was not read further."
    )
