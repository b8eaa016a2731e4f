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

A build release that publishes its own build metadata (a fork's
``llama-prebuilt-manifest.json``) gets it attached (:func:`with_build_manifest`):
read (cached the same way), checked against the asset's published digest and
the release's checksum index, so the chooser knows each bundle's GPU coverage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

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
    from llama_runtime.updater.sources.build_manifest import BuildManifest
    from llama_runtime.updater.sources.source import ReleaseSource

#: Releases asked for by the nightly channel. Upstream publishes a dozen builds
#: a day in build order, so the newest ten always hold the highest build; the
#: whole page is re-sent whenever one download count in it changes, so less is cheaper.
NIGHTLY_PER_PAGE: Final[int] = 10
_POINTER_CACHE_PREFIX: Final[str] = "nightly-tag:"
_MANIFEST_CACHE_PREFIX: Final[str] = "build-manifest:"
_T = TypeVar("_T")


def _pointer_key(asset: Asset, prefix: str = _POINTER_CACHE_PREFIX) -> tuple[str, str]:
    url = asset.api_url or asset.download_url
    return prefix + url, f"{asset.size}:{asset.digest}"


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


def _read_metadata(client: ReleaseSource, release: Release, asset: Asset, parse: Callable[[bytes], _T]) -> _T:
    """A build-metadata file of ``release``, parsed; cached by the asset's identity once it parsed.

    A cached copy that no longer parses (a damaged cache) is read again from the
    source rather than blamed on the publisher.

    Raises:
        DigestMismatchError: The bytes are not the ones GitHub publishes for the asset.
        RemoteDataError, IntegrityError: ``parse`` refused them.
        NetworkError, RemoteError: The download failed.
    """
    from llama_runtime.runtime.errors import DigestMismatchError
    from llama_runtime.updater.sources.build_manifest import MAX_MANIFEST_BYTES

    key, fingerprint = _pointer_key(asset, _MANIFEST_CACHE_PREFIX)
    cache = client.etag_cache
    cached = cache.get(key) if cache is not None else None
    if cached is not None and cached[0] == fingerprint and isinstance(cached[1], str):
        with contextlib.suppress(IntegrityError):
            return parse(cached[1].encode("utf-8"))
    data = client.read_small_asset(asset, MAX_MANIFEST_BYTES)
    published = asset.sha256  # raises IntegrityError for a digest that is not a sha256
    if published is not None and published != hashlib.sha256(data).hexdigest():
        raise DigestMismatchError(
            f"{release.repo}@{release.tag} {asset.name} does not match the sha256 GitHub publishes for it."
        )
    parsed = parse(data)  # parsed before caching: a bad file is never cached
    with contextlib.suppress(UnicodeDecodeError):  # JSON in another Unicode encoding: valid, not cached
        if cache is not None:
            cache.put(key, fingerprint, data.decode("utf-8"))
    return parsed


def _approved_digests(client: ReleaseSource, release: Release) -> dict[str, str]:
    """What the release's checksum index approves (asset -> sha256); empty without a complete index."""
    from llama_runtime.updater.sources.build_manifest import CHECKSUM_INDEX_ASSET, parse_checksum_index

    index = release.asset(CHECKSUM_INDEX_ASSET)
    if index is None or not index.is_complete:
        return {}
    where = f"{release.repo}@{release.tag} {CHECKSUM_INDEX_ASSET}"
    return _read_metadata(client, release, index, lambda data: parse_checksum_index(data, release.tag, where))


def _with_approved_digests(release: Release, approved: Mapping[str, str]) -> Release:
    """``release`` whose assets carry the index's sha256 where GitHub publishes none.

    Raises:
        DigestMismatchError: GitHub and the index disagree about an asset: one of them
            was tampered with or broken, so nothing of the release is trusted.
    """
    from llama_runtime.runtime.errors import DigestMismatchError
    from llama_runtime.updater.sources.build_manifest import CHECKSUM_INDEX_ASSET

    assets = []
    for asset in release.assets:
        wanted = approved.get(asset.name)
        if wanted is not None and asset.digest is None:
            asset = dataclasses.replace(asset, digest=f"sha256:{wanted}")
        elif wanted is not None and asset.sha256 != wanted:
            raise DigestMismatchError(
                f"{release.repo}@{release.tag}: GitHub's sha256 of {asset.name} and the one its "
                f"{CHECKSUM_INDEX_ASSET} approves differ; refusing the release."
            )
        assets.append(asset)
    return dataclasses.replace(release, assets=tuple(assets))


def _manifest_parser(release: Release, approved: Mapping[str, str]) -> Callable[[bytes], BuildManifest | None]:
    from llama_runtime.runtime.errors import DigestMismatchError
    from llama_runtime.updater.sources.build_manifest import CHECKSUM_INDEX_ASSET, MANIFEST_ASSET, parse_manifest

    where = f"{release.repo}@{release.tag} {MANIFEST_ASSET}"

    def parse(data: bytes) -> BuildManifest | None:
        wanted = approved.get(MANIFEST_ASSET)
        if wanted is not None and wanted != hashlib.sha256(data).hexdigest():
            raise DigestMismatchError(f"{where} does not match the sha256 its release's {CHECKSUM_INDEX_ASSET} lists.")
        return parse_manifest(data, where)

    return parse


def release_with_manifest(client: ReleaseSource, release: Release) -> Release:
    """``release`` with its build metadata applied, when it publishes any.

    The checksum index (``llama-prebuilt-sha256.json``) gives every asset it lists
    the sha256 its publisher approves (checked against GitHub's own digest); the
    manifest, checked against both, tells each bundle's GPU coverage. Both are
    cached by the asset's identity, so a repeated check downloads nothing.

    Raises:
        DigestMismatchError: A file is not the one its release approves.
        RemoteDataError: The manifest or index is malformed, or the index is another release's.
        NetworkError, RemoteError: A download failed.
    """
    from llama_runtime.updater.sources.build_manifest import MANIFEST_ASSET

    approved = _approved_digests(client, release)
    if approved:
        release = _with_approved_digests(release, approved)
    asset = release.asset(MANIFEST_ASSET)
    if asset is None or not asset.is_complete:
        return release
    manifest = _read_metadata(client, release, asset, _manifest_parser(release, approved))
    return release if manifest is None else dataclasses.replace(release, manifest=manifest)


def with_build_manifest(client: ReleaseSource, found: ResolvedRelease) -> ResolvedRelease:
    """``found`` with its build release's metadata applied (see :func:`release_with_manifest`)."""
    release = release_with_manifest(client, found.release)
    return found if release is found.release else dataclasses.replace(found, release=release)


def resolve_fetched(client: ReleaseSource, release: Release) -> ResolvedRelease:
    """``release`` to its build: itself, or the build its pointer names (one more request)."""
    pointer = pointer_asset(release)
    if pointer is None:
        return with_build_manifest(client, resolve_release(release, {}, [release]))
    named = read_pointer(client, release, pointer)
    try:
        build = [client.get_release(named)]
    except ReleaseNotFoundError:
        build = []
    return with_build_manifest(client, resolve_release(release, {release.tag: named}, build))


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
        found = with_build_manifest(client, resolve_release(latest, {}, [latest]))  # cached: free when unchanged
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
        return with_build_manifest(client, resolve_latest(page, "nightly"))
    return resolve_fetched(client, client.latest_published())


__all__ = [
    "NIGHTLY_PER_PAGE",
    "peek_latest_build",
    "pointers_on_page",
    "read_pointer",
    "release_with_manifest",
    "resolve_fetched",
    "resolve_latest_remote",
    "resolve_tag_remote",
    "with_build_manifest",
]
