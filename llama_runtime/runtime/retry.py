"""The one retry schedule: how often a transient network failure is tried again, and how long to wait.

Three loops use it: a GitHub API request (``updater.sources.github``),
an asset download (``updater.fetch.download``) and one range of a parallel
download (``updater.fetch.ranges``). Before this module each had its own copy
of the same numbers; they are kept here once, unchanged.

Invariant: only failures that may clear by themselves (a reset, a timeout, a
5xx) are retried; what a retry cannot fix (a digest mismatch, a full disk, a
cancel) ends the loop at once, in the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["RETRY_ATTEMPTS", "RETRY_BACKOFF_SECONDS", "backoff_seconds", "tries"]

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
