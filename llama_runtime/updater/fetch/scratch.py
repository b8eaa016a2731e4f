"""Scratch directories that outlive an interrupted run, so the next run resumes in them or removes them.

A push downloads each asset before uploading it. Its scratch directory is named by what it works
for (``llama-runtime-scratch-<key>`` in the temporary directory), so a push that was interrupted,
even killed, leaves its partial download where the next push to the same place finds it and
resumes to the byte; a finished run removes it; one nobody came back for within
:data:`STALE_AFTER_SECONDS` is removed by whichever run starts next.

Invariants:
    * A directory is used only when it is a real directory of this user, not a link, and only by one
      run at a time (an OS lock beside it, released by the kernel when the holder dies); otherwise
      the run gets a fresh private directory of its own, removed when it ends.
    * Nothing outside the ``llama-runtime-scratch-*`` names is ever removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = ["PREFIX", "STALE_AFTER_SECONDS", "scratch_dir"]

#: Name prefix of every scratch directory (and its ``.lock``).
PREFIX: Final = "llama-runtime-scratch-"
#: Age (seconds since last change) after which an abandoned scratch directory is removed: a week,
#: long enough for a fleet's weekly job to come back and resume, short enough not to fill ``/tmp``.
STALE_AFTER_SECONDS: Final[float] = 7 * 24 * 3600


@contextlib.contextmanager
def scratch_dir(purpose: str, *, root: Path | None = None) -> Iterator[Path]:
    """A directory for ``purpose`` (e.g. a destination URL) that a later run for it finds again.

    It is removed when the ``with`` body finishes without an exception, and kept (for the next run
    to resume in) when it raises, interrupts included.
    """
    import filelock

    base = Path(tempfile.gettempdir()) if root is None else root
    _remove_stale(base)
    path = base / (PREFIX + hashlib.sha256(purpose.encode()).hexdigest()[:16])
    lock = filelock.FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=0)
    except (filelock.Timeout, OSError):
        with _private(base) as fresh:  # another run works there now
            yield fresh
        return
    try:
        if not _usable(path):
            with _private(base) as fresh:
                yield fresh
            return
        yield path
        shutil.rmtree(path, ignore_errors=True)
    finally:
        lock.release()


@contextlib.contextmanager
def _private(base: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=PREFIX + "private-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _usable(path: Path) -> bool:
    """Whether ``path`` is (or is now made) a directory of this user only, not a link."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        info = path.lstat()
    except OSError:
        return False
    own = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISDIR(info.st_mode) and own and not stat.S_IMODE(info.st_mode) & 0o077


def _remove_stale(base: Path) -> None:
    """Remove scratch directories nobody came back to for :data:`STALE_AFTER_SECONDS` (best effort)."""
    cutoff = time.time() - STALE_AFTER_SECONDS
    try:
        entries = list(base.glob(PREFIX + "*"))
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            info = entry.lstat()
            mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
            if mine and stat.S_ISDIR(info.st_mode) and info.st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
