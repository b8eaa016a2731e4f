"""What an update reports when it ends: the outcome (its progress events are :mod:`updater.progress`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.updater.activate.swap import SwitchReport

if TYPE_CHECKING:
    from llama_runtime.updater.activate.attempts import Attempt


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


__all__ = ["UpdateOutcome"]
