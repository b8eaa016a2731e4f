"""Fetch one large asset as a few concurrent byte ranges, reassembled in place.

Release CDNs often cap each connection (unslothai/unsloth #6053: two hours for
one update); a few ranges at once multiply what one connection gets. Each
range is written at its own offset of ``<partial>.ranged`` (created at full
size), and a :class:`~updater.fetch.download.GrowingFile` is told the
contiguous prefix, so the digest (and an extractor) read the file in order
while later ranges are still arriving.

Invariants:
    * Only used with a published sha256: that one digest over the reassembled
      file is what proves the ranges fit together.
    * ``<partial>.ranges`` (:func:`save_record`, :func:`load_record`) records each range's bytes
      received and the validator (ETag / Last-Modified) of the upload; a resume
      asks each range only for the rest, under ``If-Range``.
    * A host that answers a Range with 200 (no Range support, or another upload
      under the same URL) ends the ranged attempt: its files are deleted and
      the caller falls back to one stream.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx

from llama_runtime.runtime.clock import tries
from llama_runtime.runtime.errors import (
    CancelledError,
    DigestMismatchError,
    NetworkError,
    SizeMismatchError,
)
from llama_runtime.runtime.fsutil import pwrite, read_cache, write_record
from llama_runtime.runtime.spans import tally, timer
from llama_runtime.updater.config import DEFAULT_PARALLEL_DOWNLOADS
from llama_runtime.updater.credentials import url_record
from llama_runtime.updater.fetch.cache import human_size
from llama_runtime.updater.fetch.download import (
    BytesDone,
    Cancel,
    DownloadResult,
    FollowReader,
    GrowingFile,
    StreamAborted,
    StreamRestarted,
    _WrongRangeError,
    open_range,
)
from llama_runtime.updater.fetch.partial import DownloadPace, PaceWatch, discard_unowned, strong_etag
from llama_runtime.updater.logs import warn_state
from llama_runtime.updater.net.limits import extra_wait
from llama_runtime.updater.release.release import Asset

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import AssetHost

__all__ = [
    "DEFAULT_PARALLEL",
    "MIN_PARALLEL_BYTES",
    "DigestPass",
    "HashingReader",
    "RangedDownload",
    "Span",
    "contiguous",
    "data_path",
    "discard_ranged",
    "load_record",
    "plan_spans",
    "save_record",
    "state_path",
]


# -- range_record: The spans of a ranged download and their record on disk (``<partial>.ranges``). ---------------

_DATA_SUFFIX: Final = ".ranged"
_STATE_SUFFIX: Final = ".ranges"
#: Opening the data file never follows a symbolic link (0 where the platform has no such flag).
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class Span:
    """Bytes ``start``..``end`` (exclusive) of the asset, ``done`` of them on disk."""

    start: int
    end: int
    done: int = 0

    @property
    def next(self) -> int:
        """The first byte not yet on disk."""
        return self.start + self.done

    @property
    def complete(self) -> bool:
        """Whether every byte of the span is on disk."""
        return self.next >= self.end


def plan_spans(size: int, parallel: int) -> list[Span]:
    """Split ``size`` bytes into ``parallel`` spans of (nearly) equal length (pure)."""
    count = max(1, min(parallel, size))
    bounds = [size * i // count for i in range(count + 1)]
    return [Span(bounds[i], bounds[i + 1]) for i in range(count)]


def contiguous(spans: list[Span]) -> int:
    """Bytes from offset 0 that are on disk, given ``spans`` in order (pure)."""
    total = 0
    for span in spans:
        total = span.next
        if not span.complete:
            break
    return total


def data_path(partial: Path) -> Path:
    """Where the ranges of ``partial`` are reassembled."""
    return partial.with_name(partial.name + _DATA_SUFFIX)


def state_path(partial: Path) -> Path:
    """The per-range record of ``partial``."""
    return partial.with_name(partial.name + _STATE_SUFFIX)


def _tmp_path(partial: Path) -> Path:
    # The temp file of earlier versions (written beside the record, then renamed): still removed.
    return partial.with_name(partial.name + _STATE_SUFFIX + ".tmp")


def discard_ranged(partial: Path) -> None:
    """Delete a ranged download's file and record (any may be missing)."""
    for path in (data_path(partial), state_path(partial), _tmp_path(partial)):
        path.unlink(missing_ok=True)


def load_record(partial: Path, url: str, size: int) -> tuple[list[Span], str | None] | None:
    """The spans and validator recorded for ``partial`` when they fit this asset and its data file, else ``None``."""
    if discard_unowned(data_path(partial)):
        return None
    try:
        raw = read_cache(state_path(partial), warn=warn_state)
        on_disk = data_path(partial).stat().st_size
    except (OSError, ValueError):
        return None
    spans = _spans_from(raw, url, size) if on_disk == size else None
    if spans is None:
        return None
    validator = raw.get("validator") if isinstance(raw, dict) else None
    return spans, validator


def save_record(partial: Path, url: str, size: int, validator: str | None, spans: list[Span]) -> None:
    """Record each span's progress (a hint: a failure to write it only costs a fresh start)."""
    payload = {
        "url": url_record(url),
        "size": size,
        "validator": validator,
        "spans": [[s.start, s.end, s.done] for s in spans],
    }
    try:
        write_record(state_path(partial), payload)
    except OSError:
        # Only a hint is lost (resuming then starts this download over); a full
        # disk is reported by the next write of the data itself.
        return


def _spans_from(raw: object, url: str, size: int) -> list[Span] | None:
    """The spans of a record written for ``url`` and ``size``, or ``None`` if it is not one."""
    if not isinstance(raw, dict) or raw.get("url") != url_record(url) or raw.get("size") != size:
        return None
    validator = raw.get("validator")
    items = raw.get("spans")
    if not (validator is None or isinstance(validator, str)) or not isinstance(items, list) or not items:
        return None
    spans: list[Span] = []
    expected_start = 0
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and all(type(v) is int for v in item)):
            return None
        start, end, done = item
        if start != expected_start or end <= start or not 0 <= done <= end - start:
            return None
        spans.append(Span(start, end, done))
        expected_start = end
    return spans if expected_start == size else None


# -- ranges ------------------------------------------------------------------------------------------------------

#: Below this an asset comes in one stream: a few extra round trips would cost
#: more than a capped connection loses on it.
MIN_PARALLEL_BYTES: Final = 16 * 1024 * 1024
#: Concurrent ranges by default (see updater.config).
DEFAULT_PARALLEL: Final = DEFAULT_PARALLEL_DOWNLOADS
#: Bytes between two saves of the per-range record (a save is one small rename).
_SAVE_EVERY_BYTES: Final = 8 * 1024 * 1024
#: Longest wait for a worker to notice an interrupt (seconds): it stops after the chunk in hand.
_STOP_JOIN_SECONDS: Final[float] = 5.0
#: Read size of the digest's pass over the reassembled file.
_HASH_READ_BYTES: Final = 1024 * 1024


class DigestPass:
    """The sha256 of a reassembled file, handed over by the one reader that reads all of it.

    With an extractor following the file, that reader is the extractor's
    (:class:`HashingReader`): each byte is read from disk once, inflated and
    hashed in the same pass. Without one, :class:`RangedDownload` reads it itself.
    """

    def __init__(self) -> None:
        self._done = threading.Event()
        self._digest: str | None = None

    def put(self, digest: str | None) -> None:
        """The digest of the whole file, or ``None`` when the file was never complete."""
        self._digest = digest
        self._done.set()

    def wait(self) -> str | None:
        """Block until :meth:`put`; what it was given."""
        self._done.wait()
        return self._digest


class HashingReader:
    """A :class:`~updater.fetch.download.FollowReader` that hashes every byte it returns."""

    def __init__(self, reader: FollowReader) -> None:
        self._reader = reader
        self._hasher = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._reader.read(size)
        started = timer()
        self._hasher.update(data)
        tally("hash download", started)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._reader.close()

    def finish(self) -> str | None:
        """Read (and hash) whatever the consumer left, to the end: the whole file's digest.

        ``None`` when the file never completed (the download failed, was
        cancelled, or rewrote bytes already read).
        """
        try:
            while self.read(_HASH_READ_BYTES):
                pass
        except (StreamAborted, StreamRestarted):
            return None
        return self._hasher.hexdigest()


class _NoRanges(Exception):
    """The host answered a Range with the whole body."""


class RangedDownload:
    """One asset fetched as concurrent ranges into ``<partial>.ranged``.

    Args:
        source: The GitHub client (or a plain ``httpx.Client``).
        asset: The asset, with its published ``size`` and ``sha256``.
        partial: The download's name in ``downloads/``; the finished file is renamed to it.
        parallel: Concurrent ranges (2 or more).
        progress: Called with ``(bytes on disk, size)``.
        cancel: Polled between chunks.
        sleep: Backoff sleep, injectable for tests.
        pace: Minimum rate per range and overall deadline (default: the built-in limits, never the environment's).
        digest: Where a reader of :attr:`growing` that reads it all (an extractor's
            :class:`HashingReader`) hands over the digest; ``None``: read it here.
    """

    def __init__(
        self,
        source: AssetHost,
        asset: Asset,
        partial: Path,
        *,
        parallel: int,
        progress: BytesDone | None = None,
        cancel: Cancel | None = None,
        sleep: Callable[[float], None] = time.sleep,
        pace: DownloadPace | None = None,
        digest: DigestPass | None = None,
    ) -> None:
        if asset.sha256 is None:
            raise ValueError("ranged downloads need a published sha256")
        self.source = source
        self.asset = asset
        self.sha256 = asset.sha256.lower()
        self.partial = partial
        self.data = data_path(partial)
        self.growing = GrowingFile(self.data)
        self.parallel = parallel
        self.progress = progress
        self.cancel = cancel
        self.sleep = sleep
        self.pace = pace if pace is not None else DownloadPace()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._spans: list[Span] = []
        self._validator: str | None = None
        self._unsaved = 0
        self._digest = digest

    def run(self) -> DownloadResult | None:
        """Fetch every range and check the digest; ``None`` when the host ignores Range.

        Raises:
            DigestMismatchError: The reassembled file has another sha256 (files deleted).
            NetworkError: A range failed after all attempts (progress is kept).
            CancelledError: ``cancel`` returned ``True`` (progress is kept).
        """
        resumed = self._load()
        try:
            # _load left no link here: a name that is one now is refused, never written through.
            fd = os.open(self.data, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0) | _NO_FOLLOW, 0o600)
        except OSError:
            discard_ranged(self.partial)
            raise
        try:
            os.ftruncate(fd, self.asset.size)
            self.growing.open_now()  # readers keep it across the final rename
            self.growing.advance(contiguous(self._spans))
            digest = self._fetch_all(fd)
        except _NoRanges:
            discard_ranged(self.partial)
            self.growing.fail()
            return None
        except BaseException:
            self.growing.fail()
            raise
        finally:
            os.close(fd)
        return self._finish(digest, resumed)

    # -- the workers ---------------------------------------------------------------------
    def _fetch_all(self, fd: int) -> str:
        digest = self._digest
        if digest is None:
            digest = DigestPass()
            reader = HashingReader(self.growing.reader())
            threading.Thread(target=_read_all, args=(reader, digest), name="range-digest", daemon=True).start()
        workers = [
            threading.Thread(target=self._worker, args=(fd, span), name=f"range-{i}", daemon=True)
            for i, span in enumerate(self._spans)
            if not span.complete
        ]
        try:
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        except BaseException:
            # Ctrl-C, or SIGTERM (the CLI makes it the same interrupt): every byte on disk stays usable,
            # so the workers stop and the record is saved before the interrupt goes on; a rerun resumes
            # to the byte instead of from the last periodic save.
            self._stop.set()
            for worker in workers:
                if worker.is_alive():
                    worker.join(timeout=_STOP_JOIN_SECONDS)
            self._save()
            raise
        if self._errors:
            self.growing.fail()
            digest.wait()
            self._save()
            raise self._first_error()
        # Readers (the extraction) get their EOF now, while the bytes are flushed: the archive's
        # fsync only has to come before it enters the cache, and a failing one still fails them.
        self.growing.finish(self.asset.size)
        os.fsync(fd)
        hashed = digest.wait()
        if hashed is None:
            raise self._first_error()
        return hashed

    def _first_error(self) -> BaseException:
        # A host without Range support is no failure, only a reason to fall back.
        for error in self._errors:
            if isinstance(error, _NoRanges):
                return error
        return self._errors[0] if self._errors else StreamAborted("the digest pass stopped")

    def _worker(self, fd: int, span: Span) -> None:
        # Each connection is held to the minimum rate; the deadline counts from the first attempt.
        watch = PaceWatch(self.pace)
        wait_asked = 0.0
        for failed, last in enumerate(tries(self.sleep)):
            if failed and wait_asked:
                self.sleep(wait_asked)  # a server's Retry-After beyond the backoff tries() just waited
            watch.new_attempt()
            try:
                self._fetch_span(fd, span, watch)
                return
            except NetworkError as exc:
                if last or self._stop.is_set():
                    self._fail(exc)
                    return
                wait_asked = extra_wait(exc, failed + 1)
            except BaseException as exc:
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(exc)
        self._stop.set()

    def _fetch_span(self, fd: int, span: Span, watch: PaceWatch) -> None:
        if span.complete:
            return
        try:
            self._fetch_open_span(fd, span, watch)
        except _WrongRangeError:
            raise _NoRanges() from None  # another range than asked: this host gets one stream

    def _fetch_open_span(self, fd: int, span: Span, watch: PaceWatch) -> None:
        with open_range(
            self.source, self.asset, self.data, start=span.next, end=span.end - 1, if_range=self._validator
        ) as response:
            if response.status_code != 206:
                raise _NoRanges()
            self._remember_validator(response)
            try:
                for chunk in response.iter_raw():
                    if self._stop.is_set():
                        return
                    self._write(fd, span, chunk)
                    if too_slow := watch.too_slow(len(chunk)):
                        raise NetworkError(
                            f"Downloading {self.asset.name} failed: {too_slow}; the partial file is kept for resuming."
                        )
                    if self.cancel is not None and self.cancel():
                        raise CancelledError(
                            f"The download of {self.asset.name} was cancelled; the partial file is kept."
                        )
            except httpx.HTTPError as exc:
                raise NetworkError(
                    f"Downloading {self.asset.name} failed: a range broke off after "
                    f"{human_size(span.done)} ({type(exc).__name__}); the partial file is kept for resuming."
                ) from exc
        if not span.complete:
            raise NetworkError(
                f"Downloading {self.asset.name} failed: a range ended early; the partial file is kept for resuming."
            )

    def _write(self, fd: int, span: Span, chunk: bytes) -> None:
        if span.next + len(chunk) > span.end:
            raise SizeMismatchError(
                f"{self.asset.name}: the server sent more bytes than the range asked for; the download was discarded."
            )
        started = timer()
        pwrite(fd, chunk, span.next)
        tally("download write", started)
        with self._lock:
            span.done += len(chunk)
            on_disk = sum(s.done for s in self._spans)
            self._unsaved += len(chunk)
            save = self._unsaved >= _SAVE_EVERY_BYTES
            # Under the lock: two workers must never tell the prefix out of order.
            self.growing.advance(contiguous(self._spans))
        if save:
            self._save()
        if self.progress is not None:
            self.progress(on_disk, self.asset.size)

    # -- the record ----------------------------------------------------------------------
    def _remember_validator(self, response: httpx.Response) -> None:
        validator = strong_etag(response) or response.headers.get("last-modified")
        with self._lock:
            if self._validator is None and validator is not None:
                self._validator = validator

    def _load(self) -> int:
        """Spans from the record when it matches this asset, else fresh ones; bytes reused."""
        recorded = load_record(self.partial, self.asset.download_url, self.asset.size)
        if recorded is None:
            discard_ranged(self.partial)
            self._spans = plan_spans(self.asset.size, self.parallel)
            return 0
        self._spans, self._validator = recorded
        return sum(s.done for s in self._spans)

    def _save(self) -> None:
        with self._lock:
            spans = [Span(s.start, s.end, s.done) for s in self._spans]
            validator = self._validator
            self._unsaved = 0
        save_record(self.partial, self.asset.download_url, self.asset.size, validator, spans)

    def _finish(self, digest: str, resumed: int) -> DownloadResult:
        if digest != self.sha256:
            discard_ranged(self.partial)
            raise DigestMismatchError(
                f"{self.asset.name} does not match its published sha256 "
                f"(expected {self.sha256}, got {digest}); the download was discarded."
            )
        os.replace(self.data, self.partial)
        state_path(self.partial).unlink(missing_ok=True)
        return DownloadResult(
            path=self.partial, size=self.asset.size, sha256=digest, resumed_from=resumed, digest_verified=True
        )


def _read_all(reader: HashingReader, digest: DigestPass) -> None:
    """The digest pass of a ranged download that no extractor follows."""
    found: str | None = None
    try:
        found = reader.finish()
    finally:  # whatever happens, the download waiting for the digest is told
        reader.close()
        digest.put(found)
