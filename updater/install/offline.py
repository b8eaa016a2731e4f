"""Installing without a network: a release archive already on disk, or a bundle.

Both go through :meth:`~.pipeline.InstallPipeline.install_archives`, the one
path every install takes (safe extraction, probe, marker, read-back,
activation, rollback); this module only decides what to feed it.

A *bundle* (``llama-runtime export``) is a ``.tar.gz`` whose first member is
the install marker, followed by the runtime's files at their recorded paths.
Restoring one checks every file against the marker's ``files`` (size and
sha256) before anything is extracted.

Invariants:
    * The caller's file is only read, never modified: it is copied (and hashed
      on the way) into a private work directory, and the copy is what gets
      extracted, so the recorded sha256 is that of the bytes installed.
    * The work directory is removed whatever happens.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import secrets
import stat
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Final

from llama_runtime.runtime.errors import (
    BackendUnavailableError,
    CorruptStateError,
    DigestMismatchError,
    ForeignMarkerError,
    IntegrityError,
    UnsafeArchiveError,
    UserInputError,
)
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE, fsync_directory, remove_tree_quietly
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import MARKER_NAME, InstallMarker, parse_marker
from llama_runtime.updater.choice.assetnames import AssetInfo, parse_asset_name
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR, MAX_ASSET_BYTES
from llama_runtime.updater.install.archive_formats import BoundedHeaderError, open_tar_stream
from llama_runtime.updater.install.download import check_free_space
from llama_runtime.updater.install.installed import find_build
from llama_runtime.updater.install.outcome import Progress, UpdateOutcome
from llama_runtime.updater.install.provenance import Provenance, ProvenanceCheck, read_attestation_file
from llama_runtime.updater.install.recovery import damage, disk_full_error, is_disk_full
from llama_runtime.updater.install.transaction import Installer

__all__ = [
    "ExportResult",
    "InstallFileRequest",
    "export_bundle",
    "install_file",
    "read_bundle_marker",
]

# Copy and hash in 1 MiB pieces: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
# A marker is a few kB even with hundreds of files; anything far larger is not one.
_MAX_MARKER_BYTES: Final[int] = 4 * 1024 * 1024
# gzip level of `export`: the one `tar czf` (gzip -6) uses; see _write_bundle.
_EXPORT_COMPRESSLEVEL: Final[int] = 6
# The repacked bundle is extracted once, right away: favour speed over size.
_REPACK_COMPRESSLEVEL: Final[int] = 1
_GZIP_MAGIC: Final[bytes] = b"\x1f\x8b"
_HEX: Final[frozenset[str]] = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class InstallFileRequest:
    """What ``install-file`` was asked.

    ``tag``, ``repo`` and ``backend`` are ``None`` when the caller gave none;
    ``default_repo`` then applies to plain archives.
    """

    archive: Path
    default_repo: str
    tag: str | None = None
    repo: str | None = None
    backend: str | None = None
    sha256: str | None = None
    attestation: Path | None = None


@dataclass(frozen=True)
class _Copy:
    path: Path
    size: int
    sha256: str


# -- pure decisions ----------------------------------------------------------------------


def normalize_sha256(value: str | None) -> str | None:
    """``HEX`` or ``sha256:HEX`` as 64 lowercase hex digits.

    Raises:
        UserInputError: Not a sha256.
    """
    if value is None:
        return None
    hexpart = value.strip().lower().removeprefix("sha256:")
    if len(hexpart) != 64 or not set(hexpart) <= _HEX:
        raise UserInputError(f"--sha256 '{value}' is not a sha256; give 64 hex digits.")
    return hexpart


def archive_meta(request: InstallFileRequest, info: AssetInfo | None, host_platform: str) -> dict[str, object]:
    """Marker fields for a plain release archive, from the request and its name.

    Raises:
        UserInputError: No tag or backend can be told, or the name contradicts the flags.
        BackendUnavailableError: The name says it is built for another platform.
    """
    name = request.archive.name
    tag = request.tag or (info.tag if info else None)
    if tag is None:
        raise UserInputError(f"Cannot tell the release of {name} from its name; pass --tag (e.g. --tag b7000).")
    if request.tag and info and info.tag and info.tag != request.tag:
        raise UserInputError(f"{name} is release {info.tag} by its name, not {request.tag}; fix --tag.")
    if info is not None and info.platform != host_platform:
        raise BackendUnavailableError(f"{name} is a {info.platform} build; this machine is {host_platform}.")
    requested = request.backend if request.backend not in (None, "auto") else None
    if requested and info and info.backend != requested:
        raise UserInputError(f"{name} is a {info.backend} build by its name, not {requested}; fix --backend.")
    backend = requested or (info.backend if info else None)
    if backend is None:
        raise UserInputError(f"Cannot tell the backend of {name} from its name; pass --backend (e.g. --backend cpu).")
    return {
        "repo": request.repo or request.default_repo,
        "tag": tag,
        "backend": backend,
        "backend_request": requested or "auto",
        "asset": name,
        "source": "file",
        "reason": f"installed from the file {request.archive}",
    }


def bundle_meta(request: InstallFileRequest, marker: InstallMarker) -> dict[str, object]:
    """Marker fields for a bundle: its own marker's, checked against any flags given.

    Raises:
        UserInputError: A flag contradicts what the bundle holds.
    """
    given = {"--tag": (request.tag, marker.tag), "--repo": (request.repo, marker.repo)}
    if request.backend not in (None, "auto"):
        given["--backend"] = (request.backend, marker.backend)
    for flag, (asked, held) in given.items():
        if asked is not None and asked != held:
            raise UserInputError(f"The bundle {request.archive.name} holds {held}, not {asked}; drop or fix {flag}.")
    return {
        "repo": marker.repo,
        "tag": marker.tag,
        "backend": marker.backend,
        "backend_request": marker.backend_request,
        "asset": marker.asset,
        "size": marker.size,
        "sha256": marker.sha256,
        "source": "bundle",
        "extra_assets": marker.extra_assets,
        "reason": f"restored from the bundle {request.archive} (first installed from {marker.source})",
    }


def is_same_install(active: InstalledRuntime | None, meta: dict[str, object]) -> bool:
    """Whether ``active`` already is this repo/tag/backend built from the same bytes."""
    if active is None:
        return False
    m = active.marker
    return (m.repo, m.tag, m.backend, m.sha256) == (meta["repo"], meta["tag"], meta["backend"], meta["sha256"])


def file_provenance(
    check: ProvenanceCheck, request: InstallFileRequest, meta: dict[str, object], bundled: InstallMarker | None
) -> Provenance:
    """The provenance of a file install, checked offline before anything is extracted.

    ``--bundle`` is verified against the file's sha256 (an export's: against the
    archive its marker records). Without one, an export's recorded bundle is
    verified again; a verified status is never carried over unchecked.

    Raises:
        ProvenanceError: A given or recorded attestation does not verify.
        ProvenanceMissingError: Provenance is required and none verified.
    """
    asset, sha256, repo = str(meta["asset"]), str(meta["sha256"]), str(meta["repo"])
    if request.attestation is not None:
        return check.evaluate(asset, sha256, repo, read_attestation_file(request.attestation))
    if bundled is None:
        return check.not_checked(asset, "installed from a file without --bundle")
    recorded = bundled.provenance
    if isinstance(recorded.get("bundle"), dict):
        result = check.evaluate(asset, sha256, repo, [recorded["bundle"]])
        # The attestation covers the release archive; the export's files are tied to it by its marker.
        return replace(result, reason=f"{result.reason}; files as recorded by the exporting machine")
    if recorded.get("status") == "absent":
        return check.evaluate(asset, sha256, repo, [])
    return check.not_checked(asset, "restored from an export whose provenance was not checked")


# -- install-file ------------------------------------------------------------------------


def install_file(installer: Installer, request: InstallFileRequest) -> UpdateOutcome:
    """Install a release archive or a bundle from disk, as a download would be installed.

    Raises:
        UserInputError: The file is missing or unreadable, or tag/backend are unclear.
        DigestMismatchError: ``--sha256`` was given and does not match.
        IntegrityError: Not an archive, unsafe, a bundle with an invalid marker, or one whose files
            differ from its marker.
        VerificationError: The runtime was rejected; the active one is unchanged.
        BusyError: Another update holds the lock.
    """
    if is_stream(request.archive):
        # A pipe or standard input can be read once: spool it, then install the copy.
        with _spooled(request.archive, installer.home) as spooled:
            return install_file(installer, replace(request, archive=spooled))
    archive = request.archive
    _check_readable(archive)
    expected_sha = normalize_sha256(request.sha256)
    bundled = read_bundle_marker(archive)
    if bundled is not None:
        meta = bundle_meta(request, bundled)
    else:
        meta = archive_meta(request, parse_asset_name(archive.name), installer.host.platform)
    home = installer.home
    home.ensure()
    with installer.lock.hold("install-file"):
        active = _active(installer)
        work = home.downloads_dir / f"install-file-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            size = archive.stat().st_size
            check_free_space(home.root, size * (2 + EXTRACTED_SIZE_FACTOR), what=archive.name)
            copy = _copy_hashing(archive, work / archive.name)
            if expected_sha is not None and copy.sha256 != expected_sha:
                raise DigestMismatchError(
                    f"{archive} does not match --sha256 (expected {expected_sha}, got {copy.sha256}); "
                    "nothing was installed."
                )
            meta["digest_verified"] = expected_sha is not None
            if bundled is None:
                meta["size"], meta["sha256"] = copy.size, copy.sha256
                archives = [copy.path]
            else:
                archives = [_repack_bundle(copy.path, bundled, work / "bundle-files" / archive.name)]
            meta["provenance"] = file_provenance(installer.provenance, request, meta, bundled).to_marker()
            if active is not None and damage(active, hash_binary=True):
                active = None  # reinstalled from these bytes; a damaged runtime is no rollback target
            if is_same_install(active, meta):
                assert active is not None
                return UpdateOutcome("up_to_date", active, installer.previous())
            there = _installed_copy(home, meta, active)
            if there is not None and installer.reverify(there, _silent):
                return installer.activate_installed(there, active, _silent, [], verified=True)
            return installer.pipeline.install_archives(
                archives, meta, active=active, emit=_silent, cancel=lambda: False, warnings=[]
            )
        finally:
            remove_tree_quietly(work)  # best effort: never hides the install's own outcome


def _silent(_event: Progress) -> None:
    """install-file reports no progress."""


def _installed_copy(home: Home, meta: dict[str, object], active: InstalledRuntime | None) -> InstalledRuntime | None:
    """An installed runtime built from these very bytes (switched to instead of a second copy)."""
    key = (str(meta["repo"]).lower(), str(meta["tag"]), str(meta["backend"]), str(meta["asset"]))
    there = find_build(home.installed(), key, exclude=active.name if active else None)
    return there if there is not None and there.marker.sha256 == meta["sha256"] else None


#: ``install-file -`` reads the archive from standard input.
STDIN_NAME: Final = "-"


def is_stream(path: Path) -> bool:
    """Whether ``path`` is standard input (``-``) or a pipe/device that can be read only once."""
    if str(path) == STDIN_NAME:
        return True
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # missing: _check_readable says so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def _spooled(source: Path, home: Home) -> Iterator[Path]:
    """``source`` read once into a private file in the home, removed afterwards."""
    home.ensure()
    spool = Path(tempfile.mkdtemp(prefix=".spool-", dir=home.downloads_dir))
    try:
        target = spool / ("stdin" if str(source) == STDIN_NAME else source.name)
        try:
            with contextlib.ExitStack() as stack:
                src = sys.stdin.buffer if str(source) == STDIN_NAME else stack.enter_context(source.open("rb"))
                with target.open("wb") as dst:
                    _copy_capped(src, dst, source)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(home.root, 0, "the archive from standard input") from exc
            raise UserInputError(f"Cannot read the archive {source}: {exc.strerror or exc}.") from None
        yield target
    finally:
        remove_tree_quietly(spool)


def _copy_capped(src: BinaryIO, dst: BinaryIO, source: Path) -> None:
    """Copy a pipe into the spool, refusing more than any release asset can be (``/dev/zero`` ends here)."""
    copied = 0
    while chunk := src.read(_CHUNK_BYTES):
        copied += len(chunk)
        if copied > MAX_ASSET_BYTES:
            raise UserInputError(
                f"{source} gave more than {MAX_ASSET_BYTES // 1024**3} GiB, more than any llama.cpp release archive; "
                "it is not an archive."
            )
        dst.write(chunk)


def _check_readable(archive: Path) -> None:
    try:
        with archive.open("rb") as fh:
            fh.read(1)
    except IsADirectoryError:
        raise UserInputError(f"{archive} is a directory; give the path of a .zip or .tar.gz archive.") from None
    except OSError as exc:
        raise UserInputError(f"Cannot read the archive {archive}: {exc.strerror or exc}.") from None


def _active(installer: Installer) -> InstalledRuntime | None:
    try:
        return installer.active()
    except ForeignMarkerError:
        raise
    except CorruptStateError:
        return None  # a damaged active runtime must not block its repair


def _copy_hashing(source: Path, target: Path) -> _Copy:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as src, target.open("wb") as dst:
        while chunk := src.read(_CHUNK_BYTES):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    return _Copy(target, size, digest.hexdigest())


# -- bundles -----------------------------------------------------------------------------


def _member_name(name: str) -> str:
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
            if first is None or not first.isreg() or _member_name(first.name) != MARKER_NAME:
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
        payload = json.loads(raw)
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
    from llama_runtime.updater.sources.remote_names import RemoteDataError, check_asset_name, check_tag

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


def _repack_bundle(bundle: Path, marker: InstallMarker, target: Path) -> Path:
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
                name = _member_name(info.name)
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


@dataclass(frozen=True)
class ExportResult:
    """A bundle written by :func:`export_bundle`."""

    path: Path
    runtime: InstalledRuntime
    size: int

    def to_json(self) -> dict[str, object]:
        """The ``export`` object of the CLI."""
        return {"output": str(self.path), "size": self.size, "runtime": self.runtime.to_json()}


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


def _write_bundle(raw: IO[bytes], runtime: InstalledRuntime) -> None:
    """The marker, then every file of ``runtime``, as a gzip'd tar stream.

    gzip level 6 (what ``tar czf`` uses) instead of tarfile's 9: on the real
    72 MB Vulkan build level 9 took 3.6x as long as ``tar czf`` for a bundle
    only 1% smaller (``scripts/bench_export.py``).
    """
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=_EXPORT_COMPRESSLEVEL, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", bufsize=_CHUNK_BYTES) as tf,
    ):
        tf.add(runtime.path / MARKER_NAME, arcname=MARKER_NAME, filter=_plain_owner)
        for path in _bundle_members(runtime.path):
            rel = path.relative_to(runtime.path).as_posix()
            tf.add(path, arcname=rel, recursive=False, filter=_plain_owner)


def export_bundle(home: Home, output: Path) -> ExportResult:
    """Write the active runtime and its marker as one ``.tar.gz`` (marker first).

    The bundle appears at ``output`` only when complete (temp file, fsync, rename).

    Raises:
        UserInputError: Nothing is active, or ``output`` cannot be written there.
        CorruptStateError: The active runtime's files differ from its marker.
        BusyError: An update is running.
    """
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.updater.install.installed import verify_files

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
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        tmp = Path(tmp_name)
        try:
            os.chmod(tmp, SHARED_FILE_MODE)  # a bundle is made to be copied elsewhere
            with os.fdopen(fd, "wb", buffering=_CHUNK_BYTES) as raw:
                _write_bundle(raw, runtime)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, output)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(output.parent)
    return ExportResult(output, runtime, output.stat().st_size)
