"""The managed llama-server as an app drives it: ``RuntimeUpdater.server``.

Start, stop, restart, status and wait, under the same locks as an update's switch, and
after finishing a switch whose process died midway: the checked build, never the one on
trial, is what a start serves. ``llama-runtime server …`` is a thin client of this.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

from llama_runtime.runtime.errors import (
    BusyError,
    CorruptStateError,
    LlamaRuntimeError,
    ServerStartError,
    UserInputError,
)
from llama_runtime.updater.api.boundary import front_door

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home, InstalledRuntime
    from llama_runtime.runtime.server import ManagedServer, ServerStatus

__all__ = ["RuntimeServer", "ServerReport", "ServerStopped"]

#: Lines of llama-server's log a report carries when it did not become healthy.
LOG_TAIL_LINES: Final[int] = 5


def _seconds(value: float, what: str, *, zero_ok: bool) -> float:
    """``value`` as seconds (:func:`~updater.api.jobs.validate_seconds`), above 0 unless ``zero_ok``.

    Raises:
        UserInputError: Not such a number (the message names ``what``).
    """
    from llama_runtime.updater.api.jobs import validate_seconds

    seconds = validate_seconds(value, what)
    if seconds == 0 and not zero_ok:
        raise UserInputError(f"Invalid {what} 0; use a positive number of seconds.")
    return seconds


@dataclass(frozen=True)
class ServerReport:
    """The managed llama-server after ``status``, ``start`` or ``restart``.

    Attributes:
        running, pid, binary, args, host, port, runtime_name, started_at: What the record says
            and whether its process runs (``host`` is a socket path when ``port`` is None).
        healthy: Whether ``/health`` answered 200 (``None`` for a server that is not running).
        health_detail: Its last answer otherwise.
        runtime: The installed runtime it runs, when known.
        recovered: The sentence saying an interrupted switch was finished first, if one was.
        down_after_switch: The runtime a dead switch was trying when it stopped the server (still down).
        back_on: The runtime a restart brings the server back on, then.
        waited_seconds: How long a start waited for ``/health`` (None for ``status``).
        log_path: llama-server's log.
        log_tail: The log's last lines, when a start did not become healthy.
        override: ``LLAMA_SERVER_PATH`` when it is set (after a start): apps that use it run that binary instead.
    """

    running: bool
    pid: int | None
    binary: Path | None
    args: tuple[str, ...]
    host: str | None
    port: int | None
    runtime_name: str | None
    started_at: str | None
    healthy: bool | None
    health_detail: str | None
    runtime: InstalledRuntime | None
    log_path: Path
    recovered: str | None = None
    down_after_switch: str | None = None
    back_on: str | None = None
    waited_seconds: float | None = None
    log_tail: tuple[str, ...] = field(default_factory=tuple)
    override: Path | None = None

    @property
    def url(self) -> str | None:
        """``http://127.0.0.1:8080``, ``http://[::1]:8080`` or ``unix:/run/llama.sock``; None when unknown."""
        if self.host is None:
            return None
        if self.port is None:
            return f"unix:{self.host}"
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    def to_json(self) -> dict[str, object]:
        """The server object of the CLI contract (``server status|start|restart --json``)."""
        payload: dict[str, object] = {
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
            "runtime": self.runtime.to_json() if self.runtime else None,
        }
        if self.waited_seconds is None:
            payload["down_after_switch"] = self.down_after_switch
        else:
            payload.update(recovered=self.recovered, waited_seconds=self.waited_seconds, log_tail=list(self.log_tail))
        return payload


@dataclass(frozen=True)
class ServerStopped:
    """What ``stop`` did.

    Attributes:
        stopped: Whether a managed llama-server was running (it is stopped now).
        pid: Its process id.
        recovered: The sentence saying an interrupted switch was finished first, if one was.
    """

    stopped: bool
    pid: int | None
    recovered: str | None = None

    def to_json(self) -> dict[str, object]:
        """The ``server stop --json`` object."""
        return {"stopped": self.stopped, "pid": self.pid, "recovered": self.recovered}


class RuntimeServer:
    """The llama-server this home manages, started on its active runtime.

    Every start and stop holds the home's switch lock, which an update takes only while
    it switches runtimes (never while it downloads): a switch never misses a server,
    nor a start its pointer. Reach it as ``RuntimeUpdater.server``.

    Args:
        home: The llama-runtime home.
        port: The port a start binds when its arguments name none (``None``: any free port).
        wait: Seconds a start waits for ``/health`` unless told otherwise.
    """

    def __init__(self, home: Home, *, port: int | None, wait: float) -> None:
        from llama_runtime.runtime.server import ManagedServer

        self._home = home
        self._server: ManagedServer = ManagedServer(home.server_dir, port=port)
        self._wait = wait

    @property
    def port(self) -> int | None:
        """The port a start binds when its arguments name none (``LLAMA_RUNTIME_SERVER_PORT``, else 8080; None: any)."""
        return self._server.port

    @property
    def default_wait(self) -> float:
        """Seconds a start waits for ``/health`` when not told (``LLAMA_RUNTIME_SERVER_WAIT``, else 300)."""
        return self._wait

    @property
    def log_path(self) -> Path:
        """llama-server's log file."""
        return self._server.log_path

    @front_door
    def status(self) -> ServerReport:
        """Whether the managed server runs, on what, and whether it is healthy; takes no lock."""
        from llama_runtime.runtime.trial import read_trial
        from llama_runtime.updater.api.inventory import server_down_after

        status = self._server.status()
        runtime = self._runtime_named(status.runtime_name) if status.running else None
        trial = None if status.running else read_trial(self._home)
        down = trial if trial is not None and server_down_after(self._home, trial) else None
        return self._report(
            status,
            runtime,
            healthy=status.healthy,
            down_after_switch=down.name if down else None,
            back_on=down.before_name if down else None,
        )

    @front_door
    def start(
        self,
        args: Sequence[str] = (),
        *,
        wait: float | None = None,
        cwd: str | Path | None = None,
        on_loading: Callable[[], None] | None = None,
    ) -> ServerReport:
        """Start llama-server on the active runtime with ``args``; returns once it is healthy or ``wait`` ran out.

        Args:
            args: llama-server's arguments (``-m MODEL``, ``--port``, …).
            wait: Seconds to wait for ``/health`` (default ``LLAMA_RUNTIME_SERVER_WAIT``, else 300).
            cwd: The directory relative paths in ``args`` mean (default: the current one).
            on_loading: Called each time the server answers that it is still loading its model.

        Returns:
            The report; ``healthy`` is false when it still runs but did not answer in time.

        Raises:
            UserInputError: Nothing is active yet, or a bad ``wait``.
            ServerAlreadyRunningError: A managed server runs already (``restart`` replaces it).
            PortInUseError: Something else listens where it would.
            ServerStartError: It exited right after starting (its log's words in the message).
            BusyError: Another command holds the switch lock, or stopped this server while it loaded.
        """
        seconds = self._wait_seconds(wait)  # bad input changes nothing: checked before a trial is finished
        recovered = self._finish_trial(restart_server=False)
        return self._start(list(args), seconds, Path(cwd) if cwd is not None else Path.cwd(), on_loading, recovered)

    @front_door
    def restart(
        self,
        args: Sequence[str] | None = None,
        *,
        stop_timeout: float | None = None,
        wait: float | None = None,
        cwd: str | Path | None = None,
        on_loading: Callable[[], None] | None = None,
    ) -> ServerReport:
        """Stop the managed server and start it again on the active runtime.

        Args:
            args: New arguments; ``None``: the ones (and the directory) it was started with.
            stop_timeout: Seconds before SIGKILL (default 10).
            wait, cwd, on_loading: As :meth:`start`.

        Raises:
            UserInputError: No server runs and no ``args`` say how to start one, or nothing is active.
            ServerStartError, BusyError, PortInUseError: As :meth:`start`.
        """
        seconds, stop_seconds = self._wait_seconds(wait), self._stop_timeout(stop_timeout)
        recovered = self._finish_trial(restart_server=args is None)
        given = Path(cwd) if cwd is not None else Path.cwd()
        return self._start(
            None if args is None else list(args), seconds, given, on_loading, recovered, restart_timeout=stop_seconds
        )

    @front_door
    def stop(self, *, timeout: float | None = None) -> ServerStopped:
        """Stop the managed server: SIGTERM, then SIGKILL after ``timeout`` seconds (default 10).

        Raises:
            UserInputError: A negative or non-finite ``timeout``.
            BusyError: Another command holds the switch lock.
        """
        from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock

        stop_timeout = self._stop_timeout(timeout)
        recovered = self._finish_trial(restart_server=False)
        was = self._server.status()
        # The switch lock, not the update lock: a download must not block this.
        # hold_for_reading: a read-only home cannot take the lock, and no start can happen there meanwhile.
        with UpdateLock(self._home.switch_lock_path).hold_for_reading("server stop", timeout=BUTTON_WAIT_SECONDS):
            self._server.stop(stop_timeout)
        return ServerStopped(stopped=was.running, pid=was.pid, recovered=recovered)

    @front_door
    def wait(self, timeout: float, *, on_loading: Callable[[], None] | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the managed server's ``/health``; whether it answered 200.

        Raises:
            UserInputError: A negative or non-finite ``timeout``.
        """
        seconds = _seconds(timeout, "timeout", zero_ok=True)
        return self._server.wait_healthy(seconds, on_answer=_loading_callback(on_loading))

    # -- internals ---------------------------------------------------------------------------------------------

    def _start(
        self,
        args: list[str] | None,
        seconds: float,
        cwd: Path | None,
        on_loading: Callable[[], None] | None,
        recovered: str | None,
        *,
        restart_timeout: float | None = None,
    ) -> ServerReport:
        """Start, or restart (``restart_timeout``: the stop's seconds), under the switch lock, then wait ``seconds``."""
        from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
        from llama_runtime.runtime.trial import checked_pointer

        restart = restart_timeout is not None
        server = self._server
        with UpdateLock(self._home.switch_lock_path).hold(
            f"server {'restart' if restart else 'start'}", timeout=BUTTON_WAIT_SECONDS
        ):
            pointer, _trial = checked_pointer(self._home, self._home.read_pointer())
            if not pointer.active:
                raise UserInputError("No runtime is active yet; run `llama-runtime update` first.")
            runtime = self._home.load(pointer.active)
            if restart_timeout is not None:
                args, cwd = self._restart_args(args, cwd)
                server.stop(restart_timeout)
            assert args is not None
            server.start(runtime.binary, args, runtime_name=runtime.name, cwd=cwd)
        healthy = server.wait_healthy(seconds, on_answer=_loading_callback(on_loading))
        status = server.status()
        if not healthy and not status.running:
            self._raise_exited(runtime.marker.tag, args)
        from llama_runtime.runtime.binary import server_override

        detail = server.last_health.detail if not healthy and server.last_health is not None else status.health_detail
        report = self._report(
            status,
            runtime,
            healthy=healthy,
            health_detail=detail,
            recovered=recovered,
            waited_seconds=seconds,
            log_tail=() if healthy else tuple(server.log_tail(LOG_TAIL_LINES)),
        )
        return replace(report, override=server_override())

    def _report(
        self,
        status: ServerStatus,
        runtime: InstalledRuntime | None,
        *,
        healthy: bool | None,
        health_detail: str | None = None,
        recovered: str | None = None,
        down_after_switch: str | None = None,
        back_on: str | None = None,
        waited_seconds: float | None = None,
        log_tail: tuple[str, ...] = (),
    ) -> ServerReport:
        return ServerReport(
            running=status.running,
            pid=status.pid,
            binary=status.binary,
            args=tuple(status.args),
            host=status.host,
            port=status.port,
            runtime_name=status.runtime_name,
            started_at=status.started_at,
            healthy=healthy,
            health_detail=health_detail if health_detail is not None else status.health_detail,
            runtime=runtime,
            log_path=self._server.log_path,
            recovered=recovered,
            down_after_switch=down_after_switch,
            back_on=back_on,
            waited_seconds=waited_seconds,
            log_tail=log_tail,
        )

    def _runtime_named(self, name: str | None) -> InstalledRuntime | None:
        if not name:
            return None
        try:
            return self._home.load(name)
        except CorruptStateError:
            return None

    def _restart_args(self, given: list[str] | None, cwd: Path | None) -> tuple[list[str], Path | None]:
        """The arguments (and directory) the running server was started with, unless ``given``.

        Raises:
            UserInputError: No managed server runs and no arguments say how to start one.
        """
        if given:
            return given, cwd
        state = self._server.record.running()
        if state is None:
            raise UserInputError(
                "No managed llama-server is running, so there are no arguments to restart it with; "
                "start one with `llama-runtime server start -- ARGS`."
            )
        return list(state.args), None  # None: the directory of the server stopped (ManagedServer.start)

    def _wait_seconds(self, given: float | None) -> float:
        return self._wait if given is None else _seconds(given, "wait", zero_ok=False)

    @staticmethod
    def _stop_timeout(given: float | None) -> float:
        from llama_runtime.runtime.server import DEFAULT_STOP_TIMEOUT_SECONDS

        return DEFAULT_STOP_TIMEOUT_SECONDS if given is None else _seconds(given, "timeout", zero_ok=True)

    def _finish_trial(self, *, restart_server: bool) -> str | None:
        """Finish a switch whose process died before its verdict (runtime.trial); the sentence saying so, or None.

        Taken under the update lock, briefly: an update holding it finishes the
        trial itself first, and the server verbs read the checked pointer anyway.
        """
        from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
        from llama_runtime.runtime.trial import finish_abandoned_trial, owner_alive, read_trial, trial_path

        trial = read_trial(self._home)
        if (trial is None and not trial_path(self._home).exists()) or (trial is not None and owner_alive(trial)):
            return None
        try:
            with UpdateLock(self._home.lock_path).hold("server", timeout=BUTTON_WAIT_SECONDS):
                return finish_abandoned_trial(self._home, restart_server=restart_server)
        except BusyError:
            return None

    def _raise_exited(self, tag: str, args: Sequence[str]) -> NoReturn:
        """llama-server ended right after starting: report what it said, in its own words.

        Raises:
            BusyError: Another command stopped it (its record is gone or names another server).
            ServerStartError: It exited by itself.
        """
        server = self._server
        code = server.exit_status()
        ours = next(reversed(server.record.children), None)
        state = server.settled_record()  # a stop under way is waited for: it removes the record last
        if ours is not None and (state is None or state.pid != ours):
            # Only a stop removes or replaces the record of a live start: llama-server did not fail.
            raise BusyError(
                f"llama-server {tag} (pid {ours}) was stopped by another llama-runtime command "
                "(`server stop`, `server restart` or an update's switch) while this start waited for /health.",
                hint="`llama-runtime server status` shows what runs now.",
            )
        said = server.log_tail()
        errors = [line for line in said if "error" in line.lower()] or said[-2:]
        with contextlib.suppress(LlamaRuntimeError):
            server.stop(0)  # forget the record of a process that is gone
        how = f"exited with status {code}" if code is not None else "exited"
        raise ServerStartError(
            f"llama-server {tag} {how} right after starting: " + (" / ".join(errors) or "it printed nothing") + ".",
            hint=f"Its arguments were: {' '.join(args) or '(none)'}; its log: {server.log_path}. "
            "`llama-server --help` lists what it accepts.",
        )


def _loading_callback(on_loading: Callable[[], None] | None) -> Callable[[object], None] | None:
    """``ManagedServer.wait_healthy``'s ``on_answer``: ``on_loading`` for each "still loading" answer."""
    if on_loading is None:
        return None
    notify = on_loading

    def on_answer(answer: object) -> None:
        if getattr(answer, "loading", False):
            notify()

    return on_answer
