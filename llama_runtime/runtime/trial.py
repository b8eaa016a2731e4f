"""Trial activation: a switch with a running server is not done until its check is.

Like A/B system updates (Android's A/B slots, systemd's boot counting), a switch
that restarts a server first records the new runtime as *on trial* in
``<home>/trial.json``, outside every runtime directory, durably, before the old
server stops. Only the server check's verdict (healthy and generating, or
rolled back) ends the trial. A process killed in between (SIGKILL, power loss)
leaves the record, and the next command that takes the update lock finishes it
(:func:`finish_abandoned_trial`): the pointer goes back to what it was before
the switch and the server the switch stopped runs again, with its recorded
binary, arguments and working directory.

Readers never act on a trial: ``status``, ``which``, ``list`` and ``ensure()``
report it and name the last checked runtime (:func:`checked_pointer`), the one
active before the switch. Reading the record is one small file read, within
start-up's budget (no psutil, no lock).

Invariants:

* The record names what to go back to (``before``); it is written before the
  pointer flips and removed only after the verdict, so while it exists the
  runtime ``before.active`` names is intact (gc and remove keep the pointer's
  runtimes, and every locking command finishes an abandoned trial first).
* Only a trial whose owner is gone (pid and creation time no longer one live
  process) is finished; a live owner is mid-switch and is left alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.fsutil import read_record, write_record
from llama_runtime.runtime.layout import Home, Pointer, is_runtime_name

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.runtime.server import ManagedServer

__all__ = [
    "TRIAL_FILE",
    "ServerToRestore",
    "Trial",
    "begin_trial",
    "checked_pointer",
    "end_trial",
    "finish_abandoned_trial",
    "owner_alive",
    "read_trial",
]

TRIAL_FILE: Final = "trial.json"
TRIAL_SCHEMA: Final = 1
#: A trial record is a few hundred bytes; server arguments bound it (llama-server takes dozens at most).
_MAX_TRIAL_BYTES: Final = 256 * 1024
#: Seconds the restored server has to answer /health: as long as any switch gives a restarted server.
RESTORE_HEALTH_SECONDS: Final = 120.0
#: A restored server that exits at once (the build on trial may still be letting go of its port, a
#: loaded machine) gets one more start before the revert says it did not come back.
RESTART_ATTEMPTS: Final = 2
#: Seconds between those starts.
RESTART_RETRY_SECONDS: Final = 1.0


@dataclass(frozen=True)
class ServerToRestore:
    """The server a switch stopped: what recovery starts again.

    Attributes:
        binary: The llama-server it ran.
        args: Its full arguments (address included), as recorded by the server control.
        cwd: Its working directory (relative arguments mean what they meant), when known.
        managed: Whether it is this home's managed server; an app's own process
            cannot be restarted from another process, only reported.
    """

    binary: Path
    args: tuple[str, ...]
    cwd: Path | None
    managed: bool

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dictionary."""
        return {
            "binary": str(self.binary),
            "args": list(self.args),
            "cwd": str(self.cwd) if self.cwd else None,
            "managed": self.managed,
        }


@dataclass(frozen=True)
class Trial:
    """One switch whose check has not given its verdict.

    Attributes:
        runtime: The runtime on trial (the switch's target).
        name: How people call it (``b7001 (vulkan)``).
        before: The pointer before the switch: what a revert writes back.
        before_name: How people call the runtime ``before.active`` names.
        server: The running server the switch stops and a revert restarts.
        pid: The process carrying the switch out.
        proc_start: That process's creation time (see :mod:`.procinfo`), when known.
        since: When the trial began (seconds since the epoch).
    """

    runtime: str
    name: str
    before: Pointer
    before_name: str
    server: ServerToRestore | None
    pid: int
    proc_start: int | None
    since: float

    def to_json(self) -> dict[str, object]:
        """The record as stored, and the ``trial`` object of ``status``/``list`` output."""
        return {
            "schema": TRIAL_SCHEMA,
            "runtime": self.runtime,
            "name": self.name,
            "before": {"active": self.before.active, "previous": self.before.previous},
            "before_name": self.before_name,
            "server": self.server.to_json() if self.server else None,
            "pid": self.pid,
            "proc_start": self.proc_start,
            "since": self.since,
        }

    def describe(self) -> str:
        """``b7001 (vulkan) is on trial (update pid 42); b7000 (vulkan) is the last checked runtime``."""
        return f"{self.name} is on trial (pid {self.pid}); {self.before_name} is the last checked runtime"


def trial_path(home: Home) -> Path:
    """Where the trial record of ``home`` lives."""
    return home.root / TRIAL_FILE


def begin_trial(home: Home, trial: Trial) -> None:
    """Record ``trial`` durably (atomic replace and fsync) before the switch touches the server.

    Raises:
        OSError: The record could not be written; the switch must not begin.
    """
    write_record(trial_path(home), trial.to_json())


def end_trial(home: Home) -> None:
    """The verdict is in: remove the record (durably; none is fine)."""
    path = trial_path(home)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        from llama_runtime.runtime.fsutil import fsync_directory

        with contextlib.suppress(OSError):
            fsync_directory(path.parent)


def read_trial(home: Home) -> Trial | None:
    """The trial on record, or None (also for a damaged record, or one whose ``before`` names no
    installed runtime: it names nothing to trust)."""
    try:
        payload = read_record(trial_path(home), max_bytes=_MAX_TRIAL_BYTES)
    except (OSError, ValueError):
        return None
    trial = _parse(payload)
    if trial is not None and trial.before.active is not None and not _has_marker(home, trial.before.active):
        return None  # names no installed runtime to go back to: nothing to trust
    return trial


def _has_marker(home: Home, name: str) -> bool:
    """Whether ``runtimes/<name>`` holds an install marker (one stat: readers stay within their budget)."""
    from llama_runtime.runtime.marker import MARKER_NAME

    return (home.runtime_path(name) / MARKER_NAME).is_file()


def _parse(payload: object) -> Trial | None:
    if not isinstance(payload, dict) or payload.get("schema") != TRIAL_SCHEMA:
        return None
    before, server = payload.get("before"), payload.get("server")
    runtime, pid, start, since = (
        payload.get("runtime"),
        payload.get("pid"),
        payload.get("proc_start"),
        payload.get("since"),
    )
    if not isinstance(before, dict) or not isinstance(runtime, str) or type(pid) is not int:
        return None
    names = (before.get("active"), before.get("previous"))
    # Names go into the pointer and paths under runtimes/: each one plain directory name, like the pointer's.
    if not is_runtime_name(runtime) or not all(n is None or (isinstance(n, str) and is_runtime_name(n)) for n in names):
        return None
    return Trial(
        runtime=runtime,
        name=str(payload.get("name") or runtime),
        before=Pointer(active=names[0], previous=names[1]),
        before_name=str(payload.get("before_name") or names[0] or "nothing"),
        server=_parse_server(server),
        pid=pid,
        proc_start=start if type(start) is int else None,
        since=float(since) if isinstance(since, int | float) and not isinstance(since, bool) else 0.0,
    )


def _parse_server(payload: object) -> ServerToRestore | None:
    if not isinstance(payload, dict):
        return None
    binary, args, cwd = payload.get("binary"), payload.get("args"), payload.get("cwd")
    if not isinstance(binary, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    return ServerToRestore(
        binary=Path(binary),
        args=tuple(args),
        cwd=Path(cwd) if isinstance(cwd, str) and cwd else None,
        managed=payload.get("managed") is True,
    )


def owner_alive(trial: Trial) -> bool:
    """Whether the process that began ``trial`` still runs (pid and creation time both match)."""
    from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks

    if trial.pid == os.getpid():
        return True
    if not pid_alive(trial.pid):
        return False
    return trial.proc_start is None or process_start_ticks(trial.pid) == trial.proc_start


def checked_pointer(home: Home, pointer: Pointer) -> tuple[Pointer, Trial | None]:
    """The pointer readers hand out: the one before the switch while a trial is on record.

    Args:
        home: The home whose trial record is read.
        pointer: The pointer as read from ``active.json``.
    """
    trial = read_trial(home)
    if trial is None:
        return pointer, trial
    return trial.before, trial  # also "nothing": a build on trial is never handed out, even as the first one


# -- recovery -----------------------------------------------------------------------


def finish_abandoned_trial(
    home: Home, *, health_timeout: float = RESTORE_HEALTH_SECONDS, restart_server: bool = True
) -> str | None:
    """Revert a trial whose owner is gone; a sentence saying what was done, or None.

    The caller holds the update lock (no live switch can be under way then,
    unless its owner still runs: that trial is left alone). The switch lock is
    taken while the server is put back, as every switch does.

    Args:
        home: The home whose trial record is finished.
        health_timeout: Seconds the restarted server has to answer /health.
        restart_server: False for a caller that starts or stops the server itself
            (``server start|stop``): the build on trial is stopped, nothing is started.
    """
    trial = read_trial(home)
    if trial is None:
        if trial_path(home).exists():  # damaged: it names nothing to go back to
            end_trial(home)
        return None
    if owner_alive(trial):
        return None
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.runtime.server import SERVER_LOCK_TIMEOUT_SECONDS

    with UpdateLock(home.switch_lock_path).hold("trial revert", timeout=SERVER_LOCK_TIMEOUT_SECONDS):
        served = _put_back(home, trial, health_timeout, restart_server)
        end_trial(home)
    return (
        f"The switch to {trial.name} (pid {trial.pid}) ended before its check gave a verdict; "
        f"reverted to {trial.before_name}{served}."
    )


def _put_back(home: Home, trial: Trial, health_timeout: float, restart_server: bool) -> str:
    """Write the pointer from before the switch and restart its server; the server's part of the sentence."""
    current = _read_pointer_or_none(home)
    before = _installed_or_none(home, trial.before.active)
    if trial.before.active is not None and before is None:
        where = current.active if current else "nothing"
        return f", but it is no longer an installed runtime; the pointer was left at {where}"
    previous = trial.before.previous
    if previous is not None and _installed_or_none(home, previous) is None:
        previous = None  # a rollback target that is gone is no target
    pointer = Pointer(active=trial.before.active, previous=previous)
    if current != pointer:
        home.write_pointer(pointer)
    restore = trial.server
    if restore is None or before is None:
        return ""
    if not restore.managed:
        return "; restart your app's llama-server on it"
    return _serve_checked(home, before, restore, health_timeout, restart_server)


def _serve_checked(
    home: Home, before: InstalledRuntime, restore: ServerToRestore, health_timeout: float, restart_server: bool
) -> str:
    """The managed server back on the checked ``before``, with the user's last arguments.

    The binary is always the checked runtime's own, never the one the record
    names: a record is a file anyone who can write the home can craft. The
    arguments are those of the server running now (a start after the switch
    was interrupted is the user's latest word), else those the switch stopped.
    """
    from llama_runtime.runtime.server import ManagedServer

    server = ManagedServer(home.server_dir)
    running = server.record.running()
    if running is not None and running.binary == before.binary:
        return " (its llama-server was still running)"
    args, cwd = (list(running.args), running.cwd) if running is not None else (list(restore.args), restore.cwd)
    if running is not None:
        server.stop()  # the build on trial: it never passed its check
    if not restart_server:
        return "; the llama-server of the build on trial was stopped" if running is not None else ""
    said = ""
    for attempt in range(RESTART_ATTEMPTS):
        said = _restart(server, before, args, cwd, health_timeout)
        if said.startswith(" and restarted") or server.is_running():
            return said
        if attempt + 1 < RESTART_ATTEMPTS:
            time.sleep(RESTART_RETRY_SECONDS)
    return said


def _restart(
    server: ManagedServer, before: InstalledRuntime, args: list[str], cwd: Path | None, health_timeout: float
) -> str:
    """Start the checked runtime's server once; the server's part of the sentence."""
    try:
        server.start(before.binary, args, runtime_name=before.name, cwd=cwd)
    except Exception as exc:  # the pointer is back either way; say what the server did
        reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return f"; its llama-server did not start again ({reason})"
    if server.wait_healthy(health_timeout):
        return " and restarted its llama-server with the arguments it had"
    return "; its llama-server was started again but did not answer /health"


def _installed_or_none(home: Home, name: str | None) -> InstalledRuntime | None:
    """The installed runtime ``name`` (its directory under ``runtimes/`` with a valid marker), else None."""
    from llama_runtime.runtime.errors import CorruptStateError

    if name is None or not is_runtime_name(name):
        return None
    try:
        return home.load(name)
    except CorruptStateError:
        return None


def _read_pointer_or_none(home: Home) -> Pointer | None:
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        return home.read_pointer()
    except CorruptStateError:
        return None
