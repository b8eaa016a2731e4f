"""Where builds come from, as the rest of the updater sees it: one small seam shaped like builds.

Every source of builds — the GitHub REST API, a static mirror served over HTTP
or read through ``file://``, an OCI registry — is one :class:`BuildSource`:
``install``, ``check``, ``plan``, ``list --available`` and ``mirror sync`` ask it
which build a channel or tag stands for (:meth:`BuildSource.resolve`), its newest
builds (:meth:`BuildSource.builds`), the attestations of a file, and what it knows
about the repository; downloads fetch asset bytes
through its :class:`AssetHost` half. None of them knows which source it is:
how a source answers (GitHub's ``nightly-tag.txt`` pointers and ETags, a
registry's tags and manifests) stays inside its adapter. The composition root
(:class:`~updater.engine.Engine`) decides which one is opened.

Invariant: an :class:`AssetHost` adds credentials only to URLs it vouches for
(the GitHub client: its API origin), never to a CDN or another host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

import httpx

from llama_runtime.runtime.errors import RemoteError

if TYPE_CHECKING:
    import httpx

    from llama_runtime.updater.net.session import Session
    from llama_runtime.updater.release.channel import Channel, ResolvedRelease
    from llama_runtime.updater.release.release import Asset, Release

__all__ = [
    "AssetHost",
    "Build",
    "BuildSource",
    "DirectoryListingError",
    "EtagCache",
    "PlainHttp",
    "RepositoryFacts",
]


# -- source ------------------------------------------------------------------------------------------------------


class DirectoryListingError(RemoteError):
    """A static server answered a release route with its directory listing, not release data (exit 7).

    Never read as "no releases": the places that fall back to ``releases/latest``
    when a source cannot list re-raise it, so the person learns what is wrong.
    """


@dataclass(frozen=True)
class Build:
    """One build a source holds, and the semver releases that name it.

    Attributes:
        release: The build release itself, with its assets.
        versions: The ``vX.Y.Z`` releases that name this build, highest first (none: a plain build).
    """

    release: Release
    versions: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """The build's tag (``bNNNN``, or a fork's)."""
        return self.release.tag

    @property
    def stable(self) -> bool:
        """Whether ``stable`` offers it: a semver release names it, or it is no prerelease itself."""
        return bool(self.versions) or not (self.release.prerelease or self.release.draft)


@dataclass(frozen=True)
class RepositoryFacts:
    """What a source knows about the repository its builds are of, and whether that may be keyed on.

    Attributes:
        default_branch: The repository's default branch as the source reported it (``None``: unknown).
        default_branch_trusted: Whether that is the forge's own word about the repository (GitHub's
            API); a mirror's or a registry's word about itself never is: whoever can write there
            could otherwise widen which branch may sign the builds.
    """

    default_branch: str | None = None
    default_branch_trusted: bool = False

    @property
    def trusted_default_branch(self) -> str | None:
        """The default branch when it may be keyed on, else ``None`` (the signer policy then says so)."""
        return self.default_branch if self.default_branch_trusted else None


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


class BuildSource(AssetHost, Protocol):
    """A repository's builds as one source offers them: what a channel or tag stands for, the files, the proof."""

    @property
    def repo(self) -> str:
        """``owner/name`` of the repository the builds are of."""
        ...

    @property
    def net(self) -> Session:
        """The network layer's session every request of this source goes through.

        Its :meth:`~updater.net.session.Session.hold` keeps a stored rate-limit back-off, its
        ``quota`` is what the last answer reported (whichever source it is).
        """
        ...

    def resolve(
        self, channel: Channel = "stable", *, tag: str | None = None, installed: str | None = None
    ) -> ResolvedRelease:
        """The build ``tag`` stands for, or else the one ``channel`` calls latest now.

        Args:
            channel: ``stable``, ``nightly``, or a channel of the source's own (a registry's
                ``mirror promote`` tags); one the source does not have is ``UserInputError``.
            tag: An exact build, a ``vX.Y.Z`` release followed to its build, or (where the
                source has manifests) ``TAG@sha256:…``; one the source cannot pin is ``UserInputError``.
            installed: The build installed now: when ``channel`` names that very build, the
                source need not fetch it (the scheduled check's cheap path), and ``release``
                is then whatever named it (it may hold no binaries). Ignored with ``tag``.

        Raises:
            UserInputError: A channel or pin this source does not have.
            ReleaseNotFoundError: Nothing qualifies, or the build named is not published.
            ReleaseIncompleteError: The release asked for names no build yet (exit 7).
            IntegrityError: What the source says contradicts its own published digests (exit 8).
            RateLimitError, NetworkError, RemoteError: The source failed.
        """
        ...

    def builds(self, limit: int) -> list[Build]:
        """The newest builds the source holds, newest first, each with the semver releases naming it.

        At most ``limit``, and fewer where the source holds or lists fewer: a source that reads
        listings page by page reads only the pages ``limit`` needs; one that cannot list (a
        static mirror without a listing) offers the build its ``stable`` names. ``list
        --available`` and ``mirror sync`` read it.

        Raises:
            DirectoryListingError: A static server answered with its directory listing (never "no builds").
            RateLimitError, NetworkError, RemoteError: The source failed.
        """
        ...

    def attestations(self, sha256: str) -> object:
        """The build attestations published for the file ``sha256`` (the API's JSON; ``[]`` for none).

        An answer whose bundles could not all be read is a
        :class:`~updater.sources.bundle_url.ResolvedAttestations` naming the failures.
        """
        ...

    def repository(self) -> RepositoryFacts:
        """What this source knows about the repository (its default branch), and whether it may be trusted."""
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
