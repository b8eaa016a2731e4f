"""Stream one release asset to a partial file, hashing while it arrives, resuming on retry.

Invariants:
    * Bytes that fail an integrity check (digest, size, cap) are deleted at
      once: nothing untrusted stays on disk. So is a partial on a full disk.
    * A network failure or a cancel keeps the partial file, so the next attempt
      (or the next run) asks only for the rest with ``Range: bytes=N-``.
    * A partial file never mixes bytes of two different uploads. Its sidecar
      ``<partial>.meta`` records the URL, size and validator (strong ETag or
      Last-Modified) of the response it was started from; a resume sends that
      validator as ``If-Range``, and a server answering 200 starts it over.
      Without a published digest, a partial whose origin cannot be proven is
      never resumed, and a complete one is never trusted without a request:
      the sidecar goes once a download completes, and a complete file that
      still has one (a crash before that) has its last byte fetched again
      under ``If-Range``.
    * Bytes are stored exactly as sent (``Accept-Encoding: identity``, raw
      reads), so a server that compresses on the fly cannot change what is
      hashed or shift resume offsets.
    * ``Authorization`` is only ever sent to the API origin, never to the CDN
      the download URL redirects to.
    * No ``httpx`` exception escapes; failures are ``runtime.errors`` types.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

import httpx
from llama_runtime.runtime.errors import (
    CancelledError,
    DigestMismatchError,
    DiskSpaceError,
    NetworkError,
    RemoteError,
    SizeMismatchError,
)
from llama_runtime.runtime.fsutil import atomic_write_json
from llama_runtime.updater.install.pace import DownloadPace, PaceWatch
from llama_runtime.updater.sources.credentials import redact_url
from llama_runtime.updater.sources.release import Asset

if TYPE_CHECKING:
    from hashlib import _Hash

    from llama_runtime.updater.sources.source import AssetHost

__all__ = [
    "DownloadResult",
    "PartialOrigin",
    "Resume",
    "check_free_space",
    "discard_partial",
    "download_asset",
    "human_size",
    "open_range",
    "plan_resume",
    "read_origin",
    "sidecar_path",
    "strong_etag",
    "throttled",
]

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
# A full disk or quota: keeping the partial would only hold on to the missing space.
_DISK_FULL_ERRNOS: Final[frozenset[int]] = frozenset({errno.ENOSPC, errno.EDQUOT})

# open_range never counts bytes against a cap; its caller bounds each range.
MAX_RANGE_CAP: Final[int] = 1 << 62
# Suffix of the sidecar that records where a partial file's bytes came from.
SIDECAR_SUFFIX: Final[str] = ".meta"

Progress = Callable[[int, int | None], None]
Cancel = Callable[[], bool]
#: Told the bytes of the partial file that are on disk (written, not only buffered)
#: each time that changes; a smaller number than before means the front was rewritten.
OnDisk = Callable[[int], None]

#: Progress reports a second at most (the contract's ten a second for ``--events``; more
#: than a person can read). Chunks arrive every 64 KiB, hundreds of times a second.
PROGRESS_INTERVAL_SECONDS: Final[float] = 0.1


def throttled(
    progress: Progress, *, interval: float = PROGRESS_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic
) -> Progress:
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


@dataclass(frozen=True)
class PartialOrigin:
    """Where the bytes of a partial file came from (its ``.meta`` sidecar).

    Attributes:
        url: The asset's download URL the partial was started from.
        size: The asset size published then, or ``None`` when unknown.
        etag: The strong ``ETag`` of the first response, if it had one.
        last_modified: Its ``Last-Modified``, if it had one.
    """

    url: str
    size: int | None
    etag: str | None = None
    last_modified: str | None = None

    @property
    def validator(self) -> str | None:
        """The ``If-Range`` value that proves a resume continues the same bytes."""
        return self.etag or self.last_modified


@dataclass(frozen=True)
class Resume:
    """How to continue a partial file: keep ``keep`` bytes, send ``if_range`` with the Range."""

    keep: int
    if_range: str | None = None


def plan_resume(
    on_disk: int,
    origin: PartialOrigin | None,
    *,
    url: str,
    size: int | None,
    cap: int,
    has_digest: bool,
) -> Resume:
    """Decide how much of a partial file may be reused (pure).

    Args:
        on_disk: Bytes of the partial file now on disk.
        origin: Its sidecar, or ``None`` when missing or unreadable.
        url: The download URL asked for now.
        size: The asset size published now, if known.
        cap: Most bytes the file may have.
        has_digest: Whether a published sha256 will check the whole file.

    Returns:
        The bytes to keep (0: start over) and the ``If-Range`` validator to send.
    """
    if on_disk <= 0 or on_disk > cap:
        return Resume(0)
    if origin is not None and origin.size != size:
        return Resume(0)  # another upload under the same name
    validator = origin.validator if origin is not None and origin.url == url else None
    if has_digest:
        return Resume(on_disk, validator)  # the final sha256 rejects any mix
    if validator is None:
        return Resume(0)  # nothing proves these bytes belong to this upload
    if size is not None and on_disk >= size:
        # Fetch the last byte again: a 206 to If-Range proves the rest is this upload.
        return Resume(size - 1, validator)
    return Resume(on_disk, validator)


def sidecar_path(partial: Path) -> Path:
    """The ``.meta`` file that records where ``partial``'s bytes came from."""
    return partial.with_name(partial.name + SIDECAR_SUFFIX)


def discard_partial(partial: Path) -> None:
    """Delete a partial file and its sidecar (either may be missing).

    Raises:
        OSError: A file exists but could not be deleted.
    """
    partial.unlink(missing_ok=True)
    sidecar_path(partial).unlink(missing_ok=True)


def read_origin(partial: Path) -> PartialOrigin | None:
    """The sidecar of ``partial``, or ``None`` when it is missing or not one of ours."""
    try:
        raw = json.loads(sidecar_path(partial).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    url, size = raw.get("url"), raw.get("size")
    etag, modified = raw.get("etag"), raw.get("last_modified")
    if not isinstance(url, str) or not (size is None or (isinstance(size, int) and not isinstance(size, bool))):
        return None
    return PartialOrigin(
        url=url,
        size=size,
        etag=etag if isinstance(etag, str) else None,
        last_modified=modified if isinstance(modified, str) else None,
    )


def strong_etag(response: httpx.Response) -> str | None:
    # RFC 9110 §13.1.5: If-Range needs a strong validator; a weak ETag proves nothing.
    etag = response.headers.get("etag")
    return etag if etag and not etag.startswith("W/") else None


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
    job = _Job(source, asset, path, MAX_RANGE_CAP, asset.size, None)
    with job._open(start, if_range, end) as response:
        wanted = f"bytes {start}-{end}/"
        if response.status_code == 206 and not response.headers.get("content-range", "").startswith(wanted):
            discard_partial(path)
            raise job._network_error("the server sent another range than asked for", kept=False)
        yield response


def download_asset(
    source: AssetHost,
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
            the file while it grows (see :mod:`updater.install.follow`).

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
    for attempt in range(1, attempts + 1):
        job.watch.new_attempt()
        try:
            return job.run(progress, cancel)
        except NetworkError:
            if attempt == attempts:
                raise
        except OSError as exc:
            if exc.errno in _DISK_FULL_ERRNOS:
                discard_partial(dest_partial)  # the space is what is missing
            raise
        sleep(_BACKOFF_SECONDS * 2 ** (attempt - 1))
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
        self.http = source.http
        self.auth = source.auth_headers_for
        # With a token, the API asset URL (the only way into a private repository).
        self.first_url = source.asset_request(asset)[0]
        self.asset = asset
        self.path = path
        self.expected_size = expected_size
        self.expected_sha256 = expected_sha256.lower() if expected_sha256 else None
        self.cap = min(max_bytes, expected_size) if expected_size is not None else max_bytes
        # A stalled link ends the download (and frees the update lock); see install/pace.py.
        self.watch: PaceWatch | None = None

    def run(self, progress: Progress | None, cancel: Cancel | None) -> DownloadResult:
        resume = self._usable_prefix()
        offset = resume.keep
        self._tell(offset)
        hasher = self._hash_prefix(offset)
        if offset and offset == self.expected_size:
            return self._finish(hasher, offset, offset)
        self._check_cancel(cancel)
        with self._open(offset, resume.if_range) as response:
            if response.status_code == 200:
                # A fresh body (or the server refused the Range / If-Range): the old
                # bytes go before the sidecar names the new origin, so a crash never
                # pairs the two.
                discard_partial(self.path)
                self._tell(0)
                self._record_origin(response)
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

    def _record_origin(self, response: httpx.Response) -> None:
        origin = PartialOrigin(
            url=self.asset.download_url,
            size=self.expected_size,
            etag=strong_etag(response),
            last_modified=response.headers.get("last-modified"),
        )
        atomic_write_json(sidecar_path(self.path), dataclasses.asdict(origin))

    def _hash_prefix(self, offset: int) -> _Hash:
        hasher = hashlib.sha256()
        if offset:
            with self.path.open("rb") as fh:
                while chunk := fh.read(CHUNK_BYTES):
                    hasher.update(chunk)
        return hasher

    @contextmanager
    def _open(self, offset: int, if_range: str | None, end: int | None = None) -> Iterator[httpx.Response]:
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
                raise self._network_error(f"could not connect ({type(exc).__name__})") from exc
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

    def _check_status(self, response: httpx.Response, offset: int, if_range: str | None) -> None:
        status = response.status_code
        if status == 206 and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            discard_partial(self.path)
            raise self._network_error("the server resumed at the wrong offset", kept=False)
        sent_etag = if_range if if_range is not None and if_range.startswith('"') else None
        etag = strong_etag(response)
        if status == 206 and sent_etag is not None and etag is not None and etag != sent_etag:
            # A server that ignores If-Range would splice two uploads together.
            discard_partial(self.path)
            raise self._network_error("the file changed on the server since the partial was started", kept=False)
        if status in (200, 206):
            return
        if status == 416:
            discard_partial(self.path)
            raise self._network_error("the server refused to resume the partial file", kept=False)
        if status == 429 or status >= 500:
            raise self._network_error(f"the server answered HTTP {status}")
        raise RemoteError(
            f"Could not download {self.asset.name}: the server answered HTTP {status} "
            f"for {redact_url(str(response.url))}."
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
