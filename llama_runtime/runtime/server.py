"""The managed ``llama-server`` process: start it detached, ask how it is, stop it.

The state of the one server a home manages lives in ``<home>/server/``::

    server.json          pid, binary, args, host, port, cwd, started_at, runtime name
    llama-server.log     its stdout and stderr (the previous start's in .log.1)
    server.lock          serialises start/stop between processes

Its arguments, addresses and ``/health`` are :mod:`llama_runtime.runtime.listen`.

Invariants:

* ``server.json`` is removed only once the process is gone, so a failed stop
  leaves the record that lets the next attempt find the process again.
* A recorded pid is ours only while its creation time matches and it runs the
  recorded binary, an installed runtime's under this home's ``runtimes/`` (or
  carries :data:`SERVER_MARK_ENV`): a record is a file, and nothing else is signalled.
* Healthy means our process (pid and start time) is itself a listener of the
  address that answered ``/health``: an answer from whoever else took the port
  is never ours. A port already in use refuses the start before anything runs.
* The server's working directory is the caller's (relative paths in its
  arguments mean what the caller meant), recorded so a restart after an update
  uses it again; never a runtime directory, which must hold only what its
  marker records.

Apps that run llama-server themselves implement :class:`ServerControl` so the
updater can quiesce their process around an activation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Protocol

import filelock

from llama_runtime.runtime.errors import (
    BusyError,
    PortInUseError,
    ServerAlreadyRunningError,
    ServerStartError,
    ServerStopError,
)
from llama_runtime.runtime.fsutil import read_cache, write_record
from llama_runtime.runtime.listen import (
    DEFAULT_HOST,
    HEALTH_PROBE_TIMEOUT_SECONDS,
    Endpoint,
    Health,
    describe_holder,
    endpoint_in_use,
    http_netloc,
    listen_address,
    listen_endpoints,
    listens_on,
    loopback_for,
    probe_endpoint,
    probe_health,
    probe_unix_health,
    with_listen_args,
)
from llama_runtime.runtime.lock import READ_ONLY_ERRNOS
from llama_runtime.runtime.procinfo import MAX_PID, pid_alive, process_carries, process_runs, process_start_ticks

# -- server_record: Which process is our server: ``server.json`` and our own children. ---------------------------

STATE_NAME: Final = "server.json"
STATE_SCHEMA: Final = 1
#: Process start times in clock ticks since boot fit in 63 bits for millennia.
MAX_START_TICKS: Final = 2**63 - 1


@dataclass(frozen=True)
class ServerState:
    """The parsed, trusted content of ``server.json``."""

    pid: int
    binary: Path
    args: list[str]
    host: str
    port: int | None
    started_at: str
    runtime_name: str | None
    proc_start: int | None
    cwd: Path | None = None


class ServerRecord:
    """``<server_dir>/server.json`` plus the children started through this object.

    Args:
        server_dir: ``home.server_dir``.
    """

    def __init__(self, server_dir: Path) -> None:
        self.path = Path(server_dir) / STATE_NAME
        #: Children this process launched, by pid (dicts keep insertion order: the last is the newest).
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        #: (pid, creation time) of recorded processes seen running our binary: an exiting process
        #: can no longer show what it runs, and stays ours until it is gone.
        self._verified: set[tuple[int, int]] = set()

    def read(self) -> ServerState | None:
        """The record, or None when there is none or it is not ours."""
        # A damaged record (or a FIFO in its place, which would block every server verb) is set aside.
        return parse_state(read_cache(self.path))

    def write(
        self,
        child: subprocess.Popen[bytes],
        *,
        binary: Path,
        args: list[str],
        listen: tuple[str, int | None],
        runtime_name: str | None,
        cwd: Path,
    ) -> None:
        """Adopt ``child`` and record it as the server (stamped now, with its creation time).

        Args:
            child: The process just started.
            binary: Its executable.
            args: Its full arguments.
            listen: The first address it listens on: host (or socket path) and port.
            runtime_name: The installed runtime the binary belongs to.
            cwd: Its working directory.
        """
        self.children[child.pid] = child
        host, port = listen
        write_record(
            self.path,
            {
                "schema_version": STATE_SCHEMA,
                "pid": child.pid,
                "binary": str(binary),
                "args": args,
                "host": host,
                "port": port,
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "runtime_name": runtime_name,
                "cwd": str(cwd),
                "proc_start": process_start_ticks(child.pid),
            },
        )

    def alive(self, state: ServerState) -> bool:
        """Whether the recorded process lives and is still the one recorded."""
        child = self.children.get(state.pid)
        if child is not None:
            return child.poll() is None
        if not pid_alive(state.pid):
            return False
        current = process_start_ticks(state.pid)
        if current is None:
            return True  # the OS would not say when it started: the pid is all there is
        # Every record we write has a creation time: a record without it
        # (hand-written, planted) proves nothing, and a different one means the
        # pid was recycled by an unrelated process. Neither may be signalled.
        if state.proc_start != current:
            return False
        if (state.pid, current) in self._verified:
            return True
        if not self.runs_installed_server(state):
            return False
        self._verified.add((state.pid, current))
        return True

    def runs_installed_server(self, state: ServerState) -> bool:
        """Whether the recorded binary is a runtime's under this home's ``runtimes/`` and the pid runs it.

        A record is a file: pid and creation time can be copied from any of
        the user's processes, so only one running an installed llama-server
        of this home may be signalled as ours.
        """
        from llama_runtime.runtime.layout import RUNTIMES_DIR_NAME

        home = os.path.abspath(self.path.parent.parent)
        runtimes = os.path.join(home, RUNTIMES_DIR_NAME)
        binary = os.path.abspath(state.binary)
        if os.path.commonpath([runtimes, binary]) != runtimes or binary == runtimes:
            return False
        runs = process_runs(state.pid, state.binary)
        if runs:
            return True
        # A llama-server started through a wrapper that execs it runs another file, but keeps our mark.
        marked = process_carries(state.pid, SERVER_MARK_ENV, home)
        return bool(marked) or (runs is None and marked is None)

    def running(self) -> ServerState | None:
        """The record when its process is alive, else None."""
        state = self.read()
        return state if state is not None and self.alive(state) else None

    def forget(self, pid: int) -> None:
        """Drop the record of ``pid``'s server (only once the process is gone)."""
        self.children.pop(pid, None)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRNOS:
                raise
            # A read-only home keeps the record; it names a process that is gone, which reads as stale.

    def newest_exit_status(self) -> int | None:
        """The exit status of the newest child started here, once it ended (else None)."""
        if not self.children:
            return None
        return list(self.children.values())[-1].poll()


def parse_state(payload: object) -> ServerState | None:
    """The trusted content of ``server.json`` (its decoded JSON), or None when it is not ours."""
    if not isinstance(payload, dict):
        return None
    pid, binary, args = payload.get("pid"), payload.get("binary"), payload.get("args")
    if type(pid) is not int or not 0 < pid <= MAX_PID or not isinstance(binary, str) or not binary:
        return None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    proc_start = payload.get("proc_start")
    if proc_start is not None and (type(proc_start) is not int or not 0 <= proc_start <= MAX_START_TICKS):
        return None  # a start time we cannot compare cannot prove the pid is ours
    host, port, cwd = payload.get("host"), payload.get("port"), payload.get("cwd")
    name, started = payload.get("runtime_name"), payload.get("started_at")
    return ServerState(
        pid=pid,
        binary=Path(binary),
        args=list(args),
        host=host if isinstance(host, str) and host else DEFAULT_HOST,
        port=port if type(port) is int and 0 < port < 65536 else None,
        started_at=started if isinstance(started, str) else "",
        runtime_name=name if isinstance(name, str) else None,
        proc_start=proc_start,
        cwd=Path(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else None,
    )


# -- server_spawn: Starting llama-server detached, reading its log, signalling it. -------------------------------

#: Sends a signal to a pid (``os.kill``; tests inject failures here).
Kill = Callable[[int, int], None]

if sys.platform == "win32":
    # TerminateProcess (what os.kill maps to) is already unconditional.
    HARD_KILL: Final[int] = signal.SIGTERM
else:
    HARD_KILL = signal.SIGKILL


#: Set in the managed server's environment to the home it belongs to: the process
#: keeps it across an ``exec``, and no process started otherwise carries it.
SERVER_MARK_ENV: Final = "LLAMA_RUNTIME_SERVER_HOME"


def spawn_detached(
    binary: Path,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: Path,
    log_path: Path,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> subprocess.Popen[bytes]:
    """Launch ``binary args`` in its own session, stdout and stderr to ``log_path``.

    The previous log is kept as ``<log>.1``; the child's environment gets
    :data:`SERVER_MARK_ENV` (the home: ``log_path``'s grandparent). ``wrap`` turns the
    command line into the one that runs it (a sandbox's).

    Raises:
        ServerStartError: The binary could not be executed.
    """
    if log_path.exists():
        os.replace(log_path, log_path.with_name(log_path.name + ".1"))
    try:
        with open(log_path, "wb") as log:
            command = [str(binary), *args]
            return subprocess.Popen(
                wrap(command) if wrap is not None else command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**(os.environ if env is None else env), SERVER_MARK_ENV: str(log_path.parent.parent.absolute())},
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
    else:
        return 0


# -- server_status: What is known about the managed server right now. --------------------------------------------


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


# -- server ------------------------------------------------------------------------------------------------------

LOG_NAME: Final = "llama-server.log"
LOCK_NAME: Final = "server.lock"

#: Seconds between health or exit probes: fast enough that a stop or a start
#: returns promptly, slow enough not to busy-loop a CPU.
POLL_INTERVAL_SECONDS: Final = 0.05
#: Default grace period for SIGTERM: llama-server finishes the current
#: request and frees device memory; a large model unmaps in well under 10 s.
DEFAULT_STOP_TIMEOUT_SECONDS: Final = 10.0
#: SIGKILL cannot be caught; only a process stuck in the kernel (a hung GPU
#: driver) outlives it, and waiting longer than this will not change that.
KILL_WAIT_SECONDS: Final = 5.0
#: Another start/stop of the same home finishes within a stop timeout plus
#: the kill wait; waiting longer would hide a hung peer.
SERVER_LOCK_TIMEOUT_SECONDS: Final = DEFAULT_STOP_TIMEOUT_SECONDS + KILL_WAIT_SECONDS
#: Where the server runs when the caller's directory cannot be used (gone, or
#: inside the home, whose runtimes must hold only what their markers record).
WORK_DIR_NAME: Final = "work"


class ServerControl(Protocol):
    """What the updater needs from whoever runs llama-server, to quiesce it."""

    def is_running(self) -> bool:
        """Whether the server process is alive."""
        ...

    def stop(self, timeout: float) -> None:
        """Stop the server, escalating after ``timeout`` seconds; raises if it cannot."""

    def start(self, binary: Path, args: Sequence[str]) -> None:
        """Launch ``binary`` with ``args``; returns once the process exists."""

    def wait_healthy(self, timeout: float) -> bool:
        """Whether the server answered /health with 200 within ``timeout`` seconds."""
        ...

    def current_args(self) -> list[str]:
        """Arguments of the running server (empty when none runs)."""
        ...

    def current_binary(self) -> Path | None:
        """Binary of the running server, or None when none runs."""

    def endpoint(self) -> str | None:
        """``http://HOST:PORT`` of the running server, or None when unknown.

        The inference gate sends its completion request there after a switch.
        A control that returns None (or predates this method) gets the health
        check only.
        """


HealthProbe = Callable[[str, int, float], Health]
Listens = Callable[[int, Endpoint], bool]


class ManagedServer(ServerControl):
    """The llama-server a llama-runtime home starts and stops.

    Args:
        server_dir: ``home.server_dir``.
        host: Address to bind when the caller's args have no ``--host``.
        port: Port to bind when the args have no ``--port``; None picks a free one.
        clock: Monotonic seconds, for timeouts.
        sleep: Waits between probes.
        kill: Sends a signal to a pid (tests inject failures here).
        health_probe: Asks ``/health`` of ``(host, port, timeout)``.
        listens: Whether a pid itself listens on an endpoint (the proof an
            answer came from our process).
    """

    def __init__(
        self,
        server_dir: Path,
        *,
        host: str = DEFAULT_HOST,
        port: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        kill: Kill = os.kill,
        health_probe: HealthProbe | None = None,
        listens: Listens = listens_on,
    ) -> None:
        self.server_dir = Path(server_dir)
        #: Which process is ours: ``server.json`` and the children this object started.
        self.record = ServerRecord(self.server_dir)
        self.state_path = self.record.path
        self.log_path = self.server_dir / LOG_NAME
        self.host = host
        self.port = port
        self._clock = clock
        self._sleep = sleep
        self._kill = kill
        self._probe: HealthProbe = health_probe or probe_health
        self._listens = listens
        # The working directory of the server stopped last: a restart (an update's
        # switch) runs in it again, so relative arguments keep their meaning.
        self._restart_cwd: Path | None = None
        #: The last answer of the last :meth:`wait_healthy` that was not 200 (None: none yet).
        self.last_health: Health | None = None

    # -- ServerControl -------------------------------------------------------

    def is_running(self) -> bool:
        """Whether the recorded server process is alive (and is still ours)."""
        return self.record.running() is not None

    def start(
        self,
        binary: Path,
        args: Sequence[str],
        *,
        runtime_name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        """Launch ``binary args`` detached from this process and record it.

        Without ``--port`` in ``args``, binds ``--host``/``--port`` (loopback and
        a free port unless the constructor said otherwise).

        Args:
            binary: The llama-server executable.
            args: Its arguments, without the program name.
            runtime_name: The installed runtime the binary belongs to; found from
                the binary's path (``runtimes/NAME/…`` with a marker) when not given.
            env: Environment for the child; None inherits this process's.
            cwd: The caller's directory, where relative arguments point; None
                reuses the directory of the server stopped last, else this
                process's. One inside the home is replaced by ``server/work``.
            wrap: Turns the command line into the one that runs it: a build not yet
                accepted runs in the sandbox (:mod:`~llama_runtime.runtime.sandbox`).

        Raises:
            ServerAlreadyRunningError: A managed server already runs.
            PortInUseError: Another process listens on an address in ``args``.
            ServerStartError: The binary could not be executed.
            BusyError: Another process is starting or stopping the server.
        """
        binary = Path(binary).absolute()
        if runtime_name is None:
            from llama_runtime.runtime.layout import runtime_name_of

            runtime_name = runtime_name_of(binary)
        with self._server_lock():
            self._refuse_if_running()
            full_args = with_listen_args(list(args), host=self.host, port=self.port)
            self._refuse_taken_addresses(full_args)
            self.server_dir.mkdir(parents=True, exist_ok=True)
            workdir = self._workdir(cwd)
            child = spawn_detached(binary, full_args, env, workdir, self.log_path, wrap)
            try:
                self.record.write(
                    child,
                    binary=binary,
                    args=full_args,
                    listen=listen_address(full_args, default_host=self.host),
                    runtime_name=runtime_name,
                    cwd=workdir,
                )
            except BaseException:
                # An unrecorded server could never be found again to stop it.
                child.kill()
                child.wait()
                self.record.children.pop(child.pid, None)
                raise

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT_SECONDS) -> None:
        """Stop the managed server: SIGTERM, then SIGKILL after ``timeout`` seconds.

        Stopping when nothing runs is fine; a stale record is removed.

        Raises:
            ServerStopError: The process may not be signalled, or survived SIGKILL;
                ``server.json`` is kept.
            BusyError: Another process is starting or stopping the server.
        """
        with self._server_lock():
            state = self.record.read()
            if state is None:
                return
            if self.record.alive(state):
                self._terminate(state, timeout)
            self._restart_cwd = state.cwd
            self.record.forget(state.pid)

    def wait_healthy(self, timeout: float, *, on_answer: Callable[[Health], None] | None = None) -> bool:
        """Poll ``/health`` until our process answers 200 (True), or it exits or
        ``timeout`` seconds pass (False). An answer from another process on the
        same port does not count.

        Args:
            timeout: Seconds to wait in all; a server still loading its model is waited for that long.
            on_answer: Called with every answer that is not 200 (``loading`` while the model loads).
        """
        deadline = self._clock() + timeout
        self.last_health = None
        while True:
            state = self.record.running()
            if state is None:
                return False
            remaining = max(deadline - self._clock(), 0.0)
            answer = self._health(state, min(HEALTH_PROBE_TIMEOUT_SECONDS, remaining))
            if answer is not None and answer.ok:
                return True
            if answer is not None:
                self.last_health = answer
                if on_answer is not None:
                    on_answer(answer)
            if self._clock() >= deadline:
                return False
            self._sleep(POLL_INTERVAL_SECONDS)

    def current_args(self) -> list[str]:
        """Arguments of the running server (empty when none runs)."""
        state = self.record.running()
        return list(state.args) if state else []

    def current_binary(self) -> Path | None:
        """Binary of the running server, or None when none runs."""
        state = self.record.running()
        return state.binary if state else None

    def endpoint(self) -> str | None:
        """``http://HOST:PORT`` of the running server, or None when none runs or no port is recorded."""
        state = self.record.running()
        if state is None or state.port is None:
            return None
        return f"http://{http_netloc(state.host, state.port)}"

    # -- for the CLI ---------------------------------------------------------------

    def settled_record(self) -> ServerState | None:
        """``server.json`` once no other process is starting or stopping the server (under the server lock).

        Raises:
            BusyError: Another process kept starting or stopping it for the whole lock timeout.
        """
        with self._server_lock():
            return self.record.read()

    def exit_status(self) -> int | None:
        """The exit status of the newest server this object started, once it ended (else None)."""
        return self.record.newest_exit_status()

    def log_tail(self, lines: int = 5, max_bytes: int = 8192) -> list[str]:
        """The last non-empty lines of the server's log (what it said before it exited)."""
        return log_tail(self.log_path, lines, max_bytes)

    def status(self) -> ServerStatus:
        """Liveness of the recorded process and, when alive, its ``/health``."""
        state = self.record.read()
        if state is None:
            return ServerStatus(running=False)
        if not self.record.alive(state):
            return gone_status(state)
        return running_status(state, self._health(state, HEALTH_PROBE_TIMEOUT_SECONDS))

    # -- internals -----------------------------------------------------------------

    def _health(self, state: ServerState, timeout: float) -> Health | None:
        """``/health`` of the recorded server, counted only when our pid listens there.

        ``None`` when the arguments name no address to ask.
        """
        target = probe_endpoint(listen_endpoints(state.args, default_host=state.host))
        if target is None:
            return None
        if target.kind == "unix":
            ok, detail = probe_unix_health(target.host, timeout)
            answer = Health(ok=ok, detail=detail)
        else:
            answer = self._probe(loopback_for(target.host), target.port or 0, timeout)
        if answer.ok and not self._listens(state.pid, target):
            return Health(
                ok=False,
                detail=f"{target} answers, but not from llama-server (pid {state.pid}): "
                f"{describe_holder(target)} listens there",
            )
        return answer

    def _refuse_if_running(self) -> None:
        """Raise :class:`ServerAlreadyRunningError` when a managed server already runs."""
        state = self.record.running()
        if state is not None:
            raise ServerAlreadyRunningError(
                f"A managed llama-server is already running (pid {state.pid}).",
                hint="Stop it first with `llama-runtime server stop`.",
            )

    def _refuse_taken_addresses(self, args: Sequence[str]) -> None:
        """Raise :class:`PortInUseError` when another process listens on an address in ``args``."""
        for endpoint in listen_endpoints(args, default_host=self.host):
            holder = self._port_in_use(endpoint)
            if holder is not None:
                raise PortInUseError(
                    f"{endpoint} is already in use by {holder}; llama-server was not started.",
                    hint="Stop that process, or give llama-server another address (`-- --port N`).",
                )

    def _port_in_use(self, endpoint: Endpoint) -> str | None:
        """Who already listens on ``endpoint``, or ``None`` when it is free."""
        return describe_holder(endpoint) if endpoint_in_use(endpoint) else None

    def _workdir(self, cwd: Path | None) -> Path:
        """The server's working directory: the caller's, never one inside the home."""
        candidate = Path(cwd) if cwd is not None else (self._restart_cwd or Path.cwd())
        home = self.server_dir.parent.resolve()
        try:
            usable = candidate.is_dir() and not candidate.resolve().is_relative_to(home)
        except OSError:
            usable = False
        if usable:
            return candidate.absolute()
        work = self.server_dir / WORK_DIR_NAME
        work.mkdir(parents=True, exist_ok=True)
        return work

    def _terminate(self, state: ServerState, timeout: float) -> None:
        signal_server(self._kill, state.pid, signal.SIGTERM)
        if self._wait_gone(state, timeout):
            return
        signal_server(self._kill, state.pid, HARD_KILL)
        if self._wait_gone(state, KILL_WAIT_SECONDS):
            return
        raise ServerStopError(
            f"llama-server (pid {state.pid}) is still running after SIGKILL.",
            reason="survived_kill",
            hint="It is probably stuck in a device driver; a reboot may be needed.",
        )

    def _wait_gone(self, state: ServerState, timeout: float) -> bool:
        deadline = self._clock() + timeout
        while self.record.alive(state):
            if self._clock() >= deadline:
                return False
            self._sleep(POLL_INTERVAL_SECONDS)
        return True

    @contextlib.contextmanager
    def _server_lock(self) -> Iterator[None]:
        lock = filelock.FileLock(str(self.server_dir / LOCK_NAME), thread_local=False)
        try:
            self.server_dir.mkdir(parents=True, exist_ok=True)
            lock.acquire(timeout=SERVER_LOCK_TIMEOUT_SECONDS)
        except filelock.Timeout as exc:  # before OSError: filelock's Timeout is a TimeoutError
            raise BusyError(
                "Another llama-runtime process is starting or stopping the server.",
                hint="Try again when it has finished.",
            ) from exc
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRNOS:
                raise
            # A home this process cannot write: nobody can record a server here through it
            # (start writes server.json), so a stop goes ahead without the lock.
            yield
            return
        try:
            yield
        finally:
            lock.release()
