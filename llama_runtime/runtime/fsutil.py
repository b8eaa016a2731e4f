"""Crash-consistent file updates.

A file replaced through :func:`atomic_write_bytes` is, after any crash, either
the old content or the new content, never a mix and never empty: the data is
written to a temporary file in the same directory, fsynced, renamed over the
target with :func:`os.replace` (atomic on POSIX and Windows), and the directory
is fsynced so the rename itself is durable (POSIX only; Windows has no
directory handles to fsync). An fsync error fails the operation and is never
retried (PostgreSQL "fsyncgate": a retried fsync can report success for lost
data).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Final

from llama_runtime.runtime.spans import tally, timer

__all__ = [
    "ATOMIC_TMP_SUFFIX",
    "MAX_DECIMAL_DIGITS",
    "MAX_RECORD_BYTES",
    "MAX_RECORD_DEPTH",
    "DamagedRecordError",
    "FlushAhead",
    "NotRegularFileError",
    "decimal",
    "flag",
    "integer",
    "mapping",
    "nests_deeper",
    "number",
    "parse_record",
    "read_cache",
    "read_record",
    "read_regular",
    "text",
    "write_record",
]


# -- fsutil ------------------------------------------------------------------------------------------------------

# Windows refuses to delete or rename a file another process has open
# (antivirus, indexer, a running llama-server.exe); these retries outlast the
# usual short-lived handles without hanging a user for long.
_REMOVE_ATTEMPTS: Final = 5
_REMOVE_BACKOFF_SECONDS: Final = 0.2
# Large enough to amortise syscalls, small enough to keep memory flat for GB files.
_HASH_CHUNK_BYTES: Final = 1024 * 1024
# Directories are opened relative to their parent and never through a link.
_DIR_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_READ_NOFOLLOW: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
# Deletion relative to an open directory (POSIX): no path ever gets longer than one name.
_FD_WALK: Final = os.unlink in os.supports_dir_fd and os.scandir in os.supports_fd


#: Suffix of the atomic write's temp files (``.NAME.*.tmp``): clean-ups find what a killed write left.
ATOMIC_TMP_SUFFIX: Final = ".tmp"


def sha256_file(path: Path) -> str:
    """sha256 hex of a file, read in 1 MiB chunks (never whole into memory)."""
    import hashlib  # deferred: OpenSSL costs start-up time that only hashing needs

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_directory(directory: Path) -> None:
    """Make a rename or creation inside ``directory`` durable (no-op on Windows)."""
    if sys.platform != "win32":  # Windows cannot open a directory to flush it
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: Windows has no pread/pwrite: there a seek and the read or write after it must not interleave with
#: another thread's on a shared (or dup'ed) descriptor.
_POSITIONED: Final = threading.Lock()


def pread(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes of ``fd`` at ``offset`` (``os.pread``, emulated where it is missing)."""
    if sys.platform == "win32":
        with _POSITIONED:
            os.lseek(fd, offset, os.SEEK_SET)
            return os.read(fd, size)
    else:
        return os.pread(fd, size, offset)


def pwrite(fd: int, data: bytes, offset: int) -> int:
    """Write ``data`` to ``fd`` at ``offset`` (``os.pwrite``, emulated where it is missing)."""
    if sys.platform == "win32":
        with _POSITIONED:
            os.lseek(fd, offset, os.SEEK_SET)
            return os.write(fd, data)
    else:
        return os.pwrite(fd, data, offset)


#: "No space left on device" and "disk quota exceeded": both mean the bytes do
#: not fit, and both deserve the same exit code (4) and sentence. The project's
#: one copy of the set (Windows has no ``EDQUOT``).
DISK_FULL_ERRNOS: Final[frozenset[int]] = frozenset(
    e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None
)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


#: Mode of files written for other users to read (a mirror a web server serves,
#: a bundle copied to other machines); the temp files behind atomic writes are 0600.
SHARED_FILE_MODE: Final[int] = 0o644


@contextlib.contextmanager
def atomic_writer(path: Path, *, mode: int | None = None) -> Iterator[BinaryIO]:
    """A file that replaces ``path`` when the block ends, so a crash leaves old or new, never a mix.

    The one atomic write of the project: a temp file ``.NAME.*.tmp`` beside
    ``path`` (recovery removes leftovers of that shape), fsync, ``os.replace``,
    fsync of the directory. An exception in the block removes the temp file
    and leaves ``path`` as it was.

    Args:
        path: The file to replace.
        mode: Permission bits for the new file (default: private, 0600).

    Raises:
        OSError: Writing, fsync or the rename failed; ``path`` is unchanged.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # deferred: start-up only reads

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=ATOMIC_TMP_SUFFIX, dir=path.parent)
    tmp = Path(tmp_name)
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # a failed write() names no file: the error must say which
        raise
    fsync_directory(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_writer`).

    Raises:
        OSError: Writing, fsync or the rename failed; ``path`` is unchanged.
    """
    with atomic_writer(path, mode=mode) as handle:
        handle.write(data)


def atomic_write_json(path: Path, payload: object, *, mode: int | None = None) -> None:
    """:func:`atomic_write_bytes` of pretty, key-sorted JSON with a final newline."""
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def remove_tree(path: Path, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Delete a directory tree, retrying files that are briefly in use (Windows).

    A path that does not exist is fine. Symlinks inside are removed, never
    followed, and a symlink given as ``path`` is removed itself. The walk is
    iterative: a chain thousands of directories deep (longer than PATH_MAX,
    deeper than the recursion limit) is removed like any other tree.

    Raises:
        OSError: The tree could still not be removed after the retries.
    """
    for attempt in range(_REMOVE_ATTEMPTS):
        try:
            _remove_tree_once(path)
            return
        except FileNotFoundError:
            return
        except PermissionError:
            if attempt == _REMOVE_ATTEMPTS - 1:
                raise
            sleep(_REMOVE_BACKOFF_SECONDS * (attempt + 1))


def remove_tree_quietly(path: Path) -> OSError | None:
    """:func:`remove_tree` for clean-ups: never raises, returns what went wrong.

    A clean-up runs while another error is on its way to the user, or before
    the real work; its failure must never replace that error or become a bug
    exit. The next clean-up tries again.
    """
    try:
        remove_tree(path)
    except OSError as exc:
        return exc
    return None


def walk_tree(root: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)`` top-down without recursion and without following links.

    Python 3.11's ``os.walk`` recurses once per level, so a directory chain a
    few thousand deep (a hostile archive, a leftover of one) ends in
    ``RecursionError``. Symlinks to directories are listed as files. A directory
    that cannot be listed is skipped, as ``os.walk`` does.
    """
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            continue
        yield top, dirs, files
        # Callers may prune ``dirs`` in place, as with os.walk.
        stack.extend(os.path.join(top, name) for name in reversed(dirs))


def _remove_tree_once(path: Path) -> None:
    """Delete ``path`` and everything under it, iteratively, never following a link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    if not _FD_WALK:
        _remove_tree_by_path(path)
        return
    fd = os.open(path, _DIR_OPEN_FLAGS)
    # One open descriptor at a time: descend by name, come back through "..",
    # so a chain thousands deep needs neither recursion nor thousands of fds.
    names: list[str] = []
    pending: list[list[tuple[str, bool]]] = []
    try:
        pending.append(_listing(fd))
        while pending:
            if pending[-1]:
                name, is_dir = pending[-1].pop()
                if is_dir:
                    try:
                        child = os.open(name, _DIR_OPEN_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    except (NotADirectoryError, OSError) as exc:
                        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                            raise
                        os.unlink(name, dir_fd=fd)  # replaced by a link or a file meanwhile
                        continue
                    os.close(fd)
                    fd = child
                    names.append(name)
                    pending.append(_listing(fd))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                continue
            pending.pop()
            if names:
                parent = os.open("..", _DIR_OPEN_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _listing(fd: int) -> list[tuple[str, bool]]:
    # An accepted runtime's folders are read-only (runtime.trust): its owner may still empty it.
    st = os.fstat(fd)
    if not st.st_mode & stat.S_IWUSR and st.st_uid == os.geteuid():
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    with os.scandir(fd) as entries:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]


def _remove_tree_by_path(path: Path) -> None:
    """Windows (no ``dir_fd``): the same post-order walk with paths."""
    order: list[str] = []
    for top, _dirs, files in walk_tree(path):
        with contextlib.suppress(OSError):
            os.chmod(top, stat.S_IRWXU)  # a read-only folder of an accepted runtime
        for name in files:
            full = os.path.join(top, name)
            with contextlib.suppress(FileNotFoundError):
                if os.path.isdir(full) and os.path.islink(full):
                    os.rmdir(full)  # a directory junction/link: remove the link only
                else:
                    with contextlib.suppress(OSError):
                        os.chmod(full, stat.S_IWRITE)  # Windows refuses to delete a read-only file
                    os.unlink(full)
        order.append(top)
    for top in reversed(order):
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(top)


def tree_size(path: Path) -> int:
    """Bytes used by the regular files under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in walk_tree(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


class FlushAhead:
    """Fsyncs the files it is handed on a thread of its own, while the rest of a tree is still written.

    A head start for :func:`fsync_tree`, never a replacement: that still
    flushes every file and directory of the tree, and finds these clean, so
    the disk writes the large files while the next members inflate instead of
    after the last one. An fsync error is kept and raised by
    :meth:`wait`, which :func:`fsync_tree` calls first: the kernel reports a
    lost write-back to one fsync only (Linux's errseq), so the later flush
    would see success for bytes that never reached the disk.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[int] = []
        self._worker: threading.Thread | None = None  # runs while files wait, then ends
        self._dropped = False
        self._error: OSError | None = None

    def add(self, fd: int) -> None:
        """Flush the file open as ``fd`` (a descriptor this takes over and closes)."""
        with self._lock:
            self._pending.append(fd)
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name="flush-ahead", daemon=True)
                self._worker.start()

    def wait(self) -> None:
        """Return once every file handed over is flushed.

        Raises:
            OSError: A flush failed (the first error; the failed file is never flushed again).
        """
        while (worker := self._worker) is not None:
            worker.join()
        if self._error is not None:
            raise self._error

    def drop(self) -> None:
        """Close what still waits without flushing it: the tree is being thrown away."""
        self._dropped = True

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._worker = None
                    return
                fd = self._pending.pop(0)
            try:
                if self._error is None and not self._dropped:
                    started = timer()
                    os.fsync(fd)
                    tally("fsync ahead", started)
            except OSError as exc:
                self._error = exc
            finally:
                os.close(fd)


def fsync_tree(root: Path, *, ahead: FlushAhead | None = None) -> None:
    """Flush every regular file and directory under ``root`` to stable storage.

    Called on a staged runtime before its marker is written, so that a marker
    that survives a crash never describes files that did not.

    Why this survives a power loss (tests/test_durability.py records the order;
    the kill tests cannot show it, since a killed process leaves the page cache):
    the install's commit point is the pointer's rename, and before it, in order,
    (1) each regular file of the tree is fsynced (its bytes and size), (2) each
    directory of the tree is fsynced (the entries naming files, links and
    subdirectories; a symlink is created with its entry), (3) the marker is
    written atomically (fsynced, renamed, its directory fsynced), (4) the tree is
    renamed into ``runtimes/`` and that directory fsynced, (5) the pointer is
    written atomically. A power loss before (5) is durable leaves the old pointer,
    naming the old runtime, which nothing touched; after it, the pointer names a
    tree every byte and name of which reached the disk first. An fsync error
    fails the install (never retried; see the module docstring).

    One flush of the whole filesystem instead (``syncfs(2)``, or ``sync``) was
    measured against this on a 256 MB tree of real machine code:
    0.10-0.14 s against 0.12-0.21 s, within the noise of a shared disk. It is
    not kept: it writes back every other process's dirty data too (slower on a
    busy machine), is Linux-only, and reports a write-back error only since
    Linux 5.8, where a per-file fsync reports each file's own. What did pay:
    each large file's fsync begun by a :class:`FlushAhead` as soon as it is
    written, so the disk works while the next members inflate; this flush then
    takes 0.03 s instead of 0.12-0.14 s at 256 MB.

    Args:
        root: The staged tree.
        ahead: Files of the tree already handed to a :class:`FlushAhead`
            during extraction; waited for first, and its error raised.
    """
    if ahead is not None:
        ahead.wait()
    for dirpath, _dirnames, filenames in walk_tree(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not stat.S_ISREG(os.lstat(full).st_mode):
                continue
            fd = os.open(full, _READ_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(dirpath))


# -- record: The one way a JSON state file is read and written. --------------------------------------------------

#: Largest state file read (bytes). The biggest one, the ETag cache, keeps itself
#: under 16 MiB of compact JSON (``updater.sources.github.MAX_CACHE_BYTES``),
#: which the pretty-printed file on disk can double; every other one is a few KB.
MAX_RECORD_BYTES: Final[int] = 64 * 1024 * 1024
#: Deepest nesting accepted. The deepest file is the ETag cache: a release list
#: (4 levels, see ``updater.release.remote_json.MAX_JSON_DEPTH``) under two of its
#: own; 64 leaves room and stays far below the interpreter's recursion limit.
MAX_RECORD_DEPTH: Final[int] = 64
# Read size once the file's own size (read first) was not all of it: small, since
# each read allocates its whole size up front.
_READ_STEP_BYTES: Final[int] = 64 * 1024


class DamagedRecordError(json.JSONDecodeError):
    """A state file that is not JSON, is larger than its bound or nests too deep."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "", 0)


class NotRegularFileError(OSError):
    """A path where a file is expected names a FIFO, a device, a socket or a directory."""


# Opening a FIFO for reading blocks until a writer comes; O_NONBLOCK makes the open return
# at once so fstat can refuse it (it changes nothing for a regular file). Windows has no
# such flag and no FIFO a path can name.
_READ_NONBLOCK: Final = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def read_regular(path: Path, max_bytes: int, *, follow_links: bool = True) -> bytes:
    """Up to ``max_bytes`` bytes of the regular file ``path``, without ever blocking on what it names.

    A caller that reads ``max_bytes + 1`` learns whether the file is larger than its bound.
    ``follow_links=False`` refuses a symlink at ``path`` itself (``O_NOFOLLOW``: ``ELOOP``).

    Raises:
        FileNotFoundError: There is no such file.
        NotRegularFileError: ``path`` is a FIFO, a device, a socket or a directory.
        OSError: It could not be read.
    """
    fd = os.open(path, _READ_NONBLOCK if follow_links else _READ_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise NotRegularFileError(errno.EINVAL, f"it is {kind}, not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return _read_at_most(handle, max_bytes)
    finally:
        os.close(fd)


def read_record(
    path: Path, *, max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_RECORD_DEPTH, follow_links: bool = True
) -> Any:
    """The decoded JSON of the state file ``path`` (any JSON value; the caller checks its shape).

    ``follow_links``: as :func:`read_regular`.

    Raises:
        FileNotFoundError: There is no such file.
        OSError: It could not be read, or is no regular file (:class:`NotRegularFileError`).
        DamagedRecordError: It is not JSON, is over ``max_bytes`` or nests deeper than ``max_depth``.
    """
    raw = read_regular(path, max_bytes + 1, follow_links=follow_links)
    return parse_record(raw, what=str(path), max_bytes=max_bytes, max_depth=max_depth)


#: Suffix a damaged cache or record is renamed to: kept for a person to look at, out of every reader's way.
DAMAGED_SUFFIX: Final = ".damaged"
#: How many ``NAME.damaged-N`` names :func:`set_aside` tries (each one a repair someone did not look at).
_MAX_ASIDE_NAMES: Final = 100


def set_aside(path: Path) -> Path:
    """Rename ``path`` (a directory standing where a file of ours belongs) to a free ``NAME.damaged[-N]``.

    Nothing in it is deleted: the name it gets is reported, for its owner to look at.

    Returns:
        The new name.

    Raises:
        OSError: It could not be renamed; it is where it was.
    """
    for attempt in range(1, _MAX_ASIDE_NAMES + 1):
        aside = path.with_name(path.name + DAMAGED_SUFFIX + ("" if attempt == 1 else f"-{attempt}"))
        if not os.path.lexists(aside):
            os.rename(path, aside)  # lexists first: a rename onto an empty directory would replace it
            return aside
    raise FileExistsError(errno.EEXIST, "no free name to set it aside", str(path))


def read_cache(path: Path, *, max_bytes: int = MAX_RECORD_BYTES, warn: Callable[[str], None] | None = None) -> Any:
    """:func:`read_record` of a cache or record the tool rebuilds (never authoritative state).

    A file that is damaged (not JSON, too large, too deep) or no regular file is set aside as
    ``NAME.damaged`` (replacing an older one) and reads as absent, so no verb fails or slows on
    it twice; ``warn`` hears one sentence saying so. Authoritative state (the pointer, markers)
    never comes here: its damage is a ``corrupt_state`` error naming the repair.

    Returns:
        The decoded JSON, or None when the file is missing, unreadable or was set aside.
    """
    try:
        return read_record(path, max_bytes=max_bytes)
    except (DamagedRecordError, NotRegularFileError) as exc:
        reason = exc.msg if isinstance(exc, DamagedRecordError) else exc.strerror
    except OSError:
        return None  # missing or unreadable (a read-only home): nothing to set aside
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    try:
        os.replace(path, aside)
    except OSError:
        aside = path  # a read-only home: it stays, and reads as absent every time
    if warn is not None:
        moved = f"set aside as {aside.name}" if aside != path else "ignored"
        warn(f"{path} was damaged ({reason}); {moved}, it is rebuilt as needed.")
    return None


def _read_at_most(handle: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``handle``, in reads sized by the file, never one of ``limit`` bytes.

    ``read(n)`` allocates ``n`` bytes before it reads: one read of the whole bound
    would cost 64 MiB of memory for a 200-byte pointer.
    """
    size = os.fstat(handle.fileno()).st_size  # a hint only: a file can grow, a FIFO says 0
    step = min(limit, size + 1)
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = handle.read(min(step, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        step = _READ_STEP_BYTES
    return b"".join(chunks)


def parse_record(
    raw: bytes, *, what: str = "the record", max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_RECORD_DEPTH
) -> Any:
    """:func:`read_record` of bytes already read (``what`` names them in the error).

    Raises:
        DamagedRecordError: ``raw`` is not UTF-8 JSON, is over ``max_bytes`` or nests deeper than ``max_depth``.
    """
    if len(raw) > max_bytes:
        raise DamagedRecordError(f"{what} is larger than {max_bytes} bytes")
    try:
        value = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise DamagedRecordError(f"{what} is not UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise DamagedRecordError(f"{what} nests more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise DamagedRecordError(f"{what} is not JSON ({exc.msg})") from None
    except ValueError:  # an integer past the interpreter's 4,300-digit conversion limit (CVE-2020-10735)
        raise DamagedRecordError(f"{what} holds a number with thousands of digits") from None
    if nests_deeper(value, max_depth):
        raise DamagedRecordError(f"{what} nests more than {max_depth} levels deep")
    return value


def write_record(path: Path, payload: object, *, mode: int | None = None) -> None:
    """Replace the state file ``path`` with ``payload`` as JSON, atomically and durably.

    Raises:
        OSError: Writing, fsync or the rename failed; ``path`` is unchanged.
    """
    atomic_write_json(path, payload, mode=mode)


def nests_deeper(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


# -- typed getters: a field of the wrong type reads as absent ---------------------------------

#: Most digits a count, a size, a port, a time or a build number needs (2**64 has 20); more is
#: damage or an attack, and past 4,300 digits ``int()`` itself raises (CVE-2020-10735).
MAX_DECIMAL_DIGITS: Final[int] = 20


def decimal(value: str, max_digits: int = MAX_DECIMAL_DIGITS) -> int | None:
    """The non-negative integer ``value`` spells in ASCII digits (spaces around allowed), else None.

    ``str.isdigit`` alone is no guard: it accepts ``"²"`` and 5,000 digits, both of which ``int`` refuses.
    """
    digits = value.strip()
    if not digits or len(digits) > max_digits or not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def text(payload: Mapping[str, Any], key: str) -> str | None:
    """``payload[key]`` when it is a string."""
    value = payload.get(key)
    return value if isinstance(value, str) else None


def integer(payload: Mapping[str, Any], key: str) -> int | None:
    """``payload[key]`` when it is an integer (``true``/``false`` are not numbers)."""
    value = payload.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(payload: Mapping[str, Any], key: str) -> float | None:
    """``payload[key]`` as a float when it is a number (never a bool; NaN and infinities included)."""
    value = payload.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def flag(payload: Mapping[str, Any], key: str) -> bool | None:
    """``payload[key]`` when it is ``true`` or ``false``."""
    value = payload.get(key)
    return value if isinstance(value, bool) else None


def mapping(payload: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """``payload[key]`` when it is a JSON object."""
    value = payload.get(key)
    return value if isinstance(value, dict) else None
