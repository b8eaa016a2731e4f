"""What an install knows of its bytes before they are verified: the marker's fields from outside the tree.

Each step of an install (the download or the file, the digests, the provenance,
the companions' files) adds to :class:`InstallFacts` with :func:`dataclasses.replace`;
none changes what an earlier step decided. Verification then turns the facts and
the staged tree into the install marker (:func:`.installed.marker_from_facts`).

Invariant: the facts are frozen; every ``extra_assets`` entry a step changes is a new mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = ["InstallFacts", "text_or_none"]


@dataclass(frozen=True)
class InstallFacts:
    """Where an install's archives came from, and what was checked of them (the marker's fields).

    Attributes:
        repo: The repository the release belongs to.
        tag: The release tag.
        backend: The concrete backend of the asset.
        backend_request: What was asked (``auto`` or a backend); later updates follow it.
        asset: The main archive's name.
        source: ``download``, ``file``, ``bundle`` or a registry's manifest.
        reason: Why this build was installed, in words.
        size: The main archive's size in bytes; ``None`` until its bytes are read.
        sha256: The main archive's sha256; ``None`` until its bytes are hashed.
        digest_verified: Every archive matched a published (or given) sha256.
        extra_assets: The companion archives' entries (name, size, sha256; later their
            files, links and provenance), downloaded ones first.
        provenance: The runtime's provenance, as the marker records it.
        release_version: The release's version as resolved (a fork's manifest), if any.
        channel: The channel the release was resolved on (``""``: none).
        attempts: What the update tried before this build (``activate.attempts``).
        companion_from: The tag whose installed companion files are reused (``""``: none).
        explicit_backend: The backend was asked for by name: no device of it is a failure.
        allow_no_device: Install an explicit GPU backend's build that lists no device of it.
    """

    repo: str
    tag: str
    backend: str
    backend_request: str
    asset: str
    source: str
    reason: str
    size: int | None = None
    sha256: str | None = None
    digest_verified: bool = False
    extra_assets: tuple[Mapping[str, object], ...] = ()
    provenance: Mapping[str, object] = field(default_factory=dict)
    release_version: str | None = None
    channel: str = ""
    attempts: tuple[Mapping[str, object], ...] = ()
    companion_from: str = ""
    explicit_backend: bool = False
    allow_no_device: bool = False

    def with_identity(self, identity: Mapping[str, object] | None) -> InstallFacts:
        """These facts with an update's identity: how it resolved the release and got to this build.

        ``identity`` holds ``release_version``, ``channel``, ``attempts``, ``explicit_backend``
        and ``allow_no_device`` (each optional), as the update transaction names them.
        """
        if not identity:
            return self
        attempts = identity.get("attempts", ())
        return replace(
            self,
            release_version=text_or_none(identity.get("release_version")),
            channel=str(identity.get("channel") or ""),
            attempts=tuple(a for a in attempts if isinstance(a, Mapping)) if isinstance(attempts, tuple | list) else (),
            explicit_backend=bool(identity.get("explicit_backend")),
            allow_no_device=bool(identity.get("allow_no_device")),
        )


def text_or_none(value: object) -> str | None:
    """``value`` if it is a non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None
