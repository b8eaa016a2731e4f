"""Downloaded release assets kept by their sha256, so the same bytes are never fetched twice.

The Windows CUDA runtime archive (``cudart-llama-bin-win-cuda-*.zip``) is
byte-identical across releases, and a runtime re-installed after ``remove``
is the same asset again: with its published digest already here, an update
takes the file from ``cache/assets/<sha256>`` instead of the network.

Invariants:
    * An entry's name is the full lowercase sha256 of its bytes, and only
      downloads whose *published* digest matched are stored.
    * :meth:`AssetCache.lookup` hashes the entry again before handing it out: a
      damaged entry is deleted and reported missing, so damage costs a download,
      never an install of bad bytes.
    * Entries are written and trimmed under the update lock; a store is one
      rename within the home's filesystem, so a crash leaves an entry whole or absent.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import DiskSpaceError
from llama_runtime.runtime.fsutil import fsync_directory, is_disk_full, sha256_file
from llama_runtime.runtime.layout import Home, InstalledRuntime

if TYPE_CHECKING:
    pass

__all__ = [
    "AssetCache",
    "CacheEntry",
    "check_free_space",
    "digests_in_use",
    "disk_full_error",
    "disk_space_errors",
    "human_size",
]


# -- cache -------------------------------------------------------------------------------------------------------

#: Sub-directory of the home's ``cache/`` holding the assets (the ETag cache lives beside it).
_ASSETS_DIR: Final = "assets"
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CacheEntry:
    """One cached asset: its digest, where it lies, and its size in bytes."""

    sha256: str
    path: Path
    size: int


class AssetCache:
    """The digest-addressed asset cache of one home.

    Args:
        directory: Where entries live, normally ``<home>/cache/assets``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def of(cls, home: Home) -> AssetCache:
        """The cache of ``home``."""
        return cls(home.cache_dir / _ASSETS_DIR)

    def _linked(self) -> bool:
        """Whether the cache directory is a link (someone else's store): never read, written or trimmed.

        ``Home.check_safe`` refuses such a home first; this guard holds for any caller.
        """
        return os.path.islink(self.directory)

    def path_for(self, sha256: str) -> Path:
        """Where the asset with ``sha256`` lies (or would lie).

        Raises:
            ValueError: ``sha256`` is not 64 hex digits.
        """
        digest = sha256.lower()
        if not _SHA256.match(digest):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.directory / digest

    def lookup(self, sha256: str, *, size: int | None = None) -> Path | None:
        """The cached asset with this digest, re-hashed now; ``None`` when absent or damaged.

        Args:
            sha256: The published digest (hex, any case).
            size: The published size, when known; a mismatch is damage, found without hashing.
        """
        if self._linked():
            return None
        try:
            path = self.path_for(sha256)
            actual = os.lstat(path).st_size
        except (ValueError, OSError):
            return None
        if (size is not None and actual != size) or sha256_file(path) != sha256.lower():
            path.unlink(missing_ok=True)  # damaged: the next update downloads it again
            return None
        os.utime(path)  # last use, for people reading the cache
        return path

    def store(self, download: Path, sha256: str) -> Path:
        """Move a digest-checked download into the cache (one rename) and return its new path.

        The caller has compared ``sha256`` with the published digest; the file
        must be on the home's filesystem and already fsynced.
        """
        target = self.path_for(sha256)
        if self._linked():
            raise OSError(f"{self.directory} is a symbolic link; nothing is stored through it")
        self.directory.mkdir(parents=True, exist_ok=True)
        os.replace(download, target)
        fsync_directory(self.directory)
        return target

    def entries(self) -> list[CacheEntry]:
        """Every entry, by digest."""
        found: list[CacheEntry] = []
        if self._linked():
            return found
        try:
            scan = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        for entry in scan:
            if _SHA256.match(entry.name) and entry.is_file(follow_symlinks=False):
                found.append(CacheEntry(entry.name, Path(entry.path), entry.stat(follow_symlinks=False).st_size))
        return found

    def unused(self, in_use: set[str]) -> list[CacheEntry]:
        """Entries whose digest no installed runtime records (what ``gc`` trims)."""
        return [entry for entry in self.entries() if entry.sha256 not in in_use]


def digests_in_use(runtimes: Iterable[InstalledRuntime]) -> set[str]:
    """sha256 digests of every asset the markers of ``runtimes`` record (main and companions)."""
    digests: set[str] = set()
    for runtime in runtimes:
        marker = runtime.marker
        digests.add(marker.sha256.lower())
        for extra in marker.extra_assets:
            sha = extra.get("sha256")
            if isinstance(sha, str):
                digests.add(sha.lower())
    return digests


# -- diskspace: Failing early when there is no room, and sizes as people read them. ------------------------------


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


def disk_full_error(directory: Path, needed: int, what: str) -> DiskSpaceError:
    """The exit-4 error for ``what`` needing ``needed`` bytes in ``directory``."""

    probe = directory
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        free = 0
    return DiskSpaceError(
        f"Not enough disk space to install {what}: need {human_size(needed)}, have {human_size(free)} in {directory}.",
        hint="Free some space (or run `llama-runtime gc`) and run the update again.",
    )


@contextmanager
def disk_space_errors(directory: Path, needed: int, what: str) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised inside the block into :class:`DiskSpaceError`.

    The block itself removes what it wrote; this only names the problem.
    """
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full_error(directory, needed, what) from exc
