"""What is known about the managed server right now: the ``server`` object of the CLI contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llama_runtime.runtime.health import Health
from llama_runtime.runtime.server_record import ServerState


@dataclass(frozen=True)
class ServerStatus:
    """What is known about the managed server right now.

    ``healthy`` is None when no server runs (nothing to ask).
    """

    running: bool
    pid: int | None = None
    binary: Path | None = None
    args: list[str] = field(default_factory=list)
    port: int | None = None
    runtime_name: str | None = None
    healthy: bool | None = None
    health_detail: str = ""
    host: str | None = None
    started_at: str | None = None

    def to_json(self) -> dict[str, object]:
        """The server object of the CLI contract."""
        return {
            "running": self.running,
            "pid": self.pid,
            "binary": str(self.binary) if self.binary else None,
            "args": list(self.args),
            "host": self.host,
            "port": self.port,
            "runtime_name": self.runtime_name,
            "started_at": self.started_at,
            "healthy": self.healthy,
            "health_detail": self.health_detail,
        }


def gone_status(state: ServerState) -> ServerStatus:
    """The status of a recorded server whose process is no longer running."""
    return ServerStatus(
        running=False,
        binary=state.binary,
        args=list(state.args),
        port=state.port,
        runtime_name=state.runtime_name,
        host=state.host,
        started_at=state.started_at,
        health_detail=f"the recorded process {state.pid} is no longer running",
    )


def running_status(state: ServerState, answer: Health | None) -> ServerStatus:
    """The status of a running server; ``answer`` is its ``/health``, None when no address is recorded."""
    if answer is None:
        healthy: bool | None = None
        detail = "no --port recorded; health unknown"
    else:
        healthy, detail = answer.ok, answer.detail
    return ServerStatus(
        running=True,
        pid=state.pid,
        binary=state.binary,
        args=list(state.args),
        port=state.port,
        runtime_name=state.runtime_name,
        healthy=healthy,
        health_detail=detail,
        host=state.host,
        started_at=state.started_at,
    )
