"""A static release mirror: ``mirror sync`` writes it, ``file://`` reads it without a server.

The tree answers the exact paths :class:`~updater.github.GitHubClient` asks
for, so any static web server or S3-style bucket can serve it::

    DIR/repos/{owner}/{name}/releases/tags/{tag}             release JSON (GitHub API shape)
    DIR/repos/{owner}/{name}/releases/latest                 the highest build mirrored
    DIR/repos/{owner}/{name}/releases/download/{tag}/{file}  the assets
    DIR/.partial/                                            resumable downloads in flight

``browser_download_url`` values are relative (``../download/{tag}/{file}``),
so the tree works under any host name or prefix.

Invariants:
    * A release becomes visible only when its JSON is replaced, and that
      happens last, after every asset it names is complete and checked: a
      half-synced release is never visible.
    * An asset file appears under ``download/`` only by a rename of a fully
      verified download; existing files are re-hashed, never trusted.
    * There is no list page: ``releases`` is a directory in the tree, and the
      client falls back to ``releases/latest`` when the list cannot be read.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx

from runtime.errors import IntegrityError, UserInputError
from runtime.fsutil import atomic_write_json, fsync_directory, sha256_file
from updater.assetnames import parse_asset_name
from updater.github import build_number
from updater.release import Asset, Release

if TYPE_CHECKING:
    from updater.github import GitHubClient

__all__ = [
    "FileTransport",
    "MirrorReport",
    "file_api_url",
    "mirror_paths",
    "select_assets",
    "sync_mirror",
]

# Read size when hashing or serving mirror files: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
# The largest asset the mirror accepts (bytes); same bound the installer uses, so a
# hostile upstream cannot fill the mirror's disk with an endless body.
_MAX_ASSET_BYTES: Final[int] = 2 * 1024**3


# -- reading a mirror without a server (file://) ------------------------------------------


def file_api_url(url: str) -> tuple[str, Path]:
    """``file:///DIR`` as the URL the client uses (``file://localhost/DIR``) and DIR.

    httpx's cookie handling rejects host-less URLs, so the host is spelled out.
    """
    parsed = httpx.URL(url)
    root = Path(urllib.request.url2pathname(parsed.path)).absolute()
    return str(parsed.copy_with(host="localhost")).rstrip("/"), root


class FileTransport(httpx.BaseTransport):
    """Serves files under ``root`` for ``file://`` URLs, like a static web server.

    Query strings are ignored (as static servers do); directories and paths
    that leave ``root`` are 404; ``Range: bytes=N-`` is honoured for resumes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Answer one request from the file system."""
        path = Path(urllib.request.url2pathname(request.url.path)).resolve()
        if request.method != "GET" or not path.is_relative_to(self.root) or not path.is_file():
            return httpx.Response(404, content=b"Not Found", headers={"content-type": "text/plain"})
        size = path.stat().st_size
        start = _range_start(request.headers.get("range", ""))
        headers = {"content-type": "application/octet-stream", "accept-ranges": "bytes"}
        if start is None or start == 0:
            return httpx.Response(200, stream=_FileStream(path, 0), headers={**headers, "content-length": str(size)})
        if start >= size:
            return httpx.Response(416, content=b"", headers={"content-range": f"bytes */{size}"})
        headers.update({"content-length": str(size - start), "content-range": f"bytes {start}-{size - 1}/{size}"})
        return httpx.Response(206, stream=_FileStream(path, start), headers=headers)


def _range_start(value: str) -> int | None:
    if value.startswith("bytes=") and value.endswith("-") and value[6:-1].isdigit():
        return int(value[6:-1])
    return None


class _FileStream(httpx.SyncByteStream):
    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        self.start = start

    def __iter__(self) -> Iterator[bytes]:
        with self.path.open("rb") as fh:
            fh.seek(self.start)
            while chunk := fh.read(_CHUNK_BYTES):
                yield chunk


# -- the decisions (pure) ---------------------------------------------------------------


@dataclass(frozen=True)
class MirrorPaths:
    """Where one repository's release data lives in a mirror."""

    releases: Path

    def tag_json(self, tag: str) -> Path:
        """The release JSON the client reads for ``tag``."""
        return self.releases / "tags" / tag

    @property
    def latest_json(self) -> Path:
        """The JSON behind ``releases/latest``."""
        return self.releases / "latest"

    def asset(self, tag: str, name: str) -> Path:
        """Where the asset file ``name`` of ``tag`` lives."""
        return self.releases / "download" / tag / name


def mirror_paths(dest: Path, repo: str) -> MirrorPaths:
    """The paths of ``repo`` inside the mirror ``dest``."""
    owner, name = repo.split("/", 1)
    return MirrorPaths(dest / "repos" / owner / name / "releases")


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


def newest(releases: Iterable[Release], count: int) -> list[Release]:
    """The ``count`` published ``bN`` releases with the highest ``N``, newest first."""
    numbered = [
        (number, rel)
        for rel in releases
        if not rel.draft and not rel.prerelease and (number := build_number(rel.tag)) is not None
    ]
    numbered.sort(key=lambda pair: pair[0], reverse=True)
    return [rel for _, rel in numbered[:count]]


def asset_json(asset: Asset, tag: str, sha256: str, digest_origin: str) -> dict[str, Any]:
    """One asset object of the mirror's release JSON (GitHub API shape, relative URL)."""
    return {
        "name": asset.name,
        "label": "",
        "state": "uploaded",
        "content_type": "application/octet-stream",
        "size": asset.size,
        "digest": f"sha256:{sha256}",
        "browser_download_url": f"../download/{tag}/{asset.name}",
        "llama_runtime_digest_origin": digest_origin,
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

    def to_json(self) -> dict[str, object]:
        """The ``mirror sync`` object of the CLI."""
        return {
            "dest": str(self.dest),
            "releases": self.releases,
            "fetched": self.fetched,
            "reused": self.reused,
            "fetched_bytes": self.fetched_bytes,
            "latest": self.latest,
        }


def sync_mirror(
    client: GitHubClient,
    dest: Path,
    *,
    tag: str | None = None,
    latest: int = 1,
    platforms: Iterable[str] = (),
    backends: Iterable[str] = (),
) -> MirrorReport:
    """Bring ``dest`` up to date with releases of ``client.repo``.

    Args:
        client: The upstream (GitHub or another mirror).
        dest: The mirror directory (created if missing).
        tag: One exact release; otherwise the ``latest`` newest builds.
        latest: How many of the newest ``bN`` releases to mirror.
        platforms: ``os-arch`` filters (empty: all).
        backends: Backend filters (empty: all).

    Raises:
        UserInputError: ``dest`` is not a directory we can write, or ``latest`` < 1.
        BackendUnavailableError: No asset of a release matches the filters.
        IntegrityError, RemoteError: An asset failed its checks or the upstream failed;
            releases already published in the mirror stay as they were.
    """
    if tag is None and latest < 1:
        raise UserInputError(f"--latest must be at least 1, not {latest}.")
    if dest.exists() and not dest.is_dir():
        raise UserInputError(f"The mirror destination {dest} exists and is not a directory.")
    report = MirrorReport(dest=dest)
    releases = [client.get_release(tag)] if tag else _newest(client, latest)
    if not releases:
        from runtime.errors import ReleaseNotFoundError

        raise ReleaseNotFoundError(f"No bN releases found in {client.repo} to mirror.")
    paths = mirror_paths(dest, client.repo)
    wanted_platforms, wanted_backends = list(platforms), list(backends)
    for release in releases:
        _sync_release(client, dest, paths, release, wanted_platforms, wanted_backends, report)
        report.releases.append(release.tag)
    report.latest = _publish_latest(paths)
    return report


def _newest(client: GitHubClient, count: int) -> list[Release]:
    from runtime.errors import NetworkError, RateLimitError, RemoteError

    try:
        return newest(client.recent_releases(), count)
    except (RateLimitError, NetworkError):
        raise
    except RemoteError:
        # The upstream is itself a static mirror: it only knows its latest build.
        return [client.latest_release()]


def _sync_release(
    client: GitHubClient,
    dest: Path,
    paths: MirrorPaths,
    release: Release,
    platforms: list[str],
    backends: list[str],
    report: MirrorReport,
) -> None:
    from runtime.errors import BackendUnavailableError

    chosen = select_assets(release, platforms, backends)
    if not chosen:
        wanted = ", ".join([*platforms, *backends]) or "any platform"
        raise BackendUnavailableError(f"{client.repo} {release.tag} has no complete asset for {wanted}.")
    previous = _read_json(paths.tag_json(release.tag))
    kept = {str(a["name"]): a for a in (previous or {}).get("assets", []) if isinstance(a, dict)}
    for asset in chosen:
        sha, origin = _ensure_asset(client, dest, paths, release.tag, asset, report)
        kept[asset.name] = asset_json(asset, release.tag, sha, origin)
    # Assets mirrored by an earlier sync stay listed only while their file is intact in size.
    listed = [a for a in kept.values() if _size_matches(paths.asset(release.tag, str(a["name"])), a.get("size"))]
    # The commit point of this release: everything it names is already in place.
    atomic_write_json(paths.tag_json(release.tag), release_json(release, listed))


def _ensure_asset(
    client: GitHubClient, dest: Path, paths: MirrorPaths, tag: str, asset: Asset, report: MirrorReport
) -> tuple[str, str]:
    """The asset's file in the mirror, checked; returns its sha256 and whose digest it matches."""
    from updater.download import download_asset

    target = paths.asset(tag, asset.name)
    published = asset.sha256
    if target.is_file() and target.stat().st_size == asset.size:
        sha = sha256_file(target)
        if published is None or sha == published:
            report.reused.append(f"{tag}/{asset.name}")
            return sha, "upstream" if published else "mirror"
    partial_dir = dest / ".partial"
    partial_dir.mkdir(parents=True, exist_ok=True)
    key = published[:16] if published else f"nodigest-{asset.size}"
    partial = partial_dir / f"{tag}-{key}-{asset.name}.part"
    result = download_asset(
        client,
        asset,
        partial,
        max_bytes=min(_MAX_ASSET_BYTES, max(asset.size, 1)),
        expected_size=asset.size,
        expected_sha256=published,
    )
    if result.size != asset.size:
        partial.unlink(missing_ok=True)
        raise IntegrityError(f"{asset.name} is {result.size} bytes, not the published {asset.size}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, target)
    fsync_directory(target.parent)
    report.fetched.append(f"{tag}/{asset.name}")
    report.fetched_bytes += result.size
    return result.sha256, "upstream" if published else "mirror"


def _publish_latest(paths: MirrorPaths) -> str | None:
    """Point ``releases/latest`` at the highest build the mirror holds; returns its tag."""
    tags_dir = paths.releases / "tags"
    candidates = [
        (number, entry.name)
        for entry in (tags_dir.iterdir() if tags_dir.is_dir() else [])
        if entry.is_file() and (number := build_number(entry.name)) is not None
    ]
    if not candidates:
        return None
    tag = max(candidates)[1]
    doc = _read_json(paths.tag_json(tag))
    if doc is None:
        return None
    atomic_write_json(paths.latest_json, latest_relative(doc))
    return tag


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def _size_matches(path: Path, size: object) -> bool:
    try:
        return isinstance(size, int) and path.stat().st_size == size
    except OSError:
        return False
