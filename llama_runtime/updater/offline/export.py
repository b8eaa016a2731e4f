"""``llama-runtime export``: the active runtime and its marker as one bundle (marker first).

The bundle carries only what the marker records (``install-file`` elsewhere
refuses anything else), and appears at its path only when complete.

"Verified" means these bytes: the marker is unsigned, so a file
record in it proves nothing about who built the file. When the home still holds
the release archive(s) the runtime was installed from (``cache/assets``), the
bundle carries them too, under :data:`SOURCE_PREFIX`, right after the marker:
``install-file`` then verifies the attestation against those bytes and installs
by extracting them, exactly as the first install did. A bundle without them is
*repacked*: its files can only be checked against its own marker, and it
installs ``unverified`` (docs/provenance.md).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final

from llama_runtime.runtime.errors import (
    CorruptStateError,
    ForeignMarkerError,
    IntegrityError,
    UnsafeArchiveError,
    UserInputError,
)
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE, fsync_directory, parse_record, sha256_file
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import MARKER_NAME, InstallMarker, parse_marker
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.stage.archive_rules import BoundedHeaderError, open_tar_stream

__all__ = [
    "SOURCE_PREFIX",
    "ExportResult",
    "Repacked",
    "export_bundle",
    "member_name",
    "read_bundle_marker",
    "repack_bundle",
    "unrecorded_files",
]

#: Where a bundle carries the release archives its runtime was extracted from. A dot
#: directory no llama.cpp archive has at its top (a runtime's files live under
#: ``llama-<tag>/`` or ``build/bin/``), so it cannot shadow a recorded file.
SOURCE_PREFIX: Final = ".llama-runtime-source/"


# -- export ------------------------------------------------------------------------------------------------------

log = get_logger("llama_runtime.export")

# Write in 1 MiB pieces: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
# gzip level of `export`: the one `tar czf` (gzip -6) uses; see _write_bundle.
_EXPORT_COMPRESSLEVEL: Final[int] = 6


@dataclass(frozen=True)
class ExportResult:
    """A bundle written by :func:`export_bundle`."""

    path: Path
    runtime: InstalledRuntime
    size: int
    carries_archive: bool = False

    def to_json(self) -> dict[str, object]:
        """The ``export`` object of the CLI."""
        return {
            "output": str(self.path),
            "size": self.size,
            "runtime": self.runtime.to_json(),
            "carries_archive": self.carries_archive,
        }


def _bundle_members(runtime_dir: Path) -> Iterator[Path]:
    """Every entry under ``runtime_dir`` except the marker, parents before children."""
    for dirpath, dirnames, filenames in os.walk(runtime_dir):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames):
            yield base / name
        for name in sorted(filenames):
            path = base / name
            if path.parent != runtime_dir or name != MARKER_NAME:
                yield path


def unrecorded_files(runtime: InstalledRuntime) -> list[str]:
    """Regular files in ``runtime`` that its marker does not record (links and folders are layout).

    A bundle may carry only what the marker records: ``install-file`` elsewhere
    refuses anything else, so export says so first.
    """
    recorded = set(runtime.marker.files)
    strays: list[str] = []
    for path in _bundle_members(runtime.path):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(runtime.path).as_posix()
            if rel not in recorded:
                strays.append(rel)
    return strays


def _plain_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def source_archives(home: Home, runtime: InstalledRuntime) -> list[tuple[str, Path]]:
    """The release archives ``runtime`` was extracted from, as the home's cache holds them (main first).

    Each is hashed now: only bytes that are the recorded archive travel. ``[]``
    when any of them is gone (the bundle is then repacked).
    """
    from llama_runtime.updater.fetch.cache import AssetCache

    cache = AssetCache.of(home)
    marker = runtime.marker
    wanted: list[tuple[str, str, object]] = [(marker.asset, marker.sha256, marker.size)]
    for extra in marker.extra_assets:
        wanted.append((str(extra.get("name", "")), str(extra.get("sha256", "")), extra.get("size")))
    found: list[tuple[str, Path]] = []
    for name, sha256, size in wanted:
        try:
            path = cache.path_for(sha256)
            if "/" in name or not name or (isinstance(size, int) and path.stat().st_size != size):
                return []
            if sha256_file(path) != sha256.lower():
                return []
        except (ValueError, OSError):
            return []
        found.append((name, path))
    return found


def _write_bundle(raw: IO[bytes], runtime: InstalledRuntime, sources: list[tuple[str, Path]]) -> None:
    """The marker, the source archives, then every file of ``runtime``, as a gzip'd tar stream.

    gzip level 6 (what ``tar czf`` uses) instead of tarfile's 9: on the real
    72 MB Vulkan build level 9 took 3.6x as long as ``tar czf`` for a bundle
    only 1% smaller (``scripts/bench_export.py``).
    """
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=_EXPORT_COMPRESSLEVEL, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", bufsize=_CHUNK_BYTES) as tf,
    ):
        tf.add(runtime.path / MARKER_NAME, arcname=MARKER_NAME, filter=_plain_owner)
        for name, path in sources:
            tf.add(path, arcname=SOURCE_PREFIX + name, recursive=False, filter=_plain_owner)
        for path in _bundle_members(runtime.path):
            _add_member(tf, path, path.relative_to(runtime.path).as_posix())


def _add_member(tf: tarfile.TarFile, path: Path, rel: str) -> None:
    """One file, link or directory; a file stored once under two names (``activate.sharing``) goes as bytes twice.

    tarfile writes a second name of one inode as a hard-link member, which ``install-file``
    (rightly) refuses: each name becomes a regular file of its own.
    """
    info = _plain_owner(tf.gettarinfo(path, arcname=rel))
    if info.islnk():
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
    if info.isreg():
        with path.open("rb") as data:
            tf.addfile(info, data)
    else:
        tf.addfile(info)


def export_bundle(home: Home, output: Path) -> ExportResult:
    """Write the active runtime and its marker as one ``.tar.gz`` (marker first).

    The bundle appears at ``output`` only when complete (temp file, fsync, rename).

    Raises:
        UserInputError: Nothing is active, or ``output`` cannot be written there.
        CorruptStateError: The active runtime's files differ from its marker.
        BusyError: An update is running.
    """
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.updater.verify.installed import verify_files

    output = output.expanduser().absolute()
    if output.is_dir():
        raise UserInputError(f"--output {output} is a directory; give a file name such as runtime.tar.gz.")
    if not output.parent.is_dir():
        raise UserInputError(f"The directory of --output {output} does not exist.")
    with UpdateLock(home.lock_path).hold_for_reading("export"):
        pointer = home.read_pointer()
        if not pointer.active:
            raise UserInputError("Nothing is active to export; install a runtime first.")
        runtime = home.load(pointer.active)
        problems = verify_files(runtime)
        if problems:
            raise CorruptStateError(
                f"The active runtime {runtime.marker.tag} is damaged ({problems[0]}); refusing to export it.",
                hint="Run `llama-runtime doctor` and reinstall the release.",
            )
        strays = unrecorded_files(runtime)
        if strays:
            shown = ", ".join(strays[:3]) + (f" (and {len(strays) - 3} more)" if len(strays) > 3 else "")
            raise CorruptStateError(
                f"The active runtime {runtime.marker.tag} holds {shown}, which its marker does not record "
                "(written there after the install?); refusing to export it, since no other machine would "
                "accept the bundle.",
                hint=f"Move those files out of {runtime.path} and export again.",
            )
        sources = source_archives(home, runtime)
        if not sources and runtime.marker.provenance.get("status") == "verified":
            log.warning(
                "export without the attested archive",
                asset=runtime.marker.asset,
                consequence="install-file reads this bundle as unverified (repacked)",
            )
        remove_stale_exports(output.parent)
        prefix = f".{output.name}{_EXPORT_TMP_INFIX}{os.getpid()}-"
        fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=_EXPORT_TMP_SUFFIX, dir=output.parent)
        tmp = Path(tmp_name)
        try:
            os.chmod(tmp, SHARED_FILE_MODE)  # a bundle is made to be copied elsewhere
            with os.fdopen(fd, "wb", buffering=_CHUNK_BYTES) as raw:
                _write_bundle(raw, runtime, sources)
                checkpoint("during_export")
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, output)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(output)  # a failed write names no file (a full disk is exit 4 naming it)
            raise
        fsync_directory(output.parent)
    return ExportResult(output, runtime, output.stat().st_size, carries_archive=bool(sources))


#: The temp file of an export beside ``--output``: ``.<name>.export-<pid>-<random>.tmp``. The pid
#: tells a later export whether its writer still runs; one whose writer is gone was killed mid-write.
_EXPORT_TMP_INFIX: Final = ".export-"
_EXPORT_TMP_SUFFIX: Final = ".tmp"
_EXPORT_TMP_NAME: Final = re.compile(r"^\..+\.export-(\d+)-[A-Za-z0-9_]+\.tmp$")


def remove_stale_exports(directory: Path) -> list[Path]:
    """Remove the temp files of exports into ``directory`` whose writer process is gone.

    Only names of :data:`_EXPORT_TMP_NAME`'s shape are touched, and only when
    their pid no longer runs: a running export's file stays (a reused pid
    keeps a stale one, never the reverse).

    Returns:
        The files removed (one that resists removal is skipped).
    """
    from llama_runtime.runtime.procinfo import pid_alive

    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = _EXPORT_TMP_NAME.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False) or pid_alive(int(match.group(1))):
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
        log.info("removed the temp file of an interrupted export", path=entry.path)
    return removed


# -- bundle: Bundles from ``llama-runtime export``: recognised, read, checked. -----------------------------------

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
    from llama_runtime.runtime.errors import RemoteDataError
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.release.release import check_asset_name, check_tag

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


@dataclass(frozen=True)
class Repacked:
    """A bundle taken apart by :func:`repack_bundle`.

    Attributes:
        files: The runtime's files as a plain release archive, each checked against the marker.
        sources: The release archives the bundle carries (:data:`SOURCE_PREFIX`), by name:
            their path in the work directory and the sha256 of their bytes.
    """

    files: Path
    sources: dict[str, tuple[Path, str]]

    def attested_archives(self, marker: InstallMarker) -> list[tuple[str, tuple[Path, str]]] | None:
        """The carried archives that are the marker's assets (main first), or ``None`` (repacked).

        Each comes with the sha256 of its carried bytes; the attestations are judged against those
        (``offline.file_provenance``): a marker's record of an archive is only a name to look for.
        """
        wanted = [(marker.asset, marker.sha256)]
        wanted += [(str(e.get("name", "")), str(e.get("sha256", ""))) for e in marker.extra_assets]
        found: list[tuple[str, tuple[Path, str]]] = []
        for name, sha256 in wanted:
            held = self.sources.get(name)
            if held is None or held[1] != sha256.lower():
                return None
            found.append((name, held))
        return found


def repack_bundle(bundle: Path, marker: InstallMarker, target: Path) -> Repacked:
    """The bundle's runtime files as a plain release archive, each checked against ``marker``.

    Members are copied as they are (links and odd entries included): the one
    safe extraction later refuses anything unsafe. Carried source archives are
    copied beside ``target`` (hashed on the way), not into it.

    Raises:
        IntegrityError: A file is missing, extra, or differs in size or sha256.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    sources: dict[str, tuple[Path, str]] = {}
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
                if name.startswith(SOURCE_PREFIX) and info.isreg():
                    sources.update(_carried_source(src, info, name, target.parent, label))
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
    return Repacked(target, sources)


def _carried_source(
    src: tarfile.TarFile, info: tarfile.TarInfo, name: str, work: Path, label: str
) -> dict[str, tuple[Path, str]]:
    """One carried source archive, copied into ``work/source/`` and hashed: ``{name: (path, sha256)}``."""
    base = name.removeprefix(SOURCE_PREFIX)
    if not base or "/" in base or base in (".", ".."):
        raise IntegrityError(f"The bundle {label} has an invalid source entry {name}.")
    handle = src.extractfile(info)
    if handle is None:
        raise IntegrityError(f"The bundle {label} has an unreadable entry {name}.")
    folder = work / "source"
    folder.mkdir(parents=True, exist_ok=True)
    reader = _HashingReader(handle)
    with (folder / base).open("wb") as out:
        while chunk := reader.read(_CHUNK_BYTES):
            out.write(chunk)
    return {base: (folder / base, reader.digest.hexdigest())}
