"""What an update reports while it runs and when it ends: progress events and the outcome.

These types are shared by the install transaction, the offline installs and the
API/CLI layers that show them; they carry no behaviour beyond serialising.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.updater.activate.swap import SwitchReport

if TYPE_CHECKING:
    from llama_runtime.updater.activate.attempts import Attempt

Phase = Literal["resolve", "download", "verify", "activate", "done"]


@dataclass(frozen=True)
class Progress:
    """One progress event of an update: the one type from the download to the job file and ``--events``.

    The installer emits it (the downloader's byte count with the asset's name as
    ``message``), the job recorder adds ``rate`` and ``eta`` and keeps the latest
    one in the job state (:attr:`JobState.progress <updater.api.job_state.JobState.progress>`;
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


@dataclass(frozen=True)
class UpdateOutcome:
    """The result of :meth:`~llama_runtime.updater.activate.transaction.Installer.update`.

    ``attempts`` are the candidate builds the update tried, in order, the last one
    the build that ended it (see :mod:`.attempts`); empty when nothing was tried.
    """

    result: Literal["installed", "switched", "up_to_date"]
    active: InstalledRuntime
    previous: InstalledRuntime | None
    warnings: tuple[str, ...] = ()
    server: SwitchReport | None = None
    attempts: tuple[Attempt, ...] = ()

    def to_json(self) -> dict[str, object]:
        """The ``update`` object of the CLI contract."""
        return {
            "result": self.result,
            "active": self.active.to_json(),
            "previous": self.previous.to_json() if self.previous else None,
            "warnings": list(self.warnings),
            "server_restarted": bool(self.server and self.server.restarted),
            "reload_required": bool(self.server and self.server.reload_required),
            "gate": self.server.gate_json() if self.server else None,
            "attempts": [a.to_json() for a in self.attempts],
        }


__all__ = ["CancelCheck", "Phase", "Progress", "ProgressCallback", "UpdateOutcome", "silent"]
