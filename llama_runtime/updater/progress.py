"""What an update reports while it runs: its one progress event type, the callbacks, the cancel check.

Every layer that does work (fetch, stage, verify, activate, offline) emits these and the API and
CLI layers show them, so they sit at the bottom of ``updater``; they carry no behaviour beyond
serialising.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock

__all__ = ["CancelCheck", "Phase", "Progress", "ProgressCallback", "RateMeter", "silent"]

# Below this much elapsed time a rate is mostly noise from the first chunk.
_MIN_RATE_WINDOW_SECONDS: Final[float] = 0.2

#: ``stop_server`` and ``health``: the managed server's switch inside an activation, when one runs.
Phase = Literal["resolve", "download", "verify", "activate", "stop_server", "health", "done"]


@dataclass(frozen=True)
class Progress:
    """One progress event of an update: the one type from the download to the job file and ``--events``.

    The installer emits it (the downloader's byte count with the asset's name as
    ``message``), the job recorder adds ``rate`` and ``eta`` and keeps the latest
    one in the job state (:attr:`JobState.progress <updater.api.job_store.JobState.progress>`;
    the job file stores its fields flat), and ``--events`` writes it with
    :meth:`to_json` (docs/events.md, ``type: progress``).
    """

    phase: Phase
    done_bytes: int = 0
    total_bytes: int | None = None
    message: str = ""
    #: Bytes per second and seconds left, once the job recorder has measured them.
    rate: float | None = None
    eta: float | None = None

    @staticmethod
    def rate_meter(clock: Clock | None = None) -> RateMeter:
        """A meter of bytes per second and seconds left, as the job recorder measures ``rate`` and ``eta``.

        ``meter.sample(message, done_bytes, total_bytes)`` returns ``(rate, eta)`` (``None`` until measured).
        """
        return RateMeter(SYSTEM_CLOCK if clock is None else clock)

    def to_json(self) -> dict[str, Any]:
        """The event's fields as ``--events`` writes them (rate and ETA to a tenth)."""
        return {
            "phase": self.phase,
            "done_bytes": self.done_bytes,
            "total_bytes": self.total_bytes,
            "rate": None if self.rate is None else round(self.rate, 1),
            "eta": None if self.eta is None else round(self.eta, 1),
            "message": self.message,
        }


ProgressCallback = Callable[[Progress], None]
CancelCheck = Callable[[], bool]


def silent(_event: Progress) -> None:
    """A progress callback that shows nothing."""


@dataclass
class RateMeter:
    """Average download rate since the first byte seen for the current file.

    Bytes already on disk when a resumed download starts are not counted as
    transferred, so a resume does not show an absurd rate.
    """

    clock: Clock = SYSTEM_CLOCK
    _key: str | None = None
    _start_bytes: int = 0
    _start_time: float = 0.0

    def sample(self, key: str, done: int, total: int | None) -> tuple[float | None, float | None]:
        """Record ``done`` bytes of file ``key``; returns ``(bytes_per_second, eta_seconds)``."""
        now = self.clock.monotonic()
        if key != self._key or done < self._start_bytes:
            self._key, self._start_bytes, self._start_time = key, done, now
            return None, None
        elapsed = now - self._start_time
        if elapsed < _MIN_RATE_WINDOW_SECONDS:
            return None, None
        rate = (done - self._start_bytes) / elapsed
        if rate <= 0 or total is None:
            return (rate if rate > 0 else None), None
        return rate, max(total - done, 0) / rate
