"""Starting llama-server detached from this process, reading its log, signalling it.

The server must outlive the CLI that started it (its own session or process
group: Ctrl-C in the terminal does not reach it), write to its own log, and
be stoppable by pid; what differs between POSIX and Windows lives here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from llama_runtime.runtime.errors import ServerStartError, ServerStopError

#: Sends a signal to a pid (``os.kill``; tests inject failures here).
Kill = Callable[[int, int], None]

if sys.platform == "win32":
    # TerminateProcess (what os.kill maps to) is already unconditional.
    HARD_KILL: Final[int] = signal.SIGTERM
else:
    HARD_KILL = signal.SIGKILL


def spawn_detached(
    binary: Path, args: Sequence[str], env: Mapping[str, str] | None, cwd: Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """Launch ``binary args`` in its own session, stdout and stderr to ``log_path``.

    The previous log is kept as ``<log>.1``.

    Raises:
        ServerStartError: The binary could not be executed.
    """
    if log_path.exists():
        os.replace(log_path, log_path.with_name(log_path.name + ".1"))
    try:
        with open(log_path, "wb") as log:
            return subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd),
                close_fds=True,
                # A new session/process group: Ctrl-C in the CLI's terminal
                # and the CLI's exit must not take the server down.
                start_new_session=sys.platform != "win32",
                creationflags=_creation_flags(),
            )
    except OSError as exc:
        raise ServerStartError(
            f"Could not start {binary}: {exc.strerror or exc}.",
            hint="Check that the runtime is installed (`llama-runtime status`).",
        ) from exc


def log_tail(log_path: Path, lines: int, max_bytes: int) -> list[str]:
    """The last non-empty ``lines`` of the server's log, reading at most its last ``max_bytes``."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(log.seek(0, os.SEEK_END) - max_bytes, 0))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def signal_server(kill: Kill, pid: int, signum: int) -> None:
    """Send ``signum`` to the server ``pid``; one that already exited is fine.

    Raises:
        ServerStopError: It belongs to another user, or the signal failed.
    """
    try:
        kill(pid, signum)
    except ProcessLookupError:
        return  # exited between the liveness check and the signal
    except PermissionError as exc:
        raise ServerStopError(
            f"Not allowed to stop llama-server (pid {pid}): it belongs to another user.",
            reason="permission_denied",
            hint="Stop it as the user that started it.",
        ) from exc
    except OSError as exc:
        raise ServerStopError(
            f"Could not signal llama-server (pid {pid}): {exc.strerror or exc}.",
            reason="signal_failed",
        ) from exc


def _creation_flags() -> int:
    """Windows flags that let the server outlive this process and its console."""
    if sys.platform == "win32":
        return subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS
    return 0
