"""Safe extraction of llama.cpp release archives (``.zip``, ``.tar.gz``).

Extraction runs in two passes over the archive:

1. a *plan* pass over the headers (plus zip symlink bodies) that refuses
   anything unsafe before a single byte is written: bad names, special files,
   duplicates, links that escape, writes through symlinks, member count,
   declared size and zip compression ratio. A ``.tar.gz`` is decompressed to
   walk its headers, but nothing is kept and declared sizes bound the work;
2. a *write* pass that repeats every plan check, streams each member in
   chunks into a fresh staging directory with ``O_EXCL | O_NOFOLLOW``, and
   counts the bytes actually written against the same caps.

A final check resolves every extracted symlink on disk: each must stay inside
the root and point at something that exists (llama.cpp #23115 shipped
dangling links).

Invariant: on any refusal nothing has been written outside ``dest``; the
caller discards ``dest`` itself.
"""

from __future__ import annotations

import enum
import errno
import gzip
import hashlib
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Final

from llama_runtime.runtime.errors import CancelledError, LlamaRuntimeError, UnsafeArchiveError

_MiB: Final = 1024 * 1024
_GiB: Final = 1024 * _MiB

# 1 MiB: large enough that syscall overhead is negligible, small enough that a
# multi-GiB shared library never sits in memory.
#: Read size of the gzip stream: tarfile's default (10 KiB) costs ~25,000
#: Python-level reads per 256 MB; 1 MiB makes decompression the only cost.
_TAR_STREAM_BUFFER: Final = 1024 * 1024
CHUNK_BYTES: Final = _MiB

# 4 KiB is PATH_MAX on Linux; a zip "symlink" body longer than that is not a path.
_MAX_LINK_TARGET_BYTES: Final = 4096
# Member names: NAME_MAX (255 bytes per component) and PATH_MAX (4096 bytes) on
# Linux and macOS. Longer names cannot be created anywhere the runtime could live.
_MAX_NAME_PART_BYTES: Final = 255
_MAX_NAME_BYTES: Final = 4096

# tarfile reads a whole PAX or GNU long-name header into memory before it is
# parsed; a declared size of gigabytes of zeros gzips to almost nothing. Real
# headers (a long path, a few attributes) are well under 1 KiB.
_MAX_EXTENDED_HEADER_BYTES: Final = 64 * 1024
# Extended headers chain by recursion inside tarfile; a real member carries at
# most a global header, a PAX header and GNU long name + long link.
_MAX_EXTENDED_HEADER_RUN: Final = 8
_EXTENDED_HEADER_TYPES: Final = frozenset(
    {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE}
)

# A full disk or quota is the machine's problem (exit 4), not the archive's.
_DISK_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})

# Read this many leading bytes to tell a zip from a gzip; names can lie.
_MAGIC_BYTES: Final = 4
_ZIP_MAGICS: Final = (b"PK\x03\x04", b"PK\x05\x06")  # local header, empty archive
_GZIP_MAGIC: Final = b"\x1f\x8b"

# Permissions we write: owner-writable, never setuid/setgid/sticky or
# group/world-writable. Exec is all-or-nothing, as pip and uv do.
_EXEC_MODE: Final = 0o755
_PLAIN_MODE: Final = 0o644
_DIR_MODE: Final = 0o755

# O_NOFOLLOW does not exist on Windows; there the parent checks are the guard.
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
_READ_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)

_TAR_SPECIAL: Final = {
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "fifo",
}
_UNIX_SPECIAL: Final = {
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
}

_DRIVE: Final = re.compile(r"^[A-Za-z]:")
# Characters of an over-long member name quoted in a refusal.
_QUOTE_CHARS: Final = 80

# Errors the archive libraries raise for corrupt or truncated input. Plain
# OSError is deliberately absent: a full disk is not a bad archive.
_CORRUPT_ERRORS: Final = (
    tarfile.TarError,
    zipfile.BadZipFile,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    NotImplementedError,  # zip compression method this Python cannot read
)


@dataclass(frozen=True)
class ExtractLimits:
    """Caps that bound what one archive may unpack to.

    Attributes:
        max_total_bytes: Sum of regular-file bytes, declared and written. The
            largest llama.cpp archives (CUDA/ROCm) unpack to well under 4 GiB.
        max_members: Entries in the archive; real releases have under 200.
        max_ratio: Largest uncompressed:compressed ratio of one zip member;
            binaries compress about 3:1, a zip bomb thousands to one.
        ratio_floor_bytes: Members at or below this size skip the ratio check,
            since small text files legitimately compress very well.
        max_depth: Most path components of one member. llama.cpp archives
            are at most 4 deep (``llama-bN/build/bin/Release/``); 32 leaves
            room for any layout while keeping the per-member work (parents
            checked, directories made) a small constant, so extraction stays
            linear in the member count and no tree the tool walks later is
            deep enough to matter.
    """

    max_total_bytes: int = 4 * _GiB
    max_members: int = 20_000
    max_ratio: float = 200.0
    ratio_floor_bytes: int = _MiB
    max_depth: int = 32


DEFAULT_LIMITS: Final = ExtractLimits()


@dataclass
class ExtractResult:
    """What an extraction wrote.

    Attributes:
        files: Relative POSIX path → (size in bytes, sha256 hex) of every
            regular file, computed while writing.
        symlinks: Relative POSIX path → link target, as stored in the archive.
        total_bytes: Regular-file bytes actually written.
        member_count: Entries in the archive, directories included.
    """

    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    total_bytes: int = 0
    member_count: int = 0


class _Kind(enum.Enum):
    FILE = "regular file"
    DIR = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hard link"
    SPECIAL = "special file"


@dataclass(frozen=True)
class _Member:
    """One archive entry, format-independent."""

    raw_name: str
    kind: _Kind
    mode: int  # permission bits as stored; 0 when the archive has none
    size: int  # declared uncompressed size of a regular file
    compressed_size: int | None = None  # zip only
    link_target: str = ""  # symlink target, or hard-link target name
    special: str = ""  # what kind of special file, for the message


_Opener = Callable[[], IO[bytes]]


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    limits: ExtractLimits = DEFAULT_LIMITS,
    cancel: Callable[[], bool] | None = None,
) -> ExtractResult:
    """Extract a ``.zip`` or ``.tar.gz`` into an empty staging directory.

    Args:
        archive: The archive; its format is detected from its magic bytes.
        dest: A non-existent or empty directory, on the filesystem the
            runtime will be activated on. The caller deletes it on failure.
        limits: Caps on size, member count and zip compression ratio.
        cancel: Polled between members and chunks; ``True`` stops the job.

    Returns:
        What was written, with the sha256 of every regular file.

    Raises:
        UnsafeArchiveError: The file is not a zip/tar.gz, is corrupt, or has a
            member that is unsafe or over a cap (nothing is written outside
            ``dest``).
        CancelledError: ``cancel()`` returned ``True``.
        LlamaRuntimeError: ``dest`` exists and is not an empty directory (a bug
            in the caller).
    """
    label = archive.name
    reader = _reader_for(archive, label)
    _prepare_dest(dest)
    root = dest.resolve()

    plan = _Plan(label, limits)
    for member, _ in reader():
        _poll(cancel, label)
        plan.admit(member)

    writer = _Writer(root, label, limits, cancel)
    write_plan = _Plan(label, limits)
    for member, opener in reader():
        _poll(cancel, label)
        name = write_plan.admit(member)
        if name is not None:
            _write_member(writer, name, member, opener, label)
    writer.result.member_count = write_plan.count
    _check_links_on_disk(root, writer.result.symlinks, label)
    return writer.result


def extract_tar_stream(
    stream: IO[bytes],
    dest: Path,
    *,
    label: str,
    limits: ExtractLimits = DEFAULT_LIMITS,
    cancel: Callable[[], bool] | None = None,
) -> ExtractResult:
    """Extract a ``.tar.gz`` read strictly forward from ``stream``, in one pass.

    For a download that is still arriving: each member passes every check of
    :func:`extract_archive`'s plan before it is written, but members are
    written as they come, so a refusal can leave earlier members in ``dest``.
    ``dest`` must therefore be a staging directory that the caller discards on
    any error and never activates before the archive's digest has matched.

    Args:
        stream: The gzip bytes, e.g. a :class:`~updater.install.follow.FollowReader`.
        dest: A non-existent or empty staging directory.
        label: The archive's name, for messages.
        limits: Caps on size and member count.
        cancel: Polled between members and chunks.

    Returns:
        What was written, with the sha256 of every regular file.

    Raises:
        UnsafeArchiveError: Not a gzip stream, corrupt, or a member is unsafe or over a cap.
        CancelledError: ``cancel()`` returned ``True``.
    """
    _prepare_dest(dest)
    root = dest.resolve()
    plan = _Plan(label, limits)
    writer = _Writer(root, label, limits, cancel)
    for member, opener in _tar_stream_members(stream, label):
        _poll(cancel, label)
        name = plan.admit(member)
        if name is not None:
            _write_member(writer, name, member, opener, label)
    writer.result.member_count = plan.count
    _check_links_on_disk(root, writer.result.symlinks, label)
    return writer.result


def _write_member(writer: _Writer, name: str, member: _Member, opener: _Opener, label: str) -> None:
    """Write one admitted member; a failure other than a full disk is the archive's fault."""
    try:
        writer.write(name, member, opener)
    except OSError as exc:
        if exc.errno in _DISK_FULL_ERRNOS:
            raise
        raise UnsafeArchiveError(
            f"Refusing {label}: member {member.raw_name!r} could not be written ({exc.strerror or type(exc).__name__})."
        ) from exc


def find_server_binary(root: Path) -> Path | None:
    """Find ``llama-server`` in any layout llama.cpp releases have used.

    Looks for ``llama-server``/``llama-server.exe`` (archive root,
    ``llama-bN/``, ``build/bin/``, ``build/bin/Release/``, ``bin/``), and for
    the pre-b3142 names ``server``/``server.exe`` only when no newer name
    exists. The shallowest match wins; ties break by path.

    Args:
        root: An extracted runtime directory.

    Returns:
        The binary's path under ``root``, or ``None``. It is a regular file or
        a symlink resolving to a regular file inside ``root``.
    """
    found = _candidate_paths(root)
    for names in (_SERVER_NAMES, _LEGACY_SERVER_NAMES):
        choice = choose_server_path([rel for rel in found if PurePosixPath(rel).name in names])
        if choice is not None:
            return root.joinpath(*choice.split("/"))
    return None


def choose_server_path(candidates: list[str]) -> str | None:
    """The shallowest relative POSIX path, ties broken alphabetically."""
    if not candidates:
        return None
    return min(candidates, key=lambda rel: (rel.count("/"), rel))


# --- format detection and readers -------------------------------------------------

_SERVER_NAMES: Final = frozenset({"llama-server", "llama-server.exe"})
_LEGACY_SERVER_NAMES: Final = frozenset({"server", "server.exe"})
# llama-bN/build/bin/Release/ is the deepest layout seen (4 directories);
# anything deeper is not a runtime layout and not worth walking.
_MAX_SEARCH_DEPTH: Final = 4


def _reader_for(archive: Path, label: str) -> Callable[[], Iterator[tuple[_Member, _Opener]]]:
    try:
        with archive.open("rb") as fh:
            magic = fh.read(_MAGIC_BYTES)
    except IsADirectoryError:
        magic = b""
    if magic in _ZIP_MAGICS:
        return lambda: _zip_members(archive, label)
    if magic.startswith(_GZIP_MAGIC):
        return lambda: _tar_members(archive, label)
    raise UnsafeArchiveError(f"{label} is not a zip or tar.gz archive.")


@contextmanager
def _reading(label: str) -> Iterator[None]:
    """Turn the archive libraries' corruption errors into one refusal."""
    try:
        yield
    except _CORRUPT_ERRORS as exc:
        raise UnsafeArchiveError(f"Refusing {label}: the archive is corrupt or truncated ({exc}).") from exc


class _ExtendedHeaderError(Exception):
    """A PAX/GNU extended header over the caps, raised before tarfile reads it."""


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses oversized or endlessly chained extended headers.

    ``_proc_member`` is tarfile's per-header dispatch (stable since Python 2);
    hooking it is the only point that sees an extended header's declared size
    before its body is read into memory.
    """

    def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo | None:
        if not isinstance(tf, _BoundedTarFile):
            raise LlamaRuntimeError("_BoundedTarInfo needs a _BoundedTarFile.")
        if self.type not in _EXTENDED_HEADER_TYPES:
            tf.extended_run = 0
        else:
            tf.extended_run += 1
            if tf.extended_run > _MAX_EXTENDED_HEADER_RUN:
                raise _ExtendedHeaderError(f"more than {_MAX_EXTENDED_HEADER_RUN} extended headers in a row")
            if self.size > _MAX_EXTENDED_HEADER_BYTES:
                raise _ExtendedHeaderError(
                    f"an extended (PAX/GNU) header of {self.size} bytes, above the "
                    f"{_MAX_EXTENDED_HEADER_BYTES}-byte limit"
                )
        result: tarfile.TarInfo | None = super()._proc_member(tf)  # type: ignore[misc]
        return result


class _BoundedTarFile(tarfile.TarFile):
    """A TarFile whose headers are parsed by :class:`_BoundedTarInfo`."""

    tarinfo = _BoundedTarInfo
    # Consecutive extended headers seen since the last real member.
    extended_run = 0
    # The gzip reader under a stream opened by open_tar_stream (TarFile leaves it open).
    owned_stream: gzip.GzipFile | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.owned_stream is not None:
                self.owned_stream.close()


def open_tar_stream(archive: Path | IO[bytes]) -> tarfile.TarFile:
    """A forward-only ``.tar.gz`` reader whose extended headers are bounded.

    Anything else that reads a tar.gz from outside (``install-file`` reading a
    bundle's marker) uses this, so a huge PAX header is refused before it is
    read into memory. Iterating raises :class:`BoundedHeaderError` past a cap.
    """
    # gzip.GzipFile inflates at most what is asked for; tarfile's own "r|gz" inflates a
    # whole buffer of input at once, and 1 MiB of gzipped zeros is 1 GiB in memory.
    # A stream (a download still arriving) is read strictly forward; gzip never seeks it.
    raw = gzip.open(archive, "rb")  # noqa: SIM115  (closed by the TarFile, see owned_stream)
    try:
        tf = _BoundedTarFile.open(fileobj=raw, mode="r|", bufsize=_TAR_STREAM_BUFFER)
    except BaseException:
        raw.close()
        raise
    if not isinstance(tf, _BoundedTarFile):  # pragma: no cover - open() returns cls
        raise LlamaRuntimeError("tarfile returned an unexpected reader.")
    tf.owned_stream = raw
    return tf


#: Raised while iterating :func:`open_tar_stream` for an extended header over the caps.
BoundedHeaderError = _ExtendedHeaderError


def _tar_members(archive: Path, label: str) -> Iterator[tuple[_Member, _Opener]]:
    with archive.open("rb") as fh:
        yield from _tar_stream_members(fh, label)


def _tar_stream_members(stream: IO[bytes], label: str) -> Iterator[tuple[_Member, _Opener]]:
    # Stream mode ("r|gz") reads strictly forward: no seeks that would
    # re-decompress from the start, and members are only known one at a time.
    try:
        with _reading(label), open_tar_stream(stream) as tf:
            while (info := tf.next()) is not None:
                yield _tar_member(info), _tar_opener(tf, info, label)
    except _ExtendedHeaderError as exc:
        raise UnsafeArchiveError(f"Refusing {label}: it has {exc}.") from exc


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo, label: str) -> _Opener:
    def opener() -> IO[bytes]:
        with _reading(label):
            stream = tf.extractfile(info)
        if stream is None:  # only for non-files; the plan never asks for one
            raise LlamaRuntimeError(f"Tar member {info.name!r} has no data stream.")
        return stream

    return opener


def _tar_member(info: tarfile.TarInfo) -> _Member:
    perm = info.mode & 0o7777
    if info.isreg():
        return _Member(info.name, _Kind.FILE, perm, info.size)
    if info.isdir():
        return _Member(info.name, _Kind.DIR, perm, 0)
    if info.issym():
        return _Member(info.name, _Kind.SYMLINK, perm, 0, link_target=info.linkname)
    if info.islnk():
        return _Member(info.name, _Kind.HARDLINK, perm, 0, link_target=info.linkname)
    special = _TAR_SPECIAL.get(info.type, f"tar entry of type {info.type!r}")
    return _Member(info.name, _Kind.SPECIAL, perm, 0, special=special)


def _zip_members(archive: Path, label: str) -> Iterator[tuple[_Member, _Opener]]:
    with _reading(label), zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            yield _zip_member(zf, info, label), _zip_opener(zf, info, label)


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> _Opener:
    def opener() -> IO[bytes]:
        with _reading(label):
            return zf.open(info)

    return opener


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> _Member:
    # orig_filename is the raw name: ZipInfo.filename is cut at a NUL byte.
    name = info.orig_filename
    if info.flag_bits & 0x1:
        raise UnsafeArchiveError(f"Refusing {label}: member {name!r} is encrypted.")
    unix = info.external_attr >> 16  # st_mode, only for zips made on Unix
    fmt = stat.S_IFMT(unix)
    perm = stat.S_IMODE(unix)
    if stat.S_ISLNK(unix):
        return _Member(name, _Kind.SYMLINK, perm, 0, link_target=_zip_link_target(zf, info, label))
    if info.is_dir() or stat.S_ISDIR(unix):
        return _Member(name, _Kind.DIR, perm, 0)
    if fmt in (0, stat.S_IFREG):
        return _Member(name, _Kind.FILE, perm, info.file_size, compressed_size=info.compress_size)
    special = _UNIX_SPECIAL.get(fmt, f"file of type {fmt:#o}")
    return _Member(name, _Kind.SPECIAL, perm, 0, special=special)


def _zip_link_target(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> str:
    with _reading(label), zf.open(info) as body:
        raw = body.read(_MAX_LINK_TARGET_BYTES + 1)
    if len(raw) > _MAX_LINK_TARGET_BYTES:
        raise UnsafeArchiveError(
            f"Refusing {label}: symlink {info.orig_filename!r} has a target longer than {_MAX_LINK_TARGET_BYTES} bytes."
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeArchiveError(
            f"Refusing {label}: symlink {info.orig_filename!r} has a target that is not UTF-8."
        ) from exc


# --- the plan: pure checks over the member sequence ---------------------------------


class _Plan:
    """Admits members one by one, refusing anything unsafe or ambiguous.

    Pure: it never touches the filesystem, so the plan pass can run over the
    whole archive before anything is written.
    """

    def __init__(self, label: str, limits: ExtractLimits) -> None:
        self.label = label
        self.limits = limits
        self.count = 0
        self.declared_bytes = 0
        self.explicit: set[str] = set()
        # Normalized path → kind, including directories implied by deeper members.
        self.kinds: dict[str, _Kind] = {}

    def refuse(self, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"Refusing {self.label}: {why}")

    def admit(self, member: _Member) -> str | None:
        """Check one member; return its normalized path, or ``None`` for the root entry."""
        self.count += 1
        if self.count > self.limits.max_members:
            raise self.refuse(f"it has more than {self.limits.max_members} members.")
        name = self._normalize(member.raw_name, "member")
        if name == "":
            if member.kind is _Kind.DIR:
                return None  # "./" in a tar: the root itself
            raise self.refuse(f"member {member.raw_name!r} names the archive root itself.")
        self._check_place(name, member)
        if member.kind is _Kind.SPECIAL:
            raise self.refuse(
                f"member {member.raw_name!r} is a {member.special}; only regular files, "
                "directories and symlinks are allowed."
            )
        if member.kind is _Kind.SYMLINK:
            self._check_symlink(name, member)
        elif member.kind is _Kind.HARDLINK:
            self._check_hardlink(member)
        elif member.kind is _Kind.FILE:
            self._check_size(member)
        self.explicit.add(name)
        self.kinds[name] = _Kind.FILE if member.kind is _Kind.HARDLINK else member.kind
        return name

    def _normalize(self, raw: str, what: str) -> str:
        """Archive name → relative POSIX path without ``.``/empty parts; refuse the rest."""
        if "\x00" in raw:
            raise self.refuse(f"{what} {raw!r} has a NUL byte in its name.")
        if "\\" in raw:
            raise self.refuse(f"{what} {raw!r} contains a backslash, which Windows treats as a path separator.")
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.refuse(f"{what} {raw!r} has a name that is not UTF-8.") from exc
        if raw.startswith("/") or _DRIVE.match(raw):
            raise self.refuse(f"{what} {raw!r} would be written outside the runtime directory.")
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self.refuse(f"{what} {raw!r} would be written outside the runtime directory.")
        if len(parts) > self.limits.max_depth:
            raise self.refuse(
                f"{what} {_abbreviate(raw)} nests {len(parts)} levels deep, above the limit of "
                f"{self.limits.max_depth} (llama.cpp archives are at most 4 deep)."
            )
        name = "/".join(parts)
        self._check_length(raw, name, what)
        return name

    def _check_length(self, raw: str, name: str, what: str) -> None:
        if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
            raise self.refuse(f"{what} {_abbreviate(raw)} has a name longer than {_MAX_NAME_BYTES} bytes.")
        for part in name.split("/"):
            if len(part.encode("utf-8")) > _MAX_NAME_PART_BYTES:
                raise self.refuse(
                    f"{what} {_abbreviate(raw)} has a path component longer than {_MAX_NAME_PART_BYTES} bytes."
                )

    def _check_place(self, name: str, member: _Member) -> None:
        parents = PurePosixPath(name).parents
        for parent in reversed(list(parents)[:-1]):  # outermost first, without "."
            kind = self.kinds.get(str(parent))
            if kind is _Kind.SYMLINK:
                raise self.refuse(f"member {member.raw_name!r} would be written through the symlink '{parent}'.")
            if kind is not None and kind is not _Kind.DIR:
                raise self.refuse(f"member {member.raw_name!r} would be written inside the file '{parent}'.")
            self.kinds[str(parent)] = _Kind.DIR
        if name in self.explicit:
            raise self.refuse(f"member {member.raw_name!r} appears more than once, so its content is ambiguous.")
        existing = self.kinds.get(name)
        if existing is _Kind.DIR and member.kind is not _Kind.DIR:
            raise self.refuse(
                f"member {member.raw_name!r} is a {member.kind.value} where other members need a directory."
            )

    def _check_symlink(self, name: str, member: _Member) -> None:
        target = member.link_target
        if len(target.encode("utf-8", "surrogateescape")) > _MAX_LINK_TARGET_BYTES:
            raise self.refuse(f"symlink {member.raw_name!r} has a target longer than {_MAX_LINK_TARGET_BYTES} bytes.")
        if not target or "\x00" in target or "\\" in target:
            raise self.refuse(f"symlink {member.raw_name!r} has an invalid target {target!r}.")
        if target.startswith("/") or _DRIVE.match(target):
            raise self.refuse(
                f"symlink {member.raw_name!r} points to the absolute path {target!r}; only "
                "relative links inside the runtime directory are allowed."
            )
        if not _stays_inside(PurePosixPath(name).parent.parts, target):
            raise self.refuse(f"symlink {member.raw_name!r} -> {target!r} points outside the runtime directory.")

    def _check_hardlink(self, member: _Member) -> None:
        target = hardlink_source(member.link_target)
        if target not in self.explicit or self.kinds.get(target) is not _Kind.FILE:
            raise self.refuse(
                f"hard link {member.raw_name!r} -> {member.link_target!r} does not point to a "
                "regular file extracted earlier from the archive."
            )

    def _check_size(self, member: _Member) -> None:
        self.declared_bytes += member.size
        if self.declared_bytes > self.limits.max_total_bytes:
            raise self.refuse(f"it unpacks to more than {self.limits.max_total_bytes} bytes.")
        if member.compressed_size is not None and exceeds_ratio(member.size, member.compressed_size, self.limits):
            raise self.refuse(_ratio_reason(member, member.size, self.limits))


def _abbreviate(raw: str) -> str:
    """``repr`` of a member name, shortened so one message cannot flood a terminal."""
    return repr(raw) if len(raw) <= _QUOTE_CHARS else repr(raw[:_QUOTE_CHARS]) + "…"


def hardlink_source(link_target: str) -> str | None:
    """The normalized member a tar hard link names, or ``None`` if it names no safe path."""
    if "\x00" in link_target or "\\" in link_target:
        return None
    if link_target.startswith("/") or _DRIVE.match(link_target):
        return None
    parts = [p for p in link_target.split("/") if p not in ("", ".")]
    return None if ".." in parts or not parts else "/".join(parts)


def _stays_inside(link_dir: tuple[str, ...], target: str) -> bool:
    """Whether ``target``, read from ``link_dir``, stays under the root textually.

    Chains through other symlinks are resolved for real after extraction.
    """
    depth = len(link_dir)
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


def exceeds_ratio(size: int, compressed_size: int, limits: ExtractLimits) -> bool:
    """Whether a zip member of ``size`` bytes from ``compressed_size`` looks like a bomb."""
    return size > limits.ratio_floor_bytes and size > limits.max_ratio * max(compressed_size, 1)


def _ratio_reason(member: _Member, size: int, limits: ExtractLimits) -> str:
    ratio = size / max(member.compressed_size or 0, 1)
    return f"member {member.raw_name!r} expands {ratio:.0f}:1, above the {limits.max_ratio:.0f}:1 limit (a zip bomb)."


# --- the write pass ---------------------------------------------------------------


class _Writer:
    """Writes admitted members under ``root``, counting every byte."""

    def __init__(self, root: Path, label: str, limits: ExtractLimits, cancel: Callable[[], bool] | None) -> None:
        self.root = root
        self.label = label
        self.limits = limits
        self.cancel = cancel
        self.result = ExtractResult()

    def refuse(self, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"Refusing {self.label}: {why}")

    def path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def write(self, name: str, member: _Member, opener: _Opener) -> None:
        self._make_dirs(name.split("/")[:-1], member)
        if member.kind is _Kind.DIR:
            self._make_dirs(name.split("/"), member)
        elif member.kind is _Kind.SYMLINK:
            os.symlink(member.link_target, self.path(name))
            self.result.symlinks[name] = member.link_target
        elif member.kind is _Kind.HARDLINK:
            source = hardlink_source(member.link_target)
            if source is None:  # the plan refuses these; this keeps the type honest
                raise self.refuse(f"hard link {member.raw_name!r} has no safe target.")
            fd = os.open(self.path(source), _READ_FLAGS)
            with os.fdopen(fd, "rb") as src:
                self.result.files[name] = self._copy(src, name, member)
        else:
            with opener() as src:
                self.result.files[name] = self._copy(src, name, member)

    def _make_dirs(self, parts: list[str], member: _Member) -> None:
        current = self.root
        for part in parts:
            current = current / part
            try:
                os.mkdir(current, _DIR_MODE)
            except FileExistsError:
                # The plan rules this out; this guards against a racing writer.
                if not stat.S_ISDIR(os.lstat(current).st_mode):
                    raise self.refuse(
                        f"member {member.raw_name!r} would be written through '{part}', which is not a directory."
                    ) from None

    def _copy(self, src: IO[bytes], name: str, member: _Member) -> tuple[int, str]:
        target = self.path(name)
        digest = hashlib.sha256()
        written = 0
        fd = os.open(target, _CREATE_FLAGS, 0o600)
        with os.fdopen(fd, "wb") as out:
            while True:
                _poll(self.cancel, self.label)
                with _reading(self.label):
                    chunk = src.read(CHUNK_BYTES)
                if not chunk:
                    break
                written += len(chunk)
                self.result.total_bytes += len(chunk)
                if self.result.total_bytes > self.limits.max_total_bytes:
                    raise self.refuse(f"it unpacks to more than {self.limits.max_total_bytes} bytes.")
                if member.compressed_size is not None and exceeds_ratio(written, member.compressed_size, self.limits):
                    raise self.refuse(_ratio_reason(member, written, self.limits))
                out.write(chunk)
                digest.update(chunk)
        if member.kind is _Kind.FILE and written != member.size:
            raise self.refuse(f"member {member.raw_name!r} holds {written} bytes but its header says {member.size}.")
        os.chmod(target, _EXEC_MODE if member.mode & 0o111 else _PLAIN_MODE)
        return written, digest.hexdigest()


def check_links_inside(root: Path, symlinks: dict[str, str], label: str) -> None:
    """Every link in ``symlinks`` (relative path -> target) resolves to something existing inside ``root``.

    Also for links moved after extraction (a CUDA companion's, merged beside
    ``llama-server``): a target that was inside the companion's own tree can
    point elsewhere, or nowhere, from its new place.

    Raises:
        UnsafeArchiveError: A link escapes ``root`` or dangles.
    """
    _check_links_on_disk(root.resolve(), symlinks, label)


def _check_links_on_disk(root: Path, symlinks: dict[str, str], label: str) -> None:
    """Every extracted link resolves, for real, to something existing inside ``root``."""
    root_text = str(root)
    for name, target in symlinks.items():
        link = root.joinpath(*name.split("/"))
        real = os.path.realpath(link)
        if os.path.commonpath([root_text, real]) != root_text:
            raise UnsafeArchiveError(
                f"Refusing {label}: symlink {name!r} -> {target!r} resolves outside the runtime directory."
            )
        if not os.path.exists(link):
            raise UnsafeArchiveError(
                f"Refusing {label}: symlink {name!r} -> {target!r} points to nothing in the archive (a dangling link)."
            )


# --- small helpers ----------------------------------------------------------------


def _prepare_dest(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise LlamaRuntimeError(f"Extraction needs an empty staging directory, but {dest} is not one.")
    dest.mkdir(parents=True, exist_ok=True)


def _poll(cancel: Callable[[], bool] | None, label: str) -> None:
    if cancel is not None and cancel():
        raise CancelledError(f"Extraction of {label} was cancelled; nothing was activated.")


def _candidate_paths(root: Path) -> list[str]:
    """Relative POSIX paths of server-named regular files (or in-root links to one)."""
    names = _SERVER_NAMES | _LEGACY_SERVER_NAMES
    root_real = os.path.realpath(root)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        if len(rel_dir.parts) >= _MAX_SEARCH_DEPTH:
            dirnames.clear()
        for filename in filenames:
            if filename in names and _is_regular_inside(Path(dirpath, filename), root_real):
                found.append((rel_dir / filename).as_posix())
    return found


def _is_regular_inside(path: Path, root_real: str) -> bool:
    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        return True
    if not stat.S_ISLNK(mode):
        return False
    real = os.path.realpath(path)
    return os.path.commonpath([root_real, real]) == root_real and os.path.isfile(real)
