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
    * The mirror answers like GitHub, so its clients need no special case:
      ``releases/latest`` is the newest non-prerelease release it holds (none
      after only nightly syncs), the listing keeps upstream's prerelease flags,
      and a semver release is GitHub's shape: one ``nightly-tag.txt`` naming its
      build (written here from what the source says names what, with its digest),
      published after the build it names. ``releases`` is a directory: its listing is its
      ``index.json`` and the same bytes as ``index.html``, which any static
      server answers the directory with (never its own HTML directory listing).

A ``file://`` mirror is read without a server through
:mod:`llama_runtime.updater.sources.mirror_reader`.
"""

from __future__ import annotations

import contextlib
import hashlib
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
    atomic_write_bytes,
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
from llama_runtime.updater.release.channel import (
    MAX_NIGHTLY_TAG_BYTES,
    NIGHTLY_TAG_ASSET,
    Channel,
    parse_nightly_tag,
)
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import highest_first, highest_version, is_release_version, validate_tag
from llama_runtime.updater.sources.mirror_reader import (
    OWN_SHA_KEY,
    SHA_DIR_CHARS,
    STATIC_INDEX_NAME,
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
from llama_runtime.updater.sources.source import Build
from llama_runtime.updater.stage.streaming import FetchOptions

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import BuildSource

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


# -- mirrorkeep: Keeping a mirror directory sound: one writer, files checked as written. -------------------------

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


# -- mirror_files: Writing into the mirror: assets by content, then the JSON naming them. ------------------------

# The largest asset the mirror accepts (bytes); same bound the installer uses, so a
# hostile upstream cannot fill the mirror's disk with an endless body.
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3


@dataclass(frozen=True)
class MirrorFetch:
    """How ``mirror sync`` fetches an asset: as ``update`` does.

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


def mirror_attestations(client: BuildSource, paths: MirrorPaths, sha256: str) -> bool:
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


def mirror_repository(client: BuildSource, paths: MirrorPaths) -> str | None:
    """Store the repository's default branch where clients ask GitHub for it; the branch, if known.

    It is the mirror's own word, which the signer policy of its clients never keys on
    (a fork's default branch stays unknown there); a sync that cannot learn it leaves
    what an earlier one stored.
    """
    branch = client.repository().trusted_default_branch
    if branch is not None:
        doc = {"full_name": client.repo, "default_branch": branch}
        paths.repository_json.parent.mkdir(parents=True, exist_ok=True)
        write_index(paths.repository_json, doc)
    return branch


def ensure_asset(
    client: BuildSource,
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


def write_index(path: Path, payload: object) -> None:
    """Write a directory's JSON as ``index.json`` and, the same bytes, as the ``index.html`` static servers serve.

    Served by a web server that runs as another user: readable by all, like the assets.
    """
    write_record(path, payload, mode=SHARED_FILE_MODE)
    write_record(path.with_name(STATIC_INDEX_NAME), payload, mode=SHARED_FILE_MODE)


def stable_tag(docs: Iterable[dict[str, Any]]) -> str | None:
    """The tag GitHub's ``releases/latest`` would answer among ``docs`` (release JSONs); ``None``: none.

    The newest non-draft, non-prerelease release: upstream's newest semver release
    by semver (``updater.release.channel``), a fork's highest plain build. A
    mirror holding only prereleases (nightly syncs) has none, as GitHub would.
    """
    tags = [str(doc.get("tag_name")) for doc in docs if not doc.get("draft") and not doc.get("prerelease")]
    return highest_version(tags) or highest_build_tag(tags)


def _named_build(paths: MirrorPaths, doc: dict[str, Any]) -> str | None:
    """The build a mirrored semver release's ``nightly-tag.txt`` names (read from the mirror), if it has one."""
    pointer = next((entry for entry in entries(doc) if entry.get("name") == NIGHTLY_TAG_ASSET), None)
    path = paths.published_file(pointer) if pointer is not None else None
    try:
        data = path.read_bytes()[: MAX_NIGHTLY_TAG_BYTES + 1] if path is not None else None
        return parse_nightly_tag(data, str(doc.get("tag_name"))) if data is not None else None
    except (OSError, IntegrityError):
        return None


def publish_latest(paths: MirrorPaths) -> tuple[str | None, str | None]:
    """Point ``releases/latest`` at :func:`stable_tag` and rewrite the listing.

    Without a stable release the file is removed: a 404, as GitHub answers,
    which clients report as a mirror that holds no stable release.

    Returns:
        The build ``releases/latest`` stands for, and the semver release it is
        (``None`` when it is a build itself); ``(None, None)`` without one.
    """
    tags_dir = paths.releases / "tags"
    files = sorted(entry for entry in (tags_dir.iterdir() if tags_dir.is_dir() else []) if entry.is_file())
    docs = [doc for entry in files if (doc := read_json(entry)) is not None]
    tag = stable_tag(docs)
    doc = next((d for d in docs if d.get("tag_name") == tag), None)
    if doc is None:
        paths.latest_json.unlink(missing_ok=True)
    else:
        write_record(paths.latest_json, latest_relative(doc), mode=SHARED_FILE_MODE)
    _publish_listing(paths, docs)
    if doc is None or tag is None:
        return None, None
    return (_named_build(paths, doc), tag) if is_release_version(tag) else (tag, None)


def _publish_listing(paths: MirrorPaths, docs: list[dict[str, Any]]) -> None:
    """Write the ``releases`` listing: every mirrored release, newest first as GitHub lists them."""
    docs = sorted(
        docs,
        key=lambda doc: (str(doc.get("published_at") or ""), any_build_number(str(doc.get("tag_name"))) or 0),
        reverse=True,
    )
    write_index(paths.listing_json, [listing_relative(doc) for doc in docs])


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
    latest_version: str | None = None  # the semver release ``releases/latest`` is, when it is one
    versions: list[str] = field(default_factory=list)  # semver releases mirrored, after the builds they name
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
            "latest_version": self.latest_version,
            "versions": self.versions,
            "attestations": self.attestations,
            "pruned": self.pruned,
            "warnings": self.warnings,
        }


def sync_mirror(
    client: BuildSource,
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
    builds, notes = _wanted(client, tag, latest, channel)
    report.warnings = list(notes)
    if not builds:
        from llama_runtime.runtime.errors import ReleaseNotFoundError

        raise ReleaseNotFoundError(f"No bN releases found in {client.repo} to mirror.")
    paths = mirror_paths(dest, client.repo)
    wanted_platforms, wanted_backends = list(platforms), list(backends)
    needed = sum(a.size for b in builds for a in select_assets(b.release, wanted_platforms, wanted_backends))
    with one_writer(dest), disk_space_errors(dest, needed, f"the mirror of {client.repo}"):
        mirror_repository(client, paths)
        for build in builds:
            chosen = _chosen(client, build.release, wanted_platforms, wanted_backends)
            _sync_release(client, dest, paths, build.release, chosen, report, fetch)
            report.releases.append(build.tag)
        _sync_versions(paths, builds, report)
        if prune:
            report.pruned = prune_releases(paths.releases, [*report.releases, *report.versions])
        report.latest, report.latest_version = publish_latest(paths)
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


#: Newest builds a sync looks through for the older ones ``--latest N`` mirrors (GitHub: one page of releases).
LISTED_BUILDS: Final[int] = 100


def _wanted(client: BuildSource, tag: str | None, count: int, channel: Channel) -> tuple[list[Build], tuple[str, ...]]:
    """What to mirror: the builds, each with the semver releases naming it, and the releases passed over.

    A semver release is mirrored as GitHub publishes it (a ``nightly-tag.txt`` naming
    its build), so ``--tag vX.Y.Z`` and ``stable`` resolve through the mirror as through GitHub.
    """
    if tag is not None:
        found = client.resolve(channel, tag=tag)  # a vX.Y.Z is followed to the build it names
        return [Build(found.release, (found.version,) if found.version else ())], found.notes
    found = client.resolve(channel)  # the resolver every verb uses
    top = found.release
    versions: dict[str, set[str]] = {top.tag: {found.version} if found.version else set()}
    older: list[Release] = []
    if count > 1:
        listed = client.builds(LISTED_BUILDS)
        below = any_build_number(top.tag)
        older = newest_releases([b.release for b in listed], count - 1, below=below, prereleases=True, decorated=True)
        # Each build keeps the semver releases that name it, so `stable` offers it through the mirror too.
        for build in listed:
            versions.setdefault(build.tag, set()).update(build.versions)
    return [Build(r, highest_first(versions.get(r.tag, set()))) for r in [top, *older]], found.notes


def _sync_versions(paths: MirrorPaths, builds: list[Build], report: MirrorReport) -> None:
    """Mirror each semver release naming a build, as GitHub has it: its one asset a ``nightly-tag.txt``
    naming the build. Written after the builds they name are published: a visible pointer never names
    a missing release."""
    for build in builds:
        for version in build.versions:
            outcome = _write_version(paths, validate_tag(version), build.release)
            report.note_asset(f"{version}/{NIGHTLY_TAG_ASSET}", outcome)
            report.versions.append(version)


def _write_version(paths: MirrorPaths, version: str, build: Release) -> AssetOutcome:
    """The semver release ``version`` in the mirror: its ``nightly-tag.txt`` (content-addressed), then its JSON.

    Returns:
        The pointer file's outcome: reused when an intact copy was there, else written (its bytes).
    """
    content = f"{build.tag}\n".encode()
    sha256 = hashlib.sha256(content).hexdigest()
    target = paths.asset(version, sha256, NIGHTLY_TAG_ASSET)
    outcome = AssetOutcome(sha256, fetched_bytes=None)
    if not (target.is_file() and sha256_file(target) == sha256):
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, content, mode=SHARED_FILE_MODE)
        outcome = AssetOutcome(sha256, fetched_bytes=len(content))
    pointer = Asset(NIGHTLY_TAG_ASSET, len(content), target.name, f"sha256:{sha256}")
    previous = read_json(paths.tag_json(version))
    listed = [asset_json(pointer, version, sha256)]
    release = Release(build.repo, version, (pointer,), published_at=build.published_at)
    write_record(paths.tag_json(version), release_json(release, listed), mode=SHARED_FILE_MODE)
    prune_generations(paths, version, [listed, list(entries(previous)), list(entries(read_json(paths.latest_json)))])
    return outcome


def _mirrored_tag(client: BuildSource, release: Release) -> str:
    """The tag ``release`` is mirrored under: a build tag, or a semver release (``v0.2.0``).

    Raises:
        RemoteError: The upstream's tag cannot name a file in the mirror.
    """
    try:
        return validate_tag(release.tag) if is_release_version(release.tag) else mirror_tag(release.tag)
    except UserInputError as exc:
        raise RemoteError(
            f"The upstream {client.repo} offers a release whose tag cannot be mirrored: {exc.message}"
        ) from None


def _chosen(client: BuildSource, release: Release, platforms: list[str], backends: list[str]) -> list[Asset]:
    """The assets of the build ``release`` to mirror.

    Raises:
        BackendUnavailableError: None matches the filters.
    """
    from llama_runtime.runtime.errors import BackendUnavailableError

    chosen = select_assets(release, platforms, backends)
    if not chosen:
        wanted = ", ".join([*platforms, *backends]) or "any platform"
        raise BackendUnavailableError(
            f"{client.repo} {_mirrored_tag(client, release)} has no complete asset for {wanted}."
        )
    return chosen


def _sync_release(
    client: BuildSource,
    dest: Path,
    paths: MirrorPaths,
    release: Release,
    chosen: list[Asset],
    report: MirrorReport,
    fetch: MirrorFetch = MirrorFetch(),
    *,
    attest: bool = True,
) -> None:
    """Mirror ``chosen`` of ``release``, then publish its JSON (``attest``: with their attestations)."""
    tag = _mirrored_tag(client, release)
    previous = read_json(paths.tag_json(tag))
    kept = {str(a["name"]): a for a in (previous or {}).get("assets", []) if isinstance(a, dict)}
    for asset in chosen:
        outcome = ensure_asset(client, dest, paths, tag, asset, kept.get(asset.name), fetch)
        report.note_asset(f"{tag}/{asset.name}", outcome)
        kept[asset.name] = asset_json(asset, tag, outcome.sha256)
        if attest and mirror_attestations(client, paths, outcome.sha256):
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


def wanted_releases(
    client: BuildSource, tag: str | None, count: int, channel: Channel
) -> tuple[list[Build], tuple[str, ...]]:
    """What a sync mirrors, for any destination: the builds (each with the semver releases naming it), and notes."""
    return _wanted(client, tag, count, channel)


def chosen_assets(client: BuildSource, release: Release, platforms: list[str], backends: list[str]) -> list[Asset]:
    """The assets of ``release`` a sync mirrors under the filters (raises ``BackendUnavailableError``: none)."""
    return _chosen(client, release, platforms, backends)
