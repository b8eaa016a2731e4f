"""The safety rules of extraction: what a member may be called, be, point at and weigh.

:class:`MemberPlan` admits members one by one and refuses anything unsafe or
ambiguous: bad names, special files, duplicates, links that escape, writes
through symlinks, member count, declared size and zip compression ratio. It is
pure (never touches the filesystem), so a whole archive can be checked before a
byte is written. :func:`check_links_inside` is the one rule that needs the disk:
every extracted link, resolved for real, stays inside and exists (llama.cpp
#23115 shipped dangling links).
"""

from __future__ import annotations

import enum
import gzip
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final, cast

from llama_runtime.runtime.errors import LlamaRuntimeError, UnsafeArchiveError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_LINK_TARGET_BYTES",
    "BoundedHeaderError",
    "ExtractLimits",
    "Member",
    "MemberKind",
    "MemberPlan",
    "MemberReader",
    "Opener",
    "check_links_inside",
    "check_links_on_disk",
    "exceeds_ratio",
    "hardlink_source",
    "open_tar_stream",
    "ratio_reason",
    "reader_for",
    "reading",
    "tar_stream_members",
]


# -- archive_formats: Reading ``.zip`` and ``.tar.gz`` release archives as one sequence. -------------------------

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
    except Exception as exc:
        # Looked up now: the block itself may be what first loads the inflater (and its errors).
        if not isinstance(exc, (*_CORRUPT_ERRORS, *_inflater_errors)):
            raise
        raise UnsafeArchiveError(f"Refusing {label}: the archive is corrupt or truncated ({exc}).") from exc


# The errors of the inflater found by _gzip_class beyond the standard library's (ISA-L's IsalError);
# filled on first use, so that start-up never imports it.
_inflater_errors: tuple[type[Exception], ...] = ()


def _gzip_class() -> type[gzip.GzipFile]:
    """The fastest gzip reader installed: ISA-L's (``isal``), else the standard library's (zlib).

    Inflate is most of the work of an install (55% of all samples of a real-shaped
    update, shared/reference/perf-profile-2026-12.md); ISA-L inflates machine code
    about 2.5x as fast as zlib on one core. Its reader is a drop-in ``GzipFile``
    that, like ``gzip``'s, inflates no more than it is asked for (a gzip bomb stays
    bounded), checks the CRC and the length, and raises ``EOFError`` on truncation.
    Imported here, on the install path only: ``ensure()`` never pays for it.
    """
    global _inflater_errors
    try:
        from isal import igzip, isal_zlib
    except ImportError:  # an optional speed-up: zlib reads every archive too
        return gzip.GzipFile
    _inflater_errors = (cast("type[Exception]", isal_zlib.error),)  # its stub calls the class an instance
    return igzip.IGzipFile


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
    reader = _gzip_class()
    # Closed by the TarFile (see owned_stream). ISA-L's reader fills its buffer with readinto().
    raw = reader(archive, "rb") if isinstance(archive, Path) else reader(fileobj=archive, mode="rb")
    try:
        tf = _BoundedTarFile.open(fileobj=_ForwardOnly(raw), mode="r:")
    except BaseException:
        raw.close()
        raise
    if not isinstance(tf, _BoundedTarFile):  # pragma: no cover - open() returns cls
        raise LlamaRuntimeError("tarfile returned an unexpected reader.")
    tf.owned_stream = raw
    return tf


#: Raised while iterating :func:`open_tar_stream` for an extended header over the caps.
BoundedHeaderError = _ExtendedHeaderError


class _ForwardOnly:
    """A gzip stream as the file tarfile's ``r:`` mode reads, that only ever moves forward.

    tarfile's stream mode (``r|``) passes every byte through its own buffer, a
    join and two slices per read (14% of a real-shaped update's samples, under
    the GIL). Its ``r:`` mode reads the file directly, and walking the
    members in order it only seeks forward: a seek here reads and drops the
    bytes in between. A seek back (no sequential walk makes one) is refused as
    a corrupt archive, never served by inflating the stream again.
    """

    def __init__(self, raw: gzip.GzipFile) -> None:
        self.raw = raw
        self.position = 0

    def read(self, size: int | None = -1) -> bytes:
        data = self.raw.read(_TAR_STREAM_BUFFER if size is None or size < 0 else size)
        self.position += len(data)
        return data

    def write(self, _data: bytes) -> int:
        raise OSError("an archive being read is not written")

    def close(self) -> None:
        """Nothing: the gzip reader under it is the TarFile's ``owned_stream``."""

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET or offset < self.position:
            raise tarfile.ReadError(f"the archive asks to be read backwards (to {offset} from {self.position})")
        while self.position < offset and self.read(min(offset - self.position, _TAR_STREAM_BUFFER)):
            pass
        return self.position


class _MemberBytes:
    """A regular member's bytes, read straight from the gzip stream (no copy through tarfile)."""

    def __init__(self, stream: _ForwardOnly, info: tarfile.TarInfo) -> None:
        self.stream = stream
        self.start = info.offset_data
        self.left = info.size

    def __enter__(self) -> _MemberBytes:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        self.stream.seek(self.start)  # where the member's bytes begin: a no-op after the first read
        want = self.left if size < 0 else min(size, self.left)
        data = self.stream.read(min(want, _TAR_STREAM_BUFFER))
        if not data:
            raise EOFError("the archive ends inside a member")
        self.start += len(data)
        self.left -= len(data)
        return data


def _tar_members(archive: Path, label: str) -> Iterator[tuple[Member, Opener]]:
    with archive.open("rb") as fh:
        yield from tar_stream_members(fh, label)


def tar_stream_members(stream: IO[bytes], label: str) -> Iterator[tuple[Member, Opener]]:
    # Read strictly forward (see _ForwardOnly): no seeks that would re-decompress
    # from the start, and members are only known one at a time.
    try:
        with reading(label), open_tar_stream(stream) as tf:
            while (info := tf.next()) is not None:
                yield _tar_member(info), _tar_opener(tf, info, label)
    except _ExtendedHeaderError as exc:
        raise UnsafeArchiveError(f"Refusing {label}: it has {exc}.") from exc


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo, label: str) -> Opener:
    def opener() -> IO[bytes]:
        if isinstance(tf.fileobj, _ForwardOnly) and info.sparse is None:  # a sparse file needs tarfile's map
            return cast("IO[bytes]", _MemberBytes(tf.fileobj, info))
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


# -- archive_rules -----------------------------------------------------------------------------------------------

_MiB: Final = 1024 * 1024
_GiB: Final = 1024 * _MiB

# Member names: NAME_MAX (255 bytes per component) and PATH_MAX (4096 bytes) on
# Linux and macOS. Longer names cannot be created anywhere the runtime could live.
_MAX_NAME_PART_BYTES: Final = 255
_MAX_NAME_BYTES: Final = 4096

_DRIVE: Final = re.compile(r"^[A-Za-z]:")
# Characters of an over-long member name quoted in a refusal.
_QUOTE_CHARS: Final = 80


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


class MemberPlan:
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
        self.kinds: dict[str, MemberKind] = {}

    def refuse(self, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"Refusing {self.label}: {why}")

    def admit(self, member: Member) -> str | None:
        """Check one member; return its normalized path, or ``None`` for the root entry."""
        self.count += 1
        if self.count > self.limits.max_members:
            raise self.refuse(f"it has more than {self.limits.max_members} members.")
        name = self._normalize(member.raw_name, "member")
        if name == "":
            if member.kind is MemberKind.DIR:
                return None  # "./" in a tar: the root itself
            raise self.refuse(f"member {member.raw_name!r} names the archive root itself.")
        self._check_place(name, member)
        if member.kind is MemberKind.SPECIAL:
            raise self.refuse(
                f"member {member.raw_name!r} is a {member.special}; only regular files, "
                "directories and symlinks are allowed."
            )
        if member.kind is MemberKind.SYMLINK:
            self._check_symlink(name, member)
        elif member.kind is MemberKind.HARDLINK:
            self._check_hardlink(member)
        elif member.kind is MemberKind.FILE:
            self._check_size(member)
        self.explicit.add(name)
        self.kinds[name] = MemberKind.FILE if member.kind is MemberKind.HARDLINK else member.kind
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
                f"{what} {abbreviate(raw)} nests {len(parts)} levels deep, above the limit of "
                f"{self.limits.max_depth} (llama.cpp archives are at most 4 deep)."
            )
        name = "/".join(parts)
        self._check_length(raw, name, what)
        return name

    def _check_length(self, raw: str, name: str, what: str) -> None:
        if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
            raise self.refuse(f"{what} {abbreviate(raw)} has a name longer than {_MAX_NAME_BYTES} bytes.")
        for part in name.split("/"):
            if len(part.encode("utf-8")) > _MAX_NAME_PART_BYTES:
                raise self.refuse(
                    f"{what} {abbreviate(raw)} has a path component longer than {_MAX_NAME_PART_BYTES} bytes."
                )

    def _check_place(self, name: str, member: Member) -> None:
        parents = PurePosixPath(name).parents
        for parent in reversed(list(parents)[:-1]):  # outermost first, without "."
            kind = self.kinds.get(str(parent))
            if kind is MemberKind.SYMLINK:
                raise self.refuse(f"member {member.raw_name!r} would be written through the symlink '{parent}'.")
            if kind is not None and kind is not MemberKind.DIR:
                raise self.refuse(f"member {member.raw_name!r} would be written inside the file '{parent}'.")
            self.kinds[str(parent)] = MemberKind.DIR
        if name in self.explicit:
            raise self.refuse(f"member {member.raw_name!r} appears more than once, so its content is ambiguous.")
        existing = self.kinds.get(name)
        if existing is MemberKind.DIR and member.kind is not MemberKind.DIR:
            raise self.refuse(
                f"member {member.raw_name!r} is a {member.kind.value} where other members need a directory."
            )

    def _check_symlink(self, name: str, member: Member) -> None:
        target = member.link_target
        if len(target.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET_BYTES:
            raise self.refuse(f"symlink {member.raw_name!r} has a target longer than {MAX_LINK_TARGET_BYTES} bytes.")
        if not target or "\x00" in target or "\\" in target:
            raise self.refuse(f"symlink {member.raw_name!r} has an invalid target {target!r}.")
        if target.startswith("/") or _DRIVE.match(target):
            raise self.refuse(
                f"symlink {member.raw_name!r} points to the absolute path {target!r}; only "
                "relative links inside the runtime directory are allowed."
            )
        if not _stays_inside(PurePosixPath(name).parent.parts, target):
            raise self.refuse(f"symlink {member.raw_name!r} -> {target!r} points outside the runtime directory.")

    def _check_hardlink(self, member: Member) -> None:
        target = hardlink_source(member.link_target)
        if target not in self.explicit or self.kinds.get(target) is not MemberKind.FILE:
            raise self.refuse(
                f"hard link {member.raw_name!r} -> {member.link_target!r} does not point to a "
                "regular file extracted earlier from the archive."
            )

    def _check_size(self, member: Member) -> None:
        self.declared_bytes += member.size
        if self.declared_bytes > self.limits.max_total_bytes:
            raise self.refuse(f"it unpacks to more than {self.limits.max_total_bytes} bytes.")
        if member.compressed_size is not None and exceeds_ratio(member.size, member.compressed_size, self.limits):
            raise self.refuse(ratio_reason(member, member.size, self.limits))


def abbreviate(raw: str) -> str:
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


def ratio_reason(member: Member, size: int, limits: ExtractLimits) -> str:
    """The refusal of a zip member that expands ``size`` bytes from its compressed size."""
    ratio = size / max(member.compressed_size or 0, 1)
    return f"member {member.raw_name!r} expands {ratio:.0f}:1, above the {limits.max_ratio:.0f}:1 limit (a zip bomb)."


def check_links_inside(root: Path, symlinks: dict[str, str], label: str) -> None:
    """Every link in ``symlinks`` (relative path -> target) resolves to something existing inside ``root``.

    Also for links moved after extraction (a CUDA companion's, merged beside
    ``llama-server``): a target that was inside the companion's own tree can
    point elsewhere, or nowhere, from its new place.

    Raises:
        UnsafeArchiveError: A link escapes ``root`` or dangles.
    """
    check_links_on_disk(root.resolve(), symlinks, label)


def check_links_on_disk(root: Path, symlinks: dict[str, str], label: str) -> None:
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
