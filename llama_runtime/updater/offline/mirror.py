"""A static release mirror: ``mirror sync`` writes it, ``file://`` reads it without a server.

This module is the sync: which releases, which of their assets, in which
order things are written. The tree's layout and JSON are
:mod:`~llama_runtime.updater.sources.mirror_reader`; writing an asset,
attestations and ``releases/latest``,
:mod:`~llama_runtime.updater.offline.mirror`; one writer, checked
publishing and what is kept, :mod:`~llama_runtime.updater.offline.mirror`.

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
:mod:`llama_runtime.updater.sources.mirror_reader`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import BusyError, IntegrityError, RemoteError, UserInputError
from llama_runtime.runtime.fsutil import (
    ATOMIC_TMP_SUFFIX,
    SHARED_FILE_MODE,
    fsync_directory,
    is_disk_full,
    remove_tree,
    sha256_file,
    write_record,
)
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.choice.decide import any_build_number, highest_build_tag, newest_releases
from llama_runtime.updater.fetch.cache import disk_space_errors
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import Progress, ProgressCallback
from llama_runtime.updater.release.channel import Channel
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import is_release_version
from llama_runtime.updater.sources.mirror_reader import (
    OWN_SHA_KEY,
    SHA_DIR_CHARS,
    MirrorPaths,
    asset_json,
    entries,
    latest_relative,
    listing_relative,
    mirror_paths,
    mirror_tag,
    read_json,
    release_json,
    select_assets,
)
from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote
from llama_runtime.updater.stage.streaming import FetchOptions

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = [
    "LOCK_NAME",
    "PARTIAL_DIR",
    "MirrorFetch",
    "MirrorReport",
    "clean_leftovers",
    "one_writer",
    "prune_generations",
    "prune_releases",
    "publish_checked",
    "sync_mirror",
]


# -- mirrorkeep: Keeping a mirror directory sound: one writer, files checked as written, nothing... --------------

log = get_logger("llama_runtime.mirror")

#: The lock file, beside the tree it guards (``mirror sync`` needs no home).
LOCK_NAME: Final = ".llama-runtime-mirror.lock"
#: Downloads in flight; never named by a release JSON.
PARTIAL_DIR: Final = ".partial"


@contextlib.contextmanager
def one_writer(dest: Path) -> Iterator[None]:
    """Hold the mirror's lock for the whole sync; never wait for another writer.

    Raises:
        BusyError: Another ``mirror sync`` writes ``dest`` now (exit 3).
    """
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with UpdateLock(dest / LOCK_NAME).hold("mirror sync"):
            yield
    except BusyError as exc:
        if exc.message.startswith("Another llama-runtime process is updating"):
            raise BusyError(
                f"Another `mirror sync` is writing {dest} right now; nothing was changed.",
                hint="Run it again when that one has finished (one writer per mirror).",
            ) from None
        raise


def publish_checked(partial: Path, target: Path, *, size: int, sha256: str | None) -> str:
    """Rename ``partial`` to ``target`` after hashing the file as it lies on disk.

    Args:
        partial: The finished download.
        target: Where the release JSON will name it.
        size: The published size.
        sha256: The digest the bytes must have (upstream's, or the one
            computed while downloading when upstream published none).

    Returns:
        The sha256 of the published file.

    Raises:
        IntegrityError: The file on disk is not the bytes that were checked;
            it is removed and nothing is published.
    """
    actual_size = partial.stat().st_size
    actual = sha256_file(partial)
    if actual_size != size or (sha256 is not None and actual != sha256):
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"{partial.name} on disk ({actual_size} bytes, sha256 {actual[:16]}…) is not the {size} bytes "
            f"that were downloaded and checked; it was not published."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, target)
    fsync_directory(target.parent)
    return actual


def prune_releases(releases_dir: Path, keep: Iterable[str]) -> list[str]:
    """Remove every mirrored release whose tag is not in ``keep``; returns the removed tags.

    The ``tags/`` JSON goes first (the release stops being visible), then its
    asset files. ``releases/latest`` is re-pointed by the caller afterwards.
    """
    wanted = set(keep)
    tags_dir = releases_dir / "tags"
    removed: list[str] = []
    for entry in sorted(tags_dir.iterdir() if tags_dir.is_dir() else []):
        if entry.is_file() and entry.name not in wanted:
            entry.unlink()
            removed.append(entry.name)
    if removed:
        fsync_directory(tags_dir)
    downloads = releases_dir / "download"
    for entry in sorted(downloads.iterdir() if downloads.is_dir() else []):
        if entry.name not in wanted and not (tags_dir / entry.name).exists():
            remove_tree(entry)
    return removed


def clean_leftovers(dest: Path) -> list[Path]:
    """Partial downloads and temporary files that killed syncs left in ``dest``; removes them."""
    found: list[Path] = []
    partial = dest / PARTIAL_DIR
    if partial.is_dir():
        found += sorted(partial.iterdir())
    for dirpath, _dirnames, filenames in os.walk(dest):
        if Path(dirpath) == partial:
            continue
        found += [Path(dirpath) / f for f in filenames if f.startswith(".") and f.endswith(ATOMIC_TMP_SUFFIX)]
    for path in found:
        with contextlib.suppress(OSError):  # best effort: the next sync tries again
            remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return found


def prune_generations(paths: MirrorPaths, tag: str, generations: list[list[dict[str, Any]]]) -> None:
    """Remove asset files of ``tag`` that none of ``generations`` names (best effort)."""
    keep: set[Path] = set()
    for generation in generations:
        for entry in generation:
            path = paths.published_file(entry)
            if path is None:
                # latest/ names files without the "../" of tags/.
                url = entry.get("browser_download_url")
                if isinstance(url, str) and url.startswith("download/"):
                    path = paths.published_file({**entry, "browser_download_url": "../" + url})
            if path is not None:
                keep.add(path.resolve())
    root = paths.tag_downloads(tag)
    if not root.is_dir():
        return
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for filename in filenames:
            file = Path(dirpath) / filename
            if file.resolve() not in keep:
                with contextlib.suppress(OSError):  # left for the next sync
                    file.unlink()
        if Path(dirpath) != root:
            with contextlib.suppress(OSError):  # still holds a kept file
                Path(dirpath).rmdir()


# -- mirror_files: Writing into the mirror: an asset checked into its content-addressed place, a... --------------

# The largest asset the mirror accepts (bytes); same bound the installer uses, so a
# hostile upstream cannot fill the mirror's disk with an endless body.
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3


@dataclass(frozen=True)
class MirrorFetch:
    """How ``mirror sync`` fetches an asset: as ``update`` does (issue 25).

    Attributes:
        options: Ranges of a large asset (``LLAMA_RUNTIME_PARALLEL_DOWNLOADS``); nothing is extracted.
        progress: Told each asset's bytes on disk, as ``update``'s download events.
    """

    options: FetchOptions = field(default_factory=FetchOptions)
    progress: ProgressCallback | None = None


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
    fetch: MirrorFetch = MirrorFetch(),
) -> AssetOutcome:
    """The asset's file in the mirror, checked: its sha256, and the bytes fetched for it.

    The content is known up front from upstream's digest, or (digest-less
    upstream) from what the previous sync computed for a file of this size.
    It is fetched as ``update`` fetches (parallel ranges, resumable), and the
    digest of that one pass over the bytes is what is checked and published.
    """
    from llama_runtime.updater.fetch.download import throttled
    from llama_runtime.updater.fetch.ranges import discard_ranged
    from llama_runtime.updater.stage.streaming import fetch_asset

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
    progress = fetch.progress

    def on_bytes(done: int, total: int | None) -> None:
        if progress is not None:
            progress(Progress("download", done, total, asset.name))

    started = time.monotonic()  # only a duration for the log line, as update's "downloaded"
    try:
        result = fetch_asset(
            client,
            asset,
            partial,
            cache=None,
            staging=None,
            max_bytes=min(_MAX_ASSET_BYTES, max(asset.size, 1)),
            progress=throttled(on_bytes),
            options=fetch.options,
        ).download
    except OSError as exc:
        if is_disk_full(exc):
            partial.unlink(missing_ok=True)  # the space is what is missing
            discard_ranged(partial)
        raise
    seconds = max(time.monotonic() - started, 1e-6)
    log.info("downloaded", asset=asset.name, bytes=result.size, seconds=round(seconds, 2), sha256=result.sha256)
    if result.size != asset.size:
        partial.unlink(missing_ok=True)
        raise IntegrityError(f"{asset.name} is {result.size} bytes, not the published {asset.size}.")
    # Content-addressed: this path only ever holds these bytes, so the rename
    # cannot change a file a published JSON names (at most it repairs one).
    target = paths.asset(tag, result.sha256, asset.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(result.path, target)
    fsync_directory(target.parent)
    return AssetOutcome(result.sha256, fetched_bytes=result.size)


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


# -- mirror ------------------------------------------------------------------------------------------------------


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
    fetch: MirrorFetch = MirrorFetch(),
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
        fetch: Ranges and progress of the downloads.

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
            _sync_release(client, dest, paths, release, wanted_platforms, wanted_backends, report, fetch)
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
    fetch: MirrorFetch,
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
        outcome = ensure_asset(client, dest, paths, tag, asset, kept.get(asset.name), fetch)
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
