"""Stream one release asset to a partial file, hashing while it arrives, resuming on retry.

The request itself is :class:`AssetRequest` (its section below); what may be resumed, and the
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

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

import httpx

from llama_runtime.runtime.clock import RETRY_ATTEMPTS, tries
from llama_runtime.runtime.errors import (
    CancelledError,
    DigestMismatchError,
    NetworkError,
    RemoteError,
    SizeMismatchError,
)
from llama_runtime.runtime.fsutil import is_disk_full, pread
from llama_runtime.updater.credentials import redact_url
from llama_runtime.updater.fetch.cache import human_size
from llama_runtime.updater.fetch.partial import (
    DownloadPace,
    PaceWatch,
    Resume,
    discard_partial,
    discard_unowned,
    plan_resume,
    read_origin,
    record_origin,
    sidecar_path,
    strong_etag,
)
from llama_runtime.updater.net.limits import (
    MAX_RETRY_WAIT_SECONDS,
    extra_wait,
    rate_limit_refusal,
    retry_after_seconds,
)
from llama_runtime.updater.net.session import Credentials, Session
from llama_runtime.updater.release.release import Asset

if TYPE_CHECKING:
    from hashlib import _Hash

    from llama_runtime.updater.sources.source import AssetHost

__all__ = [
    "PROGRESS_INTERVAL_SECONDS",
    "UNPACKING_SUFFIX",
    "AssetRequest",
    "BytesDone",
    "Cancel",
    "DownloadResult",
    "FollowReader",
    "GrowingFile",
    "OnDisk",
    "StreamAborted",
    "StreamRestarted",
    "download_asset",
    "download_name",
    "network_error",
    "open_range",
    "throttled",
    "unpacking_path",
]


# -- asset_request: One GET of a release asset's bytes: redirects, ranges, validators. ---------------------------


def network_error(asset_name: str, what: str, *, kept: bool = True) -> NetworkError:
    """A failed transfer of ``asset_name``, saying whether its partial file is kept for resuming."""
    then = "the partial file is kept for resuming" if kept else "the next try starts over"
    return NetworkError(f"Downloading {asset_name} failed: {what}; {then}.")


class _WrongRangeError(NetworkError):
    """A 206 for another range than asked (to the end of the file, or from earlier): a ranged download
    falls back to one stream on it instead of failing every try."""


class AssetRequest:
    """GETs of one asset's bytes into the file ``path``.

    Args:
        source: Where the bytes come from (its HTTP client, and its token for its own origin only).
        asset: The asset; with a token, its API URL is asked first (the only way into a private repository).
        path: The file the bytes go to; deleted when an answer makes it unusable.
    """

    def __init__(self, source: AssetHost, asset: Asset, path: Path) -> None:
        # One try per open: the download's own loop retries, resuming from the bytes it holds.
        self.net = Session(source.http, who=f"the host of {asset.name}", attempts=1)
        self.credentials: Credentials = source
        self.first_url = source.asset_request(asset)[0]
        self.asset = asset
        self.path = path

    @contextmanager
    def open(self, offset: int, if_range: str | None, end: int | None = None) -> Iterator[httpx.Response]:
        """The streamed response for bytes ``offset``..``end`` (all from ``offset`` when ``end`` is None).

        Redirects are the network layer's (credentials only to the source's own origin).

        Raises:
            NetworkError: Transport failures, 5xx, 429, a wrong range.
            RemoteError: 4xx, or a redirect loop.
        """
        # identity: the stored bytes are the asset's bytes, never a transfer encoding of them.
        headers = {"Accept": "application/octet-stream", "Accept-Encoding": "identity"}
        if offset or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
            if if_range is not None:
                headers["If-Range"] = if_range
        try:
            response = self.net.send("GET", self.first_url, headers=headers, stream=True, credentials=self.credentials)
        except NetworkError as exc:
            cause = exc.__cause__
            error = self.network_error(f"could not connect ({type(cause).__name__ if cause else exc.message})")
            error.hint = exc.hint  # the one TLS hint, when the certificate was the cause
            raise error from exc
        try:
            self._check_status(response, offset, if_range)
            yield response
        finally:
            response.close()

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
        if status in (403, 429) or status >= 500:
            asked = retry_after_seconds(response)
            if status == 403 or (asked is not None and asked > MAX_RETRY_WAIT_SECONDS):
                limited = rate_limit_refusal(response, f"The host of {self.asset.name}")
                if limited is not None:  # a wait for the scheduler, not for this command
                    raise limited
            if status != 403:
                what = network_error(self.asset.name, f"the server answered HTTP {status}").message
                raise NetworkError(what, retry_after=asked)
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
            raise _WrongRangeError(
                request.network_error("the server sent another range than asked for", kept=False).message
            )
        yield response


# -- download ----------------------------------------------------------------------------------------------------

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
        pace: Minimum rate and overall deadline (default: the built-in limits, never the environment's);
            a download below it fails with :class:`NetworkError`, keeping the bytes.
        on_disk: Told the bytes on disk after each chunk, so a reader can follow
            the file while it grows (see :mod:`updater.fetch.download`).

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
    job.watch = PaceWatch(pace if pace is not None else DownloadPace())
    return _with_retries(job, progress, cancel, sleep=sleep, attempts=attempts)


def _with_retries(
    job: _Job, progress: BytesDone | None, cancel: Cancel | None, *, sleep: Callable[[float], None], attempts: int
) -> DownloadResult:
    """Run ``job`` until it finishes, retrying a network failure with backoff (each retry resumes)."""
    assert job.watch is not None
    wait_asked = 0.0
    for failed, last in enumerate(tries(sleep, attempts=attempts)):
        if failed and wait_asked:
            sleep(wait_asked)  # a server's Retry-After beyond the backoff tries() just waited
        job.watch.new_attempt()
        try:
            return job.run(progress, cancel)
        except NetworkError as exc:
            if last:
                raise
            wait_asked = extra_wait(exc, failed + 1)
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
        # A stalled link ends the download (and frees the update lock); see fetch/partial.py.
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
        if discard_unowned(self.path):
            discard_partial(self.path)  # its sidecar describes bytes that are gone
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
UNPACKING_SUFFIX: Final = ".unpacking"


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
    return download.with_name(download.name + UNPACKING_SUFFIX)


# -- follow: Read a download while it is being written: the seam between transfer and extraction. ----------------

_READ_FLAGS: Final = os.O_RDONLY | getattr(os, "O_BINARY", 0)
#: Most bytes one ``read(-1)`` returns: tarfile asks for sizes, but other readers may not.
_MAX_READ_BYTES: Final = 1024 * 1024


class StreamAborted(Exception):
    """The writer stopped (an error, a cancel) before the file was complete."""


class StreamRestarted(Exception):
    """Bytes this reader already returned were replaced; what it built from them is void."""


class GrowingFile:
    """The shared mark of one file being written front to back.

    Args:
        path: The file. It may not exist yet; readers open it once bytes are on disk.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._mark = 0  # contiguous bytes from offset 0 that are on disk
        self._generation = 0  # bumped whenever the mark moves back
        self._done = False
        self._failed = False
        # One descriptor readers duplicate, so a later rename of the file cannot
        # hide it from them; replaced when the front is rewritten (maybe a new file).
        self._fd: int | None = None

    def open_now(self) -> None:
        """Open the file for readers now, e.g. before the writer renames it."""
        with self._cond:
            if self._fd is None:
                self._fd = os.open(self.path, _READ_FLAGS)

    def close(self) -> None:
        """Close the shared descriptor (readers keep their own)."""
        with self._cond:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def advance(self, on_disk: int) -> None:
        """Set the contiguous bytes on disk; a smaller value than before means a rewrite."""
        with self._cond:
            if on_disk < self._mark:
                self._generation += 1
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
            self._mark = on_disk
            self._cond.notify_all()

    def finish(self, size: int) -> None:
        """The file is complete at ``size`` bytes: readers get EOF there."""
        with self._cond:
            self._mark = size
            self._done = True
            self._cond.notify_all()

    def fail(self) -> None:
        """The writer gave up: every waiting or later read raises :class:`StreamAborted`."""
        with self._cond:
            self._failed = True
            self._cond.notify_all()

    def _dup(self) -> int:
        with self._cond:
            if self._fd is None:
                self._fd = os.open(self.path, _READ_FLAGS)
            return os.dup(self._fd)

    def reader(self) -> FollowReader:
        """A new reader from offset 0."""
        return FollowReader(self)

    def _await_change(self, generation: int) -> None:
        """Block until the mark moves back past ``generation`` (or the writer fails)."""
        with self._cond:
            while self._generation == generation:
                if self._failed or self._done:
                    raise StreamAborted(f"the download of {self.path.name} stopped")
                self._cond.wait()

    def _wait_for(self, pos: int, generation: int) -> tuple[int, int, bool]:
        """Block until bytes past ``pos`` are on disk; (mark, generation, done)."""
        with self._cond:
            while True:
                if self._failed:
                    raise StreamAborted(f"the download of {self.path.name} stopped")
                if self._generation != generation or self._mark > pos or self._done:
                    return self._mark, self._generation, self._done
                self._cond.wait()


class FollowReader:
    """A binary file object that reads a :class:`GrowingFile` behind its mark."""

    def __init__(self, source: GrowingFile) -> None:
        self._source = source
        self._pos = 0
        self._generation = 0
        self._fd: int | None = None

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes, waiting for them; ``b""`` only at the end of a complete file.

        Raises:
            StreamAborted: The writer failed.
            StreamRestarted: Bytes already returned were rewritten.
        """
        want = _MAX_READ_BYTES if size is None or size < 0 else size
        if want == 0:
            return b""
        while True:
            mark, generation, done = self._source._wait_for(self._pos, self._generation)
            if generation != self._generation:
                if self._pos > 0:
                    raise StreamRestarted(f"the download of {self._source.path.name} started over")
                self._generation = generation
                self.close()  # a rewrite may be a new file under the same name
            if mark <= self._pos:
                if done:
                    return b""
                continue
            if self._fd is None:
                self._fd = self._source._dup()
            data = pread(self._fd, min(want, mark - self._pos), self._pos)
            if data:
                self._pos += len(data)
                return data
            # Shorter than the mark: truncated under us, so the mark has moved back.
            self._source._await_change(self._generation)

    def readinto(self, buffer: bytearray | memoryview) -> int:
        """:meth:`read` into ``buffer`` (what ISA-L's gzip reader asks for); 0 only at the end."""
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def close(self) -> None:
        """Close the file descriptor (a later read reopens it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
