"""A static release mirror: ``mirror sync`` writes it, ``file://`` reads it without a server.

The tree answers the exact paths :class:`~updater.github.GitHubClient` asks
for, so any static web server or S3-style bucket can serve it::

    DIR/repos/{owner}/{name}/releases/tags/{tag}             release JSON (GitHub API shape)
    DIR/repos/{owner}/{name}/releases/latest                 the highest build mirrored
    DIR/repos/{owner}/{name}/releases/download/{tag}/{sha16}/{file}  the assets
    DIR/repos/{owner}/{name}/attestations/sha256:{hex}      the assets' build attestations
                                                             (GitHub's answer, verbatim)
    DIR/.partial/                                            resumable downloads in flight

``browser_download_url`` values are relative
(``../download/{tag}/{sha16}/{file}``), so the tree works under any host name
or prefix. ``sha16`` is the start of the file's sha256: asset files are
content-addressed.

Invariants:
    * A release becomes visible only when its JSON is replaced, and that
      happens last, after every asset it names is complete and checked: a
      half-synced release is never visible.
    * A file a published JSON names is never given other bytes: an asset
      re-uploaded upstream lands under a new ``sha16`` directory, and the
      previous generation's files stay for one more sync, so a client that
      read the old JSON a moment ago still downloads what it promised.
    * An asset file appears under ``download/`` only by a rename of a fully
      verified download, hashed as it lies on disk; existing files are
      re-hashed, never trusted. One sync writes a mirror at a time (a lock
      in it, :mod:`updater.sources.mirrorkeep`).
    * ``digest`` is GitHub's own; when upstream published none it stays
      ``null`` (clients record ``digest_verified: false``, as they would from
      upstream). The mirror keeps the sha256 it computed under
      ``llama_runtime_sha256`` for its own re-checks.
    * Every tag and asset name becomes a path only after it is validated,
      and every path is checked to stay inside the mirror.
    * There is no list page: ``releases`` is a directory in the tree, and the
      client falls back to ``releases/latest`` when the list cannot be read.

A ``file://`` mirror is read without a server through
:mod:`updater.sources.files`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import IntegrityError, RemoteError, UserInputError
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE, atomic_write_json, sha256_file
from llama_runtime.updater.choice.assetnames import parse_asset_name
from llama_runtime.updater.choice.channel import Channel
from llama_runtime.updater.choice.latest import build_number, highest_build_tag, newest_releases
from llama_runtime.updater.choice.tags import is_release_version, parse_tag, validate_tag
from llama_runtime.updater.install.recovery import disk_space_errors, is_disk_full
from llama_runtime.updater.sources.mirrorkeep import clean_leftovers, one_writer, prune_releases, publish_checked
from llama_runtime.updater.sources.release import Asset, Release
from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = [
    "MirrorReport",
    "mirror_paths",
    "mirror_tag",
    "select_assets",
    "sync_mirror",
]

# Read size when hashing or serving mirror files: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
# The largest asset the mirror accepts (bytes); same bound the installer uses, so a
# hostile upstream cannot fill the mirror's disk with an endless body.
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3
# Hex digits of the sha256 that name an asset's directory: 64 bits cannot collide
# between the few uploads one asset name ever sees, and keep URLs short.
_SHA_DIR_CHARS: Final[int] = 16
# The JSON key holding the sha256 the mirror computed itself (not GitHub's digest).
_OWN_SHA_KEY: Final = "llama_runtime_sha256"


# -- the decisions (pure) ---------------------------------------------------------------


def mirror_tag(tag: str) -> str:
    """``tag`` if it can name a mirrored release: a well-formed build tag (``b7000``, a fork's ``b7000-…``).

    Raises:
        UserInputError: Malformed (slashes, ``..``, spaces…) or without a build number.
    """
    cleaned = validate_tag(tag)
    if parse_tag(cleaned).build is None:
        raise UserInputError(
            f"The tag {tag!r} has no build number; the mirror holds build releases such as 'b7000' "
            "(or a fork's 'b7000-mix-1a2b3c4')."
        )
    return cleaned


@dataclass(frozen=True)
class MirrorPaths:
    """Where one repository's release data lives in a mirror.

    Every helper returns a path that resolves inside ``dest`` or raises
    :class:`~runtime.errors.RemoteError` (a name came from the upstream).
    """

    dest: Path
    releases: Path

    def inside(self, path: Path) -> Path:
        """``path``, checked to resolve inside the mirror.

        Raises:
            RemoteError: It would leave the mirror directory.
        """
        if not path.resolve().is_relative_to(self.dest.resolve()) or ".." in path.relative_to(self.dest).parts:
            raise RemoteError(f"The upstream names a file {path} outside the mirror {self.dest}; nothing was written.")
        return path

    def tag_json(self, tag: str) -> Path:
        """The release JSON the client reads for ``tag``."""
        return self.inside(self.releases / "tags" / tag)

    @property
    def latest_json(self) -> Path:
        """The JSON behind ``releases/latest``."""
        return self.releases / "latest"

    def asset(self, tag: str, sha256: str, name: str) -> Path:
        """Where the asset file ``name`` of ``tag`` with content ``sha256`` lives."""
        return self.inside(self.releases / "download" / tag / sha256[:_SHA_DIR_CHARS] / name)

    def attestations(self, sha256: str) -> Path:
        """Where the attestations of the file ``sha256`` live: the API's route, as a file."""
        if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
            raise RemoteError(f"The upstream names a file by {sha256!r}, which is not a sha256.")
        return self.inside(self.releases.parent / "attestations" / f"sha256:{sha256}")

    def tag_downloads(self, tag: str) -> Path:
        """The directory of every asset generation of ``tag``."""
        return self.inside(self.releases / "download" / tag)

    def published_file(self, entry: dict[str, Any]) -> Path | None:
        """The file an asset object of a ``tags/`` JSON names, or ``None`` if it names none in the mirror."""
        url = entry.get("browser_download_url")
        if not isinstance(url, str) or not url.startswith("../download/"):
            return None
        try:
            return self.inside(self.releases / url.removeprefix("../"))
        except RemoteError:
            return None


def mirror_paths(dest: Path, repo: str) -> MirrorPaths:
    """The paths of ``repo`` inside the mirror ``dest``.

    Raises:
        UserInputError: ``repo`` is not ``owner/name``.
    """
    owner, _, name = repo.partition("/")
    if not all(part and part not in {".", ".."} and "/" not in part and "\\" not in part for part in (owner, name)):
        raise UserInputError(f"The repository {repo!r} is not OWNER/NAME.")
    return MirrorPaths(dest, dest / "repos" / owner / name / "releases")


def select_assets(release: Release, platforms: Iterable[str], backends: Iterable[str]) -> list[Asset]:
    """The installable assets of ``release`` on one of ``platforms`` with one of ``backends``.

    An empty filter admits everything; names that are not runtimes (web UI,
    sources, unknown schemes) are never mirrored. CUDA companions count as
    ``cuda`` builds of their platform.
    """
    wanted_platforms, wanted_backends = set(platforms), set(backends)
    chosen: list[Asset] = []
    for asset in release.assets:
        info = parse_asset_name(asset.name)
        if info is None or not asset.is_complete:
            continue
        if wanted_platforms and info.platform not in wanted_platforms:
            continue
        if wanted_backends and info.backend not in wanted_backends:
            continue
        chosen.append(asset)
    return chosen


def asset_json(asset: Asset, tag: str, sha256: str) -> dict[str, Any]:
    """One asset object of the mirror's release JSON (GitHub API shape, relative URL).

    ``digest`` repeats upstream's (``null`` when it published none); the
    mirror's own hash goes under ``llama_runtime_sha256``, which clients ignore.
    """
    return {
        "name": asset.name,
        "label": "",
        "state": "uploaded",
        "content_type": "application/octet-stream",
        "size": asset.size,
        "digest": f"sha256:{sha256}" if asset.sha256 is not None else None,
        "browser_download_url": f"../download/{tag}/{sha256[:_SHA_DIR_CHARS]}/{asset.name}",
        _OWN_SHA_KEY: sha256,
    }


def release_json(release: Release, assets: list[dict[str, Any]]) -> dict[str, Any]:
    """The release object of the mirror (the fields the client reads, GitHub's names)."""
    return {
        "tag_name": release.tag,
        "name": release.tag,
        "draft": False,
        "prerelease": release.prerelease,
        "published_at": release.published_at,
        "assets": sorted(assets, key=lambda a: str(a["name"])),
    }


def latest_relative(release_doc: dict[str, Any]) -> dict[str, Any]:
    """``release_doc`` re-pointed for ``releases/latest`` (one directory up from ``tags/``)."""
    doc = dict(release_doc)
    doc["assets"] = [
        {**a, "browser_download_url": str(a["browser_download_url"]).removeprefix("../")} for a in release_doc["assets"]
    ]
    return doc


# -- the sync (IO) -----------------------------------------------------------------------


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
        channel: What "latest" means (:mod:`updater.choice.channel`).
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
    if tag is None and latest < 1:
        raise UserInputError(f"--latest must be at least 1, not {latest}.")
    if prune and tag is not None:
        raise UserInputError("--prune keeps only the releases --latest N names; it cannot be combined with --tag.")
    if tag is not None and not is_release_version(tag):
        tag = mirror_tag(tag)  # a vX.Y.Z is mirrored as the build its nightly-tag.txt names
    if dest.exists() and not dest.is_dir():
        raise UserInputError(f"The mirror destination {dest} exists and is not a directory.")
    report = MirrorReport(dest=dest)
    releases = [resolve_tag_remote(client, tag).release] if tag is not None else _newest(client, latest, channel)
    if not releases:
        from llama_runtime.runtime.errors import ReleaseNotFoundError

        raise ReleaseNotFoundError(f"No bN releases found in {client.repo} to mirror.")
    paths = mirror_paths(dest, client.repo)
    wanted_platforms, wanted_backends = list(platforms), list(backends)
    needed = sum(a.size for rel in releases for a in select_assets(rel, wanted_platforms, wanted_backends))
    with one_writer(dest), disk_space_errors(dest, needed, f"the mirror of {client.repo}"):
        for release in releases:
            _sync_release(client, dest, paths, release, wanted_platforms, wanted_backends, report)
            report.releases.append(release.tag)
        if prune:
            report.pruned = prune_releases(paths.releases, report.releases)
        report.latest = _publish_latest(paths)
        clean_leftovers(dest)
    return report


def _newest(client: ReleaseSource, count: int, channel: Channel) -> list[Release]:
    """The build ``channel`` calls latest (the resolver every verb uses), then older builds."""
    from llama_runtime.runtime.errors import NetworkError, RateLimitError, RemoteError

    top = resolve_latest_remote(client, channel).release
    if count == 1:
        return [top]
    try:
        page = client.recent_releases()
    except (RateLimitError, NetworkError):
        raise
    except RemoteError:
        return [top]  # the upstream is itself a static mirror: it only knows its latest build
    return [top, *newest_releases(page, count - 1, below=build_number(top.tag), prereleases=True)]


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
    previous = _read_json(paths.tag_json(tag))
    kept = {str(a["name"]): a for a in (previous or {}).get("assets", []) if isinstance(a, dict)}
    for asset in chosen:
        sha = _ensure_asset(client, dest, paths, tag, asset, kept.get(asset.name), report)
        kept[asset.name] = asset_json(asset, tag, sha)
        if _mirror_attestations(client, paths, sha):
            report.attestations.append(f"{tag}/{asset.name}")
    # Assets mirrored by an earlier sync stay listed only while their file is intact in size.
    listed = [a for a in kept.values() if _size_matches(paths.published_file(a), a.get("size"))]
    # The commit point of this release: everything it names is already in place.
    # Served by a web server that runs as another user: readable by all, like the assets.
    atomic_write_json(paths.tag_json(tag), release_json(release, listed), mode=SHARED_FILE_MODE)
    # Files of the generation before the one just replaced go now; the one just
    # replaced (and whatever releases/latest names) stays for in-flight clients.
    _prune(paths, tag, [listed, list(_entries(previous)), list(_entries(_read_json(paths.latest_json)))])


def _mirror_attestations(client: ReleaseSource, paths: MirrorPaths, sha256: str) -> bool:
    """Store upstream's attestations of the file ``sha256`` on the API's route; whether there were any.

    Written before the release JSON that names the file, so a client that sees
    the release also sees its attestation. Stored as received: every client
    verifies them itself (the mirror is not trusted with that).
    """
    from llama_runtime.updater.install.provenance import parse_attestations

    answer = client.attestations(sha256)
    if not parse_attestations(answer):
        return False
    target = paths.attestations(sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(target, answer, mode=SHARED_FILE_MODE)  # served like the release JSON
    return True


def _entries(doc: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """The asset objects of a release JSON (none when it is missing or malformed)."""
    assets = (doc or {}).get("assets")
    for entry in assets if isinstance(assets, list) else []:
        if isinstance(entry, dict):
            yield entry


def _prune(paths: MirrorPaths, tag: str, generations: list[list[dict[str, Any]]]) -> None:
    """Remove asset files of ``tag`` that none of ``generations`` names (best effort)."""
    keep: set[Path] = set()
    for entries in generations:
        for entry in entries:
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


def _ensure_asset(
    client: ReleaseSource,
    dest: Path,
    paths: MirrorPaths,
    tag: str,
    asset: Asset,
    previous: dict[str, Any] | None,
    report: MirrorReport,
) -> str:
    """The asset's file in the mirror, checked; returns its sha256.

    The content is known up front from upstream's digest, or (digest-less
    upstream) from what the previous sync computed for a file of this size.
    """
    from llama_runtime.updater.install.download import download_asset

    published = asset.sha256
    known = published
    if known is None and previous is not None and previous.get("size") == asset.size:
        own = previous.get(_OWN_SHA_KEY)
        known = own if isinstance(own, str) and len(own) == 64 else None
    if known is not None:
        target = paths.asset(tag, known, asset.name)
        if target.is_file() and target.stat().st_size == asset.size and sha256_file(target) == known:
            report.reused.append(f"{tag}/{asset.name}")
            return known
    partial_dir = dest / ".partial"
    partial_dir.mkdir(parents=True, exist_ok=True)
    key = published[:_SHA_DIR_CHARS] if published else f"nodigest-{asset.size}"
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
    report.fetched.append(f"{tag}/{asset.name}")
    report.fetched_bytes += result.size
    return sha


def _publish_latest(paths: MirrorPaths) -> str | None:
    """Point ``releases/latest`` at the highest build the mirror holds; returns its tag."""
    tags_dir = paths.releases / "tags"
    tag = highest_build_tag(
        entry.name for entry in (tags_dir.iterdir() if tags_dir.is_dir() else []) if entry.is_file()
    )
    if tag is None:
        return None
    doc = _read_json(paths.tag_json(tag))
    if doc is None:
        return None
    atomic_write_json(paths.latest_json, latest_relative(doc), mode=SHARED_FILE_MODE)
    return tag


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def _size_matches(path: Path | None, size: object) -> bool:
    try:
        return path is not None and isinstance(size, int) and path.stat().st_size == size
    except OSError:
        return False
