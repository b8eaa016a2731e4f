"""The one clock seam: wall time for records, monotonic time for intervals.

Everything that reads time takes a :class:`Clock` (default :data:`SYSTEM_CLOCK`),
so a test replaces time in one place: the engine's ``Seams.clock`` reaches the
job records, the rate meter and the rate-limit backoff.

Invariant: wall time (``time``) is only stored or compared with stored times
(job timestamps, "not before" of a backoff); durations, rates and deadlines use
``monotonic``, which never jumps when NTP or a person sets the clock.
Waiting itself (``sleep``, ``Event.wait``, a queue's timeout) stays on the real
clocks: a wait needs real time to pass, whatever a fake clock says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, Protocol

__all__ = [
    "RETRY_ATTEMPTS",
    "RETRY_BACKOFF_SECONDS",
    "SYSTEM_CLOCK",
    "Clock",
    "SystemClock",
    "TimeBudget",
    "backoff_seconds",
    "epoch_of",
    "tries",
    "utc_iso",
]


# -- clock -------------------------------------------------------------------------------------------------------


class Clock(Protocol):
    """Where time comes from."""

    def time(self) -> float:
        """Epoch seconds: what is stored and read back, also by other processes."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back: durations, rates and deadlines."""
        ...


class SystemClock:
    """The machine's clocks (:func:`time.time` and :func:`time.monotonic`)."""

    def time(self) -> float:
        """Epoch seconds."""
        return time.time()

    def monotonic(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()


#: The clock every seam defaults to.
SYSTEM_CLOCK: Final[Clock] = SystemClock()


def utc_iso(epoch: float) -> str:
    """``epoch`` as UTC ISO 8601 with milliseconds and a ``Z`` (``2026-11-30T16:26:02.123Z``).

    Milliseconds, because "newest" (gc, doctor --repair) orders runtimes by their
    install time and two installs can finish within one second.
    """
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def when_text(epoch: float, now: float) -> str:
    """``epoch`` for people: UTC ISO 8601 to the second and how far from ``now``.

    ``2026-12-01T12:40:00Z, in 12 min`` (or ``… 30 s ago``): the stamp for logs and
    other machines, the distance for whoever reads it now.
    """
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = round(abs(epoch - now))
    distance = f"{seconds} s" if seconds < 120 else f"{round(seconds / 60)} min"
    return f"{stamp}, {'in ' + distance if epoch >= now else distance + ' ago'}"


def epoch_of(iso: str) -> float:
    """The epoch seconds of a :func:`utc_iso` stamp (its inverse, to the millisecond).

    Raises:
        ValueError: ``iso`` is not an ISO 8601 time.
    """
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(iso)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


# -- retry: The one retry schedule for transient network failures. -----------------------------------------------

#: Tries in all, the first included. Resets and 5xx from GitHub's API and its CDN
#: usually clear within seconds, and each download retry resumes where the last
#: stopped, so three tries cost little bandwidth and little waiting.
RETRY_ATTEMPTS: Final[int] = 3
#: Wait before the second try (seconds); it doubles for each further one, so three
#: tries wait 1 s + 2 s = ~3 s before the user sees the error.
RETRY_BACKOFF_SECONDS: Final[float] = 1.0


def backoff_seconds(failed: int) -> float:
    """The wait after the ``failed``-th failed try (1-based): 1 s, 2 s, 4 s …"""
    # Read at call time, so a test can set the one constant to 0 and keep the retries.
    return RETRY_BACKOFF_SECONDS * 2.0 ** (failed - 1)


def tries(sleep: Callable[[float], None], *, attempts: int = RETRY_ATTEMPTS) -> Iterator[bool]:
    """Yield once per try, ``True`` for the last one; sleep the backoff between two tries.

    The caller's loop body makes one try; it returns or raises to stop, and falls
    through to the next iteration to try again::

        for last in tries(sleep):
            try:
                return fetch()
            except NetworkError:
                if last:
                    raise

    Args:
        sleep: The wait (``time.sleep``; injectable so tests never wait).
        attempts: Tries in all (at least one).
    """
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            sleep(backoff_seconds(attempt - 1))
        yield attempt == attempts


#: Least time worth starting a try with (seconds): less cannot even connect to a distant host.
MIN_TRY_SECONDS: Final[float] = 0.5


class TimeBudget:
    """Seconds a series of waits may take together; only time spent inside :meth:`spending` counts.

    One overall deadline for a source's API requests: retries, backoff and slow
    answers all draw on it, while time between requests (a download, a
    verification) does not. Nested spending counts once.

    Args:
        seconds: The whole budget (positive).
        clock: Where monotonic time comes from.
    """

    def __init__(self, seconds: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.seconds = seconds
        self._clock = clock
        self._spent = 0.0
        self._since: float | None = None  # start of the outermost spending now running

    def left(self) -> float:
        """Seconds still allowed (never below 0)."""
        running = self._clock.monotonic() - self._since if self._since is not None else 0.0
        return max(0.0, self.seconds - self._spent - running)

    def allows_retry(self, failed: int) -> bool:
        """Whether, after the ``failed``-th failed try, the backoff and one more try still fit."""
        return self.left() > backoff_seconds(failed) + MIN_TRY_SECONDS

    @contextmanager
    def spending(self) -> Iterator[None]:
        """Count the time of the ``with`` body against the budget."""
        if self._since is not None:
            yield
            return
        self._since = self._clock.monotonic()
        try:
            yield
        finally:
            self._spent += self._clock.monotonic() - self._since
            self._since = None
