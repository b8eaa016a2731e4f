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
from typing import Final, Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "epoch_of", "utc_iso"]


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


def epoch_of(iso: str) -> float:
    """The epoch seconds of a :func:`utc_iso` stamp (its inverse, to the millisecond).

    Raises:
        ValueError: ``iso`` is not an ISO 8601 time.
    """
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(iso)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
