"""Stream one release asset to a partial file, hashing while it arrives, resuming on retry.

The request itself is :mod:`.asset_request`; what may be resumed, and the
sidecar that proves it, is :mod:`.partial`.

Invariants:
    * Bytes that fail an integrity check (digest, size, cap) are deleted at
      once: nothing untrusted stays on disk. So is a partial on a full disk.
    * A network failure or a cancel keeps the partial file, so the next attempt
      (or the next run) asks only for the rest with ``Range: bytes=N-``.
    * A partial file never mixes bytes of two different uploads: a resume
      sends its recorded validator as ``If-Range``, and a server answering 200
      starts it over. The sidecar goes once a download completes, and a
      complete file without a digest that still has one (a crash before that)
      has its last byte fetched again under ``If-Range``.
    * No ``httpx`` exception escapes; failures are ``runtime.errors`` types.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.fsutil import is_disk_full

if TYPE_CHECKING:
    pass

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

import httpx

from llama_runtime.runtime.errors import (
    CancelledError,
    DigestMismatchError,
    NetworkError,
    SizeMismatchError,
)
from llama_runtime.runtime.retry import RETRY_ATTEMPTS, tries
from llama_runtime.updater.fetch.asset_request import AssetRequest
from llama_runtime.updater.fetch.diskspace import human_size
from llama_runtime.updater.fetch.pace import DownloadPace, PaceWatch
from llama_runtime.updater.fetch.partial import (
    Resume,
    discard_partial,
    plan_resume,
    read_origin,
    record_origin,
    sidecar_path,
)
from llama_runtime.updater.release.release import Asset

if TYPE_CHECKING:
    from hashlib import _Hash

    from llama_runtime.updater.sources.source import AssetHost

__all__ = [
    "PROGRESS_INTERVAL_SECONDS",
    "BytesDone",
    "Cancel",
    "DownloadResult",
    "OnDisk",
    "download_asset",
    "download_name",
    "throttled",
    "unpacking_path",
]

# Write buffer: few syscalls per GB. Chunks are taken as they arrive (not regrouped) so a
# dropped connection loses nothing already received and resume starts exactly there.
CHUNK_BYTES: Final[int] = 1024 * 1024

#: The downloader's byte count (``done``, ``total``): the installer turns it into its
#: one progress event type (:class:`updater.progress.Progress`) with the asset's name.
BytesDone = Callable[[int, int | None], None]
Cancel = Callable[[], bool]
#: Told the bytes of the partial file that are on disk (written, not only buffered)
#: each time that changes; a smaller number than before means the front was rewritten.
OnDisk = Callable[[int], None]

#: Progress reports a second at most (the contract's ten a second for ``--events``; more
#: than a person can read). Chunks arrive every 64 KiB, hundreds of times a second.
PROGRESS_INTERVAL_SECONDS: Final[float] = 0.1


def throttled(
    progress: BytesDone, *, interval: float = PROGRESS_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic
) -> BytesDone:
    """``progress``, called at most once per ``interval`` seconds; the first and the final count always pass."""
    last: float | None = None

    def report(done: int, total: int | None) -> None:
        nonlocal last
        now = clock()
        if last is None or now - last >= interval or (total is not None and done >= total):
            last = now
            progress(done, total)

    return report


@dataclass(frozen=True)
class DownloadResult:
    """A fully downloaded, size- and (if published) digest-checked file.

    Attributes:
        path: The partial file, now complete and fsynced; its sidecar is removed.
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


def download_asset(
    source: AssetHost,
    asset: Asset,
    dest_partial: Path,
    *,
    max_bytes: int,
    expected_size: int | None,
    expected_sha256: str | None,
    progress: BytesDone | None = None,
    cancel: Cancel | None = None,
    sleep: Callable[[float], None] = time.sleep,
    attempts: int = RETRY_ATTEMPTS,
    pace: DownloadPace | None = None,
    on_disk: OnDisk | None = None,
) -> DownloadResult:
    """Download ``asset`` into ``dest_partial``, resuming what is already there.

    Args:
        source: Where the bytes come from: a release source (its timeouts and
            origin-only token are used), or :class:`~updater.sources.source.PlainHttp`.
        asset: The asset; its ``download_url`` is fetched.
        dest_partial: The partial file, in a staging directory the caller owns.
        max_bytes: Hard ceiling; reading stops past it.
        expected_size: Published size; the file must end up exactly this long.
        expected_sha256: Published sha256 hex, or ``None`` when GitHub has none.
        progress: Called with ``(bytes_on_disk, expected_size)`` after each chunk.
        cancel: Polled between chunks; ``True`` stops the download.
        sleep: Backoff sleep, injectable for tests.
        attempts: Tries for resets, truncation, timeouts and 5xx.
        pace: Minimum rate and overall deadline (default: from the environment);
            a download below it fails with :class:`NetworkError`, keeping the bytes.
        on_disk: Told the bytes on disk after each chunk, so a reader can follow
            the file while it grows (see :mod:`updater.fetch.follow`).

    Returns:
        The checked file.

    Raises:
        DigestMismatchError: The sha256 differs (the file is deleted).
        SizeMismatchError: Too many or too few bytes against the size or cap (deleted).
        NetworkError: Transport failures after all attempts (the partial is kept).
        RemoteError: 4xx, or a redirect loop.
        CancelledError: ``cancel`` returned ``True`` (the partial is kept).
        OSError: Writing failed; on a full disk (``ENOSPC``/``EDQUOT``) the
            partial and its sidecar are deleted first.
    """
    job = _Job(source, asset, dest_partial, max_bytes, expected_size, expected_sha256, on_disk)
    job.watch = PaceWatch(pace if pace is not None else DownloadPace.from_env(os.environ))
    return _with_retries(job, progress, cancel, sleep=sleep, attempts=attempts)


def _with_retries(
    job: _Job, progress: BytesDone | None, cancel: Cancel | None, *, sleep: Callable[[float], None], attempts: int
) -> DownloadResult:
    """Run ``job`` until it finishes, retrying a network failure with backoff (each retry resumes)."""
    assert job.watch is not None
    for last in tries(sleep, attempts=attempts):
        job.watch.new_attempt()
        try:
            return job.run(progress, cancel)
        except NetworkError:
            if last:
                raise
        except OSError as exc:
            if is_disk_full(exc):
                discard_partial(job.path)  # the space is what is missing: keeping it holds on to it
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


class _Job:
    """One asset download; :meth:`run` is one attempt that resumes from disk."""

    def __init__(
        self,
        source: AssetHost,
        asset: Asset,
        path: Path,
        max_bytes: int,
        expected_size: int | None,
        expected_sha256: str | None,
        on_disk: OnDisk | None = None,
    ) -> None:
        self.on_disk = on_disk
        self.request = AssetRequest(source, asset, path)
        self.asset = asset
        self.path = path
        self.expected_size = expected_size
        self.expected_sha256 = expected_sha256.lower() if expected_sha256 else None
        self.cap = min(max_bytes, expected_size) if expected_size is not None else max_bytes
        # A stalled link ends the download (and frees the update lock); see fetch/pace.py.
        self.watch: PaceWatch | None = None

    def run(self, progress: BytesDone | None, cancel: Cancel | None) -> DownloadResult:
        resume = self._usable_prefix()
        offset = resume.keep
        self._tell(offset)
        hasher = self._hash_prefix(offset)
        if offset and offset == self.expected_size:
            return self._finish(hasher, offset, offset)
        self._check_cancel(cancel)
        with self.request.open(offset, resume.if_range) as response:
            if response.status_code == 200:
                # A fresh body (or the server refused the Range / If-Range): the old
                # bytes go before the sidecar names the new origin, so a crash never
                # pairs the two.
                discard_partial(self.path)
                self._tell(0)
                record_origin(self.path, self.asset.download_url, self.expected_size, response)
                offset = 0
                hasher = hashlib.sha256()
            with self.path.open("ab" if offset else "wb", buffering=CHUNK_BYTES) as fh:
                total = self._stream(response, fh, hasher, offset, progress, cancel)
                fh.flush()
                os.fsync(fh.fileno())
        return self._finish(hasher, total, offset)

    # -- steps -----------------------------------------------------------------------------
    def _usable_prefix(self) -> Resume:
        try:
            on_disk = self.path.stat().st_size
        except FileNotFoundError:
            on_disk = 0
        resume = plan_resume(
            on_disk,
            read_origin(self.path),
            url=self.asset.download_url,
            size=self.expected_size,
            cap=self.cap,
            has_digest=self.expected_sha256 is not None,
        )
        if resume.keep == 0:
            discard_partial(self.path)
        elif resume.keep < on_disk:
            os.truncate(self.path, resume.keep)
        return resume

    def _hash_prefix(self, offset: int) -> _Hash:
        hasher = hashlib.sha256()
        if offset:
            with self.path.open("rb") as fh:
                while chunk := fh.read(CHUNK_BYTES):
                    hasher.update(chunk)
        return hasher

    def _stream(
        self,
        response: httpx.Response,
        fh: BinaryIO,
        hasher: _Hash,
        total: int,
        progress: BytesDone | None,
        cancel: Cancel | None,
    ) -> int:
        try:
            for chunk in response.iter_raw():
                if total + len(chunk) > self.cap:
                    fh.close()
                    discard_partial(self.path)
                    raise SizeMismatchError(self._too_big_message())
                fh.write(chunk)
                hasher.update(chunk)
                total += len(chunk)
                if self.on_disk is not None:
                    fh.flush()  # a follower reads the file, not our buffer
                    self.on_disk(total)
                if progress is not None:
                    progress(total, self.expected_size)
                self._check_cancel(cancel)
                if self.watch is not None and (too_slow := self.watch.too_slow(len(chunk))):
                    fh.flush()
                    raise self._network_error(too_slow)
        except httpx.HTTPError as exc:
            fh.flush()
            raise self._network_error(
                f"the connection failed after {human_size(total)} ({type(exc).__name__})"
            ) from exc
        return total

    def _finish(self, hasher: _Hash, total: int, resumed_from: int) -> DownloadResult:
        if self.expected_size is not None and total < self.expected_size:
            # Only a response that ended cleanly gets here (a cut connection raises in
            # _stream): the server sent all it meant to, and it is not what GitHub
            # advertises. Retrying would fetch the same wrong file: integrity, exit 8.
            discard_partial(self.path)
            raise SizeMismatchError(
                f"{self.asset.name} arrived complete but {total} bytes long, not the published "
                f"{self.expected_size} bytes; the download was discarded."
            )
        digest: str = hasher.hexdigest()
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            discard_partial(self.path)
            raise DigestMismatchError(
                f"{self.asset.name} does not match its published sha256 "
                f"(expected {self.expected_sha256}, got {digest}); the download was discarded."
            )
        # Complete: nothing is left to resume. Without a digest, a complete file
        # found later is therefore fetched again, never trusted as it lies.
        sidecar_path(self.path).unlink(missing_ok=True)
        return DownloadResult(
            path=self.path,
            size=total,
            sha256=digest,
            resumed_from=resumed_from,
            digest_verified=self.expected_sha256 is not None,
        )

    # -- helpers ---------------------------------------------------------------------------
    def _tell(self, on_disk: int) -> None:
        if self.on_disk is not None:
            self.on_disk(on_disk)

    def _check_cancel(self, cancel: Cancel | None) -> None:
        if cancel is not None and cancel():
            raise CancelledError(f"The download of {self.asset.name} was cancelled; the partial file is kept.")

    def _network_error(self, what: str) -> NetworkError:
        return self.request.network_error(what)

    def _too_big_message(self) -> str:
        if self.expected_size is not None and self.cap == self.expected_size:
            return (
                f"{self.asset.name} is larger than its published size of "
                f"{self.expected_size} bytes; the download was discarded."
            )
        return f"{self.asset.name} exceeds the download cap of {human_size(self.cap)}; the download was discarded."


_PARTIAL_SUFFIX: Final = ".part"


#: Suffix of the tree a download is extracted into while it arrives (updater.stage.streaming).
_UNPACKING_SUFFIX: Final = ".unpacking"


#: Hex digits of the sha256 that name a download (updater.install._download).
_DOWNLOAD_KEY_CHARS: Final = 16


def download_name(sha256: str | None, asset: str, *, repo: str, size: int) -> str:
    """File name of the download of ``asset`` in ``downloads/``.

    With a published digest the bytes are named by it. Without one, the name
    carries the repository and the size, so a fork's asset of the same name (or
    another upload) never resumes or completes someone else's partial file.
    """
    if sha256:
        return f"{sha256[:_DOWNLOAD_KEY_CHARS]}-{asset}{_PARTIAL_SUFFIX}"
    return f"nodigest-{repo.replace('/', '_')}-{size}-{asset}{_PARTIAL_SUFFIX}"


def unpacking_path(download: Path) -> Path:
    """Where ``download`` is extracted while it arrives (never activated from there)."""
    return download.with_name(download.name + _UNPACKING_SUFFIX)
