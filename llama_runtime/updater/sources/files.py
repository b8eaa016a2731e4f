"""Reading a static mirror without a server: ``file://`` URLs answered from the file system.

The composition root (:class:`~updater.engine.Engine`) gives the release client
a :class:`FileTransport` when ``--api-url`` is a ``file://`` URL, so the client
itself never looks at URL schemes.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx

__all__ = ["FileTransport", "file_api_url"]

#: What answers a directory URL (a mirror's ``releases`` listing), like a web server's index file.
DIRECTORY_INDEX: Final = "index.json"
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
    by its ``index.json`` (a mirror's release listing), else 404, as are paths
    that leave ``root``; ``Range: bytes=N-`` is honoured for resumes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Answer one request from the file system."""
        path = Path(urllib.request.url2pathname(request.url.path)).resolve()
        if path.is_dir() and (path / DIRECTORY_INDEX).is_file():
            path = path / DIRECTORY_INDEX  # a directory is answered by its index, as a web server does
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
