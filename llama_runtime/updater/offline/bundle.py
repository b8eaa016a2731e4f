"""Bundles from ``llama-runtime export``: telling one apart, reading its marker, checking its files.

A *bundle* is a ``.tar.gz`` whose first member is the install marker, followed
by the runtime's files at their recorded paths (written by :mod:`.export`).
Restoring one checks every file against the marker's ``files`` (size and
sha256) while repacking it as a plain archive for the one safe extraction.

A bundle is data from elsewhere: its marker's names pass the rules remote data
passes, and its tar headers are bounded before they are read.
"""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Final

from llama_runtime.runtime.errors import (
    CorruptStateError,
    ForeignMarkerError,
    IntegrityError,
    UnsafeArchiveError,
    UserInputError,
)
from llama_runtime.runtime.marker import MARKER_NAME, InstallMarker, parse_marker
from llama_runtime.runtime.record import parse_record
from llama_runtime.updater.stage.archive_formats import BoundedHeaderError, open_tar_stream

__all__ = ["member_name", "read_bundle_marker", "repack_bundle"]

# A marker is a few kB even with hundreds of files; anything far larger is not one.
_MAX_MARKER_BYTES: Final[int] = 4 * 1024 * 1024
# The repacked bundle is extracted once, right away: favour speed over size.
_REPACK_COMPRESSLEVEL: Final[int] = 1
_GZIP_MAGIC: Final[bytes] = b"\x1f\x8b"


def member_name(name: str) -> str:
    """A tar member's name as the marker records paths (no leading ``./``)."""
    return PurePosixPath(name.removeprefix("./")).as_posix()


def read_bundle_marker(archive: Path) -> InstallMarker | None:
    """The marker of a bundle, or ``None`` when ``archive`` is not a bundle.

    Only the first member is read: a bundle always starts with its marker, so
    telling a multi-GB release archive apart costs one block.

    Raises:
        IntegrityError: The first member is a marker but not a valid one (the
            file is not a bundle this version can restore).
    """
    try:
        with archive.open("rb") as fh:
            if fh.read(2) != _GZIP_MAGIC:
                return None
        # Bounded headers: a PAX header declaring gigabytes is refused before it is read.
        with open_tar_stream(archive) as tf:
            first = tf.next()
            if first is None or not first.isreg() or member_name(first.name) != MARKER_NAME:
                return None
            if first.size > _MAX_MARKER_BYTES:
                return None
            handle = tf.extractfile(first)
            raw = handle.read() if handle else b""
    except BoundedHeaderError as exc:
        raise UnsafeArchiveError(f"Refusing {archive.name}: it has {exc}.") from None
    except (OSError, tarfile.TarError, EOFError, zlib.error):
        return None  # not a readable tar.gz: the extraction will say why
    try:
        payload = parse_record(raw, what=f"{archive.name}/{MARKER_NAME}", max_bytes=_MAX_MARKER_BYTES)
    except ValueError:
        raise IntegrityError(
            f"{archive.name} is not a valid bundle: its {MARKER_NAME} is not valid JSON; nothing was installed."
        ) from None
    try:
        return _checked_names(parse_marker(payload, archive / MARKER_NAME), archive)
    except ForeignMarkerError:
        raise IntegrityError(
            f"{archive.name} was written by a newer llama-runtime (its marker has a schema or backend this "
            "version does not know); nothing was installed.",
            hint="Upgrade llama-runtime-updater to restore this bundle.",
        ) from None
    except CorruptStateError as exc:
        # The marker's own wording points at `doctor`, which is about this machine, not the file.
        raise IntegrityError(f"{archive.name} is not a valid bundle ({exc.message}); nothing was installed.") from None


def _checked_names(marker: InstallMarker, archive: Path) -> InstallMarker:
    """``marker`` when its repository, tag and asset name pass the rules remote data passes.

    A bundle is data from elsewhere: its tag becomes a directory name and the
    baseline of every later update, so it is held to the release server's rules.

    Raises:
        IntegrityError: A name breaks them (exit 8).
    """
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.release.remote_names import RemoteDataError, check_asset_name, check_tag

    try:
        validate_repo(marker.repo)
        check_tag(marker.tag, what="a bundle")
        check_asset_name(marker.asset, tag=marker.tag)
    except (UserInputError, RemoteDataError) as exc:
        reason = exc.message.replace("The server sent", "its marker names").replace("; nothing was kept.", "")
        raise IntegrityError(f"{archive.name} is not a valid bundle: {reason}; nothing was installed.") from None
    return marker


class _HashingReader:
    """A file object that hashes and counts what passes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data


def repack_bundle(bundle: Path, marker: InstallMarker, target: Path) -> Path:
    """The bundle's runtime files as a plain release archive, each checked against ``marker``.

    Members are copied as they are (links and odd entries included): the one
    safe extraction later refuses anything unsafe.

    Raises:
        IntegrityError: A file is missing, extra, or differs in size or sha256.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    label = bundle.name
    try:
        with (
            open_tar_stream(bundle) as src,
            tarfile.open(target, "w:gz", compresslevel=_REPACK_COMPRESSLEVEL) as dst,
        ):
            for info in src:
                name = member_name(info.name)
                if name == MARKER_NAME:
                    continue
                if not info.isreg():
                    dst.addfile(info)
                    continue
                record = marker.files.get(name)
                if record is None:
                    raise IntegrityError(f"The bundle {label} holds {name}, which its marker does not record.")
                handle = src.extractfile(info)
                if handle is None:
                    raise IntegrityError(f"The bundle {label} has an unreadable entry {name}.")
                reader = _HashingReader(handle)
                dst.addfile(info, reader)
                if reader.size != record.size or reader.digest.hexdigest() != record.sha256:
                    raise IntegrityError(f"{name} in the bundle {label} does not match its marker (size or sha256).")
                seen.add(name)
    except BoundedHeaderError as exc:
        raise UnsafeArchiveError(f"Refusing {label}: it has {exc}.") from None
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise IntegrityError(f"The bundle {label} is damaged ({type(exc).__name__}).") from None
    missing = sorted(set(marker.files) - seen)
    if missing:
        raise IntegrityError(f"The bundle {label} lacks {missing[0]}, which its marker records.")
    return target
