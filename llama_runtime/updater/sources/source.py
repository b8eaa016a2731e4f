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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

import httpx

from llama_runtime.runtime.errors import RemoteError

if TYPE_CHECKING:
    import httpx

    from llama_runtime.updater.release.release import Asset, Release

__all__ = [
    "AssetHost",
    "DirectoryListingError",
    "EtagCache",
    "PlainHttp",
    "RateLimit",
    "ReleaseSource",
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


class AssetHost(Protocol):
    """Fetches asset bytes: a transport and the headers one URL may carry."""

    @property
    def http(self) -> httpx.Client:
        """The connection pool (with its timeouts and TLS trust) downloads send through the network layer."""
        ...

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """Headers ``url`` may carry (a token only for the source's own origin)."""
        ...

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        """The URL to fetch ``asset`` from first, and its headers (a private repository's API URL)."""
        ...

    def held_bytes(self, asset: Asset) -> bytes | None:
        """The bytes of ``asset`` when the source holds them itself, nothing to fetch (a registry's
        ``nightly-tag.txt``, made from its tag); ``None``: they are fetched from :meth:`asset_request`."""
        ...


class ReleaseSource(AssetHost, Protocol):
    """A repository's releases, and the host their assets come from."""

    #: Whether ``--tag TAG@sha256:…`` names a manifest here (a registry's builds have one).
    accepts_digest_pins: ClassVar[bool]
    #: Whether channels besides ``stable`` and ``nightly`` are tags here (``mirror promote`` moves them).
    accepts_channel_tags: ClassVar[bool]

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

    def origin_of(self, release: Release) -> str | None:
        """Where ``release``'s bytes were read from when the source can name it exactly
        (a registry's ``oci://host/name@sha256:…``); ``None``: the repository and tag say it."""
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

    def hold_requests(self, seconds: float, why: str) -> None:
        """Ask the server nothing for ``seconds`` (a rate-limit back-off stored by an earlier refusal)."""
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

    def held_bytes(self, asset: Asset) -> bytes | None:
        """Nothing: every asset is fetched."""
        return None
