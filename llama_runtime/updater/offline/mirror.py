"""A static release mirror: ``mirror sync`` writes it, ``file://`` reads it without a server.

This module is the sync: which releases, which of their assets, in which
order things are written. The tree's layout and JSON are
:mod:`~llama_runtime.updater.sources.mirror_layout`; writing an asset,
attestations and ``releases/latest``,
:mod:`~llama_runtime.updater.offline.mirror_files`; one writer, checked
publishing and what is kept, :mod:`~llama_runtime.updater.offline.mirrorkeep`.

Invariants:
    * A release becomes visible only when its JSON is replaced, and that
      happens last, after every asset it names is complete and checked: a
      half-synced release is never visible.
    * A file a published JSON names is never given other bytes; the
      generation a sync replaces stays for one more sync.
    * One sync writes a mirror at a time (a lock in it).
    * There is no list page: ``releases`` is a directory in the tree, and the
      client falls back to ``releases/latest`` when the list cannot be read.

A ``file://`` mirror is read without a server through
:mod:`llama_runtime.updater.sources.files`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import RemoteError, UserInputError
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE
from llama_runtime.runtime.record import write_record
from llama_runtime.updater.choice.latest import any_build_number, newest_releases
from llama_runtime.updater.fetch.diskspace import disk_space_errors
from llama_runtime.updater.offline.mirror_files import (
    AssetOutcome,
    ensure_asset,
    mirror_attestations,
    mirror_repository,
    publish_latest,
)
from llama_runtime.updater.offline.mirrorkeep import clean_leftovers, one_writer, prune_generations, prune_releases
from llama_runtime.updater.release.channel import Channel
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.release.tags import is_release_version
from llama_runtime.updater.sources.mirror_layout import (
    MirrorPaths,
    asset_json,
    entries,
    mirror_paths,
    mirror_tag,
    read_json,
    release_json,
    select_assets,
)
from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = ["MirrorReport", "sync_mirror"]


@dataclass
class MirrorReport:
    """What one ``mirror sync`` did."""

    dest: Path
    releases: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    fetched_bytes: int = 0
    latest: str | None = None
    attestations: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # releases passed over resolving latest, and why

    def note_asset(self, name: str, outcome: AssetOutcome) -> None:
        """Count the asset ``name`` (``tag/file``) as reused or fetched."""
        if outcome.fetched_bytes is None:
            self.reused.append(name)
        else:
            self.fetched.append(name)
            self.fetched_bytes += outcome.fetched_bytes

    def to_json(self) -> dict[str, object]:
        """The ``mirror sync`` object of the CLI."""
        return {
            "dest": str(self.dest),
            "releases": self.releases,
            "fetched": self.fetched,
            "reused": self.reused,
            "fetched_bytes": self.fetched_bytes,
            "latest": self.latest,
            "attestations": self.attestations,
            "pruned": self.pruned,
            "warnings": self.warnings,
        }


def sync_mirror(
    client: ReleaseSource,
    dest: Path,
    *,
    tag: str | None = None,
    latest: int = 1,
    platforms: Iterable[str] = (),
    backends: Iterable[str] = (),
    prune: bool = False,
    channel: Channel = "stable",
) -> MirrorReport:
    """Bring ``dest`` up to date with releases of ``client.repo``, as its one writer.

    Args:
        client: The upstream (GitHub or another mirror).
        dest: The mirror directory (created if missing).
        tag: One exact release (a ``vX.Y.Z`` is mirrored as the build it names);
            otherwise the ``latest`` newest builds.
        latest: How many builds to mirror: the one ``channel`` calls latest,
            then the next older ones.
        channel: What "latest" means (:mod:`updater.release.channel`).
        platforms: ``os-arch`` filters (empty: all).
        backends: Backend filters (empty: all).
        prune: Remove mirrored releases other than the ``latest`` newest.

    Raises:
        UserInputError: ``dest`` is not a directory we can write, ``latest`` < 1,
            or ``prune`` with an exact ``tag``.
        BusyError: Another sync writes ``dest`` now.
        DiskSpaceError: The disk filled up; the partial download is removed.
        BackendUnavailableError: No asset of a release matches the filters.
        IntegrityError, RemoteError: An asset failed its checks or the upstream failed;
            releases already published in the mirror stay as they were.
    """
    tag = _checked_request(dest, tag, latest, prune)
    report = MirrorReport(dest=dest)
    if tag is not None:
        releases = [resolve_tag_remote(client, tag).release]
    else:
        releases, notes = _newest(client, latest, channel)
        report.warnings = list(notes)
    if not releases:
        from llama_runtime.runtime.errors import ReleaseNotFoundError

        raise ReleaseNotFoundError(f"No bN releases found in {client.repo} to mirror.")
    paths = mirror_paths(dest, client.repo)
    wanted_platforms, wanted_backends = list(platforms), list(backends)
    needed = sum(a.size for rel in releases for a in select_assets(rel, wanted_platforms, wanted_backends))
    with one_writer(dest), disk_space_errors(dest, needed, f"the mirror of {client.repo}"):
        mirror_repository(client, paths)
        for release in releases:
            _sync_release(client, dest, paths, release, wanted_platforms, wanted_backends, report)
            report.releases.append(release.tag)
        if prune:
            report.pruned = prune_releases(paths.releases, report.releases)
        report.latest = publish_latest(paths)
        clean_leftovers(dest)
    return report


def _checked_request(dest: Path, tag: str | None, latest: int, prune: bool) -> str | None:
    """The tag to mirror (None: the newest builds), once the request is known to make sense.

    Raises:
        UserInputError: ``latest`` < 1, ``prune`` with a tag, a malformed tag, or ``dest`` not a directory.
    """
    if tag is None and latest < 1:
        raise UserInputError(f"--latest must be at least 1, not {latest}.")
    if prune and tag is not None:
        raise UserInputError("--prune keeps only the releases --latest N names; it cannot be combined with --tag.")
    if tag is not None and not is_release_version(tag):
        tag = mirror_tag(tag)  # a vX.Y.Z is mirrored as the build its nightly-tag.txt names
    if dest.exists() and not dest.is_dir():
        raise UserInputError(f"The mirror destination {dest} exists and is not a directory.")
    return tag


def _newest(client: ReleaseSource, count: int, channel: Channel) -> tuple[list[Release], tuple[str, ...]]:
    """The build ``channel`` calls latest (the resolver every verb uses), then older builds; and the
    releases passed over to find it (a stable release still being cut)."""
    from llama_runtime.runtime.errors import NetworkError, RateLimitError, RemoteError

    found = resolve_latest_remote(client, channel)
    top = found.release
    if count == 1:
        return [top], found.notes
    try:
        page = client.recent_releases()
    except (RateLimitError, NetworkError):
        raise
    except RemoteError:
        return [top], found.notes  # the upstream is itself a static mirror: it only knows its latest build
    older = newest_releases(page, count - 1, below=any_build_number(top.tag), prereleases=True, decorated=True)
    return [top, *older], found.notes


def _sync_release(
    client: ReleaseSource,
    dest: Path,
    paths: MirrorPaths,
    release: Release,
    platforms: list[str],
    backends: list[str],
    report: MirrorReport,
) -> None:
    from llama_runtime.runtime.errors import BackendUnavailableError

    try:
        tag = mirror_tag(release.tag)
    except UserInputError as exc:
        raise RemoteError(
            f"The upstream {client.repo} offers a release whose tag cannot be mirrored: {exc.message}"
        ) from None
    chosen = select_assets(release, platforms, backends)
    if not chosen:
        wanted = ", ".join([*platforms, *backends]) or "any platform"
        raise BackendUnavailableError(f"{client.repo} {tag} has no complete asset for {wanted}.")
    previous = read_json(paths.tag_json(tag))
    kept = {str(a["name"]): a for a in (previous or {}).get("assets", []) if isinstance(a, dict)}
    for asset in chosen:
        outcome = ensure_asset(client, dest, paths, tag, asset, kept.get(asset.name))
        report.note_asset(f"{tag}/{asset.name}", outcome)
        kept[asset.name] = asset_json(asset, tag, outcome.sha256)
        if mirror_attestations(client, paths, outcome.sha256):
            report.attestations.append(f"{tag}/{asset.name}")
    # Assets mirrored by an earlier sync stay listed only while their file is intact in size.
    listed = [a for a in kept.values() if _size_matches(paths.published_file(a), a.get("size"))]
    # The commit point of this release: everything it names is already in place.
    # Served by a web server that runs as another user: readable by all, like the assets.
    write_record(paths.tag_json(tag), release_json(release, listed), mode=SHARED_FILE_MODE)
    # Files of the generation before the one just replaced go now; the one just
    # replaced (and whatever releases/latest names) stays for in-flight clients.
    prune_generations(paths, tag, [listed, list(entries(previous)), list(entries(read_json(paths.latest_json)))])


def _size_matches(path: Path | None, size: object) -> bool:
    try:
        return path is not None and isinstance(size, int) and path.stat().st_size == size
    except OSError:
        return False
