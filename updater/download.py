"""Stream one release asset to a partial file, hashing while it arrives, resuming on retry.

Invariants:
    * Bytes that fail an integrity check (digest, size, cap) are deleted at
      once: nothing untrusted stays on disk.
    * A network failure or a cancel keeps the partial file, so the next attempt
      (or the next run) asks only for the rest with ``Range: bytes=N-``.
    * ``Authorization`` is only ever sent to the API origin, never to the CDN
      the download URL redirects to.
    * No ``httpx`` exception escapes; failures are ``runtime.errors`` types.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

import httpx

from runtime.errors import (
    CancelledError,
    DigestMismatchError,
    DiskSpaceError,
    NetworkError,
    RemoteError,
    SizeMismatchError,
)
from updater.github import GitHubClient
from updater.release import Asset

if TYPE_CHECKING:
    from hashlib import _Hash

__all__ = ["DownloadResult", "check_free_space", "download_asset", "human_size"]

# Write buffer: few syscalls per GB. Chunks are taken as they arrive (not regrouped) so a
# dropped connection loses nothing already received and resume starts exactly there.
CHUNK_BYTES: Final[int] = 1024 * 1024
# Resets and 5xx from the CDN are usually momentary; each retry resumes, so three
# attempts cost little bandwidth.
_ATTEMPTS: Final[int] = 3
_BACKOFF_SECONDS: Final[float] = 1.0
# GitHub uses two hops (github.com → CDN); more than a few means a loop.
_MAX_REDIRECTS: Final[int] = 5
_REDIRECT_STATUSES: Final[frozenset[int]] = frozenset({301, 302, 303, 307, 308})

Progress = Callable[[int, int | None], None]
Cancel = Callable[[], bool]


@dataclass(frozen=True)
class DownloadResult:
    """A fully downloaded, size- and (if published) digest-checked file.

    Attributes:
        path: The partial file, now complete and fsynced.
        size: Bytes on disk.
        sha256: Lowercase hex of the whole file.
        resumed_from: Bytes reused from an earlier partial file (0: fresh).
        digest_verified: Whether a published sha256 was compared and matched.
    """

    path: Path
    size: int
    sha256: str
    resumed_from: int
    digest_verified: bool


def human_size(n_bytes: int) -> str:
    """Decimal size for people, e.g. ``"312 MB"`` or ``"1.5 GB"``."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    return f"{value:.0f} {unit}" if unit == "B" or value >= 10 else f"{value:.1f} {unit}"


def check_free_space(directory: Path, needed: int, *, what: str = "llama.cpp") -> None:
    """Fail early when ``directory`` (or its nearest existing parent) lacks ``needed`` bytes.

    Args:
        directory: Where the bytes will go; it need not exist yet.
        needed: Bytes required.
        what: What is being installed, e.g. ``"llama.cpp b7000"``.

    Raises:
        DiskSpaceError: Less than ``needed`` bytes are free there.
    """
    probe = directory
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise DiskSpaceError(
            f"Not enough disk space to install {what}: need {human_size(needed)}, "
            f"have {human_size(free)} in {directory}."
        )


def download_asset(
    source: GitHubClient | httpx.Client,
    asset: Asset,
    dest_partial: Path,
    *,
    max_bytes: int,
    expected_size: int | None,
    expected_sha256: str | None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    sleep: Callable[[float], None] = time.sleep,
    attempts: int = _ATTEMPTS,
) -> DownloadResult:
    """Download ``asset`` into ``dest_partial``, resuming what is already there.

    Args:
        source: A :class:`GitHubClient` (its timeouts and API-only token are used)
            or a plain ``httpx.Client``.
        asset: The asset; its ``download_url`` is fetched.
        dest_partial: The partial file, in a staging directory the caller owns.
        max_bytes: Hard ceiling; reading stops past it.
        expected_size: Published size; the file must end up exactly this long.
        expected_sha256: Published sha256 hex, or ``None`` when GitHub has none.
        progress: Called with ``(bytes_on_disk, expected_size)`` after each chunk.
        cancel: Polled between chunks; ``True`` stops the download.
        sleep: Backoff sleep, injectable for tests.
        attempts: Tries for resets, truncation, timeouts and 5xx.

    Returns:
        The checked file.

    Raises:
        DigestMismatchError: The sha256 differs (the file is deleted).
        SizeMismatchError: Too many or too few bytes against the size or cap (deleted).
        NetworkError: Transport failures after all attempts (the partial is kept).
        RemoteError: 4xx, or a redirect loop.
        CancelledError: ``cancel`` returned ``True`` (the partial is kept).
    """
    job = _Job(source, asset, dest_partial, max_bytes, expected_size, expected_sha256)
    for attempt in range(1, attempts + 1):
        try:
            return job.run(progress, cancel)
        except NetworkError:
            if attempt == attempts:
                raise
        sleep(_BACKOFF_SECONDS * 2 ** (attempt - 1))
    raise AssertionError("unreachable: the last attempt returns or raises")


class _Job:
    """One asset download; :meth:`run` is one attempt that resumes from disk."""

    def __init__(
        self,
        source: GitHubClient | httpx.Client,
        asset: Asset,
        path: Path,
        max_bytes: int,
        expected_size: int | None,
        expected_sha256: str | None,
    ) -> None:
        self.http = source.http if isinstance(source, GitHubClient) else source
        self.auth = source.auth_headers_for if isinstance(source, GitHubClient) else None
        self.asset = asset
        self.path = path
        self.expected_size = expected_size
        self.expected_sha256 = expected_sha256.lower() if expected_sha256 else None
        self.cap = min(max_bytes, expected_size) if expected_size is not None else max_bytes

    def run(self, progress: Progress | None, cancel: Cancel | None) -> DownloadResult:
        offset = self._usable_prefix()
        hasher = self._hash_prefix(offset)
        if offset and offset == self.expected_size:
            return self._finish(hasher, offset, offset)
        self._check_cancel(cancel)
        with self._open(offset) as response:
            if response.status_code == 200 and offset:
                offset = 0  # the server ignored Range: start over cleanly
                hasher = hashlib.sha256()
            with self.path.open("ab" if offset else "wb", buffering=CHUNK_BYTES) as fh:
                total = self._stream(response, fh, hasher, offset, progress, cancel)
                fh.flush()
                os.fsync(fh.fileno())
        return self._finish(hasher, total, offset)

    # -- steps -----------------------------------------------------------------------------
    def _usable_prefix(self) -> int:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size > self.cap:
            self.path.unlink()
            return 0
        return size

    def _hash_prefix(self, offset: int) -> _Hash:
        hasher = hashlib.sha256()
        if offset:
            with self.path.open("rb") as fh:
                while chunk := fh.read(CHUNK_BYTES):
                    hasher.update(chunk)
        return hasher

    @contextmanager
    def _open(self, offset: int) -> Iterator[httpx.Response]:
        url = self.asset.download_url
        for _hop in range(_MAX_REDIRECTS + 1):
            headers = {"Accept": "application/octet-stream"}
            if self.auth is not None:
                headers.update(self.auth(url))
            if offset:
                headers["Range"] = f"bytes={offset}-"
            try:
                request = self.http.build_request("GET", url, headers=headers)
                response = self.http.send(request, stream=True, follow_redirects=False)
            except httpx.HTTPError as exc:
                raise self._network_error(f"could not connect ({type(exc).__name__})") from exc
            try:
                if response.status_code in _REDIRECT_STATUSES:
                    url = str(response.url.join(response.headers.get("location", "")))
                    continue
                self._check_status(response, offset)
                yield response
                return
            finally:
                response.close()
        raise RemoteError(
            f"Downloading {self.asset.name} redirected more than {_MAX_REDIRECTS} times; "
            "the server is in a redirect loop."
        )

    def _check_status(self, response: httpx.Response, offset: int) -> None:
        status = response.status_code
        if status == 206 and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            self.path.unlink(missing_ok=True)
            raise self._network_error("the server resumed at the wrong offset", kept=False)
        if status in (200, 206):
            return
        if status == 416:
            self.path.unlink(missing_ok=True)
            raise self._network_error("the server refused to resume the partial file", kept=False)
        if status == 429 or status >= 500:
            raise self._network_error(f"the server answered HTTP {status}")
        raise RemoteError(
            f"Could not download {self.asset.name}: the server answered HTTP {status} for {response.url}."
        )

    def _stream(
        self,
        response: httpx.Response,
        fh: BinaryIO,
        hasher: _Hash,
        total: int,
        progress: Progress | None,
        cancel: Cancel | None,
    ) -> int:
        try:
            for chunk in response.iter_bytes():
                if total + len(chunk) > self.cap:
                    fh.close()
                    self.path.unlink(missing_ok=True)
                    raise SizeMismatchError(self._too_big_message())
                fh.write(chunk)
                hasher.update(chunk)
                total += len(chunk)
                if progress is not None:
                    progress(total, self.expected_size)
                self._check_cancel(cancel)
        except httpx.HTTPError as exc:
            fh.flush()
            raise self._network_error(
                f"the connection failed after {human_size(total)} ({type(exc).__name__})"
            ) from exc
        return total

    def _finish(self, hasher: _Hash, total: int, resumed_from: int) -> DownloadResult:
        if self.expected_size is not None and total < self.expected_size:
            raise self._network_error(f"the body ended after {total} of {self.expected_size} bytes")
        digest: str = hasher.hexdigest()
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            self.path.unlink(missing_ok=True)
            raise DigestMismatchError(
                f"{self.asset.name} does not match its published sha256 "
                f"(expected {self.expected_sha256}, got {digest}); the download was discarded."
            )
        return DownloadResult(
            path=self.path,
            size=total,
            sha256=digest,
            resumed_from=resumed_from,
            digest_verified=self.expected_sha256 is not None,
        )

    # -- helpers ---------------------------------------------------------------------------
    def _check_cancel(self, cancel: Cancel | None) -> None:
        if cancel is not None and cancel():
            raise CancelledError(f"The download of {self.asset.name} was cancelled; the partial file is kept.")

    def _network_error(self, what: str, *, kept: bool = True) -> NetworkError:
        then = "the partial file is kept for resuming" if kept else "the next try starts over"
        return NetworkError(f"Downloading {self.asset.name} failed: {what}; {then}.")

    def _too_big_message(self) -> str:
        if self.expected_size is not None and self.cap == self.expected_size:
            return (
                f"{self.asset.name} is larger than its published size of "
                f"{self.expected_size} bytes; the download was discarded."
            )
        return f"{self.asset.name} exceeds the download cap of {human_size(self.cap)}; the download was discarded."
