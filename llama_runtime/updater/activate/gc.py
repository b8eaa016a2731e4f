"""Housekeeping: remove old runtimes, stale staging, forgotten partial downloads and unused cached assets.

Never removed: the active runtime, the previous one (the rollback target),
one a running process uses (the managed server, ``LLAMA_SERVER_PATH``, and
any process whose executable, command line, working directory, open files or
mapped libraries lie inside it, as psutil shows them on every OS), and the
newest other runtimes up to ``keep`` in all (:func:`others_to_keep`: ``--keep N``
means the same for ``gc`` and ``update``; distinct builds: a second copy of one
build is always removed unless it is protected itself). Where processes
cannot be seen at all, gc cannot see a server an app started itself, so it
refuses a ``keep`` that leaves only the protected runtimes there. Everything
happens under the update lock, taken without waiting: while an update runs, its staging and downloads are live, so gc
reports busy instead. Without a valid pointer gc cannot tell the active
runtime apart and refuses to remove any runtime.

A directory of ``runtimes/`` whose marker is missing, unreadable or foreign is
damaged (``runtime.layout``): gc removes it like an old runtime, unless the
pointer names it, a running process uses it, or its name is not one the tool
makes (then it is not ours to delete).

The asset cache (``cache/assets``, keyed by sha256) is trimmed with the
runtimes: an entry stays while a runtime that remains installed records its
digest (repair and a reinstall can use it), and goes with the last such
runtime. ``cache_only`` trims just the cache.

After each successful install, :func:`retain_after_update` applies the same rules
with a total count (``--keep``/``LLAMA_RUNTIME_KEEP``, default 3: the active, the
previous and the newest other build) and trims the cache to what the kept
runtimes record plus the two newest entries (docs/disk.md). Runtimes
may share files (hard links, ``activate.sharing``): removing one deletes only its
names, and a shared file lives while another runtime names it.

Invariant: a runtime disappears from ``runtimes/`` in one rename (into
``staging/``) before its files are deleted, so no reader ever sees a
half-deleted runtime with its marker still present; a crash mid-delete leaves
only a staging directory, which the next gc removes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.fsutil import ATOMIC_TMP_SUFFIX, remove_tree
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import marker_path
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.runtime.trial import finish_abandoned_trial
from llama_runtime.runtime.trust import forget_trust, make_writable
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.logs import get_logger

if TYPE_CHECKING:
    pass

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from typing import Literal

from llama_runtime.runtime.fsutil import tree_size
from llama_runtime.runtime.layout import Pointer
from llama_runtime.runtime.lock import NO_WAIT, UpdateLock
from llama_runtime.runtime.marker import install_order
from llama_runtime.runtime.snapshot import DamagedRuntime
from llama_runtime.updater.fetch.cache import AssetCache, CacheEntry, digests_in_use
from llama_runtime.updater.fetch.download import UNPACKING_SUFFIX, download_name
from llama_runtime.updater.verify.installed import build_key

__all__ = [
    "CACHE_NEWEST_ARCHIVES",
    "PARTIAL_MAX_AGE_SECONDS",
    "GcItem",
    "GcReport",
    "Leftover",
    "clean_leftovers",
    "collect_garbage",
    "find_leftovers",
    "is_own_runtime_name",
    "is_own_staging_name",
    "remove_runtime",
    "retain_after_update",
    "runtime_names_in_paths",
    "runtimes_to_remove",
    "runtimes_used_by_processes",
    "stale_staging",
]

#: Cached archives an update keeps besides those its kept runtimes record: the two newest
#: (usually the kept runtimes' own; else what the last updates fetched, so a retry costs no download).
CACHE_NEWEST_ARCHIVES: Final[int] = 2
#: Paths under a directory that running processes use; ``None`` where they cannot be seen.
ProcessScan = Callable[[Path], "set[str] | None"]
#: A partial download untouched this long (seconds) belongs to an abandoned
#: update; a day leaves a resumable download alone over a working day.
PARTIAL_MAX_AGE_SECONDS: Final[float] = 24 * 3600
# Staging directories are named "<pid>-<hex>" by the installer (and "<pid>-<hex>.extra").
_STAGING_OWNER: Final = re.compile(r"^(?P<pid>\d+)-")

#: What an update leaves in downloads/: partials, their sidecars, ranged reassembly and its
#: record, a tree extracted while downloading, temp files.
_OWN_DOWNLOAD_SUFFIXES: Final = (".part", ".part.meta", ".part.ranged", ".part.ranges", ".part.unpacking", ".tmp")

log = get_logger("llama_runtime.gc")

Kind = Literal["runtime", "staging", "download", "cache"]


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

    A copy of a build that stays anyway (protected, or a newer copy) is removed
    whatever ``keep`` says: the newest ``keep`` are distinct builds.

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
    newest_first = sorted(runtimes, key=lambda r: (install_order(r.marker), r.name), reverse=True)
    kept = {r.name: protected[r.name] for r in newest_first if r.name in protected}
    # A copy of a build that is kept anyway (protected, or a newer copy) is never
    # one of the newest ``keep``: the home holds one runtime per build.
    seen = {build_key(r.marker) for r in newest_first if r.name in protected}
    others: list[InstalledRuntime] = []
    duplicates: list[InstalledRuntime] = []
    for runtime in newest_first:
        if runtime.name in protected:
            continue
        key = build_key(runtime.marker)
        (duplicates if key in seen else others).append(runtime)
        seen.add(key)
    for runtime in others[: max(keep, 0)]:
        kept[runtime.name] = f"among the newest {keep} besides the active and previous"
    doomed = others[max(keep, 0) :] + duplicates
    return sorted(doomed, key=lambda r: (install_order(r.marker), r.name)), kept


def stale_staging(names: Iterable[str], alive: Callable[[int], bool]) -> list[str]:
    """Staging entries the tool made whose owning process is gone (or that name no owner)."""
    stale = []
    for name in names:
        if not is_own_staging_name(name):
            continue  # not a name the tool makes: not ours to delete
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


def runtime_names_in_paths(paths: Iterable[str], runtimes_dir: Path) -> set[str]:
    """Names of the runtime directories that ``paths`` (absolute, resolved) point into.

    ``runtimes_dir`` must be resolved too. A trailing `` (deleted)`` (how
    ``/proc`` shows a replaced file) still names the directory it was in.
    """
    names: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if not path.is_absolute() or not path.is_relative_to(runtimes_dir):
            continue
        parts = path.relative_to(runtimes_dir).parts
        if parts:
            names.add(parts[0].removesuffix(" (deleted)"))
    return names


# -- the run (IO) ------------------------------------------------------------------------


def runtimes_used_by_processes(runtimes_dir: Path, scan: ProcessScan | None = None) -> set[str] | None:
    """Runtime names any running process uses; ``None`` where processes cannot be seen.

    Args:
        runtimes_dir: ``<home>/runtimes``.
        scan: Paths under a directory that processes use (default
            :func:`~runtime.procinfo.paths_in_use`, psutil on every OS).
    """
    if scan is None:
        from llama_runtime.runtime.procinfo import paths_in_use

        scan = paths_in_use
    root = runtimes_dir.resolve()
    paths = scan(root)
    return None if paths is None else runtime_names_in_paths(paths, root)


def _named_in_use(home: Home, runtimes: list[InstalledRuntime]) -> set[str]:
    """Runtimes the managed server and ``LLAMA_SERVER_PATH`` name (known without seeing processes)."""
    from llama_runtime.runtime.binary import server_override
    from llama_runtime.runtime.server import ManagedServer

    used = {runtime_containing(ManagedServer(home.server_dir).current_binary(), runtimes)}
    used.add(runtime_containing(server_override(), runtimes))
    return {name for name in used if name is not None}


def _in_use(home: Home, runtimes: list[InstalledRuntime], scan: ProcessScan | None) -> set[str] | None:
    """Runtimes a running process uses; ``None`` when other processes cannot be seen."""
    named = _named_in_use(home, runtimes)
    scanned = runtimes_used_by_processes(home.runtimes_dir, scan)
    return None if scanned is None else named | scanned


def _checked_pointer(snapshot: HomeSnapshot, runtimes: list[InstalledRuntime]) -> Pointer:
    """The pointer, which must name an installed runtime whenever one is installed.

    Raises:
        CorruptStateError: The pointer is damaged, or runtimes are installed but
            it is missing or names none of them: every runtime would look unprotected.
    """
    from llama_runtime.runtime.errors import CorruptStateError

    if snapshot.pointer_error is not None:
        raise snapshot.pointer_error
    home, pointer = snapshot.home, snapshot.pointer
    if runtimes and pointer.active not in {r.name for r in runtimes}:
        what = "is missing" if not home.pointer_path.exists() else "names no installed runtime"
        raise CorruptStateError(
            f"The active-runtime pointer {home.pointer_path} {what}, so gc cannot tell which runtime is "
            "active and removed nothing.",
            hint="Run `llama-runtime doctor --repair` (or `llama-runtime update`) to point it at a verified "
            "runtime, then run gc again.",
        )
    return pointer


def others_to_keep(keep: int, pointer: Pointer, runtimes: Sequence[InstalledRuntime]) -> int:
    """How many unprotected runtimes ``keep`` leaves room for: the one meaning of ``--keep N``.

    ``N`` counts the runtimes kept in all, the active and the previous one among them (those are
    always kept), as ``update --keep``, ``gc --keep`` and ``LLAMA_RUNTIME_KEEP`` all say; ``0``
    keeps every runtime. Runtimes a process uses are kept over the count.
    """
    if keep <= 0:
        return len(runtimes)
    names = {r.name for r in runtimes}
    protected = {n for n in (pointer.active, pointer.previous) if n in names}
    return max(keep - len(protected), 0)


def collect_garbage(
    home: Home,
    *,
    keep: int,
    dry_run: bool = False,
    now: Callable[[], float] = time.time,
    scan_processes: ProcessScan | None = None,
    cache_only: bool = False,
) -> GcReport:
    """Remove what this module's retention rules may remove; with ``dry_run`` only report it.

    Args:
        home: The llama-runtime home.
        keep: Runtimes to keep in all (:func:`others_to_keep`): the active, the previous and the
            newest others up to ``keep``; 0 keeps every runtime.
        dry_run: Only report what would be removed.
        now: Clock (seconds since the epoch) for the age of partial downloads.
        scan_processes: Paths under a directory that running processes use, or
            ``None`` where they cannot be seen (default: psutil's view).
        cache_only: Only trim the asset cache; runtimes, staging and downloads stay.

    Raises:
        UserInputError: ``keep`` is 1 or negative, or keeps only the active and previous runtime where
            running processes cannot be seen.
        CorruptStateError: Runtimes are installed but the pointer names none of them.
        BusyError: An update is running (nothing was removed).
    """
    from llama_runtime.runtime.errors import UserInputError
    from llama_runtime.runtime.procinfo import pid_alive
    from llama_runtime.updater.config import KEEP_RULE

    if keep < 0 or keep == 1:
        # 1 would promise what never happens: the rollback target is always kept.
        raise UserInputError(f"--keep {keep} is not valid: {KEEP_RULE}.")
    report = GcReport(dry_run=dry_run)
    lock = UpdateLock(home.lock_path)
    if not dry_run:
        home.ensure()
    # --dry-run only reads: it also serves a read-only home (see UpdateLock.hold_for_reading).
    hold = lock.hold_for_reading("gc --dry-run") if dry_run else lock.hold("gc", timeout=NO_WAIT)
    with hold:
        if not dry_run:
            finish_abandoned_trial(home)  # the pointer back where a dead switch found it, before deciding
        snapshot = HomeSnapshot.read(home)
        runtimes = list(snapshot.runtimes)
        if not cache_only:
            runtimes = _collect_runtimes(snapshot, keep, scan_processes, report)
            for name in stale_staging(_names(home.staging_dir), pid_alive):
                path = home.staging_dir / name
                _remove(home, GcItem("staging", path, _size(path)), report)
            cutoff = now() - PARTIAL_MAX_AGE_SECONDS
            for entry in sorted(os.scandir(home.downloads_dir), key=lambda e: e.name):
                if _is_own_download(entry.name) and (
                    entry.stat(follow_symlinks=False).st_mtime < cutoff or _orphaned_work(entry.name)
                ):
                    path = Path(entry.path)
                    _remove(home, GcItem("download", path, _size(path)), report)
        for cached in AssetCache.of(home).unused(digests_in_use(runtimes)):
            _remove(home, GcItem("cache", cached.path, cached.size), report)
    return report


def _collect_runtimes(
    snapshot: HomeSnapshot, keep: int, scan_processes: ProcessScan | None, report: GcReport
) -> list[InstalledRuntime]:
    """Remove the runtimes gc may remove, damaged ones included; returns the installed ones that stay."""
    from llama_runtime.runtime.errors import UserInputError

    home, runtimes = snapshot.home, list(snapshot.runtimes)
    pointer = _checked_pointer(snapshot, runtimes)
    in_use = _in_use(home, runtimes, scan_processes)
    others = others_to_keep(keep, pointer, runtimes)
    if in_use is None:
        if others == 0:
            raise UserInputError(
                f"--keep {keep} keeps only the active and previous runtimes, which needs to see running processes "
                "(servers an app started itself), and this system does not let llama-runtime read them; "
                "use a larger --keep on this system."
            )
        in_use = set()
    doomed, report.kept = runtimes_to_remove(runtimes, pointer, in_use, others)
    for damaged in snapshot.damaged.values():
        _collect_damaged(home, damaged, pointer, in_use, report)
    for runtime in doomed:
        _remove(home, GcItem("runtime", runtime.path, tree_size(runtime.path), runtime.marker.tag), report)
    # A runtime that could not be removed still uses its cached assets.
    gone = {item.path for item in report.removed if item.kind == "runtime"}
    return [r for r in runtimes if r.path not in gone]


def _collect_damaged(home: Home, damaged: DamagedRuntime, pointer: Pointer, in_use: set[str], report: GcReport) -> None:
    """Remove a damaged runtime directory unless something names or uses it (then say why it stays)."""
    if damaged.name == pointer.active:
        why = "active"
    elif damaged.name == pointer.previous:
        why = "previous (the rollback target)"
    elif damaged.name in in_use:
        why = "used by a running llama-server"
    elif not is_own_runtime_name(damaged.name):
        why = "not a name llama-runtime makes"
    else:
        _remove(home, GcItem("runtime", damaged.path, tree_size(damaged.path)), report)
        return
    report.kept[damaged.name] = f"damaged ({damaged.reason}) but {why}"


def _is_own_download(name: str) -> bool:
    """Partial downloads, their sidecars, ranges and temp files, install-file work and spool directories: ours."""
    return name.endswith(_OWN_DOWNLOAD_SUFFIXES) or name.startswith(("install-file-", ".spool-"))


def _orphaned_work(name: str) -> bool:
    """Whether ``name`` is an install-file work directory whose process is gone (kept no longer: it holds a copy)."""
    from llama_runtime.runtime.procinfo import pid_alive

    match = _INSTALL_FILE_WORK.match(name)
    return match is not None and not pid_alive(int(match.group(1)))


def _names(directory: Path) -> list[str]:
    try:
        return [e.name for e in os.scandir(directory)]
    except FileNotFoundError:
        return []


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
            make_writable(item.path)  # moving a folder rewrites its "..": its read-only mode would refuse
            os.replace(item.path, target)
            forget_trust(home.root, item.path.name)
        remove_tree(target)
    except OSError as exc:
        report.failed.append(f"{item.path}: {exc.strerror or exc}")
        return
    report.removed.append(item)
    checkpoint("during_gc")


def retain_after_update(home: Home, keep: int, *, scan_processes: ProcessScan | None = None) -> GcReport:
    """Trim the home after a successful update to ``keep`` runtimes, and the cache to what they need.

    Kept: the active and the previous runtime, then the newest other builds up to
    ``keep`` in all, and every runtime a running process uses (where processes
    cannot be seen, those the managed server and ``LLAMA_SERVER_PATH`` name). The
    cache keeps the archives kept runtimes record and the :data:`CACHE_NEWEST_ARCHIVES`
    newest entries. ``keep`` 0 removes nothing. The caller holds the update lock.
    """
    report = GcReport(dry_run=False)
    if keep <= 0:
        return report
    snapshot = HomeSnapshot.read(home)
    runtimes = list(snapshot.runtimes)
    if snapshot.pointer_error is not None or snapshot.pointer.active not in {r.name for r in runtimes}:
        return report  # cannot tell the active runtime apart: remove nothing (doctor says why)
    pointer = snapshot.pointer
    newest_others = others_to_keep(keep, pointer, runtimes)
    in_use = _named_in_use(home, runtimes)
    doomed, report.kept = runtimes_to_remove(runtimes, pointer, in_use, newest_others)
    if doomed:
        # Scanning every process costs ~30-60 ms; it can only spare runtimes, so it is
        # skipped when nothing would be removed: then every unprotected runtime is a
        # distinct build among the newest, and protecting more of them dooms none.
        in_use |= runtimes_used_by_processes(home.runtimes_dir, scan_processes) or set()
        doomed, report.kept = runtimes_to_remove(runtimes, pointer, in_use, newest_others)
    for runtime in doomed:
        _remove(home, GcItem("runtime", runtime.path, tree_size(runtime.path), runtime.marker.tag), report)
    gone = {item.path for item in report.removed}
    needed = digests_in_use(r for r in runtimes if r.path not in gone)
    newest = sorted(AssetCache.of(home).entries(), key=_mtime, reverse=True)[:CACHE_NEWEST_ARCHIVES]
    for cached in AssetCache.of(home).unused(needed | {e.sha256 for e in newest}):
        _remove(home, GcItem("cache", cached.path, cached.size), report)
    for item in report.removed:
        log.info("retention removed", kind=item.kind, path=str(item.path), tag=item.tag, bytes=item.size_bytes)
    return report


def _mtime(entry: CacheEntry) -> float:
    try:
        return entry.path.stat().st_mtime
    except OSError:
        return 0.0


def remove_runtime(home: Home, name: str, *, scan_processes: ProcessScan | None = None) -> GcItem:
    """Delete the installed runtime ``name`` (``llama-runtime remove``), under the update lock.

    Raises:
        UserInputError: It is the active or the previous runtime.
        BusyError: An update is running, or a running process uses the runtime.
        CorruptStateError: ``name`` is not an installed runtime, or the pointer is unreadable.
    """
    from llama_runtime.runtime.errors import BusyError, FileSystemError, UserInputError

    home.ensure()
    with UpdateLock(home.lock_path).hold("remove", timeout=NO_WAIT):
        finish_abandoned_trial(home)  # the pointer back where a dead switch found it, before deciding
        snapshot = HomeSnapshot.read(home)
        target = snapshot.load(name)
        runtimes = list(snapshot.runtimes)
        pointer = _checked_pointer(snapshot, runtimes)
        tag = f"{target.marker.tag} ({target.marker.backend})"
        # Another copy of the same build (the damaged one `doctor --repair` reinstalled beside) is what was meant.
        spare = next(
            (
                r.name
                for r in runtimes
                if r.name not in {pointer.active, pointer.previous} and build_key(r.marker) == build_key(target.marker)
            ),
            None,
        )
        also = f"; its other copy {spare} is not in use: `llama-runtime remove {spare}` deletes that" if spare else ""
        if name == pointer.active:
            raise UserInputError(
                f"{tag} is the active runtime and cannot be removed{also}.",
                hint="Activate another one first (`llama-runtime use TAG`), then remove this one.",
            )
        if name == pointer.previous:
            raise UserInputError(
                f"{tag} is the previous runtime (the rollback target) and cannot be removed{also}.",
                hint="Once another runtime becomes the previous one (the next update or `use`), it can be removed.",
            )
        if name in (_in_use(home, runtimes, scan_processes) or set()):
            raise BusyError(f"{tag} is used by a running process ({target.path}); stop it first.")
        report = GcReport(dry_run=False)
        _remove(home, GcItem("runtime", target.path, tree_size(target.path), target.marker.tag), report)
    if report.failed:
        raise FileSystemError(f"Could not remove {report.failed[0]}.")
    return report.removed[0]


#: Prefix of the ETag cache's temp files (updater.sources.github.JsonFileEtagCache).
_ETAG_TMP_PREFIX: Final = ".etag-"


#: Work directories of ``install-file`` in downloads/ (updater.offline), made under the lock.
_INSTALL_FILE_PREFIX: Final = "install-file-"
#: Their full name, ``install-file-<pid>-<8 hex>``: the pid tells whether the owner still runs.
_INSTALL_FILE_WORK: Final = re.compile(r"^install-file-(\d+)-[0-9a-f]{8}$")


#: What the tool names entries of staging/: "<pid>-<8 hex>" (an install), its
#: ".extra" side directory, "gc-<runtime>-<8 hex>" (a runtime being removed) and
#: "smoke-<8 hex>" (the inference gate's scratch, verify/gate.py).
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
        if p.name.endswith(UNPACKING_SUFFIX) and p.is_dir() and not p.is_symlink()
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
    return (name.startswith(".") and name.endswith(ATOMIC_TMP_SUFFIX)) or name.startswith(_ETAG_TMP_PREFIX)


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
