"""Writing into the mirror: an asset checked into its content-addressed place, attestations, ``latest``.

Invariants:
    * An asset file appears under ``download/`` only by a rename of a fully
      verified download, hashed as it lies on disk; existing files are
      re-hashed, never trusted (:func:`~llama_runtime.updater.offline.mirrorkeep.publish_checked`).
    * A file's attestations are written before the release JSON that names it.

The caller holds :func:`~llama_runtime.updater.offline.mirrorkeep.one_writer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import IntegrityError
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE, is_disk_full, sha256_file
from llama_runtime.runtime.record import write_record
from llama_runtime.updater.choice.latest import any_build_number, highest_build_tag
from llama_runtime.updater.offline.mirrorkeep import publish_checked
from llama_runtime.updater.release.release import Asset
from llama_runtime.updater.sources.mirror_layout import (
    OWN_SHA_KEY,
    SHA_DIR_CHARS,
    MirrorPaths,
    latest_relative,
    listing_relative,
    read_json,
)

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

# The largest asset the mirror accepts (bytes); same bound the installer uses, so a
# hostile upstream cannot fill the mirror's disk with an endless body.
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3


@dataclass(frozen=True)
class AssetOutcome:
    """Where an asset's file came from: ``fetched_bytes`` is None when an intact copy was reused."""

    sha256: str
    fetched_bytes: int | None


def mirror_attestations(client: ReleaseSource, paths: MirrorPaths, sha256: str) -> bool:
    """Store upstream's attestations of the file ``sha256`` on the API's route; whether there were any.

    Written before the release JSON that names the file, so a client that sees
    the release also sees its attestation. Stored as received, except that an
    entry GitHub lists by ``bundle_url`` is stored with the fetched bundle
    inline and without the URL (it is pre-signed and expires: mirror clients
    need no blob host, and no signature is ever written to disk). Every client
    verifies them itself (the mirror is not trusted with that).

    Raises:
        RemoteError: An entry listed by ``bundle_url`` could not be fetched: storing
            the rest would make its file look unattested (``absent``) to every client.
    """
    from llama_runtime.runtime.errors import RemoteError
    from llama_runtime.updater.sources.bundle_url import ResolvedAttestations
    from llama_runtime.updater.verify.provenance import parse_attestations

    answer = client.attestations(sha256)
    if isinstance(answer, ResolvedAttestations):
        if answer.failures:
            raise RemoteError(
                f"The attestations of {sha256[:12]}… could not all be fetched ({'; '.join(answer.failures)}); "
                "nothing was published for this release. Run `llama-runtime mirror sync` again."
            )
        answer = answer.answer
    if not parse_attestations(answer):
        return False
    target = paths.attestations(sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_record(target, answer, mode=SHARED_FILE_MODE)  # served like the release JSON
    return True


def mirror_repository(client: ReleaseSource, paths: MirrorPaths) -> str | None:
    """Store the repository's default branch where clients ask GitHub for it; the branch, if known.

    Clients of the mirror judge an attestation's source ref against it (the
    signer policy); a sync that cannot learn it leaves what an earlier one stored.
    """
    branch = client.default_branch()
    if branch is not None:
        doc = {"full_name": client.repo, "default_branch": branch}
        paths.repository_json.parent.mkdir(parents=True, exist_ok=True)
        write_record(paths.repository_json, doc, mode=SHARED_FILE_MODE)  # served like the release JSON
    return branch


def ensure_asset(
    client: ReleaseSource,
    dest: Path,
    paths: MirrorPaths,
    tag: str,
    asset: Asset,
    previous: dict[str, Any] | None,
) -> AssetOutcome:
    """The asset's file in the mirror, checked: its sha256, and the bytes fetched for it.

    The content is known up front from upstream's digest, or (digest-less
    upstream) from what the previous sync computed for a file of this size.
    """
    from llama_runtime.updater.fetch.download import download_asset

    published = asset.sha256
    known = published
    if known is None and previous is not None and previous.get("size") == asset.size:
        own = previous.get(OWN_SHA_KEY)
        known = own if isinstance(own, str) and len(own) == 64 else None
    if known is not None:
        target = paths.asset(tag, known, asset.name)
        if target.is_file() and target.stat().st_size == asset.size and sha256_file(target) == known:
            return AssetOutcome(known, fetched_bytes=None)
    partial_dir = dest / ".partial"
    partial_dir.mkdir(parents=True, exist_ok=True)
    key = published[:SHA_DIR_CHARS] if published else f"nodigest-{asset.size}"
    partial = paths.inside(partial_dir / f"{tag}-{key}-{asset.name}.part")
    try:
        result = download_asset(
            client,
            asset,
            partial,
            max_bytes=min(_MAX_ASSET_BYTES, max(asset.size, 1)),
            expected_size=asset.size,
            expected_sha256=published,
        )
    except OSError as exc:
        if is_disk_full(exc):
            partial.unlink(missing_ok=True)  # the space is what is missing
        raise
    if result.size != asset.size:
        partial.unlink(missing_ok=True)
        raise IntegrityError(f"{asset.name} is {result.size} bytes, not the published {asset.size}.")
    # Content-addressed: this path only ever holds these bytes, so the rename
    # cannot change a file a published JSON names (at most it repairs one). The
    # file is hashed as it lies on disk, not as it was received.
    target = paths.asset(tag, result.sha256, asset.name)
    sha = publish_checked(partial, target, size=asset.size, sha256=published or result.sha256)
    return AssetOutcome(sha, fetched_bytes=result.size)


def publish_latest(paths: MirrorPaths) -> str | None:
    """Point ``releases/latest`` at the highest build the mirror holds; returns its tag."""
    tags_dir = paths.releases / "tags"
    tag = highest_build_tag(
        entry.name for entry in (tags_dir.iterdir() if tags_dir.is_dir() else []) if entry.is_file()
    )
    if tag is None:
        return None
    doc = read_json(paths.tag_json(tag))
    if doc is None:
        return None
    write_record(paths.latest_json, latest_relative(doc), mode=SHARED_FILE_MODE)
    _publish_listing(paths, tags_dir)
    return tag


def _publish_listing(paths: MirrorPaths, tags_dir: Path) -> None:
    """Write the ``releases`` listing: every mirrored release, highest build first (``list --available``, nightly)."""
    docs = [doc for entry in sorted(tags_dir.iterdir()) if entry.is_file() and (doc := read_json(entry)) is not None]
    docs.sort(key=lambda doc: any_build_number(str(doc.get("tag_name"))) or 0, reverse=True)
    listing = [listing_relative(doc) for doc in docs]
    write_record(paths.listing_json, listing, mode=SHARED_FILE_MODE)
