"""Housekeeping: remove old runtimes, stale staging and forgotten partial downloads.

Never removed: the active runtime, the previous one (the rollback target),
one whose binary a running managed server (or ``LLAMA_SERVER_PATH``) uses,
and the newest ``keep`` of the other runtimes. Everything happens under the
update lock, taken without waiting: while an update runs, its staging and
downloads are live, so gc reports busy instead.

Invariant: a runtime disappears from ``runtimes/`` in one rename (into
``staging/``) before its files are deleted, so no reader ever sees a
half-deleted runtime with its marker still present; a crash mid-delete leaves
only a staging directory, which the next gc removes.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from runtime.fsutil import remove_tree, tree_size
from runtime.layout import Home, InstalledRuntime, Pointer
from runtime.lock import NO_WAIT, UpdateLock
from updater.checkpoints import checkpoint

__all__ = [
    "DEFAULT_KEEP",
    "PARTIAL_MAX_AGE_SECONDS",
    "GcItem",
    "GcReport",
    "collect_garbage",
    "runtimes_to_remove",
    "stale_staging",
]

#: Inactive runtimes kept besides the active and previous one: enough to go
#: back two releases by hand without keeping every nightly build on disk.
DEFAULT_KEEP: Final[int] = 2
#: A partial download untouched this long (seconds) belongs to an abandoned
#: update; a day leaves a resumable download alone over a working day.
PARTIAL_MAX_AGE_SECONDS: Final[float] = 24 * 3600
# Staging directories are named "<pid>-<hex>" by the installer (and "<pid>-<hex>.extra").
_STAGING_OWNER: Final = re.compile(r"^(?P<pid>\d+)-")

Kind = Literal["runtime", "staging", "download"]


@dataclass(frozen=True)
class GcItem:
    """One thing gc removed (or would remove with ``--dry-run``)."""

    kind: Kind
    path: Path
    size_bytes: int
    tag: str | None = None

    def to_json(self) -> dict[str, object]:
        """JSON for the ``removed`` list."""
        return {"kind": self.kind, "path": str(self.path), "size_bytes": self.size_bytes, "tag": self.tag}


@dataclass
class GcReport:
    """What one gc run did."""

    dry_run: bool
    removed: list[GcItem] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        """Bytes freed (or that would be freed)."""
        return sum(item.size_bytes for item in self.removed)

    def to_json(self) -> dict[str, object]:
        """The ``gc`` object of the CLI."""
        return {
            "dry_run": self.dry_run,
            "freed_bytes": self.freed_bytes,
            "removed": [item.to_json() for item in self.removed],
            "kept": self.kept,
            "failed": self.failed,
        }


# -- decisions (pure) --------------------------------------------------------------------


def runtimes_to_remove(
    runtimes: Iterable[InstalledRuntime], pointer: Pointer, in_use: Iterable[str], keep: int
) -> tuple[list[InstalledRuntime], dict[str, str]]:
    """Which runtimes to remove (oldest first), and why each other one stays.

    Args:
        runtimes: Installed runtimes.
        pointer: The active/previous pointer.
        in_use: Names of runtimes a running process uses.
        keep: How many of the newest unprotected runtimes to keep.
    """
    protected: dict[str, str] = {}
    for name in in_use:
        protected[name] = "used by a running llama-server"
    if pointer.previous:
        protected[pointer.previous] = "previous (the rollback target)"
    if pointer.active:
        protected[pointer.active] = "active"
    newest_first = sorted(runtimes, key=lambda r: (r.marker.installed_at, r.name), reverse=True)
    kept = {r.name: protected[r.name] for r in newest_first if r.name in protected}
    others = [r for r in newest_first if r.name not in protected]
    for runtime in others[: max(keep, 0)]:
        kept[runtime.name] = f"among the newest {keep}"
    return list(reversed(others[max(keep, 0) :])), kept


def stale_staging(names: Iterable[str], alive: Callable[[int], bool]) -> list[str]:
    """Staging entries whose owning process is gone (or that name no owner)."""
    stale = []
    for name in names:
        match = _STAGING_OWNER.match(name)
        if match is None or not alive(int(match["pid"])):
            stale.append(name)
    return sorted(stale)


def runtime_containing(binary: Path | None, runtimes: Iterable[InstalledRuntime]) -> str | None:
    """The runtime whose directory holds ``binary``, if any."""
    if binary is None:
        return None
    resolved = binary.resolve()
    for runtime in runtimes:
        if resolved.is_relative_to(runtime.path.resolve()):
            return runtime.name
    return None


# -- the run (IO) ------------------------------------------------------------------------


def _in_use(home: Home, runtimes: list[InstalledRuntime]) -> set[str]:
    from runtime.binary import server_override
    from runtime.process import ManagedServer

    used = {runtime_containing(ManagedServer(home.server_dir).running_binary(), runtimes)}
    used.add(runtime_containing(server_override(), runtimes))
    return {name for name in used if name is not None}


def collect_garbage(
    home: Home,
    *,
    keep: int = DEFAULT_KEEP,
    dry_run: bool = False,
    now: Callable[[], float] = time.time,
) -> GcReport:
    """Remove what :mod:`updater.gc` may remove; with ``dry_run`` only report it.

    Raises:
        UserInputError: ``keep`` is negative.
        BusyError: An update is running (nothing was removed).
    """
    from runtime.errors import UserInputError
    from runtime.process import pid_alive

    if keep < 0:
        raise UserInputError(f"--keep must be 0 or more, not {keep}.")
    report = GcReport(dry_run=dry_run)
    home.ensure()
    with UpdateLock(home.lock_path).hold("gc", timeout=NO_WAIT):
        runtimes = home.installed()
        doomed, report.kept = runtimes_to_remove(runtimes, home.read_pointer(), _in_use(home, runtimes), keep)
        for runtime in doomed:
            _remove(home, GcItem("runtime", runtime.path, tree_size(runtime.path), runtime.marker.tag), report)
        for name in stale_staging((e.name for e in os.scandir(home.staging_dir)), pid_alive):
            path = home.staging_dir / name
            _remove(home, GcItem("staging", path, _size(path)), report)
        cutoff = now() - PARTIAL_MAX_AGE_SECONDS
        for entry in sorted(os.scandir(home.downloads_dir), key=lambda e: e.name):
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                path = Path(entry.path)
                _remove(home, GcItem("download", path, _size(path)), report)
    return report


def _size(path: Path) -> int:
    return tree_size(path) if path.is_dir() and not path.is_symlink() else path.lstat().st_size


def _remove(home: Home, item: GcItem, report: GcReport) -> None:
    if report.dry_run:
        report.removed.append(item)
        return
    target = item.path
    try:
        if item.kind == "runtime":
            # One rename takes it out of runtimes/ before any file goes.
            target = home.staging_dir / f"gc-{item.path.name}-{secrets.token_hex(4)}"
            os.replace(item.path, target)
        remove_tree(target)
    except OSError as exc:
        report.failed.append(f"{item.path}: {exc.strerror or exc}")
        return
    report.removed.append(item)
    checkpoint("during_gc")
