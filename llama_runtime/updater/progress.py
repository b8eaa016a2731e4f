"""What an update reports while it runs: its one progress event type, the callbacks, the cancel check.

Every layer that does work (fetch, stage, verify, activate, offline) emits these and the API and
CLI layers show them, so they sit at the bottom of ``updater``; they carry no behaviour beyond
serialising.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CancelCheck", "Phase", "Progress", "ProgressCallback", "silent"]

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
