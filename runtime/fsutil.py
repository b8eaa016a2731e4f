"""Crash-consistent file updates.

A file replaced through :func:`atomic_write_bytes` is, after any crash, either
the old content or the new content, never a mix and never empty: the data is
written to a temporary file in the same directory, fsynced, renamed over the
target with :func:`os.replace` (atomic on POSIX and Windows), and the directory
is fsynced so the rename itself is durable (POSIX only; Windows has no
directory handles to fsync). An fsync error fails the operation and is never
retried (PostgreSQL "fsyncgate": a retried fsync can report success for lost
data).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

# Windows refuses to delete or rename a file another process has open
# (antivirus, indexer, a running llama-server.exe); these retries outlast the
# usual short-lived handles without hanging a user for long.
_REMOVE_ATTEMPTS: Final = 5
_REMOVE_BACKOFF_SECONDS: Final = 0.2
# Large enough to amortise syscalls, small enough to keep memory flat for GB files.
_HASH_CHUNK_BYTES: Final = 1024 * 1024


def sha256_file(path: Path) -> str:
    """sha256 hex of a file, read in 1 MiB chunks (never whole into memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_directory(directory: Path) -> None:
    """Make a rename or creation inside ``directory`` durable (no-op on Windows)."""
    if sys.platform == "win32":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves old or new, never a mix.

    Raises:
        OSError: Writing, fsync or the rename failed; ``path`` is unchanged.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(path.parent)


def atomic_write_json(path: Path, payload: object) -> None:
    """:func:`atomic_write_bytes` of pretty, key-sorted JSON with a final newline."""
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def remove_tree(path: Path, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Delete a directory tree, retrying files that are briefly in use (Windows).

    A path that does not exist is fine. Symlinks inside are removed, never followed.

    Raises:
        OSError: The tree could still not be removed after the retries.
    """
    for attempt in range(_REMOVE_ATTEMPTS):
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
            else:
                shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except PermissionError:
            if attempt == _REMOVE_ATTEMPTS - 1:
                raise
            sleep(_REMOVE_BACKOFF_SECONDS * (attempt + 1))


def tree_size(path: Path) -> int:
    """Bytes used by the regular files under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if not os.path.islink(os.path.join(root, name)):
                    total += st.st_size
    return total


def fsync_tree(root: Path) -> None:
    """Flush every regular file and directory under ``root`` to stable storage.

    Called on a staged runtime before its marker is written, so that a marker
    that survives a crash never describes files that did not.
    """
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                continue
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(dirpath))
