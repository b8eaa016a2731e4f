"""What a use case of the front door is given: the engine, the job store, and the caller's defaults.

``RuntimeUpdater`` builds one per call and hands it to the use cases (``check``, ``manage``,
``doctor``); they never reach into the updater, so the front door depends on them and never
the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.api.job_store import JobStore
    from llama_runtime.updater.api.jobs import JobRunner
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.release.channel import Channel

__all__ = ["UseCaseContext"]


@dataclass(frozen=True)
class UseCaseContext:
    """The collaborators and defaults of one front-door call.

    Attributes:
        engine: Builds the release source, the installer and the host facts.
        jobs: The home's job records (every job of a home is claimed through them).
        repo: ``owner/name`` releases come from.
        backend: ``auto`` or the backend the caller named (what ``use``, ``remove`` and ``check`` go by).
        backend_request: What ``update`` and ``plan`` ask: the named backend (``auto`` included),
            or ``None`` to keep the active runtime's stored request.
        channel: ``stable``/``nightly``, or ``None`` for the active runtime's stored channel.
        file_repo: The origin ``install_file`` records when none is given.
    """

    engine: Engine
    jobs: JobStore
    repo: str
    backend: str
    backend_request: str | None
    channel: Channel | None
    file_repo: Callable[[], str]

    @property
    def home(self) -> Home:
        """The llama-runtime home."""
        return self.engine.home

    @property
    def explicit_backend(self) -> str | None:
        """The backend the caller named, ``None`` for ``auto``."""
        return None if self.backend == "auto" else self.backend

    def runner(self) -> JobRunner:
        """Claims and runs the home's jobs through the engine."""
        from llama_runtime.updater.api.jobs import JobRunner

        return JobRunner(self.home, self.jobs, self.engine)
