"""Disk space: failing early when there is no room, and saying sizes as people read them.

Standard library only, so commands that merely show sizes (``status``, ``gc``)
never import the network stack.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import DiskSpaceError
from llama_runtime.runtime.fsutil import is_disk_full

if TYPE_CHECKING:
    pass


__all__ = ["check_free_space", "disk_full_error", "disk_space_errors", "human_size"]


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
    from llama_runtime.updater.fetch.diskspace import human_size

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
