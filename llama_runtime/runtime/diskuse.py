"""Disk use of a home whose runtimes share files (hard links, ``updater.activate.sharing``).

Each runtime's bytes split in two: ``own_bytes``, files no other runtime of the
home holds, and ``shared_bytes``, files stored once for several runtimes (so
removing this runtime frees only ``own_bytes``). ``home_bytes`` counts every
regular file of the home once, however many names it has: what the home costs.
Sizes are file sizes (``st_size``), as ``tree_size`` counts them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llama_runtime.runtime.fsutil import walk_tree

__all__ = ["DiskUse", "HomeDiskUse", "home_disk_use"]

#: A file, whatever its name: (device, inode).
_FileId = tuple[int, int]


@dataclass(frozen=True)
class DiskUse:
    """One runtime's bytes: only its own, and those stored once with other runtimes."""

    own_bytes: int
    shared_bytes: int

    def to_json(self) -> dict[str, int]:
        """The ``own_bytes``/``shared_bytes`` keys of ``list`` and ``status``."""
        return {"own_bytes": self.own_bytes, "shared_bytes": self.shared_bytes}


@dataclass(frozen=True)
class HomeDiskUse:
    """Every runtime's :class:`DiskUse` by directory name, and the home's total bytes."""

    runtimes: dict[str, DiskUse]
    home_bytes: int


def _files(root: Path) -> dict[_FileId, int]:
    """The regular files under ``root`` (links not followed), each once, with their sizes."""
    found: dict[_FileId, int] = {}
    for dirpath, _dirs, names in walk_tree(root):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    found[(st.st_dev, st.st_ino)] = st.st_size
    return found


def home_disk_use(home_root: Path, runtime_dirs: Iterable[Path]) -> HomeDiskUse:
    """What each runtime in ``runtime_dirs`` costs alone and shares, and what ``home_root`` costs in all."""
    per_runtime = {path.name: _files(path) for path in runtime_dirs}
    holders: dict[_FileId, int] = {}
    for files in per_runtime.values():
        for file_id in files:
            holders[file_id] = holders.get(file_id, 0) + 1
    use = {
        name: DiskUse(
            own_bytes=sum(size for fid, size in files.items() if holders[fid] == 1),
            shared_bytes=sum(size for fid, size in files.items() if holders[fid] > 1),
        )
        for name, files in per_runtime.items()
    }
    return HomeDiskUse(use, sum(_files(home_root).values()))
