"""Fetch exactly the release data the channel resolver needs (the IO half of channels).

The decisions live in :mod:`updater.choice.channel` (pure); this module asks
GitHub for as little as they need, cheapest first:

* ``stable``: ``GET /releases/latest``; when that is a semver release without
  binaries, its ``nightly-tag.txt`` (a web download: no API quota) and
  ``GET /releases/tags/<build>``. Forks: ``/releases/latest`` is the build.
* ``nightly``: one small page of ``GET /releases?per_page=…``.
* a tag: ``GET /releases/tags/<tag>``, then the pointer hop for ``vX.Y.Z``.

The content of a ``nightly-tag.txt`` is cached by the asset's identity (id
URL, size, digest), so a repeated check does not download it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import (
    IntegrityError,
    NetworkError,
    RateLimitError,
    ReleaseNotFoundError,
    RemoteError,
)
from llama_runtime.updater.choice.channel import (
    MAX_NIGHTLY_TAG_BYTES,
    Channel,
    ResolvedRelease,
    parse_nightly_tag,
    pointer_asset,
    resolve_latest,
    resolve_release,
)
from llama_runtime.updater.sources.release import Asset, Release

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

#: Releases asked for by the nightly channel. Upstream publishes a dozen builds
#: a day in build order, so the newest ten always hold the highest build; the
#: whole page is re-sent whenever one download count in it changes, so less is cheaper.
NIGHTLY_PER_PAGE: Final[int] = 10
_POINTER_CACHE_PREFIX: Final[str] = "nightly-tag:"


def _pointer_key(asset: Asset) -> tuple[str, str]:
    url = asset.api_url or asset.download_url
    return _POINTER_CACHE_PREFIX + url, f"{asset.size}:{asset.digest}"


def read_pointer(client: ReleaseSource, release: Release, asset: Asset) -> str:
    """The build named by ``release``'s ``nightly-tag.txt`` (cached while the asset is unchanged).

    Raises:
        IntegrityError: The file is too long or names no build.
        NetworkError, RemoteError: It could not be downloaded.
    """
    key, fingerprint = _pointer_key(asset)
    cache = client.etag_cache
    cached = cache.get(key) if cache is not None else None
    if cached is not None and cached[0] == fingerprint and isinstance(cached[1], str):
        return parse_nightly_tag(cached[1], release.tag)
    content = client.read_small_asset(asset, MAX_NIGHTLY_TAG_BYTES)
    named = parse_nightly_tag(content, release.tag)
    if cache is not None:
        cache.put(key, fingerprint, named)
    return named


def pointers_on_page(client: ReleaseSource, releases: Sequence[Release]) -> dict[str, str]:
    """Semver release tag -> the build its ``nightly-tag.txt`` names, for the stable releases in ``releases``.

    Each read is a web download (no API quota), cached while the asset is
    unchanged. A pointer that breaks the rules is left out (that release offers nothing).
    """
    found: dict[str, str] = {}
    for release in releases:
        pointer = None if release.draft or release.prerelease else pointer_asset(release)
        if pointer is None:
            continue
        try:
            found[release.tag] = read_pointer(client, release, pointer)
        except IntegrityError:
            continue
    return found


def resolve_fetched(client: ReleaseSource, release: Release) -> ResolvedRelease:
    """``release`` to its build: itself, or the build its pointer names (one more request)."""
    pointer = pointer_asset(release)
    if pointer is None:
        return resolve_release(release, {}, [release])
    named = read_pointer(client, release, pointer)
    try:
        build = [client.get_release(named)]
    except ReleaseNotFoundError:
        build = []
    return resolve_release(release, {release.tag: named}, build)


def peek_latest_build(client: ReleaseSource, channel: Channel) -> tuple[str, str | None, Release]:
    """The build tag ``channel`` calls latest, without fetching that build when stable points at it.

    The scheduled check's cheap path: when the build is the one installed,
    nothing more is needed (one API request for ``stable``).

    Returns:
        ``(build tag, semver or None, the release fetched)``; the release is a
        pointer release when stable followed one (then the build is not fetched).
    """
    if channel == "stable":
        latest = client.latest_published()
        pointer = pointer_asset(latest)
        if pointer is not None:
            version = latest.tag if latest.tag.startswith("v") else None
            return read_pointer(client, latest, pointer), version, latest
        found = resolve_release(latest, {}, [latest])
    else:
        found = resolve_latest_remote(client, channel)
    return found.build_tag, found.version, found.release


def resolve_tag_remote(client: ReleaseSource, tag: str) -> ResolvedRelease:
    """The build ``tag`` stands for: a build tag itself, or a ``vX.Y.Z`` followed to its build.

    Raises:
        ReleaseNotFoundError: No such release, or the build it names is missing.
        IntegrityError: Its ``nightly-tag.txt`` breaks the rules.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    return resolve_fetched(client, client.get_release(tag))


def resolve_latest_remote(client: ReleaseSource, channel: Channel) -> ResolvedRelease:
    """The build ``channel`` calls latest, fetched with the fewest requests.

    Raises:
        ReleaseNotFoundError: Nothing qualifies.
        IntegrityError: A ``nightly-tag.txt`` breaks the rules.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    if channel == "nightly":
        try:
            page = client.recent_releases(per_page=NIGHTLY_PER_PAGE)
        except (RateLimitError, NetworkError):
            raise
        except ReleaseNotFoundError:
            raise
        except RemoteError:
            # A static mirror cannot list (``releases`` is a directory there);
            # its ``releases/latest`` is the highest build it holds.
            page = [client.latest_published()]
        return resolve_latest(page, "nightly")
    return resolve_fetched(client, client.latest_published())


__all__ = [
    "NIGHTLY_PER_PAGE",
    "peek_latest_build",
    "pointers_on_page",
    "read_pointer",
    "resolve_fetched",
    "resolve_latest_remote",
    "resolve_tag_remote",
]
