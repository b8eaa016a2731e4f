"""A fork's own build metadata: ``llama-prebuilt-manifest.json`` and its checksum index (pure).

Unsloth's fork publishes which GPU architectures and CUDA versions each of its
bundles serves, and the sha256 of each file, as release assets; these parsers
read them as remote data (bounded, every field checked), with no IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from llama_runtime.runtime.errors import RemoteDataError
from llama_runtime.runtime.fsutil import decimal
from llama_runtime.updater.release.remote_json import loads_bounded

__all__ = [
    "BUILD_METADATA_ASSETS",
    "CHECKSUM_INDEX_ASSET",
    "DEFAULT_RANK",
    "MANIFEST_ASSET",
    "MAX_MANIFEST_BYTES",
    "ArtifactFacts",
    "BuildManifest",
    "parse_artifact",
    "parse_checksum_index",
    "parse_manifest",
]


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
