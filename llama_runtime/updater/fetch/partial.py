"""A download's partial file, and the proof of where its bytes came from (its ``.meta`` sidecar).

Resuming is decided here, purely: how many bytes of a partial file may be kept
and which ``If-Range`` validator proves the rest continues the same upload.

Invariants:
    * A partial file never mixes bytes of two different uploads. Its sidecar
      ``<partial>.meta`` records the URL, size and validator (strong ETag or
      Last-Modified) of the response it was started from; a resume sends that
      validator as ``If-Range``.
    * Without a published digest, a partial whose origin cannot be proven is
      never resumed, and a complete one is never trusted without a request.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.fsutil import read_cache, write_record
from llama_runtime.updater.config import (  # the limits are settings, read once; re-exported here
    DOWNLOAD_DEADLINE_SECONDS,
    MIN_RATE_BYTES_PER_SECOND,
    MIN_RATE_WINDOW_SECONDS,
    DownloadPace,
)
from llama_runtime.updater.credentials import url_record
from llama_runtime.updater.logs import warn_state

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DOWNLOAD_DEADLINE_SECONDS",
    "MIN_RATE_BYTES_PER_SECOND",
    "MIN_RATE_WINDOW_SECONDS",
    "SIDECAR_SUFFIX",
    "DownloadPace",
    "PaceWatch",
    "PartialOrigin",
    "Resume",
    "discard_partial",
    "discard_unowned",
    "plan_resume",
    "read_origin",
    "record_origin",
    "sidecar_path",
    "strong_etag",
]


# -- partial -----------------------------------------------------------------------------------------------------

# Suffix of the sidecar that records where a partial file's bytes came from.
SIDECAR_SUFFIX: Final[str] = ".meta"


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
    validator = origin.validator if origin is not None and origin.url == url_record(url) else None
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


def unowned_reason(path: Path) -> str | None:
    """Why the file at ``path`` is not a download's own to write through, or ``None`` (also when absent).

    A partial is written in place (appended, ranges written at offsets): only a
    regular file with one link may be, so bytes never land in a file elsewhere
    that a symlink points to or a hard link shares.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_nlink > 1:
        return f"it is a hard link shared with {st.st_nlink - 1} other name(s)"
    return None


def discard_unowned(path: Path) -> bool:
    """Remove the name ``path`` when :func:`unowned_reason` finds one (never what it points to or shares).

    Returns:
        Whether it was removed; the download then starts afresh.

    Raises:
        OSError: The name could not be removed.
    """
    reason = unowned_reason(path)
    if reason is None:
        return False
    warn_state(f"The partial download {path} was discarded without being read or written: {reason}.")
    path.unlink()
    return True


def read_origin(partial: Path) -> PartialOrigin | None:
    """The sidecar of ``partial``, or ``None`` when it is missing or not one of ours."""
    raw = read_cache(sidecar_path(partial), warn=warn_state)
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
    """The response's ``ETag`` when it is strong, else ``None``."""
    # RFC 9110 §13.1.5: If-Range needs a strong validator; a weak ETag proves nothing.
    etag = response.headers.get("etag")
    return etag if etag and not etag.startswith("W/") else None


def record_origin(partial: Path, url: str, size: int | None, response: httpx.Response) -> None:
    """Write ``partial``'s sidecar: its bytes are ``response``'s, an answer for ``url`` of ``size`` bytes."""
    origin = PartialOrigin(
        url=url_record(url),  # never a password or a signed query on disk
        size=size,
        etag=strong_etag(response),
        last_modified=response.headers.get("last-modified"),
    )
    write_record(sidecar_path(partial), dataclasses.asdict(origin))


# -- pace: A download that drips is a failed download: a minimum rate and an overall deadline. -------------------


class PaceWatch:
    """Watches one download over all its attempts; :meth:`too_slow` says when to give up.

    Args:
        pace: The limits.
        clock: The clock (its monotonic time; injectable for tests).
    """

    def __init__(self, pace: DownloadPace, clock: Clock = SYSTEM_CLOCK) -> None:
        self.pace = pace
        self.clock = clock
        self.started = clock.monotonic()
        self._window_start = self.started
        self._window_bytes = 0

    def new_attempt(self) -> None:
        """Start a new rate window (a retry's connection gets a full window)."""
        self._window_start = self.clock.monotonic()
        self._window_bytes = 0

    def too_slow(self, received: int) -> str | None:
        """Record ``received`` new bytes; why the download must stop, or ``None``."""
        now = self.clock.monotonic()
        if now - self.started > self.pace.deadline:
            return f"it took longer than the {self.pace.deadline:.0f} s deadline (LLAMA_RUNTIME_DOWNLOAD_DEADLINE)"
        self._window_bytes += received
        elapsed = now - self._window_start
        if elapsed < self.pace.window:
            return None
        if self._window_bytes < self.pace.min_rate * elapsed:
            return (
                f"the server sent {self._window_bytes} bytes in {elapsed:.0f} s, below the minimum of "
                f"{self.pace.min_rate:.0f} bytes/s (LLAMA_RUNTIME_MIN_RATE)"
            )
        self._window_start, self._window_bytes = now, 0
        return None
