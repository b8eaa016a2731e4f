"""Keeping a mirror directory sound: one writer, files checked as written, nothing left over.

:func:`~updater.offline.mirror.sync_mirror` decides what to publish; this
module holds the rules that make publishing safe when syncs overlap, crash,
or run out of disk:

* :func:`one_writer`: a lock file in the mirror serialises syncs of one
  destination (two writers of one partial file published corrupt bytes).
* :func:`publish_checked`: an asset is hashed as it lies on disk, not as it
  was received, before the rename that publishes it.
* :func:`prune_releases`: with ``--prune``, releases the sync did not name go,
  their JSON first (so nothing visible points at a deleted file).
* :func:`prune_generations`: a file a published JSON names is never given
  other bytes (a re-upload lands under a new ``sha16``); the generation just
  replaced stays for one more sync, so a client that read the old JSON a
  moment ago still downloads what it promised. Older files go.
* :func:`clean_leftovers`: partial downloads and temporary files of killed
  syncs are removed at the end of a sync that completed.

The caller holds :func:`one_writer` for every function here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import BusyError, IntegrityError
from llama_runtime.runtime.fsutil import fsync_directory, remove_tree, sha256_file
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.sources.mirror_layout import MirrorPaths

__all__ = [
    "LOCK_NAME",
    "PARTIAL_DIR",
    "clean_leftovers",
    "one_writer",
    "prune_generations",
    "prune_releases",
    "publish_checked",
]

#: The lock file, beside the tree it guards (``mirror sync`` needs no home).
LOCK_NAME: Final = ".llama-runtime-mirror.lock"
#: Downloads in flight; never named by a release JSON.
PARTIAL_DIR: Final = ".partial"
#: Suffix of runtime.fsutil's atomic-write temporary files.
_TMP_SUFFIX: Final = ".tmp"


@contextlib.contextmanager
def one_writer(dest: Path) -> Iterator[None]:
    """Hold the mirror's lock for the whole sync; never wait for another writer.

    Raises:
        BusyError: Another ``mirror sync`` writes ``dest`` now (exit 3).
    """
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with UpdateLock(dest / LOCK_NAME).hold("mirror sync"):
            yield
    except BusyError as exc:
        if exc.message.startswith("Another llama-runtime process is updating"):
            raise BusyError(
                f"Another `mirror sync` is writing {dest} right now; nothing was changed.",
                hint="Run it again when that one has finished (one writer per mirror).",
            ) from None
        raise


def publish_checked(partial: Path, target: Path, *, size: int, sha256: str | None) -> str:
    """Rename ``partial`` to ``target`` after hashing the file as it lies on disk.

    Args:
        partial: The finished download.
        target: Where the release JSON will name it.
        size: The published size.
        sha256: The digest the bytes must have (upstream's, or the one
            computed while downloading when upstream published none).

    Returns:
        The sha256 of the published file.

    Raises:
        IntegrityError: The file on disk is not the bytes that were checked;
            it is removed and nothing is published.
    """
    actual_size = partial.stat().st_size
    actual = sha256_file(partial)
    if actual_size != size or (sha256 is not None and actual != sha256):
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"{partial.name} on disk ({actual_size} bytes, sha256 {actual[:16]}…) is not the {size} bytes "
            f"that were downloaded and checked; it was not published."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, target)
    fsync_directory(target.parent)
    return actual


def prune_releases(releases_dir: Path, keep: Iterable[str]) -> list[str]:
    """Remove every mirrored release whose tag is not in ``keep``; returns the removed tags.

    The ``tags/`` JSON goes first (the release stops being visible), then its
    asset files. ``releases/latest`` is re-pointed by the caller afterwards.
    """
    wanted = set(keep)
    tags_dir = releases_dir / "tags"
    removed: list[str] = []
    for entry in sorted(tags_dir.iterdir() if tags_dir.is_dir() else []):
        if entry.is_file() and entry.name not in wanted:
            entry.unlink()
            removed.append(entry.name)
    if removed:
        fsync_directory(tags_dir)
    downloads = releases_dir / "download"
    for entry in sorted(downloads.iterdir() if downloads.is_dir() else []):
        if entry.name not in wanted and not (tags_dir / entry.name).exists():
            remove_tree(entry)
    return removed


def clean_leftovers(dest: Path) -> list[Path]:
    """Partial downloads and temporary files that killed syncs left in ``dest``; removes them."""
    found: list[Path] = []
    partial = dest / PARTIAL_DIR
    if partial.is_dir():
        found += sorted(partial.iterdir())
    for dirpath, _dirnames, filenames in os.walk(dest):
        if Path(dirpath) == partial:
            continue
        found += [Path(dirpath) / f for f in filenames if f.startswith(".") and f.endswith(_TMP_SUFFIX)]
    for path in found:
        with contextlib.suppress(OSError):  # best effort: the next sync tries again
            remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return found


def prune_generations(paths: MirrorPaths, tag: str, generations: list[list[dict[str, Any]]]) -> None:
    """Remove asset files of ``tag`` that none of ``generations`` names (best effort)."""
    keep: set[Path] = set()
    for entries in generations:
        for entry in entries:
            path = paths.published_file(entry)
            if path is None:
                # latest/ names files without the "../" of tags/.
                url = entry.get("browser_download_url")
                if isinstance(url, str) and url.startswith("download/"):
                    path = paths.published_file({**entry, "browser_download_url": "../" + url})
            if path is not None:
                keep.add(path.resolve())
    root = paths.tag_downloads(tag)
    if not root.is_dir():
        return
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for filename in filenames:
            file = Path(dirpath) / filename
            if file.resolve() not in keep:
                with contextlib.suppress(OSError):  # left for the next sync
                    file.unlink()
        if Path(dirpath) != root:
            with contextlib.suppress(OSError):  # still holds a kept file
                Path(dirpath).rmdir()
