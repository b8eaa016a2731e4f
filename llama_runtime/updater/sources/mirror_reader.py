"""Reading a static mirror without a server: ``file://`` URLs answered from the file system.

The composition root (:class:`~updater.engine.Engine`) gives the release client
a :class:`FileTransport` when ``--api-url`` is a ``file://`` URL, so the client
itself never looks at URL schemes.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from llama_runtime.runtime.errors import RemoteError, UserInputError
from llama_runtime.runtime.fsutil import decimal, read_record
from llama_runtime.updater.credentials import redact_url
from llama_runtime.updater.release.assetnames import parse_asset_name
from llama_runtime.updater.release.manifest import BUILD_METADATA_ASSETS
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import parse_tag, validate_tag
from llama_runtime.updater.sources.source import DirectoryListingError

__all__ = ["FileTransport", "file_api_url"]


# -- mirror_reader -----------------------------------------------------------------------------------------------

#: What answers a directory URL (a mirror's ``releases`` listing), like a web server's index file:
#: ``index.json``, else the ``index.html`` copy every static server serves (see :data:`STATIC_INDEX_NAME`).
DIRECTORY_INDEXES: Final[tuple[str, ...]] = ("index.json", "index.html")
# Read size when serving mirror files: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024


def file_api_url(url: str) -> tuple[str, Path]:
    """``file:///DIR`` as the URL the client uses (``file://localhost/DIR``) and DIR.

    httpx's cookie handling rejects host-less URLs, so the host is spelled out.
    """
    parsed = httpx.URL(url)
    root = Path(urllib.request.url2pathname(parsed.path)).absolute()
    return str(parsed.copy_with(host="localhost")).rstrip("/"), root


class FileTransport(httpx.BaseTransport):
    """Serves files under ``root`` for ``file://`` URLs, like a static web server.

    Query strings are ignored (as static servers do); a directory is answered
    by its ``index.json`` or ``index.html`` (a mirror's release listing), else 404, as are paths
    that leave ``root``; ``Range: bytes=N-`` is honoured for resumes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Answer one request from the file system."""
        path = Path(urllib.request.url2pathname(request.url.path)).resolve()
        index = next((path / name for name in DIRECTORY_INDEXES if path.is_dir() and (path / name).is_file()), None)
        if index is not None:
            path = index  # a directory is answered by its index, as a web server does
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
    if value.startswith("bytes=") and value.endswith("-"):
        return decimal(value[6:-1])
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


# -- mirror_layout: The mirror's shape: where each file lives, what its JSON says (pure). ------------------------

# Hex digits of the sha256 that name an asset's directory: 64 bits cannot collide
# between the few uploads one asset name ever sees, and keep URLs short.
SHA_DIR_CHARS: Final[int] = 16
#: The listing's file inside ``releases/`` (see :attr:`MirrorPaths.listing_json`).
LISTING_NAME: Final = "index.json"
#: The same bytes again under the name every static server answers a directory with
#: (``python -m http.server``, nginx's and Apache's default index, Caddy's ``file_server``):
#: a plain server then serves the listing, never its own HTML directory listing.
STATIC_INDEX_NAME: Final = "index.html"
# The JSON key holding the sha256 the mirror computed itself (not GitHub's digest).
OWN_SHA_KEY: Final = "llama_runtime_sha256"


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

    @property
    def repository_json(self) -> Path:
        """The JSON behind ``repos/{owner}/{name}`` (GitHub's "Get a repository"), as that directory's index."""
        return self.releases.parent / LISTING_NAME

    def tag_json(self, tag: str) -> Path:
        """The release JSON the client reads for ``tag``."""
        return self.inside(self.releases / "tags" / tag)

    @property
    def latest_json(self) -> Path:
        """The JSON behind ``releases/latest``."""
        return self.releases / "latest"

    @property
    def listing_json(self) -> Path:
        """The JSON behind ``releases`` itself: every mirrored release, newest first.

        ``releases`` is a directory, so the list is its index file; the ``file://``
        reader answers the directory with it (a web server does so when told to
        serve ``index.json``).
        """
        return self.releases / LISTING_NAME

    def asset(self, tag: str, sha256: str, name: str) -> Path:
        """Where the asset file ``name`` of ``tag`` with content ``sha256`` lives."""
        return self.inside(self.releases / "download" / tag / sha256[:SHA_DIR_CHARS] / name)

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
    ``cuda`` builds of their platform. A fork's build metadata (its manifest and
    checksum index) goes along, so clients of the mirror choose as they would from GitHub.
    """
    wanted_platforms, wanted_backends = set(platforms), set(backends)
    chosen: list[Asset] = []
    for asset in release.assets:
        if asset.name in BUILD_METADATA_ASSETS and asset.is_complete:
            chosen.append(asset)
            continue
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
        "browser_download_url": f"../download/{tag}/{sha256[:SHA_DIR_CHARS]}/{asset.name}",
        OWN_SHA_KEY: sha256,
    }


def release_json(release: Release, assets: list[dict[str, Any]]) -> dict[str, Any]:
    """The release object of the mirror (the fields the client reads, GitHub's names)."""
    return {
        "tag_name": release.tag,
        "name": release.tag,
        "draft": False,
        "prerelease": release.prerelease,
        "published_at": release.published_at,
        # What the build's commit is reported from (the certificate names the publisher's).
        "target_commitish": release.target_commitish,
        "assets": sorted(assets, key=lambda a: str(a["name"])),
    }


def listing_relative(release_doc: dict[str, Any]) -> dict[str, Any]:
    """``release_doc`` re-pointed for the ``releases`` listing, read at ``…/releases`` (no slash).

    The prerelease flag stays upstream's: each channel resolves over the mirror's
    listing as it does over GitHub's (``stable`` never takes a nightly build).
    """
    doc = dict(release_doc)
    doc["assets"] = [
        {**a, "browser_download_url": "releases/" + str(a["browser_download_url"]).removeprefix("../")}
        for a in release_doc["assets"]
    ]
    return doc


def latest_relative(release_doc: dict[str, Any]) -> dict[str, Any]:
    """``release_doc`` re-pointed for ``releases/latest`` (one directory up from ``tags/``)."""
    doc = dict(release_doc)
    doc["assets"] = [
        {**a, "browser_download_url": str(a["browser_download_url"]).removeprefix("../")} for a in release_doc["assets"]
    ]
    return doc


def mirror_not_found(api_url: str, route: str, fallback: str) -> tuple[str, str]:
    """What a mirror's 404 means for ``route`` (the URL path asked), and what to do: (message, hint).

    A missing ``releases/latest`` is a mirror without a stable release (synced for
    nightly, or by exact build tags); a missing ``releases/tags/T``, a release it does
    not hold. Only an ``http(s)`` mirror can also be a web server that may not read
    the files; a ``file://`` one is read by this process itself.
    """
    where = api_url.rstrip("/")
    tail = route.rstrip("/").rsplit("/releases/", 1)[-1] if "/releases/" in route else ""
    message, hint = fallback, f"Check that `llama-runtime mirror sync` filled {where}."
    if tail == "latest":
        message = (
            f"The mirror {where} holds no stable release (no releases/latest): it was synced for the nightly "
            "channel or for exact build tags only."
        )
        hint = "Sync the stable channel into it (`llama-runtime mirror sync --dest DIR`), or use --channel nightly."
    elif tail.startswith("tags/"):
        tag = urllib.request.url2pathname(tail.removeprefix("tags/"))
        message = f"The mirror {where} does not hold the release {tag}."
        hint = (
            f"`llama-runtime mirror sync --dest DIR --tag {tag}` adds it; "
            "`llama-runtime list --available` shows what it holds."
        )
    if not where.startswith("file:"):
        hint += " If it was synced, check that its web server may read the files (mode 644)."
    return message, hint


# What a static server's own page for a directory starts its title with (python -m http.server,
# nginx autoindex and Apache mod_autoindex: "Index of /…"): the mirror's index file is missing.
_DIRECTORY_LISTING_MARKS: Final[tuple[bytes, ...]] = (b"Directory listing for", b"Index of /")
# Bytes of an HTML answer searched for those marks: they are in its title, near the top.
_LISTING_PEEK_BYTES: Final[int] = 4096


def asked_url(response: httpx.Response) -> httpx.URL | None:
    """The URL the answer is for (after redirects), when the response knows its request."""
    try:
        return response.request.url
    except RuntimeError:  # a response built by hand (tests, transports) has no request
        return None


def check_html_answer(response: httpx.Response, raw: bytes) -> None:
    """Let a mirror's ``index.html`` through (JSON that a static server labels HTML); refuse any other page.

    A mirror's directory (``releases``) is answered with its ``index.html``, which
    ``mirror sync`` writes as the same JSON as ``index.json``. A real HTML page
    there is the server's own directory listing: the index is missing, and
    reading that page as "no releases" would hide it.

    Raises:
        DirectoryListingError: The answer is a directory listing.
        RemoteError: Another HTML page (a portal, an error page).
    """
    if raw.lstrip()[:1] in (b"[", b"{"):
        return
    asked = asked_url(response)
    where = redact_url(str(asked)) if asked is not None else "the server"
    if any(mark in raw[:_LISTING_PEEK_BYTES] for mark in _DIRECTORY_LISTING_MARKS):
        raise DirectoryListingError(
            f"{where} answered with its web server's directory listing, not release data: the mirror has no "
            "release index there (it was synced by an older llama-runtime, or copied without its index files).",
            hint="Run `llama-runtime mirror sync --dest DIR` again: it writes releases/index.json and the "
            "index.html copy any static web server serves for the directory.",
        )
    raise RemoteError("GitHub answered with something that is not release data (text/html).")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object the mirror wrote, or None when it is missing or not one."""
    try:
        payload = read_record(path)
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def entries(doc: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """The asset objects of a release JSON (none when it is missing or malformed)."""
    assets = (doc or {}).get("assets")
    for entry in assets if isinstance(assets, list) else []:
        if isinstance(entry, dict):
            yield entry
