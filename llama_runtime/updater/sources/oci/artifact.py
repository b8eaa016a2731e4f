"""A build as one OCI artifact: its config (the release's metadata), its layers (the assets), pure.

Image-spec 1.1 (``manifest.md``, "Guidelines for Artifact Usage"): an artifact
is an image manifest with an ``artifactType`` and a config of the artifact's
own media type; each layer is one file, named by the
``org.opencontainers.image.title`` annotation. Every layer digest is the
sha256 upstream publishes for that asset, so upstream's attestations (made
over those bytes) still match. Provenance bundles are separate manifests whose
``subject`` is the build's manifest (image-spec "subject", distribution-spec
"Listing referrers").

No IO: the registry is :mod:`.client`; pushing is ``offline.registry_push``,
reading ``sources.oci.source``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from llama_runtime.runtime.errors import RemoteDataError
from llama_runtime.updater.release.release import Asset, Release, check_asset_name, check_tag
from llama_runtime.updater.release.remote_json import loads_bounded
from llama_runtime.updater.sources.oci.client import MANIFEST_MEDIA_TYPE, Descriptor, parse_descriptor

__all__ = [
    "ARTIFACT_TYPE",
    "ASSET_DIGEST_ANNOTATION",
    "BUNDLE_ARTIFACT_TYPE",
    "CHANNELS_TAG",
    "CONFIG_MEDIA_TYPE",
    "EMPTY_CONFIG",
    "BuildConfig",
    "ChannelRecord",
    "attestation_tag",
    "build_manifest",
    "bundle_manifest",
    "channels_manifest",
    "parse_build",
    "parse_channels",
    "reserved_tag",
]

#: The manifest's ``artifactType``: a llama-runtime build.
ARTIFACT_TYPE: Final = "application/vnd.llama-runtime.build.v1+json"
#: The config blob's media type (image-spec: an artifact's config may be of its own type).
CONFIG_MEDIA_TYPE: Final = "application/vnd.llama-runtime.build.config.v1+json"
#: Each asset's layer: upstream's file as published, not a tar of it.
LAYER_MEDIA_TYPE: Final = "application/octet-stream"
TITLE_ANNOTATION: Final = "org.opencontainers.image.title"
CREATED_ANNOTATION: Final = "org.opencontainers.image.created"
#: A Sigstore bundle, as ``cosign attest``/``gh attestation`` store them in registries.
BUNDLE_ARTIFACT_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: Which asset (its layer digest) a bundle attests: a build has one bundle per asset or more.
ASSET_DIGEST_ANNOTATION: Final = "dev.llama-runtime.asset.digest"
#: image-spec's empty descriptor ("{}"), the config of a manifest that needs none.
EMPTY_MEDIA_TYPE: Final = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG: Final[bytes] = b"{}"
EMPTY_DIGEST: Final = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
#: The tag of the channel record (who moved which channel last): a name no channel, build or
#: referrer tag can have.
CHANNELS_TAG: Final = "llama-runtime.channels"
CHANNELS_ARTIFACT_TYPE: Final = "application/vnd.llama-runtime.channels.v1+json"
CHANNEL_ANNOTATION_PREFIX: Final = "dev.llama-runtime.channel."
#: Hex digits of a bundle manifest's digest in its attestation tag: unique among a build's few bundles.
ATTESTATION_TAG_ID_CHARS: Final[int] = 16
#: The config's schema: bumped only when readers must refuse what they do not know.
CONFIG_SCHEMA: Final[int] = 1
#: Largest config blob read (bytes): a build's ~50 assets are ~10 KB of JSON.
MAX_CONFIG_BYTES: Final[int] = 1024 * 1024


@dataclass(frozen=True)
class ChannelRecord:
    """Who last moved a channel tag and where: ``moved_by`` is ``sync`` or ``promote``."""

    moved_by: str
    build: str
    digest: str


@dataclass(frozen=True)
class BuildConfig:
    """What a build's config blob says, and the manifest it came from.

    Attributes:
        release: The build release (assets' URLs left empty: the source fills them).
        versions: The semver releases an older push listed in the config (``v0.6.0``); pushes
            now leave them out (the registry's semver tags say which release names a build).
        layers: Asset name -> its layer descriptor.
    """

    release: Release
    versions: tuple[str, ...]
    layers: dict[str, Descriptor]


def config_json(release: Release, sha256s: dict[str, str]) -> bytes:
    """The config blob of ``release`` with the assets in ``sha256s`` (name -> hex), canonical JSON.

    Only what upstream's build release itself says and the asset bytes: the same
    build and assets give the same bytes, whichever path pushed them (GitHub, a
    directory mirror, another registry; ``--tag``, ``--newest``, ``--channel``).
    Facts that change after a build is published (which semver release names it)
    or that a mirror cannot vouch for (the repository's default branch) stay out:
    carrying them would move the build's digest with the same bytes.
    """
    assets = [
        {"name": a.name, "size": a.size, "sha256": sha256s[a.name]}
        for a in sorted(release.assets, key=lambda a: a.name)
        if a.name in sha256s
    ]
    doc = {
        "schema": CONFIG_SCHEMA,
        "repo": release.repo,
        "tag": release.tag,
        "prerelease": release.prerelease,
        "published_at": release.published_at,
        "target_commitish": release.target_commitish,
        "assets": assets,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def build_manifest(config: bytes, config_digest: str, assets: list[tuple[str, int, str]]) -> bytes:
    """The build's image manifest: ``assets`` are (name, size, ``sha256:…``), one layer each, by name."""
    layers = [
        {"mediaType": LAYER_MEDIA_TYPE, "digest": digest, "size": size, "annotations": {TITLE_ANNOTATION: name}}
        for name, size, digest in sorted(assets)
    ]
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config)},
        "layers": layers,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def bundle_manifest(bundle: Descriptor, subject: Descriptor, asset_digest: str, asset_name: str) -> bytes:
    """A referrer holding one Sigstore bundle of the asset ``asset_digest``, its ``subject`` the build.

    The bundle's layer is titled (``oras pull`` writes it under that name, not its digest).
    """
    layer = {**bundle.to_json(), "annotations": {TITLE_ANNOTATION: f"{asset_name}.sigstore.json"}}
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": BUNDLE_ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_CONFIG)},
        "layers": [layer],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        "annotations": {ASSET_DIGEST_ANNOTATION: asset_digest, TITLE_ANNOTATION: f"{asset_name}.sigstore.json"},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def attestation_tag(subject: str, referrer: str) -> str:
    """The tag that keeps the bundle manifest ``referrer`` of the build ``subject``: ``sha256-<build>.<id>.att``.

    cosign's scheme (``sha256-<hex>.att``) widened to one tag per bundle: registries'
    "delete untagged" retention and ``garbage-collect --delete-untagged`` keep what a tag
    names, and a referrer reachable only through the fallback index is not kept by all of them.
    """
    return f"{subject.replace(':', '-', 1)}.{referrer.removeprefix('sha256:')[:ATTESTATION_TAG_ID_CHARS]}.att"


def reserved_tag(tag: str) -> str | None:
    """Why ``tag`` may not be a channel (``mirror promote --to``), or ``None`` when it may.

    Referrer tags (``sha256-<hex>``, the distribution-spec fallback), cosign's and this
    project's attestation, signature and SBOM tags, and the channel record: moving one
    would overwrite a build's provenance or the sync's bookkeeping.
    """
    lowered = tag.lower()
    if lowered.startswith(("sha256-", "sha512-")):
        return "a referrers tag (sha256-<hex>) of a build's attestations"
    if lowered.endswith((".att", ".sig", ".sbom")):
        return "an attestation, signature or SBOM tag"
    if lowered == CHANNELS_TAG:
        return "the record of who moved each channel"
    return None


def channels_manifest(record: dict[str, ChannelRecord]) -> bytes:
    """The channel record's manifest: who last moved each channel tag, to which build and digest."""
    notes = {
        f"{CHANNEL_ANNOTATION_PREFIX}{name}": f"{r.moved_by} {r.build} {r.digest}" for name, r in sorted(record.items())
    }
    empty = {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_CONFIG)}
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": CHANNELS_ARTIFACT_TYPE,
        "config": empty,
        "layers": [empty],
        "annotations": notes,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def parse_channels(doc: dict[str, Any]) -> dict[str, ChannelRecord]:
    """The channel record a :func:`channels_manifest` holds (entries it cannot read are left out)."""
    if doc.get("artifactType") != CHANNELS_ARTIFACT_TYPE:
        return {}
    notes = doc.get("annotations")
    record: dict[str, ChannelRecord] = {}
    for key, value in (notes if isinstance(notes, dict) else {}).items():
        if not isinstance(key, str) or not key.startswith(CHANNEL_ANNOTATION_PREFIX) or not isinstance(value, str):
            continue
        parts = value.split(" ")
        if len(parts) == 3 and parts[0] in ("sync", "promote") and parts[2].startswith("sha256:"):
            record[key.removeprefix(CHANNEL_ANNOTATION_PREFIX)] = ChannelRecord(parts[0], parts[1], parts[2])
    return record


def manifest_layers(doc: dict[str, Any], where: str) -> tuple[Descriptor, dict[str, Descriptor]]:
    """The config descriptor and the titled layers of a build manifest ``doc``.

    Raises:
        RemoteDataError: Not a llama-runtime build, or a layer without a title.
    """
    if doc.get("artifactType") != ARTIFACT_TYPE and _config_type(doc) != CONFIG_MEDIA_TYPE:
        raise RemoteDataError(f"{where} is not a llama-runtime build (artifactType {doc.get('artifactType')!r}).")
    config = parse_descriptor(doc.get("config"), where)
    layers: dict[str, Descriptor] = {}
    raw_layers = doc.get("layers")
    for raw in raw_layers if isinstance(raw_layers, list) else []:
        layer = parse_descriptor(raw, where)
        title = (layer.annotations or {}).get(TITLE_ANNOTATION)
        if not title:
            raise RemoteDataError(f"{where} has a layer without an {TITLE_ANNOTATION} annotation.")
        layers[title] = layer
    return config, layers


def parse_build(config: bytes, layers: dict[str, Descriptor], where: str) -> BuildConfig:
    """The build a config blob describes, its assets checked against the manifest's layers.

    Raises:
        RemoteDataError: Malformed, another schema, or an asset whose layer is
            missing or names other bytes than the config says.
    """
    try:
        doc = loads_bounded(config, what=f"the config of {where}")
    except ValueError:
        raise RemoteDataError(f"The config of {where} is not JSON.") from None
    if not isinstance(doc, dict) or doc.get("schema") != CONFIG_SCHEMA:
        raise RemoteDataError(f"The config of {where} is not a llama-runtime build config (schema {CONFIG_SCHEMA}).")
    repo, tag = doc.get("repo"), check_tag(doc.get("tag"), what=f"the build in {where}")
    if not isinstance(repo, str) or repo.count("/") != 1:
        raise RemoteDataError(f"The config of {where} names no upstream repository.")
    assets = tuple(_asset(raw, tag, layers, where) for raw in _list(doc.get("assets")))
    release = Release(
        repo=repo,
        tag=tag,
        assets=assets,
        prerelease=doc.get("prerelease") is True,
        published_at=_str(doc.get("published_at")),
        target_commitish=_str(doc.get("target_commitish")),
    )
    versions = tuple(check_tag(v, what=f"a version in {where}") for v in _list(doc.get("versions")))
    return BuildConfig(release, versions, layers)


def _asset(raw: object, tag: str, layers: dict[str, Descriptor], where: str) -> Asset:
    if not isinstance(raw, dict):
        raise RemoteDataError(f"The config of {where} lists an asset that is not an object.")
    name = check_asset_name(raw.get("name"), tag=tag)
    size, sha = raw.get("size"), raw.get("sha256")
    layer = layers.get(name)
    if layer is None or layer.digest != f"sha256:{sha}" or layer.size != size:
        raise RemoteDataError(f"{where} lists {name} in its config, but no layer of the manifest holds those bytes.")
    return Asset(name=name, size=layer.size, download_url="", digest=layer.digest)


def _config_type(doc: dict[str, Any]) -> object:
    config = doc.get("config")
    return config.get("mediaType") if isinstance(config, dict) else None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
