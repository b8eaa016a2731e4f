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
  until one names a published build.
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
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from llama_runtime.runtime.errors import (
    DigestMismatchError,
    IntegrityError,
    NetworkError,
    RateLimitError,
    ReleaseNotFoundError,
    RemoteError,
    SizeMismatchError,
)
from llama_runtime.runtime.fsutil import decimal
from llama_runtime.updater.release.channel import (
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
from llama_runtime.updater.release.release import Asset, Release, RemoteDataError
from llama_runtime.updater.sources.source import DirectoryListingError, loads_bounded

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = [
    "BUILD_METADATA_ASSETS",
    "CHECKSUM_INDEX_ASSET",
    "MANIFEST_ASSET",
    "MAX_MANIFEST_BYTES",
    "NIGHTLY_PER_PAGE",
    "ArtifactFacts",
    "BuildManifest",
    "LatestPeek",
    "parse_artifact",
    "parse_checksum_index",
    "parse_manifest",
    "peek_latest_build",
    "pointers_on_page",
    "read_pointer",
    "release_with_manifest",
    "resolve_fetched",
    "resolve_latest_remote",
    "resolve_tag_remote",
    "with_build_manifest",
]


# -- build_manifest: A fork's own build metadata: Unsloth's ``llama-prebuilt-manifest.json`` (pu... --------------

MANIFEST_ASSET: Final = "llama-prebuilt-manifest.json"
CHECKSUM_INDEX_ASSET: Final = "llama-prebuilt-sha256.json"
#: The release files that describe its builds rather than being one: a mirror copies them too.
BUILD_METADATA_ASSETS: Final[frozenset[str]] = frozenset({MANIFEST_ASSET, CHECKSUM_INDEX_ASSET})
#: Largest manifest or checksum index read (bytes). The fork's manifests list ~20
#: artifacts in a few KiB; a megabyte is generous and still bounds a hostile reply.
MAX_MANIFEST_BYTES: Final[int] = 1024 * 1024
#: The manifest schema this version reads (Unsloth's ``schema_version``).
SCHEMA_VERSION: Final[int] = 1
#: Unsloth's default rank for an artifact that gives none: after every ranked one.
DEFAULT_RANK: Final[int] = 1000
_SHA256_HEX: Final = re.compile(r"^[0-9a-f]{64}$")
#: SM numbers are compute capabilities times ten; anything past this is not a GPU.
_MAX_SM: Final[int] = 1000


@dataclass(frozen=True)
class ArtifactFacts:
    """What the manifest says about one bundle.

    Attributes:
        asset_name: The release asset it describes.
        install_kind: ``linux-cuda``, ``linux-rocm``, ``windows-cuda``, ``linux-cpu`` …
        runtime_line: ``cuda12`` / ``cuda13`` for CUDA bundles.
        coverage_class: ``portable`` (all supported GPUs) or a targeted class
            (``older``, ``newer``, ``legacy``, ``targeted``).
        bundle_profile: The profile name (``cuda12-older``).
        supported_sms: The SMs compiled in (``(70, 75, 80, 86, 89)``).
        min_sm: Lowest SM covered, when given.
        max_sm: Highest SM covered, when given.
        rank: The fork's own order among equally tight bundles (lower first).
        gfx_target: The ROCm family label (``gfx110X``) or single target.
        mapped_targets: The concrete gfx targets a ROCm bundle holds.
    """

    asset_name: str
    install_kind: str
    runtime_line: str | None = None
    coverage_class: str | None = None
    bundle_profile: str | None = None
    supported_sms: tuple[int, ...] = ()
    min_sm: int | None = None
    max_sm: int | None = None
    rank: int = DEFAULT_RANK
    gfx_target: str | None = None
    mapped_targets: tuple[str, ...] = ()

    @property
    def portable(self) -> bool:
        """Whether the fork calls this bundle its all-GPU fallback."""
        return self.coverage_class == "portable"


@dataclass(frozen=True)
class BuildManifest:
    """A release's build manifest: the facts of each bundle, by asset name."""

    upstream_tag: str
    artifacts: Mapping[str, ArtifactFacts] = field(default_factory=dict)

    def artifact(self, asset_name: str) -> ArtifactFacts | None:
        """The facts of ``asset_name``, when the manifest describes it."""
        return self.artifacts.get(asset_name)


def _malformed(where: str, what: str) -> RemoteDataError:
    return RemoteDataError(f"{where} is malformed: {what}; the release's build metadata cannot be trusted.")


def _text(raw: dict[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _malformed(where, f"'{key}' is not text")
    return value


def _sm(value: object, where: str, key: str) -> int:
    # Unsloth writes SMs as numbers or as digit strings ("86"); both mean the same.
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _malformed(where, f"'{key}' holds {type(value).__name__}, not an SM number")
    text = str(value).strip()  # JSON numbers stop at 4,300 digits, so str() of one works
    sm = decimal(text, max_digits=4)
    if sm is None or not 0 < sm < _MAX_SM:
        raise _malformed(where, f"'{key}' holds {text[:20]!r}, not an SM number such as 86")
    return sm


def _optional_sm(raw: dict[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    return None if value is None else _sm(value, where, key)


def _strings(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _malformed(where, f"'{key}' is not a list of names")
    return tuple(value)


def _rank(raw: dict[str, Any], where: str) -> int:
    value = raw.get("rank", DEFAULT_RANK)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _malformed(where, "'rank' is not a whole number")
    return value


def parse_artifact(raw: object, where: str) -> ArtifactFacts | None:
    """One ``artifacts[]`` entry; ``None`` for an entry without a name or kind (Unsloth drops those too).

    Raises:
        RemoteDataError: A field it has is of the wrong shape.
    """
    if not isinstance(raw, dict):
        raise _malformed(where, "an artifact is not an object")
    name, kind = raw.get("asset_name"), raw.get("install_kind")
    if not isinstance(name, str) or not name or not isinstance(kind, str) or not kind:
        return None
    where = f"{where} (artifact {name[:120]!r})"
    sms = raw.get("supported_sms")
    if sms is not None and not isinstance(sms, list):
        raise _malformed(where, "'supported_sms' is not a list")
    low, high = _optional_sm(raw, "min_sm", where), _optional_sm(raw, "max_sm", where)
    if low is not None and high is not None and low > high:
        raise _malformed(where, f"its min_sm {low} is above its max_sm {high}")
    return ArtifactFacts(
        asset_name=name,
        install_kind=kind,
        runtime_line=_text(raw, "runtime_line", where),
        coverage_class=_text(raw, "coverage_class", where),
        bundle_profile=_text(raw, "bundle_profile", where),
        supported_sms=tuple(sorted({_sm(v, where, "supported_sms") for v in sms or ()})),
        min_sm=low,
        max_sm=high,
        rank=_rank(raw, where),
        gfx_target=_text(raw, "gfx_target", where),
        mapped_targets=tuple(t.lower() for t in _strings(raw, "mapped_targets", where)),
    )


def parse_manifest(data: bytes, where: str) -> BuildManifest | None:
    """Read a ``llama-prebuilt-manifest.json``.

    Args:
        data: The file's bytes (at most :data:`MAX_MANIFEST_BYTES`).
        where: ``"<repo>@<tag> llama-prebuilt-manifest.json"``, for messages.

    Returns:
        The manifest, or ``None`` when it is not a version this code reads.

    Raises:
        RemoteDataError: It is not JSON, or a version-1 manifest breaks its shape.
    """
    try:
        payload = loads_bounded(data, what=where)
    except ValueError:
        raise _malformed(where, "it is not JSON") from None
    if not isinstance(payload, dict):
        raise _malformed(where, "it is not a JSON object")
    version = payload.get("schema_version")
    if isinstance(version, bool) or version != SCHEMA_VERSION or payload.get("component") != "llama.cpp":
        return None
    upstream = payload.get("upstream_tag")
    entries = payload.get("artifacts")
    if not isinstance(upstream, str) or not upstream:
        raise _malformed(where, "it names no upstream_tag")
    if not isinstance(entries, list):
        raise _malformed(where, "it has no artifacts list")
    artifacts: dict[str, ArtifactFacts] = {}
    for raw in entries:
        artifact = parse_artifact(raw, where)
        if artifact is None:
            continue
        if artifact.asset_name in artifacts:  # two different stories about one file: neither is believed
            raise _malformed(where, f"it describes {artifact.asset_name[:120]!r} twice")
        artifacts[artifact.asset_name] = artifact
    return BuildManifest(upstream_tag=upstream, artifacts=artifacts)


def parse_checksum_index(data: bytes, release_tag: str, where: str) -> dict[str, str]:
    """Read a ``llama-prebuilt-sha256.json``: the sha256 its publisher approves for each file.

    Returns:
        Asset name -> lower-case hex sha256, the manifest's own entry included.

    Raises:
        RemoteDataError: The index is malformed or belongs to another release.
    """
    try:
        payload = loads_bounded(data, what=where)
    except ValueError:
        raise _malformed(where, "it is not JSON") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("artifacts"), dict):
        raise _malformed(where, "it has no artifacts object")
    if payload.get("release_tag") != release_tag:
        found = str(payload.get("release_tag"))[:80]
        raise _malformed(where, f"it is the index of release {found!r}, not {release_tag!r}")
    approved: dict[str, str] = {}
    for name, entry in payload["artifacts"].items():
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or not _SHA256_HEX.match(digest.lower()):
            raise _malformed(where, f"its entry for {str(name)[:120]!r} has no valid sha256")
        approved[name] = digest.lower()
    return approved


# -- resolve -----------------------------------------------------------------------------------------------------

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


def read_pointer(client: ReleaseSource, release: Release, asset: Asset) -> str:
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


def pointers_on_page(client: ReleaseSource, releases: Sequence[Release]) -> dict[str, str]:
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


def _read_metadata(client: ReleaseSource, release: Release, asset: Asset, parse: Callable[[bytes], _T]) -> _T:
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


def _approved_digests(client: ReleaseSource, release: Release) -> dict[str, str]:
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


def _published_build(client: ReleaseSource, tag: str) -> Release | None:
    try:
        return client.get_release(tag)
    except ReleaseNotFoundError:
        return None


def resolve_fetched(client: ReleaseSource, release: Release) -> ResolvedRelease:
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


def _older_stable(client: ReleaseSource, skipped: Release, installed: str | None) -> Iterator[StableFallback]:
    """The semver releases below ``skipped``, highest first, each looked up only when the one before failed.

    One request for the tags, then per release one for it and one for its build
    (none for a build that is ``installed``); the pointer is a cached web download.
    """
    releases_seen = 0
    for tag in older_versions(client.version_tags(), skipped.tag, limit=MAX_STABLE_LOOKUPS):
        if releases_seen >= MAX_STABLE_FALLBACKS:
            return
        try:
            release = client.get_release(tag)
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


def _stable_remote(client: ReleaseSource) -> ResolvedRelease:
    """``stable``'s build: ``/releases/latest`` followed, or the newest older release that names one."""
    latest = client.latest_published()
    skipped = missing_pointer(latest)
    if skipped is None:
        return resolve_fetched(client, latest)
    chosen, notes = fallback_stable(skipped, _older_stable(client, latest, None))
    return with_build_manifest(client, with_notes(follow_fallback(chosen), notes))


def peek_latest_build(client: ReleaseSource, channel: Channel, installed: str | None = None) -> LatestPeek:
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


def resolve_tag_remote(client: ReleaseSource, tag: str) -> ResolvedRelease:
    """The build ``tag`` stands for: a build tag itself, or a ``vX.Y.Z`` followed to its build.

    Raises:
        ReleaseNotFoundError: No such release, or the build it names is missing.
        ReleaseIncompleteError: A ``vX.Y.Z`` with no ``nightly-tag.txt`` yet (exit 7).
        IntegrityError: Its ``nightly-tag.txt`` breaks the rules or fails its published digest.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
    if "@" in tag and not getattr(client, "accepts_digest_pins", False):  # only a registry pins manifests
        from llama_runtime.runtime.errors import UserInputError

        raise UserInputError(
            f"--tag {tag} pins a manifest digest, which only a registry source has; "
            "use --api-url oci://HOST/NS/NAME, or the tag alone."
        )
    return resolve_fetched(client, client.get_release(tag))


def resolve_latest_remote(client: ReleaseSource, channel: Channel) -> ResolvedRelease:
    """The build ``channel`` calls latest, fetched with the fewest requests.

    Raises:
        ReleaseNotFoundError: Nothing qualifies.
        ReleaseIncompleteError: The newest stable release names no build yet and no older one does.
        IntegrityError: A ``nightly-tag.txt`` breaks the rules or fails its published digest.
        RateLimitError, NetworkError, RemoteError: GitHub failed.
    """
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
