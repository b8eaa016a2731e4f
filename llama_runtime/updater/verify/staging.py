"""The staged tree: extracting a release's archives into staging/ and describing them in a marker.

A staged tree is a candidate runtime that nothing points at yet. Its main
archive is extracted first; companion archives (the CUDA runtime on Windows)
are merged beside ``llama-server``; the marker that records every file is
built here and written last by the transaction.

Invariant: a staged tree never contains a file at the marker's path before the
marker is written, so a fresh runtime never looks damaged.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from llama_runtime.runtime.errors import IntegrityError, UnsafeArchiveError, VerificationError
from llama_runtime.runtime.fsutil import remove_tree_quietly
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.marker import MARKER_NAME, FileRecord, InstallMarker, marker_path
from llama_runtime.updater.progress import CancelCheck
from llama_runtime.updater.stage.archive import ExtractResult, extract_archive, find_server_binary
from llama_runtime.updater.stage.archive_rules import check_links_inside
from llama_runtime.updater.verify.verify import BinaryIdentity, BinaryReport, BuildCheck

__all__ = ["Staged", "Verified", "extract_staged", "marker_from_meta", "merge_companion", "new_staging_path"]


@dataclass
class Staged:
    """An extracted candidate runtime: its directory, its server binary and every file's record."""

    directory: Path
    binary_rel: str
    files: dict[str, FileRecord] = field(default_factory=dict)

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
    for extra in archives[1:]:
        records.update(merge_companion(extra, staging, binary.parent, asset_name, cancel))
    if os.path.lexists(marker_path(staging)):
        # The marker is written last, at this very path: an archive's file of that
        # name would be replaced by it and the fresh runtime would look damaged.
        raise UnsafeArchiveError(
            f"Refusing {asset_name}: it ships a file named {MARKER_NAME}, the name of the install marker."
        )
    rel = binary.relative_to(staging).as_posix()
    return Staged(directory=staging, binary_rel=rel, files=records)


def merge_companion(
    extra: Path, staging: Path, bin_dir: Path, asset_name: str, cancel: CancelCheck
) -> dict[str, FileRecord]:
    """Put a companion archive's files (the CUDA runtime) beside ``llama-server``.

    The binaries find their libraries next to themselves ($ORIGIN,
    Windows' DLL search order), so that is where they must land; a single
    top-level directory of the companion is dropped. Links move as links.

    Returns:
        The records of the files moved, by their path in ``staging``.
    """
    side = staging.with_name(staging.name + ".extra")
    records: dict[str, FileRecord] = {}
    try:
        found = extract_archive(extra, side, cancel=cancel)
        entries = [*found.files, *found.symlinks]
        tops = {e.split("/", 1)[0] for e in entries}
        strip = len(tops) == 1 and all("/" in e for e in entries)
        moved_links: dict[str, str] = {}
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
    return records


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Verified:
    """What verifying the staged tree found, for its marker."""

    report: BinaryReport
    identity: BinaryIdentity
    build_check: BuildCheck
    speeds: dict[str, dict[str, object]]


def marker_from_meta(
    meta: dict[str, object],
    staged: Staged,
    verified: Verified,
    *,
    installed_at: str,
    sequence: int,
    host: dict[str, object],
) -> InstallMarker:
    """The install marker of ``staged``: ``meta`` says where it came from, ``verified`` what it is."""
    return InstallMarker(
        repo=str(meta["repo"]),
        tag=str(meta["tag"]),
        backend=str(meta["backend"]),
        backend_request=str(meta["backend_request"]),
        asset=str(meta["asset"]),
        size=int(str(meta["size"])),
        sha256=str(meta["sha256"]),
        digest_verified=bool(meta["digest_verified"]),
        installed_at=installed_at,
        sequence=sequence,
        binary=staged.binary_rel,
        version=verified.report.version,
        devices=verified.report.devices,
        files=staged.files,
        source=str(meta.get("source", "download")),
        extra_assets=tuple(meta.get("extra_assets", ())),  # type: ignore[arg-type]
        host=host,
        reason=str(meta.get("reason", "")),
        speeds=verified.speeds,
        provenance=dict(meta.get("provenance") or {}),  # type: ignore[call-overload]
        release_version=_text_or_none(meta.get("release_version")),
        channel=str(meta.get("channel") or ""),
        reported_build=verified.identity.build,
        build_check=verified.build_check,
        attempts=tuple(meta.get("attempts", ())),  # type: ignore[arg-type]
    )
