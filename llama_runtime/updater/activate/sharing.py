"""Identical files stored once: a staged runtime's files hard-linked to installed runtimes'.

Successive builds differ in their main libraries and ship identical runtime
libraries (a CUDA companion is ~600 MB of the same bytes every build): each
file of a staged runtime whose size and sha256 equal a file an installed
runtime records becomes a hard link to that file, before the staged runtime
is verified, so verification sees exactly the bytes that will run.

Invariants:

* A file is linked only to a source that hashes now to what both markers
  record; a shared file is read-only (write bits cleared on its one inode).
  ``llama-server`` itself is never shared: successive builds' binaries differ
  anyway, and damage to the file that runs stays in one runtime.
* Nothing is ever written through a shared file: a link replaces a file by
  one rename (``os.replace``), and so does a repair. A source that no longer
  matches its record (damage) is replaced by a link to the staged file's
  checked bytes: one damaged shared file touches every runtime that shares it,
  and one install with a good copy heals them all.
* Nothing is linked, renamed or chmodded through a symbolic link: a recorded file reached
  through a linked folder of its runtime (or a linked runtime directory) is never a source,
  so a folder the owner pointed elsewhere is left alone, as ``use`` and ``rollback`` refuse it.
* Where links cannot be made (another filesystem, a filesystem without hard
  links, a link count at its limit, no permission) the staged file stays a
  copy; the update says so once and goes on.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.stage.staged import Staged

__all__ = ["SharingReport", "share_identical"]

log = get_logger("llama_runtime.sharing")

#: Errors that mean "this filesystem (or this pair of paths) cannot share": keep copies.
_NO_LINKS: Final = frozenset(
    {errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}
)
#: The write bits a shared file loses: one inode serves several runtimes. Not on Windows, where
#: a read-only file can be neither deleted (gc, remove) nor replaced by rename (a repair).
_WRITE_BITS: Final = 0 if os.name == "nt" else stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


@dataclass
class SharingReport:
    """What sharing did for one staged runtime.

    Attributes:
        linked: Files now stored once with an installed runtime's, and their bytes.
        repaired: Installed files that no longer matched their record and were replaced.
        copies_because: Why files stayed copies (the first error), or ``None``.
    """

    linked: int = 0
    linked_bytes: int = 0
    repaired: list[str] = field(default_factory=list)
    copies_because: str | None = None

    def warning(self) -> str | None:
        """The sentence for people when files had to stay copies."""
        if self.copies_because is None:
            return None
        return (
            "Identical files could not be shared with the installed runtimes as hard links "
            f"({self.copies_because}); they are stored as copies."
        )


def share_identical(
    staged: Staged, runtimes: Iterable[InstalledRuntime], digest: Callable[[Path], str]
) -> SharingReport:
    """Hard-link each staged file to an identical file of ``runtimes`` (the caller holds the update lock).

    Args:
        staged: The extracted candidate; its records are the archive's checked bytes.
        runtimes: Installed runtimes whose recorded files may be shared.
        digest: A file's sha256 (``HomeSnapshot.sha256``: each file hashed once per operation).
    """
    report = SharingReport()
    sources = _sources(runtimes)
    for rel, record in staged.files.items():
        if report.copies_because is not None:
            break
        if rel == staged.binary_rel:
            continue  # each runtime's own: successive builds' binaries always differ, and it is what runs
        target, shared = staged.directory / rel, False
        # Every source is looked at: a damaged one is repaired even after the file is shared.
        for root, source in sources.get((record.sha256, record.size), ()):
            if _through_link(root, source):
                continue  # behind a folder linked elsewhere: not the runtime's own file
            outcome = _share_one(target, source, record.sha256, digest, linked=shared, scratch=staged.directory.parent)
            if outcome == "linked" and not shared:
                shared = True
                report.linked += 1
                report.linked_bytes += record.size
                checkpoint("during_share")
            elif outcome == "repaired":
                report.repaired.append(str(source))
            elif outcome.startswith("no links"):
                report.copies_because = outcome.removeprefix("no links: ")
                break
    if report.linked or report.repaired:
        log.info("shared identical files", files=report.linked, bytes=report.linked_bytes, repaired=report.repaired)
    return report


def _sources(runtimes: Iterable[InstalledRuntime]) -> dict[tuple[str, int], list[tuple[Path, Path]]]:
    """Recorded files of ``runtimes`` by (sha256, size), each as (its runtime's directory, its path)."""
    found: dict[tuple[str, int], list[tuple[Path, Path]]] = {}
    for runtime in runtimes:
        for rel, record in runtime.marker.files.items():
            if record.size > 0:
                found.setdefault((record.sha256, record.size), []).append((runtime.path, runtime.path / rel))
    return found


def _through_link(root: Path, path: Path) -> bool:
    """Whether ``root`` or a folder between it and ``path`` is a symbolic link (or not a folder at all).

    Looked at just before the file is touched; the file itself is checked by ``_share_one``'s lstat.
    """
    folder = root
    for part in (None, *path.relative_to(root).parts[:-1]):
        folder = folder if part is None else folder / part
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return True
        except OSError:
            return True  # missing: nothing to share with
    return False


def _share_one(
    target: Path, source: Path, sha256: str, digest: Callable[[Path], str], *, linked: bool, scratch: Path
) -> str:
    """Link ``target`` to ``source`` (unless ``linked`` already); a damaged ``source`` gets ``target``'s bytes.

    Returns:
        ``linked``, ``repaired``, ``skipped``, or ``no links: <why>`` when this filesystem cannot share.
    """
    try:
        src, dst = source.lstat(), target.lstat()
        if not stat.S_ISREG(src.st_mode):
            return "skipped"  # missing or not a file: doctor reports it, a reinstall replaces it
        if (src.st_dev, src.st_ino) == (dst.st_dev, dst.st_ino):
            return "linked"
        if src.st_size != dst.st_size or digest(source) != sha256:
            # Damage in an installed runtime: replaced by rename with the checked bytes, never written through.
            _link_over(target, source, scratch)
            return "repaired"
        if linked or (src.st_mode & 0o111) != (dst.st_mode & 0o111):
            return "skipped"  # one inode has one mode: an executable is never shared with a plain file
        _link_over(source, target, scratch)
    except OSError as exc:
        if exc.errno in _NO_LINKS:
            return f"no links: {os.strerror(exc.errno or 0)} at {target.name}"
        log.warning("could not share a file", path=str(target), source=str(source), reason=str(exc))
        return "skipped"
    return "linked"


def _link_over(existing: Path, replaced: Path, scratch: Path) -> None:
    """Replace ``replaced`` by a hard link to ``existing`` in one rename (a crash leaves one or the other).

    The new link is made in ``scratch`` (``staging/``) under a name the clean-up of interrupted
    updates knows by its owner's pid, so a crash between link and rename leaves nothing in a runtime.
    """
    os.chmod(existing, stat.S_IMODE(existing.lstat().st_mode) & ~_WRITE_BITS)
    temporary = scratch / f"{os.getpid()}-{secrets.token_hex(4)}"
    os.link(existing, temporary)
    try:
        os.replace(temporary, replaced)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
