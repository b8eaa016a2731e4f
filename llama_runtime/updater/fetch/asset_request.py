"""One GET of a release asset's bytes: redirects followed by hand, Range/If-Range, the status judged.

Invariants:
    * Bytes are asked for exactly as stored (``Accept-Encoding: identity``), so
      a server that compresses on the fly cannot change what is hashed or shift
      resume offsets.
    * ``Authorization`` is only ever sent to the API origin, never to the CDN
      the download URL redirects to (the source's ``auth_headers_for`` decides).
    * A response that makes the file's bytes unusable (a wrong range, another
      upload under the same name, 416) deletes the file before it is reported.
    * No ``httpx`` exception escapes; failures are ``runtime.errors`` types.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx

from llama_runtime.runtime.errors import NetworkError, RemoteError
from llama_runtime.updater.credentials import redact_url
from llama_runtime.updater.fetch.partial import discard_partial, strong_etag
from llama_runtime.updater.release.release import Asset

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import AssetHost

__all__ = ["AssetRequest", "network_error", "open_range"]

# GitHub uses two hops (github.com → CDN); more than a few means a loop.
_MAX_REDIRECTS: Final[int] = 5
_REDIRECT_STATUSES: Final[frozenset[int]] = frozenset({301, 302, 303, 307, 308})


def network_error(asset_name: str, what: str, *, kept: bool = True) -> NetworkError:
    """A failed transfer of ``asset_name``, saying whether its partial file is kept for resuming."""
    then = "the partial file is kept for resuming" if kept else "the next try starts over"
    return NetworkError(f"Downloading {asset_name} failed: {what}; {then}.")


class AssetRequest:
    """GETs of one asset's bytes into the file ``path``.

    Args:
        source: Where the bytes come from (its HTTP client, and its token for its own origin only).
        asset: The asset; with a token, its API URL is asked first (the only way into a private repository).
        path: The file the bytes go to; deleted when an answer makes it unusable.
    """

    def __init__(self, source: AssetHost, asset: Asset, path: Path) -> None:
        self.http = source.http
        self.auth = source.auth_headers_for
        self.first_url = source.asset_request(asset)[0]
        self.asset = asset
        self.path = path

    @contextmanager
    def open(self, offset: int, if_range: str | None, end: int | None = None) -> Iterator[httpx.Response]:
        """The streamed response for bytes ``offset``..``end`` (all from ``offset`` when ``end`` is None).

        Raises:
            NetworkError: Transport failures, 5xx, 429, a wrong range.
            RemoteError: 4xx, or a redirect loop.
        """
        url = self.first_url
        for _hop in range(_MAX_REDIRECTS + 1):
            # identity: the stored bytes are the asset's bytes, never a transfer encoding of them.
            headers = {"Accept": "application/octet-stream", "Accept-Encoding": "identity"}
            headers.update(self.auth(url))
            if offset or end is not None:
                headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
                if if_range is not None:
                    headers["If-Range"] = if_range
            try:
                request = self.http.build_request("GET", url, headers=headers)
                response = self.http.send(request, stream=True, follow_redirects=False)
            except httpx.HTTPError as exc:
                raise self.network_error(f"could not connect ({type(exc).__name__})") from exc
            try:
                if response.status_code in _REDIRECT_STATUSES:
                    url = str(response.url.join(response.headers.get("location", "")))
                    continue
                self._check_status(response, offset, if_range)
                yield response
                return
            finally:
                response.close()
        raise RemoteError(
            f"Downloading {self.asset.name} redirected more than {_MAX_REDIRECTS} times; "
            "the server is in a redirect loop."
        )

    def network_error(self, what: str, *, kept: bool = True) -> NetworkError:
        """A failed transfer of this asset (see :func:`network_error`)."""
        return network_error(self.asset.name, what, kept=kept)

    def _check_status(self, response: httpx.Response, offset: int, if_range: str | None) -> None:
        status = response.status_code
        if status == 206 and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            discard_partial(self.path)
            raise self.network_error("the server resumed at the wrong offset", kept=False)
        sent_etag = if_range if if_range is not None and if_range.startswith('"') else None
        etag = strong_etag(response)
        if status == 206 and sent_etag is not None and etag is not None and etag != sent_etag:
            # A server that ignores If-Range would splice two uploads together.
            discard_partial(self.path)
            raise self.network_error("the file changed on the server since the partial was started", kept=False)
        if status in (200, 206):
            return
        if status == 416:
            discard_partial(self.path)
            raise self.network_error("the server refused to resume the partial file", kept=False)
        if status == 429 or status >= 500:
            raise self.network_error(f"the server answered HTTP {status}")
        raise RemoteError(
            f"Could not download {self.asset.name}: the server answered HTTP {status} "
            f"for {redact_url(str(response.url))}."
        )


@contextmanager
def open_range(
    source: AssetHost,
    asset: Asset,
    path: Path,
    *,
    start: int,
    end: int,
    if_range: str | None,
) -> Iterator[httpx.Response]:
    """GET bytes ``start``..``end`` (inclusive) of ``asset``, following its redirects.

    The response is 206 for exactly that range, or 200 when the host ignores
    Range (or the ``If-Range`` validator no longer matches): then it is the
    whole asset from byte 0. ``path`` is the file the bytes go to; it is
    deleted when the host answers in a way that makes it unusable.

    Raises:
        NetworkError: Transport failures, 5xx, 429, a wrong range (``path`` deleted).
        RemoteError: 4xx, or a redirect loop.
    """
    request = AssetRequest(source, asset, path)
    with request.open(start, if_range, end) as response:
        wanted = f"bytes {start}-{end}/"
        if response.status_code == 206 and not response.headers.get("content-range", "").startswith(wanted):
            discard_partial(path)
            raise request.network_error("the server sent another range than asked for", kept=False)
        yield response
