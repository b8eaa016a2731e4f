"""Recovery after an interrupted update, and a full disk reported as such.

A crashed or killed update can leave behind, in the home:

* ``staging/<pid>-<hex>[.extra]`` directories (killed before activation),
  ``downloads/install-file-<pid>-<hex>`` work directories, and
  ``downloads/<download>.unpacking`` trees extracted while downloading;
* ``.<name>.<random>.tmp`` files of an atomic write that never got renamed;
* a finished download of a release that did get activated (killed right
  after the pointer flip, before the download was deleted);
* a ``runtimes/`` directory without an install marker (a half-finished
  removal: nothing this program writes ever lacks one, since the marker is
  written in staging before the rename that publishes the directory).

Invariant: nothing removed here is reachable from the pointer, and nothing
removed here is needed to resume: partial downloads of releases that are not
installed stay, so the next update asks only for the rest. The caller holds
the update lock; without it, staging belongs to the update that is running.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import DiskSpaceError
from llama_runtime.runtime.fsutil import DISK_FULL_ERRNOS, is_disk_full, remove_tree
from llama_runtime.runtime.integrity import file_problems
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import marker_path
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.updater.checkpoints import checkpoint

if TYPE_CHECKING:
    from llama_runtime.updater.choice.decide import ActiveState

__all__ = [
    "DISK_FULL_ERRNOS",
    "Leftover",
    "active_state",
    "clean_leftovers",
    "damage",
    "disk_full_error",
    "disk_space_errors",
    "download_name",
    "find_leftovers",
    "is_disk_full",
    "is_own_runtime_name",
    "is_own_staging_name",
    "unpacking_path",
]

#: Suffix of :func:`runtime.fsutil.atomic_write_bytes` temp files.
_TMP_SUFFIX: Final = ".tmp"
#: Prefix of the ETag cache's temp files (updater.github.JsonFileEtagCache).
_ETAG_TMP_PREFIX: Final = ".etag-"
_PARTIAL_SUFFIX: Final = ".part"
#: Work directories of ``install-file`` in downloads/ (updater.offline), made under the lock.
_INSTALL_FILE_PREFIX: Final = "install-file-"
#: Suffix of the tree a download is extracted into while it arrives (updater.stage.streaming).
_UNPACKING_SUFFIX: Final = ".unpacking"
#: Hex digits of the sha256 that name a download (updater.install._download).
_DOWNLOAD_KEY_CHARS: Final = 16
#: What the tool names entries of staging/: "<pid>-<8 hex>" (an install), its
#: ".extra" side directory, "gc-<runtime>-<8 hex>" (a runtime being removed) and
#: "smoke-<8 hex>" (the inference gate's scratch, verify/smoke.py).
#: Clean-ups delete only these: anything else there is not ours to delete.
_OWN_STAGING_NAME: Final = re.compile(
    r"^(?:\d+-[0-9a-f]{8}(?:\.extra)?|gc-[A-Za-z0-9._-]+-[0-9a-f]{8}|smoke-[0-9a-f]{8})$"
)
#: Runtime directories are "<label>-<8 hex>" (runtime.layout.Home.new_runtime_name).
_OWN_RUNTIME_NAME: Final = re.compile(r"^[A-Za-z0-9._-]+-[0-9a-f]{8}$")


@dataclass(frozen=True)
class Leftover:
    """A path an interrupted update left behind, and why it is safe to remove."""

    path: Path
    why: str


def download_name(sha256: str | None, asset: str, *, repo: str, size: int) -> str:
    """File name of the download of ``asset`` in ``downloads/``.

    With a published digest the bytes are named by it. Without one, the name
    carries the repository and the size, so a fork's asset of the same name (or
    another upload) never resumes or completes someone else's partial file.
    """
    if sha256:
        return f"{sha256[:_DOWNLOAD_KEY_CHARS]}-{asset}{_PARTIAL_SUFFIX}"
    return f"nodigest-{repo.replace('/', '_')}-{size}-{asset}{_PARTIAL_SUFFIX}"


def unpacking_path(download: Path) -> Path:
    """Where ``download`` is extracted while it arrives (never activated from there)."""
    return download.with_name(download.name + _UNPACKING_SUFFIX)


def find_leftovers(home: Home, snapshot: HomeSnapshot | None = None) -> list[Leftover]:
    """What interrupted updates left in ``home``; reads listings, changes nothing.

    Args:
        home: The llama-runtime home.
        snapshot: The home as the caller's locked operation read it (default: read here).
    """
    snapshot = snapshot or HomeSnapshot.read(home)
    found: list[Leftover] = []
    found += [
        Leftover(p, "staging of an interrupted update")
        for p in _entries(home.staging_dir)
        if is_own_staging_name(p.name)
    ]
    # Every directory an atomic write can leave a temp file in (a killed .meta write: downloads/).
    for directory in (home.root, home.locks_dir, home.cache_dir, home.downloads_dir, home.jobs_dir, home.server_dir):
        found += [
            Leftover(p, "temporary file of an interrupted write")
            for p in _entries(directory)
            if p.is_file() and _is_temp_name(p.name)
        ]
    found += [
        Leftover(p, "work directory of an interrupted install-file")
        for p in _entries(home.downloads_dir)
        if p.name.startswith(_INSTALL_FILE_PREFIX) and p.is_dir() and not p.is_symlink()
    ]
    found += [
        Leftover(p, "extraction of an interrupted download")
        for p in _entries(home.downloads_dir)
        if p.name.endswith(_UNPACKING_SUFFIX) and p.is_dir() and not p.is_symlink()
    ]
    found += _installed_downloads(home, snapshot)
    found += _markerless_runtimes(snapshot)
    return found


def clean_leftovers(home: Home, snapshot: HomeSnapshot | None = None) -> list[Leftover]:
    """Remove :func:`find_leftovers` (of ``snapshot`` when given); the caller holds the update lock.

    A crash in the middle is harmless: each removal is of something nothing
    refers to, so the next run simply removes the rest.

    Returns:
        What was removed (a leftover that cannot be removed is skipped).
    """
    removed: list[Leftover] = []
    for leftover in find_leftovers(home, snapshot):
        try:
            remove_tree(leftover.path)
        except OSError:
            continue  # best effort: a leftover that resists removal must not block the update
        removed.append(leftover)
        checkpoint("during_gc")
    return removed


def damage(runtime: InstalledRuntime, *, hash_binary: bool = False, snapshot: HomeSnapshot | None = None) -> list[str]:
    """Recorded files of ``runtime`` that are gone or changed size, the binary included.

    Cheap enough for ``status`` and for every update (stat only, plus the
    binary's sha256 when ``hash_binary``): a runtime whose directory was half
    deleted, or whose ``llama-server`` was truncated, must not count as installed.
    With the locked operation's ``snapshot``, each runtime is checked (and each file hashed) once.
    """
    if snapshot is not None:
        return snapshot.problems(runtime, "size", hash_binary=hash_binary)
    return file_problems(runtime.path, runtime.marker, "size", hash_binary=hash_binary)


def active_state(runtime: InstalledRuntime, snapshot: HomeSnapshot | None = None) -> ActiveState:
    """``runtime`` as the update decision sees it: its marker, and whether its files are intact.

    Intact means every recorded size and the binary's sha256 (the file that runs,
    a few MB): a rewritten ``llama-server`` of the same size is not "up to date".
    """
    from llama_runtime.updater.choice.decide import ActiveState

    intact = not damage(runtime, hash_binary=True, snapshot=snapshot)
    return ActiveState(runtime.marker, intact=intact, name=runtime.name)


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


# -- helpers ---------------------------------------------------------------------


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(Path(entry.path) for entry in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


def is_own_staging_name(name: str) -> bool:
    """Whether ``name`` in ``staging/`` is one the tool makes (nothing else is ever deleted there)."""
    return _OWN_STAGING_NAME.match(name) is not None


def is_own_runtime_name(name: str) -> bool:
    """Whether ``name`` in ``runtimes/`` is one the tool makes (``Home.new_runtime_name``)."""
    return _OWN_RUNTIME_NAME.match(name) is not None


def _is_temp_name(name: str) -> bool:
    return (name.startswith(".") and name.endswith(_TMP_SUFFIX)) or name.startswith(_ETAG_TMP_PREFIX)


def _installed_downloads(home: Home, snapshot: HomeSnapshot) -> list[Leftover]:
    """Downloads whose release is installed: keeping them only costs disk."""
    wanted: set[str] = set()
    for runtime in snapshot.runtimes:
        m = runtime.marker
        assets: list[tuple[object, object, object]] = [(m.asset, m.sha256, m.size)]
        assets += [(e.get("name"), e.get("sha256"), e.get("size")) for e in m.extra_assets]
        for name, sha, size in assets:
            if isinstance(name, str) and isinstance(sha, str) and isinstance(size, int):
                # Named by digest when one was published, else by repo and size.
                wanted.add(download_name(sha, name, repo=m.repo, size=size))
                wanted.add(download_name(None, name, repo=m.repo, size=size))
    return [
        Leftover(p, "download of a release that is already installed")
        for p in _entries(home.downloads_dir)
        if p.name in wanted and p.is_file()
    ]


def _markerless_runtimes(snapshot: HomeSnapshot) -> list[Leftover]:
    """Runtime directories with no marker that the pointer does not name."""
    if snapshot.pointer_error is not None:
        return []  # cannot tell what is referenced: touch nothing
    named = {snapshot.pointer.active, snapshot.pointer.previous}
    return [
        Leftover(d.path, "runtime directory without an install marker (an interrupted removal)")
        for d in snapshot.damaged.values()
        if _OWN_RUNTIME_NAME.match(d.name) and d.name not in named and not os.path.lexists(marker_path(d.path))
    ]
