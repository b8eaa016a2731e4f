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
    * One build, one manifest: the manifest is computed from the build's own
      facts and asset bytes only (:func:`~llama_runtime.updater.sources.oci.artifact.config_json`),
      so every path that pushes the same assets gives the same digest, and a
      sync that adds nothing writes nothing (every tag is asked with a HEAD
      before it would be written).
    * Pushes merge, never replace: a build's manifest holds what the registry
      already held for it plus what this run adds, its bundles carried over to
      the merged manifest; the tag is written only while it still names what
      the merge was computed from, and read back after a settling pause; when
      another writer moved it, the merge is computed again from what it names.
    * Channels belong to the admin once promoted: the sync moves a channel tag
      only while it still names what the previous sync put there (the channel
      record, :data:`~llama_runtime.updater.sources.oci.artifact.CHANNELS_TAG`), and says so when
      it leaves one alone.
    * A blob the registry holds is never uploaded again (a HEAD first), and an
      asset whose upstream digest the registry holds is not even downloaded.
    * Every pushed byte was checked against upstream's digest on the way in
      (the download) and is checked again by the registry (``PUT ?digest=``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import RemoteError, UserInputError
from llama_runtime.runtime.fsutil import sha256_file
from llama_runtime.updater.fetch.scratch import scratch_dir
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import Progress
from llama_runtime.updater.release.channel import Channel
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import is_release_version
from llama_runtime.updater.sources.oci.artifact import (
    ASSET_DIGEST_ANNOTATION,
    BUNDLE_ARTIFACT_TYPE,
    CHANNELS_TAG,
    EMPTY_CONFIG,
    EMPTY_DIGEST,
    TITLE_ANNOTATION,
    ChannelRecord,
    attestation_tag,
    build_manifest,
    bundle_manifest,
    channels_manifest,
    config_json,
    manifest_layers,
    parse_build,
    parse_channels,
    reserved_tag,
)
from llama_runtime.updater.sources.oci.client import (
    MANIFEST_MEDIA_TYPE,
    Descriptor,
    Manifest,
    RegistryClient,
    parse_descriptor,
    sha256_digest,
)
from llama_runtime.updater.sources.oci.reference import valid_tag

if TYPE_CHECKING:
    from llama_runtime.updater.offline.mirror import MirrorFetch
    from llama_runtime.updater.sources.source import BuildSource

__all__ = ["PushReport", "promote", "sync_registry"]

log = get_logger("llama_runtime.mirror")

#: Bytes read from disk per upload piece: the upload streams, it never holds an asset in memory
#: (except a blob small enough for one PUT).
_READ_BYTES: Final[int] = 1024 * 1024
# The largest asset pushed: the same bound the directory mirror and the installer use (bytes).
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3
# The largest build config read back when merging with an earlier push (bytes).
_MAX_CONFIG_BYTES: Final[int] = 1024 * 1024
#: Times one build's manifest is merged again because another writer moved its tag meanwhile.
_MAX_COMMIT_ATTEMPTS: Final[int] = 8
#: Pause between writing a tag and reading it back (seconds). The registry API has no
#: compare-and-swap for tags: a writer that found the tag unchanged just before this one
#: wrote it writes its own within one request's time; this pause is many of those, so the
#: read-back sees it and the merge is computed again.
SETTLE_S: Final[float] = 0.5
#: Referrers read from an earlier manifest to carry over (a build has one or two per asset).
_MAX_CARRIED_REFERRERS: Final[int] = 256


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
    channels: dict[str, str] = field(default_factory=dict)  # channel tag -> build tag (moved or already there)
    held: dict[str, str] = field(default_factory=dict)  # channel tag -> why the sync left it alone
    attestations: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # manifests and tags written (empty: a no-op sync)
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
            "channels_held": self.held,
            "attestations": self.attestations,
            "written": self.written,
            "warnings": self.warnings,
        }


def sync_registry(
    client: BuildSource,
    registry: RegistryClient,
    *,
    tag: str | None = None,
    latest: int = 1,
    platforms: list[str] | None = None,
    backends: list[str] | None = None,
    channel: Channel = "stable",
    channels: list[str] | None = None,
    fetch: MirrorFetch | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PushReport:
    """Push the builds ``tag`` or ``latest`` name (as a directory mirror chooses them) to ``registry``.

    Args:
        channels: The channel tags this sync may move (``stable``, ``nightly``); ``None``: the one
            ``channel`` names when no ``tag`` is given, ``[]``: none. Each is moved only while the
            registry's channel record says the previous sync put it where it is.
        sleep: Waits :data:`SETTLE_S` before a written tag is read back.

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
    wanted_builds, notes = wanted_releases(client, tag, latest, channel)
    report = PushReport(dest=registry.ref.display, warnings=list(notes))
    builds = [b.release for b in wanted_builds]
    named = {b.tag: list(b.versions) for b in wanted_builds if b.versions}  # build tag -> semver tags naming it
    tags = _Tags(registry, report, sleep)
    replaced: dict[str, str] = {}  # a build's manifest before this run merged into it -> the build tag
    with _scratch(registry.ref.repository_url) as scratch:
        for build in builds:
            assets = chosen_assets(client, build, platforms or [], backends or [])
            pusher = _BuildPush(client, registry, scratch, fetch or MirrorFetch(), report, tags)
            digest = pusher.push(build, assets)
            report.releases.append(build.tag)
            report.manifests[build.tag] = digest
            if pusher.before is not None and pusher.before != digest:
                replaced[pusher.before] = build.tag
    moves = {v: b for b, vs in named.items() for v in vs if b in report.manifests}
    report.versions = sorted(moves)
    wanted = ([channel] if tag is None else []) if channels is None else channels
    targets = _channel_targets(builds, named, wanted, channel) if builds else {}
    moves.update(_owned_channels(registry, targets, report))
    moves.update(_following(registry, replaced, moves))
    # A build merged into by another writer meanwhile: report what its tag names now.
    report.manifests.update(tags.point(moves))
    _record_channels(registry, {c: moves[c] for c in targets if c in moves}, report)
    return report


def _channel_targets(
    builds: list[Release], named: dict[str, list[str]], wanted: list[str], channel: str
) -> dict[str, str]:
    """Channel tag -> the build the sync would point it at.

    The channel the sync resolved names its first build; ``nightly`` the newest build pushed;
    ``stable`` the build the highest semver release pushed names (else the newest non-prerelease
    build, as a fork's ``releases/latest``).
    """
    from llama_runtime.updater.choice.decide import any_build_number
    from llama_runtime.updater.release.tags import highest_version

    targets: dict[str, str] = {}
    for name in wanted:
        if name == channel:
            targets[name] = builds[0].tag
        elif name == "nightly":
            targets[name] = max(builds, key=lambda b: any_build_number(b.tag) or 0).tag
        elif name == "stable":
            pushed = {b.tag for b in builds}
            by_version = {v: b for b, vs in named.items() if b in pushed for v in vs}
            top = highest_version(by_version)
            stable = [b for b in builds if not b.prerelease]
            if top is not None:
                targets[name] = by_version[top]
            elif stable:
                targets[name] = max(stable, key=lambda b: any_build_number(b.tag) or 0).tag
    return targets


def _owned_channels(registry: RegistryClient, targets: dict[str, str], report: PushReport) -> dict[str, str]:
    """The channels of ``targets`` this sync may move (channel -> build); the rest noted in ``report.held``.

    A channel is the sync's while the record says the sync moved it last and the tag still
    names that manifest (or what its build tag names now: the same build, merged since).
    Without a record (a repository pushed before records, or a new channel) a channel
    that does not exist yet is the sync's, and an existing one too unless the record says otherwise.
    """
    record = _read_channels(registry)
    owned: dict[str, str] = {}
    for name, build in targets.items():
        mark = record.get(name)
        now = registry.digest_of(name)
        if mark is not None and mark.moved_by == "promote":
            report.held[name] = (
                f"{name} was promoted to {mark.build} by `mirror promote`; the sync leaves it there "
                f"(`mirror promote --to {name} --tag TAG` moves it, `--to {name} --to-sync` hands it back)."
            )
        elif mark is not None and now is not None and now != mark.digest and now != registry.digest_of(mark.build):
            report.held[name] = (
                f"{name} names {now}, not the {mark.build} the previous sync put there; it was moved by "
                "another tool, so the sync leaves it alone (`mirror promote` moves it)."
            )
        else:
            owned[name] = build
            report.channels[name] = build
    report.warnings += list(report.held.values())
    return owned


def _following(registry: RegistryClient, replaced: dict[str, str], moves: dict[str, str]) -> dict[str, str]:
    """The other tags that named a manifest this run merged into (tag -> its build): they follow the build.

    A semver release or a channel (promoted ones too) named the build; after the build gained
    an asset, leaving them on the older manifest would withhold that asset from their clients.
    """
    if not replaced:
        return {}
    from llama_runtime.updater.choice.decide import any_build_number

    follow: dict[str, str] = {}
    for tag in registry.tags():
        if tag in moves or reserved_tag(tag) is not None:
            continue
        if any_build_number(tag) is not None and not is_release_version(tag):
            continue  # a build tag names its own build
        digest = registry.digest_of(tag)
        if digest in replaced:
            follow[tag] = replaced[digest]
    return follow


def _read_channels(registry: RegistryClient) -> dict[str, ChannelRecord]:
    manifest = registry.get_manifest(CHANNELS_TAG)
    return parse_channels(manifest.doc) if manifest is not None else {}


def _record_channels(registry: RegistryClient, moved: dict[str, str], report: PushReport, *, by: str = "sync") -> None:
    """Write who moved ``moved`` (channel -> build) last into the channel record (only when it changes)."""
    if not moved:
        return
    record = _read_channels(registry)
    for name, build in moved.items():
        digest = registry.digest_of(name)
        if digest is not None:
            record[name] = ChannelRecord(by, build, digest)
    raw = channels_manifest(record)
    if registry.digest_of(CHANNELS_TAG) == sha256_digest(raw):
        return
    _ensure_blob(registry, EMPTY_DIGEST, EMPTY_CONFIG)
    registry.put_manifest(CHANNELS_TAG, raw, MANIFEST_MEDIA_TYPE)
    report.written.append(CHANNELS_TAG)


@dataclass(frozen=True)
class Promotion:
    """A channel tag moved by ``mirror promote``: the repository, the build, the channel and the manifest digest."""

    dest: str
    tag: str
    channel: str
    digest: str
    to_sync: bool = False

    def to_json(self) -> dict[str, object]:
        """The ``mirror promote`` object of the CLI."""
        return {
            "dest": self.dest,
            "tag": self.tag,
            "channel": self.channel,
            "digest": self.digest,
            "to_sync": self.to_sync,
        }


def check_channel_name(channel: str) -> None:
    """Refuse a ``--to`` that is not a channel a client can follow.

    Raises:
        UserInputError: A build or semver tag, a referrer/attestation tag, ``nightly``
            (clients resolve it as the newest build tag, never from a tag), or not a tag.
    """
    from llama_runtime.updater.choice.decide import any_build_number

    if not valid_tag(channel) or is_release_version(channel) or any_build_number(channel) is not None:
        raise UserInputError(
            f"--to {channel!r} is not a channel name; use a word such as stable, candidate or canary "
            "(build and version tags name builds themselves)."
        )
    why = reserved_tag(channel)
    if why is not None:
        raise UserInputError(f"--to {channel!r} is {why}, never a channel; use a word such as canary or stable.")
    if channel == "nightly":
        raise UserInputError(
            "--to nightly would move a tag clients never read: `nightly` is the newest build tag the "
            "registry holds. Promote to a channel of your own (canary) and follow it with --channel canary."
        )


def promote(registry: RegistryClient, tag: str | None, channel: str, *, to_sync: bool = False) -> str:
    """Point the channel tag ``channel`` at the build already pushed as ``tag``; returns its manifest digest.

    The move is recorded (:data:`CHANNELS_TAG`): a later ``mirror sync`` leaves the channel
    where it was promoted. ``to_sync`` hands it back instead: the next sync moves it again
    (``tag`` may then be ``None``: the channel stays where it is until that sync).

    Raises:
        UserInputError: ``channel`` is not a channel name, or neither ``tag`` nor ``to_sync``.
        ReleaseNotFoundError: The registry holds no build ``tag``.
    """
    from llama_runtime.runtime.errors import ReleaseNotFoundError

    check_channel_name(channel)
    if tag is None and not to_sync:
        raise UserInputError("mirror promote needs --tag BUILD (or --to-sync to hand the channel back to the sync).")
    report = PushReport(dest=registry.ref.display)
    if tag is not None:
        digest = registry.digest_of(tag)
        if digest is None:
            raise ReleaseNotFoundError(
                f"{registry.ref.display} holds no build {tag}; push it with `mirror sync` first."
            )
        _Tags(registry, report, lambda _s: None).move(channel, digest)
    digest = registry.digest_of(channel)
    if digest is None:
        raise ReleaseNotFoundError(f"{registry.ref.display} has no channel {channel} to hand back.")
    record = _read_channels(registry)
    build = tag or (record[channel].build if channel in record else channel)
    _record_channels(registry, {channel: build}, report, by="sync" if to_sync else "promote")
    return digest


def _ensure_blob(registry: RegistryClient, digest: str, data: bytes) -> None:
    if not registry.has_blob(digest):
        registry.push_blob(digest, len(data), lambda offset: iter([data[offset:]]))


class _Tags:
    """Moves tags as the last step: HEAD first (a tag already right is never written), then read back."""

    def __init__(self, registry: RegistryClient, report: PushReport, sleep: Callable[[float], None]) -> None:
        self.registry, self.report, self.sleep = registry, report, sleep

    def move(self, tag: str, digest: str) -> bool:
        """Make ``tag`` name the manifest ``digest``; whether it had to be written."""
        if self.registry.digest_of(tag) == digest:
            return False
        manifest = self.registry.get_manifest(digest)
        if manifest is None:
            raise RemoteError(f"{self.registry.ref.display} lost the manifest {digest} before it was tagged {tag}.")
        self.registry.put_manifest(tag, manifest.raw, manifest.media_type)
        self.report.written.append(tag)
        return True

    def point(self, moves: dict[str, str]) -> dict[str, str]:
        """Make each tag of ``moves`` name what its build tag names (tag -> build tag), until that holds;
        returns the digest each of those build tags names then.

        Another writer may merge into a build meanwhile: after a settling pause every
        tag is checked again against its build tag, and moved again when the build moved.
        """
        for _attempt in range(_MAX_COMMIT_ATTEMPTS):
            builds = {b: self.registry.digest_of(b) for b in sorted(set(moves.values()))}
            wrote = False
            for tag, build in sorted(moves.items()):
                digest = builds[build]
                if digest is None:
                    raise RemoteError(f"{self.registry.ref.display} lost the build {build} before {tag} was moved.")
                wrote = self.move(tag, digest) or wrote
            if not wrote:
                return {b: d for b, d in builds.items() if d is not None}
            self.sleep(SETTLE_S)
        raise RemoteError(
            f"The tags of {self.registry.ref.display} kept moving while this sync pointed them; "
            "another sync is writing the same builds. Run `mirror sync` again."
        )


@dataclass(frozen=True)
class _Held:
    """What the registry's build tag names now: the manifest, and its assets (name -> layer)."""

    manifest: Manifest
    layers: dict[str, Descriptor]


@contextlib.contextmanager
def _scratch(dest: str) -> Iterator[Path]:
    """A scratch directory for the downloads (in ``TMPDIR``), named by ``dest``: an interrupted push leaves
    its partial download there for the next push to resume; a full disk there is said as such."""
    from llama_runtime.runtime.errors import DiskSpaceError
    from llama_runtime.runtime.fsutil import is_disk_full

    with scratch_dir(dest) as path:
        try:
            yield path
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            shutil.rmtree(path, ignore_errors=True)  # the space is what is missing: nothing is kept to resume
            raise DiskSpaceError(
                f"The disk holding {path.parent} (TMPDIR) filled up while `mirror sync` downloaded an asset to push; "
                "nothing was tagged for that build and the registry keeps every build that was complete.",
                hint="Free space there, or point TMPDIR at a larger disk, and run `mirror sync` again "
                "(blobs already in the registry are not sent again).",
            ) from None


class _BuildPush:
    """One build's push: blobs, config, manifest, referrers, and the build tag (merged, never replaced)."""

    def __init__(
        self,
        client: BuildSource,
        registry: RegistryClient,
        scratch: Path,
        fetch: MirrorFetch,
        report: PushReport,
        tags: _Tags,
    ) -> None:
        self.client, self.registry, self.scratch, self.fetch, self.report = client, registry, scratch, fetch, report
        self.tags = tags
        self._blobs: dict[str, str] = {}  # asset name -> sha256 hex, blobs this run made sure of
        self.before: str | None = None  # what the build tag named when this run first read it

    def push(self, build: Release, assets: list[Asset]) -> str:
        """Make the build tag name a manifest holding ``assets`` and everything it held; its digest.

        Each round reads what the tag names; when that holds every asset of this run,
        its bundles are made sure of and it is the answer (nothing is written when all
        is there). Otherwise the merge is pushed, the tag written only if it still
        names what the merge came from, and read back in the next round after a pause.

        Raises:
            RemoteError: The tag kept moving for :data:`_MAX_COMMIT_ATTEMPTS` rounds.
        """
        for attempt in range(_MAX_COMMIT_ATTEMPTS + 1):
            named, held = self._held(build.tag)
            if attempt == 0:
                self.before = named
            missing = [a for a in assets if not _holds(held, a)]
            if held is not None and not missing:
                subject = Descriptor(MANIFEST_MEDIA_TYPE, held.manifest.digest, len(held.manifest.raw))
                for asset in assets:
                    if asset.name not in self._blobs:  # held before this run
                        self.report.reused.append(f"{build.tag}/{asset.name}")
                    self._attest(build.tag, asset.name, held.layers[asset.name].digest.removeprefix("sha256:"), subject)
                return held.manifest.digest
            if attempt == _MAX_COMMIT_ATTEMPTS:
                break
            raw = self._merged(build, held, missing)
            digest = sha256_digest(raw)
            subject = Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw))
            if self.registry.digest_of(digest) is None:
                self.registry.put_manifest(digest, raw, MANIFEST_MEDIA_TYPE)
                self.report.written.append(digest)
            if held is not None:
                self._carry_referrers(build.tag, held.manifest.digest, subject)
            for asset in missing:
                self._attest(build.tag, asset.name, self._blobs[asset.name], subject)
            if self.registry.digest_of(build.tag) == named:
                self.registry.put_manifest(build.tag, raw, MANIFEST_MEDIA_TYPE)  # the build's commit point
                self.report.written.append(build.tag)
                self.tags.sleep(SETTLE_S)
            # else: another writer moved the tag since it was read; merge again from what it names
        raise RemoteError(
            f"{self.registry.ref.display}:{build.tag} kept moving while this sync merged into it; another sync "
            "is pushing the same build. Run `mirror sync` again (nothing it holds was dropped)."
        )

    def _merged(self, build: Release, held: _Held | None, missing: list[Asset]) -> bytes:
        """The manifest of ``build`` holding ``held``'s assets and ``missing`` (their blobs pushed first)."""
        sha256s = {name: layer.digest.removeprefix("sha256:") for name, layer in (held.layers if held else {}).items()}
        sizes = {name: layer.size for name, layer in (held.layers if held else {}).items()}
        for asset in missing:
            if asset.name not in self._blobs:
                self._blobs[asset.name] = self._blob(build.tag, asset)
            sha256s[asset.name], sizes[asset.name] = self._blobs[asset.name], asset.size
        known = {a.name: a for a in build.assets}
        # An asset the registry holds stays, even one this run's source no longer lists.
        kept = tuple(known.get(name) or Asset(name, sizes[name], "", f"sha256:{sha256s[name]}") for name in sha256s)
        release = dataclasses.replace(build, assets=kept, draft=False, manifest=None)
        config = config_json(release, sha256s)
        config_digest = sha256_digest(config)
        _ensure_blob(self.registry, config_digest, config)
        layers = [(name, sizes[name], f"sha256:{sha256s[name]}") for name in sha256s]
        return build_manifest(config, config_digest, layers)

    def _held(self, tag: str) -> tuple[str | None, _Held | None]:
        """The digest the build tag names now, and that build (``None``: not one this project can read)."""
        manifest = self.registry.get_manifest(tag)
        if manifest is None:
            return None, None
        try:
            config, layers = manifest_layers(manifest.doc, f"{self.registry.ref.display}:{tag}")
            build = parse_build(self.registry.get_blob(config.digest, _MAX_CONFIG_BYTES), layers, tag)
        except RemoteError:
            return manifest.digest, None  # not ours, or damaged: pushed afresh
        return manifest.digest, _Held(manifest, {a.name: layers[a.name] for a in build.release.assets})

    def _carry_referrers(self, tag: str, earlier: str, subject: Descriptor) -> None:
        """Give the merged manifest ``subject`` the bundles the manifest ``earlier`` had (same blobs)."""
        carried = 0
        for referrer in self.registry.referrers(earlier, BUNDLE_ARTIFACT_TYPE)[:_MAX_CARRIED_REFERRERS]:
            manifest = self.registry.get_manifest(referrer.digest)
            if manifest is None or manifest.doc.get("artifactType") != BUNDLE_ARTIFACT_TYPE:
                continue  # gone (garbage-collected) or another kind: the asset's next sync attests it again
            subject_doc, layers = manifest.doc.get("subject"), manifest.doc.get("layers")
            notes = manifest.doc.get("annotations")
            if not isinstance(subject_doc, dict) or subject_doc.get("digest") != earlier:
                continue
            if not isinstance(layers, list) or len(layers) != 1 or not isinstance(notes, dict):
                continue
            asset_digest, title = notes.get(ASSET_DIGEST_ANNOTATION), notes.get(TITLE_ANNOTATION)
            if not isinstance(asset_digest, str) or not isinstance(title, str):
                continue
            blob = parse_descriptor(layers[0], f"the referrer {referrer.digest}")
            name = title.removesuffix(".sigstore.json")
            self._put_bundle(blob, subject, asset_digest, name)
            carried += 1
        if carried:
            log.info("referrers carried", build=tag, count=carried, to=subject.digest)

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

    def _attest(self, tag: str, name: str, sha256: str, subject: Descriptor) -> None:
        """Make upstream's bundles of the asset ``sha256`` referrers of ``subject`` (writing only what lacks)."""
        from llama_runtime.updater.verify.provenance import parse_attestations

        bundles = parse_attestations(_resolved(self.client.attestations(sha256), sha256))
        if not bundles:
            return
        for bundle in bundles:
            data = json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()
            blob = Descriptor(BUNDLE_ARTIFACT_TYPE, sha256_digest(data), len(data))
            _ensure_blob(self.registry, blob.digest, data)
            self._put_bundle(blob, subject, f"sha256:{sha256}", name)
        if f"{tag}/{name}" not in self.report.attestations:
            self.report.attestations.append(f"{tag}/{name}")

    def _put_bundle(self, blob: Descriptor, subject: Descriptor, asset_digest: str, name: str) -> None:
        """The referrer holding ``blob`` for ``subject``: pushed, tagged, listed (each only when missing)."""
        raw = bundle_manifest(blob, subject, asset_digest, name)
        digest = sha256_digest(raw)
        processed = False
        keep = attestation_tag(subject.digest, digest)
        if self.registry.digest_of(keep) != digest:
            _ensure_blob(self.registry, EMPTY_DIGEST, EMPTY_CONFIG)
            # Pushed under its tag: the tag keeps it through "delete untagged" retention and GC.
            digest, processed = self.registry.put_manifest(keep, raw, MANIFEST_MEDIA_TYPE)
            self.report.written.append(keep)
        if not processed:  # no referrers API (Distribution 2.8): keep the sha256-<hex> index
            notes = {ASSET_DIGEST_ANNOTATION: asset_digest}
            referrer = Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw), BUNDLE_ARTIFACT_TYPE, notes)
            if self.registry.add_referrer_to_tag(subject.digest, referrer):
                self.report.written.append(f"{subject.digest.replace(':', '-', 1)}")


def _holds(held: _Held | None, asset: Asset) -> bool:
    """Whether ``held`` has ``asset``: its layer of that name is upstream's digest (or size, without one)."""
    if held is None or asset.name not in held.layers:
        return False
    layer = held.layers[asset.name]
    if asset.sha256 is not None:
        return layer.digest == f"sha256:{asset.sha256}"
    return layer.size == asset.size


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
