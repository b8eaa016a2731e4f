"""Fetch exactly the release data the channel resolver needs (the IO half of channels).

The decisions live in :mod:`updater.release.channel` (pure); this module asks
GitHub for as little as they need, cheapest first:

* ``stable``: ``GET /releases/latest``; when that is a semver release without
  binaries, its ``nightly-tag.txt`` (a web download: no API quota) and
  ``GET /releases/tags/<build>``. Forks: ``/releases/latest`` is the build.
  While that release has no ``nightly-tag.txt`` (make-release.yml uploads it
  after creating the release, or never), the repository's ``vX.Y.Z`` tags
  (``GET /git/matching-refs/tags/v``: one small answer that changes only when a
  release is cut) and ``GET /releases/tags/<vX.Y.Z>`` of the next lower ones,
  until one names a published build. A source that does not serve the tags (a
  proxy or forge that serves releases only) is paged instead: a few pages of
  ``GET /releases`` bring the older semver releases themselves.
* ``nightly``: one small page of ``GET /releases?per_page=…``.
* a tag: ``GET /releases/tags/<tag>``, then the pointer hop for ``vX.Y.Z``.

The content of a ``nightly-tag.txt`` is checked against the sha256 GitHub
publishes for the asset (its size where none is published) before it is
believed, then cached by the asset's identity (id URL, size, digest), so a
repeated check does not download it again.

A build release that publishes its own build metadata (a fork's
``llama-prebuilt-manifest.json``) gets it attached (:func:`with_build_manifest`):
read (cached the same way), checked against the asset's published digest and
the release's checksum index, so the chooser knows each bundle's GPU coverage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from llama_runtime.runtime.errors import (
    DigestMismatchError,
    IntegrityError,
    NetworkError,
    RateLimitError,
    ReleaseNotFoundError,
    RemoteError,
    SizeMismatchError,
    UserInputError,
)
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.release.channel import (
    CHANNELS,
    MAX_NIGHTLY_TAG_BYTES,
    MAX_STABLE_FALLBACKS,
    Channel,
    ResolvedRelease,
    StableFallback,
    fallback_stable,
    follow_fallback,
    missing_pointer,
    older_versions,
    parse_nightly_tag,
    pointer_asset,
    resolve_latest,
    resolve_release,
    with_notes,
)
from llama_runtime.updater.release.manifest import (
    CHECKSUM_INDEX_ASSET,
    MANIFEST_ASSET,
    MAX_MANIFEST_BYTES,
    BuildManifest,
    parse_checksum_index,
    parse_manifest,
)
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import highest_first, parse_tag
from llama_runtime.updater.sources.source import Build, DirectoryListingError

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import EtagCache

__all__ = [
    "NIGHTLY_PER_PAGE",
    "BuildFiles",
    "GitHubReleases",
    "LatestPeek",
    "github_builds",
    "peek_latest_build",
    "pointers_on_page",
    "read_pointer",
    "release_with_manifest",
    "resolve_fetched",
    "resolve_github",
    "resolve_latest_remote",
    "resolve_tag_remote",
    "with_build_manifest",
]


# -- resolve -----------------------------------------------------------------------------------------------------

#: Releases asked for by the nightly channel. Upstream publishes a dozen builds
#: a day in build order, so the newest ten always hold the highest build; the
#: whole page is re-sent whenever one download count in it changes, so less is cheaper.
NIGHTLY_PER_PAGE: Final[int] = 10
_POINTER_CACHE_PREFIX: Final[str] = "nightly-tag:"
_MANIFEST_CACHE_PREFIX: Final[str] = "build-manifest:"
_T = TypeVar("_T")


class BuildFiles(Protocol):
    """Where a build's small metadata files are read from (its checksum index, a fork's manifest)."""

    @property
    def repo(self) -> str:
        """``owner/name`` of the repository."""
        ...

    @property
    def etag_cache(self) -> EtagCache | None:
        """Where small reads are kept by the asset's identity, if anywhere."""
        ...

    def read_small_asset(self, asset: Asset, max_bytes: int) -> bytes:
        """The whole body of a small asset, refused past ``max_bytes``."""
        ...


class GitHubReleases(BuildFiles, Protocol):
    """GitHub's releases as its REST API (or a static mirror of it) offers them: the GitHub adapter's own shape."""

    def get_release(self, tag: str) -> Release:
        """The release whose tag is exactly ``tag`` (raises ``ReleaseNotFoundError``)."""
        ...

    def latest_published(self) -> Release:
        """``releases/latest`` (the newest non-prerelease release)."""
        ...

    def recent_releases(self, per_page: int = 100, page: int = 1) -> list[Release]:
        """A page of releases, newest first (a static mirror may raise ``RemoteError``: it has no list)."""
        ...

    def version_tags(self) -> list[str] | None:
        """The semver release tags ``vX.Y.Z``, in no order (``None`` where it cannot say: a mirror)."""
        ...


def _pointer_key(asset: Asset, prefix: str = _POINTER_CACHE_PREFIX) -> tuple[str, str]:
    url = asset.api_url or asset.download_url
    return prefix + url, f"{asset.size}:{asset.digest}"


@dataclass(frozen=True)
class LatestPeek:
    """What the scheduled check's cheap path found (see :func:`peek_latest_build`).

    Attributes:
        build_tag: The build the channel calls latest.
        version: The semver release it was reached through, or ``None``.
        release: The build release, or the pointer release that names it when
            the build was not fetched.
        notes: Releases passed over on the way, and why (the check's ``warnings``).
    """

    build_tag: str
    version: str | None
    release: Release
    notes: tuple[str, ...] = ()


def _check_published_bytes(release: Release, asset: Asset, data: bytes) -> None:
    """Refuse bytes that are not the ones GitHub publishes for ``asset``.

    GitHub publishes a sha256 ``digest`` for every release asset uploaded since
    June 2025; where none is published (older assets, some mirrors) only the
    published size can be checked, and is.

    Raises:
        DigestMismatchError: The sha256 differs from the published one.
        SizeMismatchError: No digest is published and the size differs.
        IntegrityError: The published digest is not a sha256.
    """
    where = f"{release.repo}@{release.tag} {asset.name}"
    published = asset.sha256
    if published is not None and published != hashlib.sha256(data).hexdigest():
        raise DigestMismatchError(f"{where} does not match the sha256 GitHub publishes for it; refusing what it names.")
    if published is None and len(data) != asset.size:
        raise SizeMismatchError(
            f"{where} is {len(data)} bytes, but {asset.size} are published (no digest is published to check it by)."
        )


def read_pointer(client: GitHubReleases, release: Release, asset: Asset) -> str:
    """The build named by ``release``'s ``nightly-tag.txt`` (cached while the asset is unchanged).

    Raises:
        DigestMismatchError, SizeMismatchError: The bytes are not the ones published (exit 8).
        IntegrityError: The file is too long or names no build.
        NetworkError, RemoteError: It could not be downloaded.
    """
    key, fingerprint = _pointer_key(asset)
    cache = client.etag_cache
    cached = cache.get(key) if cache is not None else None
    if cached is not None and cached[0] == fingerprint and isinstance(cached[1], str):
        return parse_nightly_tag(cached[1], release.tag)  # checked before it was cached
    content = client.read_small_asset(asset, MAX_NIGHTLY_TAG_BYTES)
    _check_published_bytes(release, asset, content)
    named = parse_nightly_tag(content, release.tag)
    if cache is not None:
        cache.put(key, fingerprint, named)
    return named


def pointers_on_page(client: GitHubReleases, releases: Sequence[Release]) -> dict[str, str]:
    """Semver release tag -> the build its ``nightly-tag.txt`` names, for the stable releases in ``releases``.

    Each read is a web download (no API quota), cached while the asset is
    unchanged. A pointer whose content names no build is left out (that release
    offers nothing), as is one still uploading; one whose bytes are not the ones
    GitHub publishes is refused.

    Raises:
        DigestMismatchError, SizeMismatchError: A pointer's bytes fail its published digest (or size).
    """
    found: dict[str, str] = {}
    for release in releases:
        pointer = None if release.draft or release.prerelease else pointer_asset(release)
        if pointer is None or not pointer.is_complete:
            continue
        try:
            found[release.tag] = read_pointer(client, release, pointer)
        except (DigestMismatchError, SizeMismatchError):
            raise  # tampered or broken in transit: nothing it names can be trusted
        except IntegrityError:
            continue
    return found


def _read_metadata(client: BuildFiles, release: Release, asset: Asset, parse: Callable[[bytes], _T]) -> _T:
    """A build-metadata file of ``release``, parsed; cached by the asset's identity once it parsed.

    A cached copy that no longer parses (a damaged cache) is read again from the
    source rather than blamed on the publisher.

    Raises:
        DigestMismatchError: The bytes are not the ones GitHub publishes for the asset.
        RemoteDataError, IntegrityError: ``parse`` refused them.
        NetworkError, RemoteError: The download failed.
    """

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


def _approved_digests(client: BuildFiles, release: Release) -> dict[str, str]:
    """What the release's checksum index approves (asset -> sha256); empty without a complete index."""

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

    where = f"{release.repo}@{release.tag} {MANIFEST_ASSET}"

    def parse(data: bytes) -> BuildManifest | None:
        wanted = approved.get(MANIFEST_ASSET)
        if wanted is not None and wanted != hashlib.sha256(data).hexdigest():
            raise DigestMismatchError(f"{where} does not match the sha256 its release's {CHECKSUM_INDEX_ASSET} lists.")
        return parse_manifest(data, where)

    return parse


def release_with_manifest(client: BuildFiles, release: Release) -> Release:
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

    approved = _approved_digests(client, release)
    if approved:
        release = _with_approved_digests(release, approved)
    asset = release.asset(MANIFEST_ASSET)
    if asset is None or not asset.is_complete:
        return release
    manifest = _read_metadata(client, release, asset, _manifest_parser(release, approved))
    return release if manifest is None else dataclasses.replace(release, manifest=manifest)


def with_build_manifest(client: BuildFiles, found: ResolvedRelease) -> ResolvedRelease:
    """``found`` with its build release's metadata applied (see :func:`release_with_manifest`)."""
    release = release_with_manifest(client, found.release)
    return found if release is found.release else dataclasses.replace(found, release=release)


def _published_build(client: GitHubReleases, tag: str) -> Release | None:
    try:
        return client.get_release(tag)
    except ReleaseNotFoundError:
        return None


def resolve_fetched(client: GitHubReleases, release: Release) -> ResolvedRelease:
    """``release`` to its build: itself, or the build its pointer names (one more request).

    Raises:
        ReleaseIncompleteError: A semver release without a (complete) ``nightly-tag.txt``.
    """
    pointer = pointer_asset(release)
    if pointer is None or missing_pointer(release) is not None:
        return with_build_manifest(client, resolve_release(release, {}, [release]))
    named = read_pointer(client, release, pointer)
    build = _published_build(client, named)
    return with_build_manifest(client, resolve_release(release, {release.tag: named}, [build] if build else []))


#: Older ``vX.Y.Z`` tags looked up at most while stable falls back: tags without a release do not
#: count towards :data:`MAX_STABLE_FALLBACKS` releases, but the lookups stay bounded (requests).
MAX_STABLE_LOOKUPS: Final[int] = 8


log = get_logger("llama_runtime.resolve")

#: Pages of ``/releases`` (100 each) read for older semver releases where the source serves no tag
#: refs: upstream publishes about ten builds a day and a semver release every two or three weeks,
#: so 300 releases reach back past the two releases before the newest.
MAX_RELEASE_PAGES: Final[int] = 3
_RELEASES_PER_PAGE: Final[int] = 100


def _paged_versions(client: GitHubReleases, below: str) -> dict[str, Release]:
    """The semver releases below ``below`` on the first :data:`MAX_RELEASE_PAGES` pages of ``/releases``.

    Where the tags cannot be asked for. A source that cannot list either
    (a static mirror) has none to offer: unknown, not a failure.
    """
    found: dict[str, Release] = {}
    for page in range(1, MAX_RELEASE_PAGES + 1):
        try:
            releases = client.recent_releases(per_page=_RELEASES_PER_PAGE, page=page)
        except (RateLimitError, NetworkError):
            raise
        except RemoteError as exc:
            log.debug("releases cannot be paged", repo=client.repo, reason=exc.message)
            break
        older = set(older_versions([r.tag for r in releases], below, limit=len(releases)))
        found.update({r.tag: r for r in releases if r.tag in older})
        if len(found) >= MAX_STABLE_LOOKUPS or len(releases) < _RELEASES_PER_PAGE:
            break
    return found


def _older_stable(client: GitHubReleases, skipped: Release, installed: str | None) -> Iterator[StableFallback]:
    """The semver releases below ``skipped``, highest first, each looked up only when the one before failed.

    One request for the tags, then per release one for it and one for its build
    (none for a build that is ``installed``); the pointer is a cached web download.
    A source that serves no tags is paged instead (:func:`_paged_versions`), which
    brings the releases themselves.
    """
    tags = client.version_tags()
    paged = _paged_versions(client, skipped.tag) if tags is None else {}
    releases_seen = 0
    for tag in older_versions(paged if tags is None else tags, skipped.tag, limit=MAX_STABLE_LOOKUPS):
        if releases_seen >= MAX_STABLE_FALLBACKS:
            return
        try:
            release = paged[tag] if tag in paged else client.get_release(tag)
        except ReleaseNotFoundError:
            yield StableFallback(tag)  # a bare tag: make-release.yml pushes it before it creates the release
            continue
        releases_seen += 1  # bare tags (or junk ones) never use up the releases looked at
        pointer = pointer_asset(release)
        if release.draft or release.prerelease or missing_pointer(release) is not None:
            yield StableFallback(tag, release)
        elif pointer is None:  # a semver-tagged build (a fork's) stands for itself
            yield StableFallback(tag, release, tag, release)
        else:
            try:
                named = read_pointer(client, release, pointer)
            except (DigestMismatchError, SizeMismatchError):
                raise  # bytes other than the published ones: exit 8, whatever asked
            except IntegrityError:  # a pointer naming no build (itself, a semver tag, too long): pass it over
                yield StableFallback(tag, release)
                continue
            yield StableFallback(tag, release, named, None if named == installed else _published_build(client, named))


def _stable_remote(client: GitHubReleases) -> ResolvedRelease:
    """``stable``'s build: ``/releases/latest`` followed, or the newest older release that names one."""
    latest = client.latest_published()
    skipped = missing_pointer(latest)
    if skipped is None:
        return resolve_fetched(client, latest)
    chosen, notes = fallback_stable(skipped, _older_stable(client, latest, None))
    return with_build_manifest(client, with_notes(follow_fallback(chosen), notes))


def peek_latest_build(client: GitHubReleases, channel: Channel, installed: str | None = None) -> LatestPeek:
    """The build ``channel`` calls latest, without fetching that build when stable points at it.

    The scheduled check's cheap path: when the build is the one installed,
    nothing more is needed (one API request for ``stable``; three while the
    newest stable release names no build yet and stable falls back).

    Args:
        client: The release source.
        channel: ``stable`` or ``nightly``.
        installed: The build installed now (same repository): a fallback release
            naming it is taken without its build being fetched.

    Returns:
        The build; its ``release`` is a pointer release when stable followed one
        and the build was not fetched.
    """
    if channel != "stable":
        found = resolve_latest_remote(client, channel)
        return LatestPeek(found.build_tag, found.version, found.release, found.notes)
    latest = client.latest_published()
    skipped = missing_pointer(latest)
    if skipped is not None:
        chosen, notes = fallback_stable(skipped, _older_stable(client, latest, installed), installed)
        if chosen.build is None:  # the installed build: nothing more to look up
            assert chosen.named is not None and chosen.release is not None  # it qualified
            return LatestPeek(chosen.named, chosen.tag, chosen.release, notes)
        found = with_build_manifest(client, with_notes(follow_fallback(chosen), notes))
        return LatestPeek(found.build_tag, found.version, found.release, found.notes)
    pointer = pointer_asset(latest)
    if pointer is not None:
        version = latest.tag if latest.tag.startswith("v") else None
        return LatestPeek(read_pointer(client, latest, pointer), version, latest)
    found = with_build_manifest(client, resolve_release(latest, {}, [latest]))  # cached: free when unchanged
    return LatestPeek(found.build_tag, found.version, found.release)


def resolve_tag_remote(client: GitHubReleases, tag: str) -> ResolvedRelease:
    """The build ``tag`` stands for: a build tag itself, or a ``vX.Y.Z`` followed to its build.

    Raises:
        ReleaseNotFoundError: No such release, or the build it names is missing.
        ReleaseIncompleteError: A ``vX.Y.Z`` with no ``nightly-tag.txt`` yet (exit 7).
        IntegrityError: Its ``nightly-tag.txt`` breaks the rules or fails its published digest.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    if "@" in tag:  # GitHub has no manifests to pin: only a registry source has
        raise UserInputError(
            f"--tag {tag} pins a manifest digest, which only a registry source has; "
            "use --api-url oci://HOST/NS/NAME, or the tag alone."
        )
    return resolve_fetched(client, client.get_release(tag))


def resolve_latest_remote(client: GitHubReleases, channel: Channel) -> ResolvedRelease:
    """The build ``channel`` calls latest, fetched with the fewest requests.

    Raises:
        ReleaseNotFoundError: Nothing qualifies.
        ReleaseIncompleteError: The newest stable release names no build yet and no older one does.
        IntegrityError: A ``nightly-tag.txt`` breaks the rules or fails its published digest.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    if channel not in CHANNELS:  # GitHub's releases have no channels of their own: a registry's tags do
        raise UserInputError(
            f"The channel {channel!r} is a registry channel; this source has only 'stable' and 'nightly'.",
            hint="Use --channel stable or nightly, or --api-url oci://HOST/NS/NAME for a registry that holds it.",
        )
    if channel == "nightly":
        try:
            page = client.recent_releases(per_page=NIGHTLY_PER_PAGE)
        except (RateLimitError, NetworkError):
            raise
        except (ReleaseNotFoundError, DirectoryListingError):
            raise  # a directory listing is never read as "no releases"
        except RemoteError:
            # A static mirror synced before it wrote its listing cannot list;
            # its ``releases/latest`` was then the highest build it held.
            page = [client.latest_published()]
        return with_build_manifest(client, resolve_latest(page, "nightly"))
    return _stable_remote(client)


def resolve_github(
    client: GitHubReleases, channel: Channel, *, tag: str | None = None, installed: str | None = None
) -> ResolvedRelease:
    """:meth:`BuildSource.resolve <updater.sources.source.BuildSource.resolve>` through GitHub's releases.

    With ``installed``, the scheduled check's cheap path (:func:`peek_latest_build`): the build
    ``channel`` names is fetched only when it is not the one installed.
    """
    if tag is not None:
        return resolve_tag_remote(client, tag)
    if installed is None:
        return resolve_latest_remote(client, channel)
    peek = peek_latest_build(client, channel, installed)
    release = peek.release
    if peek.build_tag != installed and pointer_asset(release) is not None:
        release = resolve_fetched(client, release).release
    return ResolvedRelease(peek.build_tag, peek.version, release, peek.notes)


#: Pages of ``/releases`` (100 each) :func:`github_builds` reads at most: ``list --available`` looks
#: through three for the builds that fit this machine, as it always did.
MAX_BUILD_PAGES: Final[int] = 3


def _build_number(release: Release) -> int | None:
    try:
        return parse_tag(release.tag).build
    except UserInputError:
        return None


def github_builds(client: GitHubReleases, limit: int, pages: dict[int, list[Release]]) -> list[Build]:
    """:meth:`BuildSource.builds <updater.sources.source.BuildSource.builds>` through GitHub's release pages.

    The builds among the newest ``limit`` releases: a page of ``/releases`` per hundred (at most
    :data:`MAX_BUILD_PAGES`, fewer when a page comes back short), each read once per client
    (``pages`` keeps them). The semver releases among them name their builds through their
    ``nightly-tag.txt`` (web downloads, cached); each build gets its published metadata
    (:func:`with_metadata`). A static mirror that cannot list offers the build its ``stable`` names.

    Raises:
        DirectoryListingError: The listing is a static server's directory page.
        DigestMismatchError, SizeMismatchError: A pointer's bytes fail its published digest.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    releases: list[Release] = []
    for page in range(1, min(MAX_BUILD_PAGES, max(1, -(-limit // _RELEASES_PER_PAGE))) + 1):
        if page not in pages:
            try:
                pages[page] = client.recent_releases(per_page=_RELEASES_PER_PAGE, page=page)
            except (RateLimitError, NetworkError, DirectoryListingError):
                raise  # a directory listing is never read as "no builds"
            except RemoteError:
                if page > 1:
                    break
                found = resolve_latest_remote(client, "stable")  # a static mirror lists nothing
                return [Build(found.release, (found.version,) if found.version else ())]
        batch = pages[page]
        releases += batch
        if len(batch) < _RELEASES_PER_PAGE:
            break
    named: dict[str, list[str]] = {}
    for version, build in pointers_on_page(client, releases).items():
        named.setdefault(build, []).append(version)
    found_builds = [r for r in releases if not r.draft and _build_number(r) is not None]
    found_builds.sort(key=lambda r: _build_number(r) or 0, reverse=True)
    return with_metadata(client, [Build(r, highest_first(named.get(r.tag, []))) for r in found_builds[:limit]])


def with_metadata(client: BuildFiles, builds: Sequence[Build]) -> list[Build]:
    """``builds`` with their published build metadata (:func:`release_with_manifest`), read once each.

    A build whose metadata is broken or not the bytes its release approves is left out (one bad
    release does not hide the rest, and none is offered on metadata that failed its checks).
    """
    kept: list[Build] = []
    for build in builds:
        try:
            release = release_with_manifest(client, build.release)
        except IntegrityError as exc:
            log.debug("build left out", repo=client.repo, tag=build.tag, reason=exc.message)
            continue
        kept.append(build if release is build.release else dataclasses.replace(build, release=release))
    return kept
