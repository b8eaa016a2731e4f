"""A download that drips is a failed download: a minimum rate and an overall deadline.

httpx's read timeout only bounds the wait for the *next* byte, so a server
sending one byte every ten seconds keeps an update (and its lock) alive
forever (issue 12, finding 6). :class:`PaceWatch` ends such a download with a
:class:`~runtime.errors.NetworkError` (exit 7): the bytes are kept for a
resume, and the update lock is released.

Configurable for slow links (and tests), each in the environment:
``LLAMA_RUNTIME_MIN_RATE`` (bytes per second), ``LLAMA_RUNTIME_MIN_RATE_WINDOW``
(seconds the rate is averaged over) and ``LLAMA_RUNTIME_DOWNLOAD_DEADLINE``
(seconds for one asset, all attempts together).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.updater.config import env_number

__all__ = [
    "DOWNLOAD_DEADLINE_SECONDS",
    "MIN_RATE_BYTES_PER_SECOND",
    "MIN_RATE_WINDOW_SECONDS",
    "DownloadPace",
    "PaceWatch",
]

#: Below 1 KiB/s a 100 MB asset would take more than a day: the link is
#: stalled, not slow (curl's --speed-limit idea; its users pick similar values).
MIN_RATE_BYTES_PER_SECOND: Final[float] = 1024.0
#: The rate is averaged over a minute, so a short stall (a Wi-Fi roam, a CDN
#: hiccup) never ends a healthy download.
MIN_RATE_WINDOW_SECONDS: Final[float] = 60.0
#: One asset may take at most 6 hours over all attempts: the largest asset
#: (~400 MB) still fits at ~20 KB/s, and a server that drips just above the
#: minimum rate cannot hold the update lock for days.
DOWNLOAD_DEADLINE_SECONDS: Final[float] = 6 * 3600.0


@dataclass(frozen=True)
class DownloadPace:
    """The limits one download is held to."""

    min_rate: float = MIN_RATE_BYTES_PER_SECOND
    window: float = MIN_RATE_WINDOW_SECONDS
    deadline: float = DOWNLOAD_DEADLINE_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DownloadPace:
        """The limits with the environment's overrides.

        Raises:
            UserInputError: A value is not a positive number (``LLAMA_RUNTIME_MIN_RATE`` may be 0: off).
        """
        return cls(
            min_rate=env_number(
                env, "LLAMA_RUNTIME_MIN_RATE", MIN_RATE_BYTES_PER_SECOND, unit="bytes per second", zero_ok=True
            ),
            window=env_number(env, "LLAMA_RUNTIME_MIN_RATE_WINDOW", MIN_RATE_WINDOW_SECONDS),
            deadline=env_number(env, "LLAMA_RUNTIME_DOWNLOAD_DEADLINE", DOWNLOAD_DEADLINE_SECONDS),
        )


class PaceWatch:
    """Watches one download over all its attempts; :meth:`too_slow` says when to give up.

    Args:
        pace: The limits.
        clock: The clock (its monotonic time; injectable for tests).
    """

    def __init__(self, pace: DownloadPace, clock: Clock = SYSTEM_CLOCK) -> None:
        self.pace = pace
        self.clock = clock
        self.started = clock.monotonic()
        self._window_start = self.started
        self._window_bytes = 0

    def new_attempt(self) -> None:
        """Start a new rate window (a retry's connection gets a full window)."""
        self._window_start = self.clock.monotonic()
        self._window_bytes = 0

    def too_slow(self, received: int) -> str | None:
        """Record ``received`` new bytes; why the download must stop, or ``None``."""
        now = self.clock.monotonic()
        if now - self.started > self.pace.deadline:
            return f"it took longer than the {self.pace.deadline:.0f} s deadline (LLAMA_RUNTIME_DOWNLOAD_DEADLINE)"
        self._window_bytes += received
        elapsed = now - self._window_start
        if elapsed < self.pace.window:
            return None
        if self._window_bytes < self.pace.min_rate * elapsed:
            return (
                f"the server sent {self._window_bytes} bytes in {elapsed:.0f} s, below the minimum of "
                f"{self.pace.min_rate:.0f} bytes/s (LLAMA_RUNTIME_MIN_RATE)"
            )
        self._window_start, self._window_bytes = now, 0
        return None
