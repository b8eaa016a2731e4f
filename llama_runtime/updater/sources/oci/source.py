"""An OCI registry filled by ``mirror sync --dest oci://…``, read as a :class:`~updater.sources.source.BuildSource`.

The registry's tags answer for themselves: a build tag (``b7000``) is the build
its config describes, each asset downloadable from its blob URL with the layer
digest as its published sha256; a semver tag (``v0.6.0``) names the build its
manifest is; the ``stable`` tag is what ``stable`` resolves to, reached through
the highest semver tag naming the same manifest; other channel tags are moved
by ``mirror promote``. Choice, verification and exit codes are the ones every
source gets.

Invariants:
    * Nothing read from the registry is used before its digest is checked:
      manifests by the client, configs against the manifest, assets by the
      download against the layer digest, bundles by the signer policy.
    * The releases keep the upstream identity (``ggml-org/llama.cpp``); a
      registry holding another repository's builds is refused, not relabelled.
    * A repeated ``check`` costs one request: the manifest HEAD of ``stable``,
      whose digest names a config kept in the ETag cache.
    * What the registry says about the upstream repository never counts: its
      default branch is unknown here, as for a directory mirror (the signer
      policy then accepts ``master``/``main``, and upstream's own is a fact).
    * Which semver release names a build is the registry's ``vX.Y.Z`` tag naming
      the build's manifest, not its config: a release cut after the build was
      pushed gets a tag and leaves the build's digest where it was.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING, Any, Final, Self

import httpx

from llama_runtime.runtime.errors import ReleaseNotFoundError, RemoteDataError, RemoteError
from llama_runtime.updater.release.channel import ResolvedRelease
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.remote_json import loads_bounded
from llama_runtime.updater.release.tags import highest_first, is_release_version
from llama_runtime.updater.sources.oci.artifact import (
    ASSET_DIGEST_ANNOTATION,
    BUNDLE_ARTIFACT_TYPE,
    MAX_CONFIG_BYTES,
    BuildConfig,
    manifest_layers,
    parse_build,
)
from llama_runtime.updater.sources.oci.client import RegistryClient
from llama_runtime.updater.sources.source import Build, RepositoryFacts

if TYPE_CHECKING:
    from llama_runtime.updater.net.session import Session
    from llama_runtime.updater.release.channel import Channel
    from llama_runtime.updater.sources.source import EtagCache

__all__ = ["RegistrySource"]

#: The channel tag ``releases/latest`` stands for.
STABLE_TAG: Final = "stable"
#: Builds read for one listing page (each costs a manifest GET, and a config GET the first time):
#: ``list --available`` and nightly resolution need the newest few, not a registry's history.
MAX_LISTED_BUILDS: Final[int] = 30
#: Largest Sigstore bundle read (bytes): a bundle with its certificate chain is ~10 KB.
MAX_BUNDLE_BYTES: Final[int] = 1024 * 1024
#: Referrers read per asset: a build's bundles are one or two per asset.
MAX_REFERRERS: Final[int] = 32
#: Builds read for ``nightly``: the newest few, as GitHub's nightly page (an upload in progress is passed over).
NIGHTLY_BUILDS: Final[int] = 10
#: Semver tags asked (one HEAD each, highest first) for which of them name a build: a release
#: names a build pushed shortly before it, so the newest few cover the builds clients ask for.
MAX_VERSION_PROBES: Final[int] = 32


def _build_number(tag: str) -> int | None:
    """The build ``N`` of a build tag (``bN``, a fork's decorated build); ``None`` for any other tag."""
    from llama_runtime.runtime.errors import UserInputError
    from llama_runtime.updater.release.tags import parse_tag

    try:
        return parse_tag(tag).build
    except UserInputError:
        return None


class RegistrySource:
    """A repository of an OCI registry as a :class:`~updater.sources.source.BuildSource`.

    Its own answers to what a channel or tag stands for: ``stable``, ``nightly``,
    the channel tags ``mirror promote`` moves (``candidate``, ``canary``), build
    tags, ``vX.Y.Z`` tags and ``TAG@sha256:…`` pins (:meth:`resolve`).

    Args:
        registry: The registry client; closed with this source.
        repo: The upstream repository the builds must be of (``ggml-org/llama.cpp``).
        etag_cache: Where manifests and configs read by digest are kept (free repeats), if anywhere.
    """

    def __init__(
        self,
        registry: RegistryClient,
        repo: str,
        *,
        etag_cache: EtagCache | None = None,
    ) -> None:
        self.registry = registry
        self._repo = repo
        self._etag_cache = etag_cache
        self._manifests: dict[str, str] = {}  # build tag -> manifest digest
        self._subjects: dict[str, str] = {}  # asset sha256 hex -> its build's manifest digest
        self._builds: dict[str, BuildConfig] = {}  # build tag -> the build as read (this process)
        self._tags: list[str] | None = None  # the repository's tags (read once per process)
        self._named: dict[str, str] = {}  # semver tag -> the manifest digest it names (asked this process)
        self._listed: dict[int, list[Build]] = {}  # builds(n) answered (this process), by n

    # -- AssetHost ------------------------------------------------------------------------------------------

    @property
    def repo(self) -> str:
        """The upstream repository, as the marker records it."""
        return self._repo

    @property
    def http(self) -> httpx.Client:
        """The registry's connection pool."""
        return self.registry.http

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """The registry's authorization, for its own origin only (never a blob redirect's CDN)."""
        return self.registry.auth_headers_for(url)

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        """The asset's blob URL, with the registry's authorization."""
        return asset.download_url, {"Accept": "application/octet-stream", **self.auth_headers_for(asset.download_url)}

    @property
    def net(self) -> Session:
        """The network layer's session of the registry (its rate-limit hold; registries report no quota)."""
        return self.registry.net

    # -- BuildSource ----------------------------------------------------------------------------------------

    def resolve(
        self, channel: Channel = "stable", *, tag: str | None = None, installed: str | None = None
    ) -> ResolvedRelease:
        """The build a tag of the registry names: ``tag``, else the channel's.

        ``stable`` is the build the ``stable`` tag names, reached through the highest
        ``vX.Y.Z`` tag naming the same manifest; ``nightly`` the highest complete build
        among the newest :data:`NIGHTLY_BUILDS`; any other channel the build its
        tag names now. A ``vX.Y.Z`` tag is the build its manifest is; a pin
        (``TAG@sha256:…``) only while ``TAG`` still names that manifest. ``installed``
        changes nothing: a repeated check costs the ``stable`` manifest HEAD either way.

        Raises:
            ReleaseNotFoundError: The registry has no such tag (or no build).
            IntegrityError: A pinned tag names other bytes now (exit 8).
            RemoteDataError: A build tag holds another build.
            NetworkError, RateLimitError, RemoteError: The registry failed.
        """
        from llama_runtime.updater.release.channel import resolve_latest, resolve_release
        from llama_runtime.updater.sources.resolve import with_build_manifest

        if tag is not None:
            found = self._resolve_tag(tag)
        elif channel == STABLE_TAG:
            build = self._build(STABLE_TAG)
            version = self._highest_version(build)
            found = ResolvedRelease(build.release.tag, version, build.release if version else _as_stable(build))
        elif channel == "nightly":
            found = resolve_latest(self._newest_builds(NIGHTLY_BUILDS), "nightly")
        else:
            release = self._release(channel)
            found = resolve_release(release, {}, [release])
        return with_build_manifest(self, found)

    def builds(self, limit: int) -> list[Build]:
        """The newest builds the registry holds (by build number, at most :data:`MAX_LISTED_BUILDS`), each
        with the semver tags naming its manifest (or recorded in its config) and its build metadata."""
        from llama_runtime.updater.sources.resolve import with_metadata

        count = min(limit, MAX_LISTED_BUILDS)
        if count in self._listed:
            return self._listed[count]  # asked again for more than it holds: the same answer, no request
        releases = self._newest_builds(count)
        listed = {self._manifests.get(r.tag, "") for r in releases}
        by_digest: dict[str, list[str]] = {}
        for version in self._probed_versions(within=listed):
            by_digest.setdefault(self._named[version], []).append(version)
        found = []
        for release in releases:
            build = self._builds[release.tag]
            named = {*build.versions, *by_digest.get(self._manifests.get(release.tag, ""), [])}
            found.append(Build(release, highest_first(named)))
        self._listed[count] = with_metadata(self, found)
        return self._listed[count]

    def repository(self) -> RepositoryFacts:
        """Nothing to trust: a registry's word about the upstream repository never counts.

        Whoever can push to the registry could otherwise widen which branch may
        sign a fork's builds; as for a directory mirror, the signer policy accepts
        ``master`` or ``main`` and says so (upstream's own default branch is a fact).
        """
        return RepositoryFacts()

    # -- release listing (the mirror writer) ----------------------------------------------------------------

    def _release(self, tag: str) -> Release:
        """The build tagged ``tag`` (a build tag, a channel tag; ``TAG@sha256:…`` pinned).

        A build already read through another tag (``stable`` names it) is not asked
        for again: its manifest is the build's, whichever tag led to it.
        """
        if "@" in tag:
            tag, _, pin = tag.partition("@")
            build = self._pinned(tag, pin)
        else:
            known = self._builds.get(tag)
            build = known if known is not None else self._build(tag)
        if _build_number(tag) is None:
            return build.release  # a channel tag (canary, candidate): the build it names now
        if build.release.tag != tag:
            raise RemoteDataError(
                f"{self.registry.ref.display}:{tag} holds the build {build.release.tag}; a build tag must name "
                "its own build."
            )
        return build.release

    def attestations(self, sha256: str) -> object:
        """The Sigstore bundles pushed as referrers of the build holding ``sha256``, as GitHub's API shape.

        A listing entry is judged by the referrer manifest itself (its ``artifactType``,
        ``subject`` and asset annotation): tools that copy repositories (``skopeo copy
        --all``) rewrite the fallback index without the descriptors' ``artifactType``.
        A referrer the listing names but the registry no longer holds (garbage
        collection of untagged manifests) is reported, so the verdict is
        ``unverified`` saying why, never ``absent``.
        """
        from llama_runtime.updater.sources.bundle_url import ResolvedAttestations

        subject = self._subjects.get(sha256)
        if subject is None:
            return []
        found: list[dict[str, Any]] = []
        missing: list[str] = []
        for referrer in self.registry.referrers(subject, BUNDLE_ARTIFACT_TYPE)[:MAX_REFERRERS]:
            named = (referrer.annotations or {}).get(ASSET_DIGEST_ANNOTATION)
            if named is not None and named != f"sha256:{sha256}":
                continue  # another asset's bundle
            try:
                bundle = self._bundle(referrer.digest, subject, sha256)
            except ReleaseNotFoundError:
                missing.append(
                    f"{self.registry.ref.display} lists the attestation {referrer.digest} but no longer holds it "
                    "(removed by garbage collection or retention?); sync the build again"
                )
                continue
            if bundle is not None:
                found.append({"bundle": bundle})
        answer: object = {"attestations": found} if found else []
        return ResolvedAttestations(answer, tuple(missing)) if missing else answer

    def read_small_asset(self, asset: Asset, max_bytes: int) -> bytes:
        """A small blob (a build's checksum index or manifest), checked against its digest."""
        from llama_runtime.runtime.errors import IntegrityError

        if asset.size > max_bytes:
            raise IntegrityError(f"{asset.name} is larger than {max_bytes} bytes; refusing to read it.")
        return self.registry.get_blob(asset.digest or "", max_bytes)

    @property
    def etag_cache(self) -> EtagCache | None:
        """Manifests and configs kept by digest, and the small metadata files of builds."""
        return self._etag_cache

    def close(self) -> None:
        """Release the connection pool."""
        self.registry.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading builds -------------------------------------------------------------------------------------

    def _resolve_tag(self, tag: str) -> ResolvedRelease:
        """The build ``tag`` names: a ``vX.Y.Z`` tag's manifest is its build; any other tag is its build's own."""
        from llama_runtime.updater.release.channel import resolve_release

        name, _, pin = tag.partition("@")
        if not is_release_version(name):
            release = self._release(tag)
            return resolve_release(release, {}, [release])
        build = self._pinned(name, pin) if pin else self._build(name)
        return ResolvedRelease(build.release.tag, name, build.release)

    def _newest_builds(self, count: int) -> list[Release]:
        """The ``count`` highest-numbered builds the registry holds (a ``vX.Y.Z`` tag is none of them)."""
        numbered = [(n, t) for t in self._all_tags() if (n := _build_number(t)) is not None]
        chosen = sorted((n, t) for n, t in numbered if not is_release_version(t))[::-1][:count]
        return [self._build(tag).release for _n, tag in chosen]

    def _build(self, reference: str) -> BuildConfig:
        """The build ``reference`` (a tag or digest) names: one HEAD when its manifest is cached, else GETs."""
        where = f"{self.registry.ref.display}:{reference}"
        head = self.registry.head_manifest(reference)
        cached = self._cached(head.digest) if head is not None else None
        if cached is not None:
            digest, manifest_doc, config = cached
        else:
            manifest = self.registry.get_manifest(reference)
            if manifest is None:
                raise ReleaseNotFoundError(
                    f"{where} does not exist; `mirror sync --dest {self.registry.ref.display}`"
                    " pushes builds, `mirror promote` moves channel tags."
                )
            digest, manifest_doc = manifest.digest, manifest.doc
            config_desc, _ = manifest_layers(manifest_doc, where)
            config = self.registry.get_blob(config_desc.digest, MAX_CONFIG_BYTES)
            self._remember(digest, manifest.raw, config)
        _config, layers = manifest_layers(manifest_doc, where)
        build = parse_build(config, layers, where)
        if build.release.repo.lower() != self._repo.lower():
            raise RemoteError(
                f"{self.registry.ref.display} holds builds of {build.release.repo}, not {self._repo}; "
                f"pass --repo {build.release.repo} to use them."
            )
        assets = tuple(
            Asset(a.name, a.size, self.registry.blob_url(a.digest or ""), a.digest) for a in build.release.assets
        )
        release = Release(
            self._repo,
            build.release.tag,
            assets,
            prerelease=build.release.prerelease,
            published_at=build.release.published_at,
            target_commitish=build.release.target_commitish,
            origin=f"{self.registry.ref.display}@{digest}",
        )
        self._manifests[release.tag] = digest
        for asset in assets:
            self._subjects[(asset.digest or "").removeprefix("sha256:")] = digest
        found = BuildConfig(release, build.versions, layers)
        self._builds[release.tag] = found
        return found

    def _pinned(self, tag: str, digest: str) -> BuildConfig:
        """The build the manifest ``digest`` is, while the registry's ``tag`` still names it.

        Raises:
            ReleaseNotFoundError: The registry has no ``tag``.
            IntegrityError: ``tag`` now names other bytes (exit 8): a pin is never followed elsewhere.
        """
        from llama_runtime.runtime.errors import IntegrityError

        head = self.registry.head_manifest(tag)
        now = head.digest if head is not None else None
        if head is None:
            manifest = self.registry.get_manifest(tag)
            if manifest is None:
                raise ReleaseNotFoundError(f"{self.registry.ref.display}:{tag} does not exist.")
            now = manifest.digest
        if now != digest:
            raise IntegrityError(
                f"{self.registry.ref.display}:{tag} now names {now}, not the pinned {digest}; nothing was installed.",
                hint="The registry's tag was moved or re-pushed. Pin the new digest after checking it, "
                "or install by tag alone.",
            )
        return self._build(digest)

    def _all_tags(self) -> list[str]:
        if self._tags is None:
            self._tags = self.registry.tags()
        return self._tags

    def _probed_versions(self, stop_at: str | None = None, within: set[str] | None = None) -> list[str]:
        """The newest semver tags, each asked which manifest it names, highest first.

        Stops after the one naming ``stop_at``, or after the first naming a manifest not
        ``within`` (releases name ever newer builds: a release naming a build older than a
        page of the newest builds is followed only by releases naming older ones).
        """
        from packaging.version import Version

        semver = [t for t in self._all_tags() if is_release_version(t)]
        versions = sorted(semver, key=lambda t: Version(t.strip()[1:]), reverse=True)
        probed: list[str] = []
        for version in versions[:MAX_VERSION_PROBES]:
            if version not in self._named:
                head = self.registry.head_manifest(version)
                self._named[version] = head.digest if head is not None else ""
            probed.append(version)
            if stop_at is not None and self._named[version] == stop_at:
                break
            if within is not None and self._named[version] not in within:
                break
        return probed

    def _highest_version(self, build: BuildConfig) -> str | None:
        """The highest semver release naming ``build``: its tag in the registry (remembered per manifest)."""
        from llama_runtime.updater.release.tags import highest_version

        digest = self._manifests.get(build.release.tag, "")
        key = f"{self._cache_key(digest)}#version"
        hit = self._etag_cache.get(key) if self._etag_cache is not None else None
        if hit is not None and hit[0] == digest and isinstance(hit[1], dict):
            cached = hit[1].get("version")
            if cached is None or (isinstance(cached, str) and is_release_version(cached)):
                return cached
        named = [v for v in self._probed_versions(stop_at=digest) if self._named[v] == digest]
        version = highest_version([*named, *(v for v in build.versions if is_release_version(v))])
        if self._etag_cache is not None:
            with contextlib.suppress(OSError):
                self._etag_cache.put(key, digest, {"version": version})
        return version

    def _bundle(self, digest: str, subject: str, sha256: str) -> dict[str, Any] | None:
        """The bundle of the referrer ``digest``, when it is a bundle of ``subject``'s asset ``sha256``.

        Raises:
            ReleaseNotFoundError: The registry no longer holds the referrer or its bundle blob.
        """
        manifest = self.registry.get_manifest(digest)
        if manifest is None:
            raise ReleaseNotFoundError(f"{self.registry.ref.display} has no manifest {digest}.")
        doc = manifest.doc
        subject_doc = doc.get("subject")
        layers = doc.get("layers")
        if doc.get("artifactType") != BUNDLE_ARTIFACT_TYPE:
            return None  # another kind of referrer (a signature, an SBOM)
        if not isinstance(subject_doc, dict) or subject_doc.get("digest") != subject:
            return None  # a referrer of other bytes: never used for these
        notes = doc.get("annotations")
        named = notes.get(ASSET_DIGEST_ANNOTATION) if isinstance(notes, dict) else None
        if named is not None and named != f"sha256:{sha256}":
            return None  # another asset's bundle
        if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
            return None
        blob = self.registry.get_blob(str(layers[0].get("digest")), MAX_BUNDLE_BYTES)
        try:
            bundle = loads_bounded(blob, what=f"the bundle {digest}")
        except (ValueError, RemoteDataError):
            return None
        return bundle if isinstance(bundle, dict) else None

    def _cached(self, digest: str) -> tuple[str, dict[str, Any], bytes] | None:
        if self._etag_cache is None:
            return None
        hit = self._etag_cache.get(self._cache_key(digest))
        if hit is None or hit[0] != digest or not isinstance(hit[1], dict):
            return None
        manifest, config = hit[1].get("manifest"), hit[1].get("config")
        if not isinstance(manifest, str) or not isinstance(config, str):
            return None
        raw = manifest.encode()
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            return None  # the cache file was edited: read the registry
        try:
            doc = loads_bounded(raw, what="a cached manifest")
        except (ValueError, RemoteDataError):
            return None
        config_raw = config.encode()
        config_desc, _ = manifest_layers(doc, digest)
        if "sha256:" + hashlib.sha256(config_raw).hexdigest() != config_desc.digest:
            return None
        return digest, doc, config_raw

    def _remember(self, digest: str, raw: bytes, config: bytes) -> None:
        if self._etag_cache is None:
            return
        try:
            self._etag_cache.put(self._cache_key(digest), digest, {"manifest": raw.decode(), "config": config.decode()})
        except (UnicodeDecodeError, OSError):
            return

    def _cache_key(self, digest: str) -> str:
        return f"{self.registry.ref.display}@{digest}"


def _as_stable(build: BuildConfig) -> Release:
    """``build`` as the stable release it is while no ``vX.Y.Z`` names it: the ``stable`` tag says so."""
    release = build.release
    return Release(
        release.repo,
        release.tag,
        release.assets,
        prerelease=False,
        published_at=release.published_at,
        target_commitish=release.target_commitish,
        origin=release.origin,
    )


def open_registry_source(
    registry: RegistryClient,
    repo: str,
    *,
    etag_cache: EtagCache | None = None,
) -> RegistrySource:
    """A :class:`RegistrySource` over ``registry`` (``--api-url oci://HOST/NS/NAME``); the caller closes it.

    Raises:
        UserInputError: ``registry`` names a tag or digest (``--tag`` says which build).
    """
    from llama_runtime.runtime.errors import UserInputError

    if registry.ref.tag is not None or registry.ref.digest is not None:
        registry.http.close()
        raise UserInputError(
            f"--api-url {registry.ref.display} names a tag or digest; give the repository (oci://HOST/NS/NAME) and "
            "choose the build with --tag or --channel."
        )
    return RegistrySource(registry, repo, etag_cache=etag_cache)
