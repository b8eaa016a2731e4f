"""Read a download while it is being written: the seam between transfer and extraction.

A :class:`GrowingFile` is told, by whoever writes the file (one stream or
several ranges), how many bytes from the start are on disk; any number of
:class:`FollowReader` objects read behind that mark with ``pread`` and wait
when they catch up. Nothing is held in memory beyond one read.

Invariants:
    * A reader never returns a byte past the mark: every byte it returns was
      written to the file before the mark moved over it.
    * When the front of the file is rewritten (the mark moves back below what
      a reader already returned, as when a server restarts the body from 0),
      that reader raises :class:`StreamRestarted` instead of mixing bytes of two
      bodies. A reader that has returned nothing simply starts on the new file.
    * :meth:`GrowingFile.fail` wakes every reader with :class:`StreamAborted`, so a
      stopped download never leaves a reader waiting.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["FollowReader", "GrowingFile", "StreamAborted", "StreamRestarted"]

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
            data = os.pread(self._fd, min(want, mark - self._pos), self._pos)
            if data:
                self._pos += len(data)
                return data
            # Shorter than the mark: truncated under us, so the mark has moved back.
            self._source._await_change(self._generation)

    def close(self) -> None:
        """Close the file descriptor (a later read reopens it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
