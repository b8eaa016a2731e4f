"""``mirror sync --dest oci://…``: each build pushed to an OCI registry as one artifact.

What is mirrored is chosen exactly as for a directory mirror
(:mod:`~llama_runtime.updater.offline.mirror`: the builds ``--newest N`` or
``--tag`` names, the semver releases naming them, ``--platform``/``--backend``).
The artifact's shape is :mod:`~llama_runtime.updater.sources.oci.artifact`.

Invariants:
    * A tag is the commit point: the build tag, its semver tags and the
      channel tag are moved only after every blob, the manifest and its
      provenance referrers are in the registry, so a client never sees a tag
      naming a half-pushed build.
    * A blob the registry holds is never uploaded again (a HEAD first), and an
      asset whose upstream digest the registry holds is not even downloaded.
    * Every pushed byte was checked against upstream's digest on the way in
      (the download) and is checked again by the registry (``PUT ?digest=``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import RemoteError, UserInputError
from llama_runtime.runtime.fsutil import sha256_file
from llama_runtime.updater.fetch.scratch import scratch_dir
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import Progress
from llama_runtime.updater.release.channel import Channel, pointer_asset
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import is_release_version
from llama_runtime.updater.sources.oci.artifact import (
    ASSET_DIGEST_ANNOTATION,
    BUNDLE_ARTIFACT_TYPE,
    EMPTY_CONFIG,
    EMPTY_DIGEST,
    build_manifest,
    bundle_manifest,
    config_json,
    manifest_layers,
    parse_build,
)
from llama_runtime.updater.sources.oci.client import MANIFEST_MEDIA_TYPE, Descriptor, RegistryClient, sha256_digest
from llama_runtime.updater.sources.oci.reference import valid_tag

if TYPE_CHECKING:
    from llama_runtime.updater.offline.mirror import MirrorFetch
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = ["PushReport", "promote", "sync_registry"]

log = get_logger("llama_runtime.mirror")

#: Bytes read from disk per upload piece: the upload streams, it never holds an asset in memory
#: (except a blob small enough for one PUT).
_READ_BYTES: Final[int] = 1024 * 1024
# The largest asset pushed: the same bound the directory mirror and the installer use (bytes).
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3
# The largest build config read back when merging with an earlier push (bytes).
_MAX_CONFIG_BYTES: Final[int] = 1024 * 1024


@dataclass
class PushReport:
    """What one ``mirror sync --dest oci://…`` did."""

    dest: str
    releases: list[str] = field(default_factory=list)
    manifests: dict[str, str] = field(default_factory=dict)  # build tag -> manifest digest
    uploaded: list[str] = field(default_factory=list)  # tag/asset whose blob was uploaded
    reused: list[str] = field(default_factory=list)  # tag/asset the registry already held
    mounted: list[str] = field(default_factory=list)  # tag/asset mounted from the source repository
    uploaded_bytes: int = 0
    versions: list[str] = field(default_factory=list)
    channels: dict[str, str] = field(default_factory=dict)  # channel tag -> build tag
    attestations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The ``mirror sync`` object of the CLI for a registry."""
        return {
            "dest": self.dest,
            "releases": self.releases,
            "manifests": self.manifests,
            "uploaded": self.uploaded,
            "reused": self.reused,
            "mounted": self.mounted,
            "uploaded_bytes": self.uploaded_bytes,
            "versions": self.versions,
            "channels": self.channels,
            "attestations": self.attestations,
            "warnings": self.warnings,
        }


def sync_registry(
    client: ReleaseSource,
    registry: RegistryClient,
    *,
    tag: str | None = None,
    latest: int = 1,
    platforms: list[str] | None = None,
    backends: list[str] | None = None,
    channel: Channel = "stable",
    fetch: MirrorFetch | None = None,
) -> PushReport:
    """Push the builds ``tag`` or ``latest`` name (as a directory mirror chooses them) to ``registry``.

    Raises:
        UserInputError: ``latest`` < 1, or a malformed tag.
        BackendUnavailableError: A build has no asset matching the filters.
        IntegrityError: An asset is not the bytes upstream published.
        RemoteError, NetworkError: Upstream or the registry failed; tags already
            pushed stay as they were.
    """
    from llama_runtime.updater.offline.mirror import MirrorFetch, chosen_assets, wanted_releases
    from llama_runtime.updater.sources.mirror_reader import mirror_tag

    if tag is None and latest < 1:
        raise UserInputError(f"--newest must be 1 or more, not {latest}.")
    if tag is not None and not is_release_version(tag):
        tag = mirror_tag(tag)
    builds, versions, notes = wanted_releases(client, tag, latest, channel)
    report = PushReport(dest=registry.ref.display, warnings=list(notes))
    named = _versions_by_build(client, versions)
    branch = client.default_branch()
    with scratch_dir(registry.ref.repository_url) as scratch:  # an interrupted push resumes its download there
        for build in builds:
            assets = chosen_assets(client, build, platforms or [], backends or [])
            pusher = _BuildPush(client, registry, scratch, fetch or MirrorFetch(), report)
            digest = pusher.push(build, assets, named.get(build.tag, []), branch)
            report.releases.append(build.tag)
            report.manifests[build.tag] = digest
    for version, build_tag in sorted((v, b) for b, vs in named.items() for v in vs if b in report.manifests):
        _move_tag(registry, version, report.manifests[build_tag])
        report.versions.append(version)
    if tag is None and builds:
        _move_tag(registry, channel, report.manifests[builds[0].tag])
        report.channels[channel] = builds[0].tag
    return report


@dataclass(frozen=True)
class Promotion:
    """A channel tag moved by ``mirror promote``: the repository, the build, the channel and the manifest digest."""

    dest: str
    tag: str
    channel: str
    digest: str

    def to_json(self) -> dict[str, object]:
        """The ``mirror promote`` object of the CLI."""
        return {"dest": self.dest, "tag": self.tag, "channel": self.channel, "digest": self.digest}


def promote(registry: RegistryClient, tag: str, channel: str) -> str:
    """Point the channel tag ``channel`` at the build already pushed as ``tag``; returns its manifest digest.

    Raises:
        UserInputError: ``channel`` is not a tag, or names a build/semver tag.
        ReleaseNotFoundError: The registry holds no build ``tag``.
    """
    from llama_runtime.runtime.errors import ReleaseNotFoundError
    from llama_runtime.updater.choice.decide import any_build_number

    if not valid_tag(channel) or is_release_version(channel) or any_build_number(channel) is not None:
        raise UserInputError(
            f"--to {channel!r} is not a channel name; use a word such as stable, candidate or canary "
            "(build and version tags name builds themselves)."
        )
    found = registry.head_manifest(tag)
    if found is None:
        manifest = registry.get_manifest(tag)
        if manifest is None:
            raise ReleaseNotFoundError(
                f"{registry.ref.display} holds no build {tag}; push it with `mirror sync` first."
            )
        digest = manifest.digest
    else:
        digest = found.digest
    _move_tag(registry, channel, digest)
    return digest


def _versions_by_build(client: ReleaseSource, versions: list[Release]) -> dict[str, list[str]]:
    """Build tag -> the semver releases whose ``nightly-tag.txt`` names it."""
    from llama_runtime.updater.sources.resolve import read_pointer

    named: dict[str, list[str]] = {}
    for version in versions:
        pointer = pointer_asset(version)
        if pointer is not None and pointer.is_complete:
            named.setdefault(read_pointer(client, version, pointer), []).append(version.tag)
    return named


def _move_tag(registry: RegistryClient, tag: str, digest: str) -> None:
    """Make ``tag`` name the manifest ``digest`` (the bytes re-put under the tag, as the spec moves tags)."""
    manifest = registry.get_manifest(digest)
    if manifest is None:
        raise RemoteError(f"{registry.ref.display} lost the manifest {digest} before it was tagged {tag}.")
    registry.put_manifest(tag, manifest.raw, manifest.media_type)


class _BuildPush:
    """One build's push: blobs, config, manifest, referrers (tags are the caller's)."""

    def __init__(
        self,
        client: ReleaseSource,
        registry: RegistryClient,
        scratch: Path,
        fetch: MirrorFetch,
        report: PushReport,
    ) -> None:
        self.client, self.registry, self.scratch, self.fetch, self.report = client, registry, scratch, fetch, report

    def push(self, build: Release, assets: list[Asset], versions: list[str], branch: str | None) -> str:
        """Push ``assets`` of ``build`` (with what an earlier push holds), the manifest, and its bundles."""
        earlier = self._earlier(build.tag)
        sha256s = {name: layer.digest.removeprefix("sha256:") for name, layer in earlier.items()}
        sizes = {name: layer.size for name, layer in earlier.items()}
        for asset in assets:
            sha256s[asset.name] = self._blob(build.tag, asset)
            sizes[asset.name] = asset.size
        known = {a.name: a for a in build.assets}
        kept = tuple(a for name in sha256s if (a := known.get(name)) is not None)
        release = dataclasses.replace(build, assets=kept, draft=False, manifest=None)
        config = config_json(release, sha256s, versions, branch)
        config_digest = sha256_digest(config)
        self._ensure_bytes(config_digest, config)
        layers = [(name, sizes[name], f"sha256:{sha256s[name]}") for name in sha256s if name in known]
        raw = build_manifest(config, config_digest, layers)
        digest, _ = self.registry.put_manifest(sha256_digest(raw), raw, MANIFEST_MEDIA_TYPE)
        subject = Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw))
        for asset in assets:
            self._attest(build.tag, asset.name, sha256s[asset.name], subject)
        self.registry.put_manifest(build.tag, raw, MANIFEST_MEDIA_TYPE)  # the build's commit point
        return digest

    def _earlier(self, tag: str) -> dict[str, Descriptor]:
        """The layers an earlier push of ``tag`` holds (kept, as a directory mirror keeps earlier assets)."""
        manifest = self.registry.get_manifest(tag)
        if manifest is None:
            return {}
        try:
            config, layers = manifest_layers(manifest.doc, f"{self.registry.ref.display}:{tag}")
            build = parse_build(self.registry.get_blob(config.digest, _MAX_CONFIG_BYTES), layers, tag)
        except RemoteError:
            return {}  # not ours, or damaged: pushed afresh
        return {a.name: layers[a.name] for a in build.release.assets}

    def _blob(self, tag: str, asset: Asset) -> str:
        """The asset's blob in the registry: reused when it holds upstream's digest, else fetched and uploaded."""
        published = asset.sha256
        if published is not None and self.registry.has_blob(f"sha256:{published}"):
            self.report.reused.append(f"{tag}/{asset.name}")
            return published
        if published is not None and self._mounted(asset, f"sha256:{published}"):
            self.report.mounted.append(f"{tag}/{asset.name}")
            return published
        path = self._download(tag, asset)
        sha = sha256_file(path)
        digest = f"sha256:{sha}"
        if self.registry.has_blob(digest):
            self.report.reused.append(f"{tag}/{asset.name}")
        else:
            self.registry.push_blob(
                digest,
                asset.size,
                _reader(path),
                progress=self._progress(asset),
                session=self.scratch / f"{sha}.upload",
            )
            self.report.uploaded.append(f"{tag}/{asset.name}")
            self.report.uploaded_bytes += asset.size
            log.info("pushed", asset=asset.name, bytes=asset.size, digest=digest)
        path.unlink(missing_ok=True)
        return sha

    def _mounted(self, asset: Asset, digest: str) -> bool:
        """Whether ``digest`` was mounted from the repository ``asset`` is a blob of (on this very registry).

        distribution-spec "Mounting a blob from another repository": the registry links the blob
        without a transfer; a registry that will not answers with an upload session instead. Whether
        the asset lives there is its URL's: ``/v2/<name>/blobs/<digest>`` on the registry's own origin.
        """
        from llama_runtime.updater.net.origin import same_origin

        if not same_origin(asset.download_url, self.registry.origin):
            return False
        _v2, found, rest = asset.download_url.partition(f"{self.registry.origin}/v2/")
        name = rest.rpartition("/blobs/")[0] if found else ""
        if not name or name == self.registry.ref.name:
            return False
        return self.registry.mount_blob(digest, name)

    def _download(self, tag: str, asset: Asset) -> Path:
        from llama_runtime.updater.fetch.download import throttled
        from llama_runtime.updater.stage.streaming import fetch_asset

        progress = self.fetch.progress

        def on_bytes(done: int, total: int | None) -> None:
            if progress is not None:
                progress(Progress("download", done, total, asset.name))

        partial = self.scratch / f"{tag}-{asset.name}.part"
        result = fetch_asset(
            self.client,
            asset,
            partial,
            cache=None,
            staging=None,
            max_bytes=min(_MAX_ASSET_BYTES, max(asset.size, 1)),
            progress=throttled(on_bytes),
            options=self.fetch.options,
        ).download
        if result.size != asset.size:
            from llama_runtime.runtime.errors import IntegrityError

            raise IntegrityError(f"{asset.name} is {result.size} bytes, not the published {asset.size}.")
        return result.path

    def _progress(self, asset: Asset) -> Callable[[int], None] | None:
        """Upload progress, reported as the asset's transfer (bytes the registry holds of ``asset.size``)."""
        progress = self.fetch.progress
        if progress is None:
            return None
        return lambda done: progress(Progress("download", done, asset.size, asset.name))

    def _ensure_bytes(self, digest: str, data: bytes) -> None:
        if not self.registry.has_blob(digest):
            self.registry.push_blob(digest, len(data), lambda offset: iter([data[offset:]]))

    def _attest(self, tag: str, name: str, sha256: str, subject: Descriptor) -> None:
        """Push upstream's bundles of the asset ``sha256`` as referrers of the build ``subject``."""
        from llama_runtime.updater.verify.provenance import parse_attestations

        bundles = parse_attestations(_resolved(self.client.attestations(sha256), sha256))
        if not bundles:
            return
        self._ensure_bytes(EMPTY_DIGEST, EMPTY_CONFIG)
        for bundle in bundles:
            data = json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()
            blob = Descriptor(BUNDLE_ARTIFACT_TYPE, sha256_digest(data), len(data))
            self._ensure_bytes(blob.digest, data)
            raw = bundle_manifest(blob, subject, f"sha256:{sha256}", name)
            digest = sha256_digest(raw)
            processed = False
            if self.registry.head_manifest(digest) is None:
                digest, processed = self.registry.put_manifest(digest, raw, MANIFEST_MEDIA_TYPE)
            if not processed:  # no referrers API (Distribution 2.8): keep the sha256-<hex> index
                notes = {ASSET_DIGEST_ANNOTATION: f"sha256:{sha256}"}
                referrer = Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw), BUNDLE_ARTIFACT_TYPE, notes)
                self.registry.add_referrer_to_tag(subject.digest, referrer)
        self.report.attestations.append(f"{tag}/{name}")


def _resolved(answer: object, sha256: str) -> object:
    """The attestations answer, refusing one whose ``bundle_url`` entries could not all be fetched."""
    from llama_runtime.updater.sources.bundle_url import ResolvedAttestations

    if isinstance(answer, ResolvedAttestations):
        if answer.failures:
            raise RemoteError(
                f"The attestations of {sha256[:12]}… could not all be fetched ({'; '.join(answer.failures)}); "
                "the build was not tagged. Run `llama-runtime mirror sync` again."
            )
        return answer.answer
    return answer


def _reader(path: Path) -> Callable[[int], Iterator[bytes]]:
    def chunks(offset: int) -> Iterator[bytes]:
        with path.open("rb") as f:
            f.seek(offset)
            while piece := f.read(_READ_BYTES):
                yield piece

    return chunks
