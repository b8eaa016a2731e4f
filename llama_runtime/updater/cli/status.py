"""``status``: what is active, what is installed, whether an override is in force.

It reads the home only (no network, no installer), so it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from llama_runtime import LlamaRuntimeError, UserInputError
from llama_runtime.runtime.fsutil import decimal
from llama_runtime.updater.cli.common import provenance_line, settings_from_args, updater_for

if TYPE_CHECKING:
    from llama_runtime import StatusResult
    from llama_runtime.runtime.layout import Home, InstalledRuntime
    from llama_runtime.runtime.listen import Health
    from llama_runtime.runtime.sandbox import SandboxSupport
    from llama_runtime.runtime.server import ManagedServer
    from llama_runtime.runtime.trial import Trial
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


# -- status ------------------------------------------------------------------------------------------------------


def _register_status(add: AddParser) -> dict[str, Handler]:
    """Add ``status``."""
    add("status", "what is active, what is installed, whether an override is in force")
    return {"status": cmd_status}


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    """``status``: the active and previous runtimes, the installed ones, speeds, skipped builds."""
    from llama_runtime.updater.cli.gateopts import speed_lines

    status = updater_for(settings_from_args(args)).status()
    active, previous, override = status.active, status.previous, status.override
    lines = [_runtime_line("active", active)]
    if active is None:
        lines.append("Nothing is installed yet. Run `llama-runtime update` to install the latest llama.cpp.")
    else:
        lines.append(f"binary: {active.binary}")
        lines.append(provenance_line(active))
        if active.marker.device_warning:
            lines.append(f"warning: {active.marker.device_warning}")
    lines += _pin_lines(status)
    if previous:
        lines.append(_runtime_line("previous", previous) + "  (`llama-runtime rollback` goes back to it)")
    shared = sum(entry.shared_bytes for entry in status.installed)
    lines.append(
        f"installed runtimes: {len(status.installed)} in {status.home / 'runtimes'}; "
        f"the home uses {status.home_bytes / 1e6:.1f} MB"
        + (" (files identical across runtimes are stored once)" if shared else "")
    )
    lines += speed_lines(status.speeds, active, previous)
    if override:
        lines.append(
            f"override: LLAMA_SERVER_PATH={override.path} ({override.version or 'does not run'}) is in force; "
            "apps run that binary, not the managed one."
        )
    if status.sandbox is not None:
        lines.append(sandbox_line(status.sandbox))
    if status.update_running:
        lines.append("An update is running right now.")
    if status.trial is not None:
        after = "its check is running" if status.trial.owner_running else "the next update, use or rollback reverts it"
        lines.append(f"trial: {status.trial.describe()} ({after}).")
        if status.trial.server_down:
            lines.append(server_down_line(status.trial.name, status.trial.before_name))
    for build in status.skipped_builds:
        lines.append(f"skipped (failed here; `update --tag {build.tag}` retries): {build.describe()}")
    out.result(status.to_json(), lines)
    return 0


def sandbox_line(support: SandboxSupport) -> str:
    """``sandbox: bubblewrap (bwrap at /usr/bin/bwrap)``, with how to get a stronger one."""
    stronger = f"; for a stronger one, {support.stronger}" if support.stronger else ""
    return f"sandbox for a new build's first runs: {support.level} ({support.detail}{stronger})"


def _pin_lines(status: StatusResult) -> list[str]:
    """The pin's line; a damaged pin file is said, never a failed ``status``."""
    if status.pin_problem is not None:
        return [f"warning: {status.pin_problem}"]
    if status.pinned is None:
        return []
    return [
        f"pinned: {status.pinned.repo} {status.pinned.tag} (`check --apply`, scheduled jobs and a plain `update` "
        "stay on it; `llama-runtime unpin` releases it)"
    ]


def server_down_after(home: Home, trial: Trial) -> bool:
    """Whether the managed server a dead switch stopped is still down (nothing brought it back yet)."""
    from llama_runtime.updater.api.inventory import server_down_after as down

    return down(home, trial)


def server_down_line(name: str, before_name: str) -> str:
    """The sentence saying the managed server is down because a switch was interrupted, and what brings it back."""
    return (
        f"server: llama-server is down: the switch to {name} was interrupted after stopping it; "
        f"`llama-runtime server restart` (or the next update, use, rollback or gc) starts {before_name} "
        "again with its last arguments."
    )


def _runtime_line(label: str, runtime: InstalledRuntime | None) -> str:
    if runtime is None:
        return f"{label}: none"
    m = runtime.marker
    named = f"{m.release_version} (build {m.tag})" if m.release_version else m.tag
    origin = f" from {m.source}" if m.source.startswith("oci") else ""  # a registry: upstream identity and origin
    return f"{label}: {m.repo} {named} ({m.backend}){origin} at {runtime.path}"


def override_info() -> dict[str, Any] | None:
    """The ``LLAMA_SERVER_PATH`` override in force: its path, whether it exists, its version line."""
    from llama_runtime.updater.api.inventory import server_override_info

    info = server_override_info()
    return info.to_json() if info is not None else None


# -- server: ``llama-runtime server start [-- ARGS…] | stop | restart | status``: the managed llama-server. ---

#: llama-server's own default port (``--port``, tools/server/README.md), so that a
#: managed server is where every llama.cpp client looks first.
LLAMA_SERVER_DEFAULT_PORT: Final[int] = 8080
#: Seconds ``server start`` waits for /health (``--wait``, ``LLAMA_RUNTIME_SERVER_WAIT``). A server
#: that maps a large model from a slow disk, or a Vulkan build compiling its shader cache cold (47 s
#: seen on a desktop GPU), is loading, not failing; one that exits is reported at once anyway.
SERVER_WAIT_DEFAULT_SECONDS: Final[float] = 300.0
#: Seconds between the lines saying llama-server is still loading: alive, not chatty.
LOADING_NOTICE_SECONDS: Final[float] = 10.0


def _register_server(add: AddParser) -> dict[str, Handler]:
    """Add the ``server`` command."""
    p = add("server", "the managed llama-server: start [-- ARGS…], stop, restart [-- ARGS…], status")
    p.add_argument("action", choices=("start", "stop", "restart", "status"))
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="stop: seconds before SIGKILL (default 10); start/restart: the same as --wait, when --wait is not given",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start/restart: seconds to wait for /health while llama-server loads its model "
        f"(LLAMA_RUNTIME_SERVER_WAIT; default {SERVER_WAIT_DEFAULT_SECONDS:.0f})",
    )
    return {"server": cmd_server}


def server_wait(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> float:
    """Seconds ``server start|restart`` waits for /health: ``--wait``, ``--timeout``, the environment, 300.

    Raises:
        UserInputError: The value is not a positive number of seconds (exit 2).
    """
    from llama_runtime.updater.config import env_number

    for flag in ("wait", "timeout"):
        given = getattr(args, flag, None)
        if given is not None:
            if not math.isfinite(given) or given <= 0:
                raise UserInputError(f"--{flag} must be a positive number of seconds, not {given:g}.")
            return float(given)
    return env_number(os.environ if env is None else env, "LLAMA_RUNTIME_SERVER_WAIT", SERVER_WAIT_DEFAULT_SECONDS)


def _stop_timeout(args: argparse.Namespace) -> float:
    from llama_runtime.runtime.server import DEFAULT_STOP_TIMEOUT_SECONDS

    given = args.timeout
    if given is None:
        return DEFAULT_STOP_TIMEOUT_SECONDS
    if not math.isfinite(given) or given < 0:
        raise UserInputError(f"--timeout must be 0 or a positive number of seconds, not {given:g}.")
    return float(given)


def cmd_server(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
    from llama_runtime.runtime.server import ManagedServer
    from llama_runtime.updater.cli.common import home_for, settings_from_args

    home = home_for(settings_from_args(args))
    server = ManagedServer(home.server_dir, port=default_port())
    stop_timeout = _stop_timeout(args)
    wait = server_wait(args) if args.action in ("start", "restart") else 0.0
    if args.action == "status":
        return _status(out, home, server)
    # A switch that died midway is finished first: the checked build, never the one on trial, is served.
    given = bool(getattr(args, "server_args", []))
    recovered = finish_trial(home, restart_server=args.action == "restart" and not given)
    if args.action in ("start", "restart"):
        timing = (stop_timeout, wait)
        return _start(args, out, home, server, timing, restart=args.action == "restart", recovered=recovered)
    was = server.status()
    # The switch lock, not the update lock: a download must not block this.
    # hold_for_reading: a read-only home cannot take the lock, and no start can happen there meanwhile.
    with UpdateLock(home.switch_lock_path).hold_for_reading("server stop", timeout=BUTTON_WAIT_SECONDS):
        server.stop(stop_timeout)
    lines = [f"Stopped llama-server (pid {was.pid})." if was.running else "No managed llama-server was running."]
    payload: dict[str, object] = {"stopped": was.running, "pid": was.pid, "recovered": recovered}
    out.result(payload, [f"warning: {recovered}"] * bool(recovered) + lines)
    return 0


def finish_trial(home: Home, *, restart_server: bool) -> str | None:
    """Finish a switch whose process died before its verdict (runtime.trial); the sentence saying so, or None.

    Taken under the update lock, briefly: an update holding it finishes the
    trial itself first, and the server verbs read the checked pointer anyway.
    """
    from llama_runtime import BusyError
    from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
    from llama_runtime.runtime.trial import finish_abandoned_trial, owner_alive, read_trial, trial_path

    trial = read_trial(home)
    if (trial is None and not trial_path(home).exists()) or (trial is not None and owner_alive(trial)):
        return None
    try:
        with UpdateLock(home.lock_path).hold("server", timeout=BUTTON_WAIT_SECONDS):
            return finish_abandoned_trial(home, restart_server=restart_server)
    except BusyError:
        return None


def _start(
    args: argparse.Namespace,
    out: Output,
    home: Home,
    server: ManagedServer,
    timing: tuple[float, float],
    *,
    restart: bool,
    recovered: str | None,
) -> int:
    """``server start|restart``: the checked build on the arguments given; exit 0 only once it is healthy.

    Args:
        timing: Seconds before SIGKILL when stopping (restart), and seconds to wait for /health.
    """
    from llama_runtime.runtime.binary import server_override
    from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
    from llama_runtime.runtime.trial import checked_pointer

    server_args = list(getattr(args, "server_args", []))
    # The caller's directory: relative paths in the arguments mean what they meant there.
    cwd: Path | None = Path.cwd()
    # Under the switch lock, which an update holds only while it switches runtimes (never
    # while it downloads): the switch must not miss this server, nor this start its pointer.
    with UpdateLock(home.switch_lock_path).hold(f"server {args.action}", timeout=BUTTON_WAIT_SECONDS):
        pointer, _trial = checked_pointer(home, home.read_pointer())
        if not pointer.active:
            raise UserInputError("No runtime is active yet; run `llama-runtime update` first.")
        runtime = home.load(pointer.active)
        if restart:
            server_args, cwd = _restart_args(server, server_args, cwd)
            server.stop(timing[0])
        server.start(runtime.binary, server_args, runtime_name=runtime.name, cwd=cwd)
    notice = LoadingNotice(timing[1], quiet=args.quiet or out.as_json)
    healthy = server.wait_healthy(timing[1], on_answer=notice)
    status = server.status()
    if not healthy and not status.running:
        _raise_exited(server, runtime.marker.tag, server_args)
    lines = [f"warning: {recovered}"] * bool(recovered) + [
        f"{'Restarted' if restart else 'Started'} llama-server {runtime.marker.tag} ({runtime.marker.backend}), "
        f"pid {status.pid}, on {_where(status.host, status.port)}"
        + ("" if healthy else f"; it did not answer /health within {timing[1]:g} s"),
        f"log: {server.log_path}",
    ]
    if not healthy:
        lines += _still_starting(server)
    override = server_override()
    if override is not None:
        lines.append(f"warning: LLAMA_SERVER_PATH={override} is set; apps using it run that binary instead.")
    payload = status.to_json()
    payload["healthy"] = healthy
    payload["runtime"] = runtime.to_json()
    payload["recovered"] = recovered
    payload["waited_seconds"] = timing[1]
    payload["log_tail"] = [] if healthy else server.log_tail()
    if not healthy and server.last_health is not None:
        payload["health_detail"] = server.last_health.detail
    out.result(payload, lines)
    return 0 if healthy else 6


class LoadingNotice:
    """The progress line while llama-server loads its model: on stderr, every few seconds, never with --json.

    Args:
        wait: Seconds the command waits in all (said in the line).
        quiet: Say nothing (``--quiet``, ``--json``).
        clock: Monotonic seconds.
    """

    def __init__(self, wait: float, *, quiet: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait = wait
        self.quiet = quiet
        self._clock = clock
        self._began = clock()
        self._said_at: float | None = None

    def __call__(self, answer: Health) -> None:
        now = self._clock()
        if self.quiet or not answer.loading:
            return
        if self._said_at is not None and now - self._said_at < LOADING_NOTICE_SECONDS:
            return
        self._said_at = now
        sys.stderr.write(
            f"llama-server is loading its model ({now - self._began:.0f} s so far; waiting up to {self.wait:g} s)...\n"
        )
        sys.stderr.flush()


def _still_starting(server: ManagedServer) -> list[str]:
    """What a server that outlived the wait last said: its /health answer and its log's last lines."""
    last = server.last_health
    lines = [
        f"It is still running; its last answer was {last.detail if last else 'nothing'}. "
        "`llama-runtime server status` says when it is healthy; `--wait SECONDS` waits longer."
    ]
    return lines + [f"  log: {line}" for line in server.log_tail()]


def _restart_args(server: ManagedServer, given: list[str], cwd: Path | None) -> tuple[list[str], Path | None]:
    """``server restart``: the arguments (and directory) the running server was started with, unless ARGS are given.

    Raises:
        UserInputError: No managed server runs and no ARGS say how to start one.
    """
    if given:
        return given, cwd
    state = server.record.running()
    if state is None:
        raise UserInputError(
            "No managed llama-server is running, so there are no arguments to restart it with; "
            "start one with `llama-runtime server start -- ARGS`."
        )
    return list(state.args), None  # None: the directory of the server stopped (ManagedServer.start)


def default_port(env: Mapping[str, str] | None = None) -> int | None:
    """The port ``server start`` binds without ``--port``: llama-server's own default, 8080.

    ``LLAMA_RUNTIME_SERVER_PORT`` overrides it (``0``: any free port, for tests and for
    machines where 8080 is taken).

    Raises:
        UserInputError: The variable is not a port number.
    """
    raw = (os.environ if env is None else env).get("LLAMA_RUNTIME_SERVER_PORT", "").strip()
    if not raw:
        return LLAMA_SERVER_DEFAULT_PORT
    port = decimal(raw)
    if port is None or port > 65535:
        raise UserInputError(
            f"LLAMA_RUNTIME_SERVER_PORT={raw[:40]!r} is not a port; use 1-65535, or 0 for any free port."
        )
    return port or None


def _raise_exited(server: ManagedServer, tag: str, server_args: list[str]) -> NoReturn:
    """llama-server ended right after starting: report what it said, in its own words.

    Raises:
        BusyError: Another command stopped it (its record is gone or names another server).
        ServerStartError: It exited by itself.
    """
    from llama_runtime import BusyError, ServerStartError

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
        hint=f"Its arguments were: {' '.join(server_args) or '(none)'}; its log: {server.log_path}. "
        "`llama-server --help` lists what it accepts.",
    )


def _status(out: Output, home: Home, server: ManagedServer) -> int:
    from llama_runtime import CorruptStateError
    from llama_runtime.runtime.trial import read_trial

    status = server.status()
    payload = status.to_json()
    runtime = None
    if status.running and status.runtime_name:
        try:
            runtime = home.load(status.runtime_name)
        except CorruptStateError:
            runtime = None
    payload["runtime"] = runtime.to_json() if runtime else None
    trial = None if status.running else read_trial(home)
    payload["down_after_switch"] = trial.name if trial is not None and server_down_after(home, trial) else None
    if trial is not None and payload["down_after_switch"]:
        lines = [server_down_line(trial.name, trial.before_name)]
    elif not status.running:
        lines = ["No managed llama-server is running. Start one with `llama-runtime server start -- ARGS`."]
    else:
        what = f"{runtime.marker.tag} ({runtime.marker.backend})" if runtime else str(status.binary)
        health = "healthy" if status.healthy else f"not healthy ({status.health_detail})"
        lines = [f"llama-server {what} runs as pid {status.pid} on {_where(status.host, status.port)}: {health}."]
    out.result(payload, lines)
    return 0


def _where(host: str | None, port: int | None) -> str:
    """``http://127.0.0.1:8080``, ``http://[::1]:8080`` or ``unix:/run/llama.sock`` for people."""
    if host is None or port is None:
        return f"unix:{host}"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def register(add: AddParser) -> dict[str, Handler]:
    """Add this module's commands."""
    return {**_register_status(add), **_register_server(add)}
