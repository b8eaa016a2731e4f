"""Safe extraction of llama.cpp release archives (``.zip``, ``.tar.gz``), and finding ``llama-server`` in them.

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

The formats are read by the ``archive_formats`` section of :mod:`.archive_rules`; the checks are
its rules; this module runs the passes and writes.

Invariant: on any refusal nothing has been written outside ``dest``; the
caller discards ``dest`` itself.
"""

from __future__ import annotations

import hashlib
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Final

from llama_runtime.runtime.errors import CancelledError, LlamaRuntimeError, UnsafeArchiveError
from llama_runtime.runtime.fsutil import FlushAhead, is_disk_full
from llama_runtime.runtime.spans import tally, timer
from llama_runtime.updater.stage.archive_rules import (
    DEFAULT_LIMITS,
    ExtractLimits,
    Member,
    MemberKind,
    MemberPlan,
    Opener,
    check_links_on_disk,
    exceeds_ratio,
    hardlink_source,
    ratio_reason,
    reader_for,
    reading,
    tar_stream_members,
)

# 1 MiB: large enough that syscall overhead is negligible, small enough that a
# multi-GiB shared library never sits in memory.
CHUNK_BYTES: Final = 1024 * 1024

# Members at least this large are hashed and written on a thread of their own (_Sink);
# smaller ones are not worth a thread start.
_PIPELINE_MIN_BYTES: Final = 4 * CHUNK_BYTES
# Chunks waiting for that thread: enough to ride out a slow write, bounded memory (3 MiB).
_PIPELINE_DEPTH: Final = 3

# Permissions we write: owner-writable, never setuid/setgid/sticky or
# group/world-writable. Exec is all-or-nothing, as pip and uv do.
_EXEC_MODE: Final = 0o755
_PLAIN_MODE: Final = 0o644
_DIR_MODE: Final = 0o755

# O_NOFOLLOW does not exist on Windows; there the parent checks are the guard.
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
_READ_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)

_SERVER_NAMES: Final = frozenset({"llama-server", "llama-server.exe"})
_LEGACY_SERVER_NAMES: Final = frozenset({"server", "server.exe"})
# llama-bN/build/bin/Release/ is the deepest layout seen (4 directories);
# anything deeper is not a runtime layout and not worth walking.
_MAX_SEARCH_DEPTH: Final = 4

__all__ = [
    "ExtractResult",
    "choose_server_path",
    "extract_archive",
    "extract_tar_stream",
    "find_server_binary",
]


@dataclass
class ExtractResult:
    """What an extraction wrote.

    Attributes:
        files: Relative POSIX path → (size in bytes, sha256 hex) of every
            regular file, computed while writing.
        symlinks: Relative POSIX path → link target, as stored in the archive.
        total_bytes: Regular-file bytes actually written.
        member_count: Entries in the archive, directories included.
        ahead: The large files' flushes, begun as each was written. Whoever
            makes the tree durable passes it to
            :func:`~llama_runtime.runtime.fsutil.fsync_tree`, which waits for
            them: their errors are reported there and nowhere else.
    """

    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    total_bytes: int = 0
    member_count: int = 0
    ahead: FlushAhead = field(default_factory=FlushAhead, repr=False, compare=False)


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    limits: ExtractLimits = DEFAULT_LIMITS,
    cancel: Callable[[], bool] | None = None,
    ahead: FlushAhead | None = None,
) -> ExtractResult:
    """Extract a ``.zip`` or ``.tar.gz`` into an empty staging directory.

    Args:
        archive: The archive; its format is detected from its magic bytes.
        dest: A non-existent or empty directory, on the filesystem the
            runtime will be activated on. The caller deletes it on failure.
        limits: Caps on size, member count and zip compression ratio.
        cancel: Polled between members and chunks; ``True`` stops the job.
        ahead: Where the large files' flushes begin (default: a new one, in the result).

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
    reader = reader_for(archive, label)
    _prepare_dest(dest)
    root = dest.resolve()

    plan = MemberPlan(label, limits)
    for member, _ in reader():
        _poll(cancel, label)
        plan.admit(member)

    return _write_all(_Writer(root, label, limits, cancel, ahead), MemberPlan(label, limits), reader())


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
        stream: The gzip bytes, e.g. a :class:`~updater.fetch.download.FollowReader`.
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
    plan = MemberPlan(label, limits)
    return _write_all(_Writer(root, label, limits, cancel), plan, tar_stream_members(stream, label))


def _write_all(writer: _Writer, plan: MemberPlan, members: Iterable[tuple[Member, Opener]]) -> ExtractResult:
    """Write every member ``plan`` admits, then check the links on disk; a failure drops the flushes begun."""
    try:
        for member, opener in members:
            _poll(writer.cancel, writer.label)
            name = plan.admit(member)
            if name is not None:
                _write_member(writer, name, member, opener, writer.label)
        writer.result.member_count = plan.count
        check_links_on_disk(writer.root, writer.result.symlinks, writer.label)
    except BaseException:
        writer.result.ahead.drop()  # the caller throws the tree away: its files need no flush
        raise
    return writer.result


def _write_member(writer: _Writer, name: str, member: Member, opener: Opener, label: str) -> None:
    """Write one admitted member; a failure other than a full disk is the archive's fault."""
    try:
        writer.write(name, member, opener)
    except OSError as exc:
        if is_disk_full(exc):  # the machine's problem (exit 4), not the archive's
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


class _Writer:
    """Writes admitted members under ``root``, counting every byte."""

    def __init__(
        self,
        root: Path,
        label: str,
        limits: ExtractLimits,
        cancel: Callable[[], bool] | None,
        ahead: FlushAhead | None = None,
    ) -> None:
        self.root = root
        self.label = label
        self.limits = limits
        self.cancel = cancel
        self.result = ExtractResult(ahead=ahead or FlushAhead())

    def refuse(self, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"Refusing {self.label}: {why}")

    def path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def write(self, name: str, member: Member, opener: Opener) -> None:
        self._make_dirs(name.split("/")[:-1], member)
        if member.kind is MemberKind.DIR:
            self._make_dirs(name.split("/"), member)
        elif member.kind is MemberKind.SYMLINK:
            os.symlink(member.link_target, self.path(name))
            self.result.symlinks[name] = member.link_target
        elif member.kind is MemberKind.HARDLINK:
            source = hardlink_source(member.link_target)
            if source is None:  # the plan refuses these; this keeps the type honest
                raise self.refuse(f"hard link {member.raw_name!r} has no safe target.")
            fd = os.open(self.path(source), _READ_FLAGS)
            with os.fdopen(fd, "rb") as src:
                self.result.files[name] = self._copy(src, name, member)
        else:
            with opener() as src:
                self.result.files[name] = self._copy(src, name, member)

    def _make_dirs(self, parts: list[str], member: Member) -> None:
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

    def _copy(self, src: IO[bytes], name: str, member: Member) -> tuple[int, str]:
        target = self.path(name)
        written = 0
        fd = os.open(target, _CREATE_FLAGS, 0o600)
        with os.fdopen(fd, "wb") as out:
            sink = _Sink(out, threaded=member.size >= _PIPELINE_MIN_BYTES)
            try:
                while True:
                    _poll(self.cancel, self.label)
                    started = timer()
                    with reading(self.label):
                        chunk = src.read(CHUNK_BYTES)
                    tally("inflate+input", started)
                    if not chunk:
                        break
                    written += len(chunk)
                    self.result.total_bytes += len(chunk)
                    if self.result.total_bytes > self.limits.max_total_bytes:
                        raise self.refuse(f"it unpacks to more than {self.limits.max_total_bytes} bytes.")
                    if member.compressed_size is not None and exceeds_ratio(
                        written, member.compressed_size, self.limits
                    ):
                        raise self.refuse(ratio_reason(member, written, self.limits))
                    sink.put(chunk)
            except BaseException:
                sink.stop()  # the extracting thread's own error is the one that leaves
                raise
            sha256 = sink.close()  # every chunk written (or the writer's error raised)
            if sink.threaded:  # a large file: the disk writes it while the next members inflate
                out.flush()
                self.result.ahead.add(os.dup(out.fileno()))
        if member.kind is MemberKind.FILE and written != member.size:
            raise self.refuse(f"member {member.raw_name!r} holds {written} bytes but its header says {member.size}.")
        os.chmod(target, _EXEC_MODE if member.mode & 0o111 else _PLAIN_MODE)
        return written, sha256


class _Sink:
    """Hashes and writes one member's chunks, on a thread of its own for a large member.

    Inflating, hashing and writing are each about a third of extracting machine
    code; with the last two on another thread (hashlib, ISA-L and
    ``write`` all release the GIL) the extraction runs at the inflater's speed.
    At most :data:`_PIPELINE_DEPTH` chunks wait, so memory stays bounded. The
    writer's error (a full disk) is raised in the extracting thread, by the
    next :meth:`put` or by :meth:`close`; a failing extraction calls :meth:`stop`.
    """

    def __init__(self, out: IO[bytes], *, threaded: bool) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.error: BaseException | None = None
        self.queue: queue.Queue[bytes | None] | None = None
        self.thread: threading.Thread | None = None
        self.threaded = threaded
        if threaded:
            self.queue = queue.Queue(maxsize=_PIPELINE_DEPTH)
            self.thread = threading.Thread(target=self._drain, name="extract-writer", daemon=True)
            self.thread.start()

    def put(self, chunk: bytes) -> None:
        if self.queue is None:
            self._write(chunk)
            return
        if self.error is not None:
            raise self.error
        self.queue.put(chunk)

    def stop(self) -> None:
        """Wait for the writer to finish what it was given (the caller is failing anyway)."""
        if self.queue is not None and self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.queue = self.thread = None

    def close(self) -> str:
        """Wait for every chunk to be written; the sha256 of them all.

        Raises:
            OSError: The writer failed.
        """
        self.stop()
        if self.error is not None:
            raise self.error
        return self.digest.hexdigest()

    def _write(self, chunk: bytes) -> None:
        started = timer()
        self.out.write(chunk)
        tally("write", started)
        started = timer()
        self.digest.update(chunk)
        tally("hash files", started)

    def _drain(self) -> None:
        assert self.queue is not None
        while (chunk := self.queue.get()) is not None:
            if self.error is None:  # after a failure, only empty the queue so put() never blocks
                try:
                    self._write(chunk)
                except BaseException as exc:
                    self.error = exc


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
