"""Get one asset's checked bytes onto disk in one pass: from the cache, as ranges, or as one stream.

For a ``.tar.gz`` the archive is extracted into staging *while* it arrives: a
worker thread follows the partial file (:mod:`updater.fetch.download`) and
feeds it to :func:`~updater.stage.archive.extract_tar_stream`, so the
transfer, the decompression and the writing overlap instead of following
one another. Each byte is read from disk once: with ranges, the extractor's
reader also computes the download's sha256 (:class:`~updater.fetch.ranges.HashingReader`),
reading on to the end whatever the extraction left, and each extracted
file's sha256 is computed while it is written.

Invariants:
    * Staging is never activated here. Whatever was extracted is only handed
      back after the download's digest (or, without one, its size) matched;
      on any failure the staging directory is deleted before the error leaves.
    * Every member passes the checks of the plan pass before it is written; a
      refused member stops the extraction at once. The download still runs to
      its end, so corrupted bytes are reported as a digest mismatch (as
      before), and a hostile but correctly published archive as unsafe.
    * When the extraction cannot follow (the server restarted the body, the
      bytes are not gzip, a range host fell back to one stream), staging is
      discarded and the caller extracts the finished file instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from llama_runtime.runtime.errors import IntegrityError
from llama_runtime.runtime.fsutil import remove_tree_quietly
from llama_runtime.runtime.spans import tally, timer
from llama_runtime.updater.fetch.cache import AssetCache
from llama_runtime.updater.fetch.download import (
    BytesDone,
    Cancel,
    DownloadResult,
    FollowReader,
    GrowingFile,
    StreamAborted,
    StreamRestarted,
    download_asset,
)
from llama_runtime.updater.fetch.partial import DownloadPace, discard_partial
from llama_runtime.updater.fetch.ranges import (
    DEFAULT_PARALLEL,
    MIN_PARALLEL_BYTES,
    DigestPass,
    HashingReader,
    RangedDownload,
    discard_ranged,
    state_path,
)
from llama_runtime.updater.release.release import Asset
from llama_runtime.updater.stage.archive import ExtractResult, extract_tar_stream

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import AssetHost

__all__ = ["FetchOptions", "Fetched", "fetch_asset", "streams_as_tar"]

_GZIP_MAGIC: Final = b"\x1f\x8b"
_TAR_GZ_SUFFIXES: Final = (".tar.gz", ".tgz")


@dataclass(frozen=True)
class FetchOptions:
    """How an asset may be fetched.

    Attributes:
        parallel: Concurrent ranges for a large asset; 1 fetches one stream.
        min_parallel_bytes: Smallest asset fetched as ranges.
        stream_extract: Extract a ``.tar.gz`` while it downloads.
        pace: The minimum rate and deadline each download is held to (the invocation's settings).
    """

    parallel: int = DEFAULT_PARALLEL
    min_parallel_bytes: int = MIN_PARALLEL_BYTES
    stream_extract: bool = True
    pace: DownloadPace = field(default_factory=DownloadPace)


@dataclass(frozen=True)
class Fetched:
    """An asset's checked bytes, and what was already extracted from them.

    Attributes:
        download: The file and its size and digest.
        cached: The file is a cache entry (it stays there; never delete it).
        extracted: The archive as extracted into the staging directory, or
            ``None`` when the caller still has to extract ``download.path``.
    """

    download: DownloadResult
    cached: bool = False
    extracted: ExtractResult | None = None


def streams_as_tar(asset_name: str) -> bool:
    """Whether an asset is extracted while it downloads (a ``.tar.gz`` by name)."""
    return asset_name.lower().endswith(_TAR_GZ_SUFFIXES)


def fetch_asset(
    source: AssetHost,
    asset: Asset,
    partial: Path,
    *,
    cache: AssetCache | None,
    staging: Path | None,
    max_bytes: int,
    progress: BytesDone | None = None,
    cancel: Cancel | None = None,
    options: FetchOptions = FetchOptions(),
) -> Fetched:
    """The asset's checked bytes, from the cache or the network, extracted on the way when possible.

    Args:
        source: The GitHub client (or a plain ``httpx.Client``).
        asset: The asset, with its published size and (if any) sha256.
        partial: Its file in ``downloads/`` (kept across runs for resuming).
        cache: The asset cache to look in first, or ``None``.
        staging: An empty staging directory to extract a ``.tar.gz`` into while
            it downloads, or ``None`` to only download.
        max_bytes: Hard ceiling of the download.
        progress: Called with ``(bytes on disk, size)``.
        cancel: Polled between chunks.
        options: Ranges and streaming extraction.

    Raises:
        The errors of :func:`~updater.fetch.download.download_asset`, and
        :class:`UnsafeArchiveError` for a refused member (staging deleted).
    """
    if (hit := _from_cache(cache, asset, progress)) is not None:
        return hit
    stream_into = staging if staging is not None and options.stream_extract and streams_as_tar(asset.name) else None
    if _use_ranges(asset, partial, options):
        # With an extractor following the file, its pass over the bytes is the digest's too.
        digest = DigestPass() if stream_into is not None else None
        ranged = RangedDownload(
            source,
            asset,
            partial,
            parallel=options.parallel,
            progress=progress,
            cancel=cancel,
            digest=digest,
            pace=options.pace,
        )
        fetched = _follow(ranged.growing, ranged.run, stream_into, asset.name, cancel, digest)
        if fetched is not None:
            return fetched
        # The host ignored Range: one stream, from the start.
    growing = GrowingFile(partial)

    def one_stream() -> DownloadResult:
        return download_asset(
            source,
            asset,
            partial,
            max_bytes=max_bytes,
            expected_size=asset.size,
            expected_sha256=asset.sha256,
            progress=progress,
            cancel=cancel,
            pace=options.pace,
            on_disk=growing.advance,
        )

    fetched = _follow(growing, one_stream, stream_into, asset.name, cancel)
    discard_ranged(partial)  # an older ranged attempt is superseded
    if fetched is None:
        raise AssertionError("unreachable: one stream always returns a result or raises")
    return fetched


def _from_cache(cache: AssetCache | None, asset: Asset, progress: BytesDone | None) -> Fetched | None:
    """The cached copy of ``asset`` (found by its published digest and size), or ``None``."""
    if cache is None or asset.sha256 is None:
        return None
    hit = cache.lookup(asset.sha256, size=asset.size)
    if hit is None:
        return None
    if progress is not None:
        progress(asset.size, asset.size)
    return Fetched(DownloadResult(hit, asset.size, asset.sha256.lower(), 0, True), cached=True)


def _use_ranges(asset: Asset, partial: Path, options: FetchOptions) -> bool:
    """Ranges for a large asset with a published digest, unless one stream is already under way."""
    if options.parallel < 2 or asset.sha256 is None or asset.size < options.min_parallel_bytes:
        return False
    stream_started = partial.exists() and not state_path(partial).exists()
    return not stream_started


def _follow(
    growing: GrowingFile,
    download: Callable[[], DownloadResult | None],
    staging: Path | None,
    label: str,
    cancel: Cancel | None,
    digest: DigestPass | None = None,
) -> Fetched | None:
    """Run ``download`` while a worker extracts what it writes into ``staging`` (if given).

    ``digest``: the worker also hashes what it reads, to the file's end, and hands the sha256 there.
    """
    if staging is not None:
        remove_tree_quietly(staging)  # a leftover of a killed run would make the extraction refuse to start
    worker = _Extraction(growing, staging, label, cancel, digest) if staging is not None else None
    try:
        try:
            result = download()
        except BaseException:
            growing.fail()
            if worker is not None:
                worker.abandon()
            raise
        if result is None:
            if worker is not None:
                worker.abandon()
            return None
        growing.finish(result.size)
        try:
            extracted = worker.outcome() if worker is not None else None
        except IntegrityError:
            # Checked bytes of a refused archive: they would only be refused again.
            discard_partial(result.path)
            raise
        return Fetched(result, extracted=extracted)
    finally:
        growing.close()


class _NotGzip(Exception):
    """The bytes do not start like a gzip stream; the caller extracts by content type later."""


class _GzipGate:
    """Passes a reader through after checking its first bytes are gzip's magic."""

    def __init__(self, reader: FollowReader | HashingReader) -> None:
        self._reader = reader
        head = b""
        while len(head) < len(_GZIP_MAGIC) and (more := reader.read(len(_GZIP_MAGIC) - len(head))):
            head += more
        if head != _GZIP_MAGIC:
            raise _NotGzip()
        self._head = head

    def read(self, size: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        started = timer()
        data = self._reader.read(size)
        tally("input", started)  # the inflater waiting for the download (and hashing it, with ranges)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)


class _Extraction:
    """A worker thread extracting a ``.tar.gz`` from a growing file into staging."""

    def __init__(
        self, growing: GrowingFile, staging: Path, label: str, cancel: Cancel | None, digest: DigestPass | None
    ) -> None:
        self.staging = staging
        self.label = label
        self.cancel = cancel
        self.digest = digest
        self.reader = growing.reader()
        self.result: ExtractResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="extract-while-downloading", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        hashing = HashingReader(self.reader) if self.digest is not None else None
        try:
            gate = _GzipGate(hashing if hashing is not None else self.reader)
            stream: IO[bytes] = gate  # type: ignore[assignment]
            self.result = extract_tar_stream(stream, self.staging, label=self.label, cancel=self.cancel)
        except BaseException as exc:  # handed to the waiting thread in outcome()
            self.error = exc
        finally:
            self._hand_over_digest(hashing)
            self.reader.close()

    def _hand_over_digest(self, hashing: HashingReader | None) -> None:
        """Hash the rest of the file (a refused archive still gets its digest checked) and hand it over."""
        if self.digest is None or hashing is None:
            return
        found: str | None = None
        try:
            found = hashing.finish()
        finally:  # the download waiting for the digest is always told
            self.digest.put(found)

    def abandon(self) -> None:
        """Wait for the worker (the download failed, so it stops) and delete staging."""
        self.thread.join()
        remove_tree_quietly(self.staging)

    def outcome(self) -> ExtractResult | None:
        """The extraction, once the download is complete and checked.

        Returns:
            What was extracted, or ``None`` when the caller must extract the
            finished file itself (staging is then deleted).

        Raises:
            UnsafeArchiveError, CancelledError, OSError: The extraction's own failure (staging deleted).
        """
        self.thread.join()
        if self.error is None:
            return self.result
        remove_tree_quietly(self.staging)
        if isinstance(self.error, (StreamRestarted, StreamAborted, _NotGzip)):
            return None
        raise self.error
