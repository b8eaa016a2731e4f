"""Reading llama.cpp release archives: ``.zip`` and ``.tar.gz`` as one sequence of members.

Each format reader yields :class:`Member` (a format-independent header) with an
:data:`Opener` for its bytes; the safety rules (:mod:`.archive_rules`) and the
extraction (:mod:`.archive`) never see a ``TarInfo`` or ``ZipInfo``. The format is
told by magic bytes, never by name.

Invariants: a corrupt or truncated archive surfaces as one
:class:`~llama_runtime.runtime.errors.UnsafeArchiveError`; a tar's extended
(PAX/GNU) headers are bounded before tarfile reads them into memory; a gzip
stream is inflated only as far as it is read.
"""

from __future__ import annotations

import enum
import gzip
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from llama_runtime.runtime.errors import LlamaRuntimeError, UnsafeArchiveError

#: Read size of the gzip stream: tarfile's default (10 KiB) costs ~25,000
#: Python-level reads per 256 MB; 1 MiB makes decompression the only cost.
_TAR_STREAM_BUFFER: Final = 1024 * 1024

#: 4 KiB is PATH_MAX on Linux; a zip "symlink" body longer than that is not a path.
MAX_LINK_TARGET_BYTES: Final = 4096

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

# Read this many leading bytes to tell a zip from a gzip; names can lie.
_MAGIC_BYTES: Final = 4
_ZIP_MAGICS: Final = (b"PK\x03\x04", b"PK\x05\x06")  # local header, empty archive
_GZIP_MAGIC: Final = b"\x1f\x8b"

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

__all__ = [
    "MAX_LINK_TARGET_BYTES",
    "BoundedHeaderError",
    "Member",
    "MemberKind",
    "MemberReader",
    "Opener",
    "open_tar_stream",
    "reader_for",
    "reading",
    "tar_stream_members",
]


class MemberKind(enum.Enum):
    """What an archive entry is."""

    FILE = "regular file"
    DIR = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hard link"
    SPECIAL = "special file"


@dataclass(frozen=True)
class Member:
    """One archive entry, format-independent."""

    raw_name: str
    kind: MemberKind
    mode: int  # permission bits as stored; 0 when the archive has none
    size: int  # declared uncompressed size of a regular file
    compressed_size: int | None = None  # zip only
    link_target: str = ""  # symlink target, or hard-link target name
    special: str = ""  # what kind of special file, for the message


#: Opens one member's bytes (only asked for regular files).
Opener = Callable[[], IO[bytes]]
#: Walks the archive from the start each time it is called.
MemberReader = Callable[[], Iterator[tuple[Member, Opener]]]


def reader_for(archive: Path, label: str) -> MemberReader:
    """A reader of ``archive``'s members, by its magic bytes.

    Raises:
        UnsafeArchiveError: It is neither a zip nor a gzip file.
    """
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
def reading(label: str) -> Iterator[None]:
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


def _tar_members(archive: Path, label: str) -> Iterator[tuple[Member, Opener]]:
    with archive.open("rb") as fh:
        yield from tar_stream_members(fh, label)


def tar_stream_members(stream: IO[bytes], label: str) -> Iterator[tuple[Member, Opener]]:
    # Stream mode ("r|gz") reads strictly forward: no seeks that would
    # re-decompress from the start, and members are only known one at a time.
    try:
        with reading(label), open_tar_stream(stream) as tf:
            while (info := tf.next()) is not None:
                yield _tar_member(info), _tar_opener(tf, info, label)
    except _ExtendedHeaderError as exc:
        raise UnsafeArchiveError(f"Refusing {label}: it has {exc}.") from exc


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo, label: str) -> Opener:
    def opener() -> IO[bytes]:
        with reading(label):
            stream = tf.extractfile(info)
        if stream is None:  # only for non-files; the plan never asks for one
            raise LlamaRuntimeError(f"Tar member {info.name!r} has no data stream.")
        return stream

    return opener


def _tar_member(info: tarfile.TarInfo) -> Member:
    perm = info.mode & 0o7777
    if info.isreg():
        return Member(info.name, MemberKind.FILE, perm, info.size)
    if info.isdir():
        return Member(info.name, MemberKind.DIR, perm, 0)
    if info.issym():
        return Member(info.name, MemberKind.SYMLINK, perm, 0, link_target=info.linkname)
    if info.islnk():
        return Member(info.name, MemberKind.HARDLINK, perm, 0, link_target=info.linkname)
    special = _TAR_SPECIAL.get(info.type, f"tar entry of type {info.type!r}")
    return Member(info.name, MemberKind.SPECIAL, perm, 0, special=special)


def _zip_members(archive: Path, label: str) -> Iterator[tuple[Member, Opener]]:
    with reading(label), zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            yield _zip_member(zf, info, label), _zip_opener(zf, info, label)


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> Opener:
    def opener() -> IO[bytes]:
        with reading(label):
            return zf.open(info)

    return opener


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> Member:
    # orig_filename is the raw name: ZipInfo.filename is cut at a NUL byte.
    name = info.orig_filename
    if info.flag_bits & 0x1:
        raise UnsafeArchiveError(f"Refusing {label}: member {name!r} is encrypted.")
    unix = info.external_attr >> 16  # st_mode, only for zips made on Unix
    fmt = stat.S_IFMT(unix)
    perm = stat.S_IMODE(unix)
    if stat.S_ISLNK(unix):
        return Member(name, MemberKind.SYMLINK, perm, 0, link_target=_zip_link_target(zf, info, label))
    if info.is_dir() or stat.S_ISDIR(unix):
        return Member(name, MemberKind.DIR, perm, 0)
    if fmt in (0, stat.S_IFREG):
        return Member(name, MemberKind.FILE, perm, info.file_size, compressed_size=info.compress_size)
    special = _UNIX_SPECIAL.get(fmt, f"file of type {fmt:#o}")
    return Member(name, MemberKind.SPECIAL, perm, 0, special=special)


def _zip_link_target(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> str:
    with reading(label), zf.open(info) as body:
        raw = body.read(MAX_LINK_TARGET_BYTES + 1)
    if len(raw) > MAX_LINK_TARGET_BYTES:
        raise UnsafeArchiveError(
            f"Refusing {label}: symlink {info.orig_filename!r} has a target longer than {MAX_LINK_TARGET_BYTES} bytes."
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeArchiveError(
            f"Refusing {label}: symlink {info.orig_filename!r} has a target that is not UTF-8."
        ) from exc
