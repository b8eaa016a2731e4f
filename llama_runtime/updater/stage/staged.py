"""The staged tree: a release's archives extracted into ``staging/``, a candidate runtime not yet verified.

The main archive's tree comes first; each companion archive (the CUDA runtime)
is put beside ``llama-server``, never over a file of the main archive. Nothing
here runs a binary: verification (``verify``) judges the tree this builds.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from llama_runtime.runtime.errors import IntegrityError, UnsafeArchiveError, VerificationError
from llama_runtime.runtime.fsutil import FlushAhead, remove_tree_quietly
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.marker import MARKER_NAME, FileRecord, marker_path
from llama_runtime.updater.progress import CancelCheck
from llama_runtime.updater.stage.archive import ExtractResult, extract_archive, find_server_binary
from llama_runtime.updater.stage.archive_rules import check_links_inside

__all__ = ["Staged", "extract_staged", "merge_companion", "new_staging_path"]


@dataclass
class Staged:
    """An extracted candidate runtime: its directory, its server binary and every file's record."""

    directory: Path
    binary_rel: str
    files: dict[str, FileRecord] = field(default_factory=dict)
    #: Each companion archive's files and links (paths in ``directory``), in the archives' order.
    companions: list[tuple[dict[str, FileRecord], dict[str, str]]] = field(default_factory=list)
    #: The large files' flushes, begun as they were extracted (waited for by ``fsync_tree``).
    ahead: FlushAhead | None = None

    @property
    def binary(self) -> Path:
        """The staged ``llama-server``."""
        return self.directory / self.binary_rel


def new_staging_path(home: Home) -> Path:
    """A fresh staging path (not created yet) that recovery knows by its owner's pid."""
    return home.staging_dir / f"{os.getpid()}-{secrets.token_hex(4)}"


def extract_staged(
    archives: list[Path], staging: Path, asset_name: str, cancel: CancelCheck, main: ExtractResult | None
) -> Staged:
    """Extract ``archives`` (main first) into ``staging``; ``main`` is what a streamed extraction already wrote.

    Raises:
        VerificationError: The main archive holds no ``llama-server``.
        UnsafeArchiveError: A member is refused, or an archive ships a file at the marker's path.
        IntegrityError: A companion would overwrite a file of the main archive.
    """
    result = main if main is not None else extract_archive(archives[0], staging, cancel=cancel)
    records = {p: FileRecord(size=s, sha256=h) for p, (s, h) in result.files.items()}
    binary = find_server_binary(staging)
    if binary is None:
        raise VerificationError(f"{asset_name} contains no llama-server binary.")
    companions = [
        merge_companion(extra, staging, binary.parent, asset_name, cancel, result.ahead) for extra in archives[1:]
    ]
    for placed, _links in companions:
        records.update(placed)
    if os.path.lexists(marker_path(staging)):
        # The marker is written last, at this very path: an archive's file of that
        # name would be replaced by it and the fresh runtime would look damaged.
        raise UnsafeArchiveError(
            f"Refusing {asset_name}: it ships a file named {MARKER_NAME}, the name of the install marker."
        )
    rel = binary.relative_to(staging).as_posix()
    return Staged(directory=staging, binary_rel=rel, files=records, companions=companions, ahead=result.ahead)


def merge_companion(
    extra: Path, staging: Path, bin_dir: Path, asset_name: str, cancel: CancelCheck, ahead: FlushAhead | None = None
) -> tuple[dict[str, FileRecord], dict[str, str]]:
    """Put a companion archive's files (the CUDA runtime) beside ``llama-server``.

    The binaries find their libraries next to themselves ($ORIGIN,
    Windows' DLL search order), so that is where they must land; a single
    top-level directory of the companion is dropped. Links move as links.

    Returns:
        The records of the files moved and the links' targets, by their path in ``staging``.
    """
    side = staging.with_name(staging.name + ".extra")
    records: dict[str, FileRecord] = {}
    moved_links: dict[str, str] = {}
    try:
        found = extract_archive(extra, side, cancel=cancel, ahead=ahead)
        entries = [*found.files, *found.symlinks]
        tops = {e.split("/", 1)[0] for e in entries}
        strip = len(tops) == 1 and all("/" in e for e in entries)
        for rel in entries:
            placed = rel.split("/", 1)[1] if strip else rel
            target = bin_dir / placed
            if target.exists() or target.is_symlink():
                raise IntegrityError(f"{extra.name} would overwrite {placed} of {asset_name}.")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(side / rel, target)
            if rel in found.files:
                size, sha = found.files[rel]
                records[target.relative_to(staging).as_posix()] = FileRecord(size=size, sha256=sha)
            else:
                moved_links[target.relative_to(staging).as_posix()] = found.symlinks[rel]
        # A link checked inside the companion's tree may point elsewhere from its new place.
        check_links_inside(staging, moved_links, extra.name)
    finally:
        remove_tree_quietly(side)
    return records, moved_links
