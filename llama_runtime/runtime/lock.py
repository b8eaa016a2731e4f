"""The cross-process update lock and its per-caller waiting policy.

One OS-level lock (:class:`filelock.FileLock`; released by the kernel when
the holder dies, so a crash never leaves a stale lock) guards every change to
the runtimes and the pointer. The lock file lives in ``<home>/locks/``,
outside any directory that is swapped or deleted, and is never removed.

Callers differ in how long they may wait: start-up never waits, the update
button fails fast, the scheduler may wait a while. A side file records who
holds the lock, so "busy" can say what is running. That record is best-effort:
the flock is the lock, so a holder that cannot write it (a full disk) still
holds the lock, and readers take a missing or empty record as "owner unknown".
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.errors import BusyError, CorruptStateError
from llama_runtime.runtime.fsutil import read_cache, write_record

if TYPE_CHECKING:
    import filelock

#: Seconds the update button waits for the lock: long enough to ride over
#: another process's short read-modify-write of the pointer (rollback),
#: short enough that a second click answers "busy" at once.
BUTTON_WAIT_SECONDS: Final = 0.5
#: Never wait: app start-up must not block on an update in progress.
NO_WAIT: Final = 0.0
#: What opening the lock file in a home this process may read but not write raises.
READ_ONLY_ERRNOS: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
#: The owner record is three short fields; anything far larger is not one.
_MAX_OWNER_BYTES: Final = 64 * 1024
#: Longest operation name shown in "busy" (the verbs are short words).
_MAX_OPERATION_CHARS: Final = 40


@dataclass(frozen=True)
class LockOwner:
    """Who holds the update lock, as recorded in the side file."""

    pid: int
    operation: str
    since: float


def busy_error(owner: LockOwner | None, now: float) -> BusyError:
    """The "busy" error for a lock ``owner`` holds: who (verb, pid), since when, and how to end it."""
    doing = ""
    if owner is not None:
        held = max(0.0, now - owner.since) if math.isfinite(now - owner.since) else 0.0
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(min(owner.since, now)))
        doing = f" ({owner.operation}, pid {owner.pid}, since {started}, {held:.0f} s ago)"
    return BusyError(
        f"Another llama-runtime process is updating this runtime{doing}.",
        hint="Wait for it to finish (`llama-runtime job wait`), or stop it with `llama-runtime job cancel`.",
    )


def lock_is_directory(lock_path: Path) -> CorruptStateError:
    """The error for a directory standing where a lock file belongs: no locked command can run."""
    return CorruptStateError(
        f"The lock file {lock_path} is a directory, not a file; no command that changes the home can run.",
        hint="Run `llama-runtime doctor --repair`: it moves the directory aside (keeping what is in it).",
    )


class UpdateLock:
    """The update lock of one home.

    Args:
        lock_path: ``<home>/locks/update.lock``.
        clock: Stamps the owner record's ``since``.
    """

    def __init__(self, lock_path: Path, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.lock_path = lock_path
        self.clock = clock
        self.owner_path = lock_path.with_suffix(".owner.json")
        self._lock_object: filelock.BaseFileLock | None = None

    @property
    def _lock(self) -> filelock.BaseFileLock:
        # filelock is imported on first use: `status` usually never needs it.
        if self._lock_object is None:
            import filelock

            self._lock_object = filelock.FileLock(str(self.lock_path), thread_local=False)
        return self._lock_object

    def owner(self) -> LockOwner | None:
        """The recorded holder, if any (may be stale when nobody holds the lock)."""
        try:
            if self.owner_path.stat().st_size == 0:
                return None  # a holder that could not write its record: owner unknown, not damage
        except OSError:
            return None
        payload = read_cache(self.owner_path, max_bytes=_MAX_OWNER_BYTES)
        try:
            pid, operation, since = payload["pid"], payload["operation"], payload["since"]
        except (KeyError, TypeError):
            return None
        if not (isinstance(pid, int) and 0 < pid < 2**31 and isinstance(operation, str)):
            return None  # a pid no process can have, or a stranger's file
        if not isinstance(since, int | float) or isinstance(since, bool) or not math.isfinite(since):
            return None
        return LockOwner(pid, operation[:_MAX_OPERATION_CHARS], float(since))

    def is_held(self) -> bool:
        """Whether some process (this one included) holds the lock right now.

        Holders record themselves in the owner file right after acquiring (an
        empty one when the record cannot be written), so no owner file means
        not held (checked without importing filelock).
        """
        if self._lock_object is not None and self._lock_object.is_locked:
            return True
        if not self.owner_path.exists():
            return False
        import filelock

        probe = filelock.FileLock(str(self.lock_path), thread_local=False)
        try:
            probe.acquire(timeout=0)
        except filelock.Timeout:
            return True
        except OSError:
            return False  # no lock file can be opened (a directory in its place): nobody holds it
        probe.release()
        return False

    @contextlib.contextmanager
    def hold_for_reading(self, operation: str, *, timeout: float = NO_WAIT) -> Iterator[bool]:
        """:meth:`hold` for commands that only read; yields whether the lock is held.

        In a home this process cannot write (a read-only mount, another user's
        home) the lock file cannot be opened. Such a process cannot change the
        home either, so it reads without the lock instead of failing: runtime
        directories never change after activation and the pointer is replaced
        atomically, so what it reads is a consistent state.

        Raises:
            BusyError: Another process holds the lock.
        """
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.hold(operation, timeout=timeout))
            except OSError as exc:
                if exc.errno not in READ_ONLY_ERRNOS:
                    raise
                yield False
                return
            yield True

    @contextlib.contextmanager
    def hold(self, operation: str, *, timeout: float = NO_WAIT) -> Iterator[None]:
        """Hold the lock for ``operation``, waiting at most ``timeout`` seconds.

        Raises:
            BusyError: Another process holds the lock; the message says what it does.
        """
        import filelock

        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=timeout)
        except filelock.Timeout:
            raise busy_error(self.owner(), self.clock.time()) from None
        except OSError:
            if self.lock_path.is_dir() and not self.lock_path.is_symlink():
                raise lock_is_directory(self.lock_path) from None
            raise
        try:
            self._record_owner(operation)
            yield
        finally:
            with contextlib.suppress(OSError):
                self.owner_path.unlink()
            self._lock.release()

    def _record_owner(self, operation: str) -> None:
        """Write the owner record, or at least an empty one: the lock holds without it (a full disk)."""
        try:
            write_record(self.owner_path, {"pid": os.getpid(), "operation": operation, "since": self.clock.time()})
        except OSError:
            # An empty file needs no data block; if even that fails, "busy" only cannot say who.
            with contextlib.suppress(OSError):
                self.owner_path.touch()
