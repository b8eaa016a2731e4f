"""``status``: what is active, what is installed, whether an override is in force.

It reads the home only (no network, no installer), so it starts fast.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from llama_runtime import UserInputError
from llama_runtime.updater.cli.common import provenance_line, settings_from_args, updater_for

if TYPE_CHECKING:
    from llama_runtime import InstalledRuntime, ServerReport, StatusResult
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
    if status.update_running:
        lines.append("An update is running right now.")
    if status.trial is not None:
        after = "its check is running" if status.trial.owner_running else "the next update, use or rollback reverts it"
        lines.append(f"trial: {status.trial.describe()} ({after}).")
        if status.trial.server_down:
            lines.append(server_down_line(status.trial.name, status.trial.before_name))
    for build in status.skipped_builds:
        lines.append(f"skipped (failed here; `update --retry-skipped` retries): {build.describe()}")
    out.result(status.to_json(), lines)
    return 0


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
    channel = f", channel {m.channel}" if m.channel else ""  # what a plain update follows
    return f"{label}: {m.repo} {named} ({m.backend}{channel}){origin} at {runtime.path}"


# -- server: ``llama-runtime server start [-- ARGS…] | stop | restart | status``: a client of ``RuntimeUpdater.server``.

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
        "(LLAMA_RUNTIME_SERVER_WAIT; default 300)",
    )
    return {"server": cmd_server}


def _flag_seconds(args: argparse.Namespace, flag: str, *, zero_ok: bool = False) -> float | None:
    """``--wait`` or ``--timeout`` when given, checked; ``None`` when not.

    Raises:
        UserInputError: Not a positive number of seconds (or 0 with ``zero_ok``).
    """
    given = getattr(args, flag, None)
    if given is None:
        return None
    if not math.isfinite(given) or given < 0 or (given == 0 and not zero_ok):
        what = "0 or a positive" if zero_ok else "a positive"
        raise UserInputError(f"--{flag} must be {what} number of seconds, not {given:g}.")
    return float(given)


def cmd_server(args: argparse.Namespace, out: Output) -> int:
    """``server ACTION``: the managed llama-server, through ``RuntimeUpdater.server``."""
    server = updater_for(settings_from_args(args)).server
    if args.action == "status":
        report = server.status()
        out.result(report.to_json(), _status_lines(report))
        return 0
    if args.action == "stop":
        stopped = server.stop(timeout=_flag_seconds(args, "timeout", zero_ok=True))
        lines = [
            f"Stopped llama-server (pid {stopped.pid})." if stopped.stopped else "No managed llama-server was running."
        ]
        out.result(stopped.to_json(), [f"warning: {stopped.recovered}"] * bool(stopped.recovered) + lines)
        return 0
    wait = _flag_seconds(args, "wait")
    if wait is None and args.timeout is not None:
        wait = _flag_seconds(args, "timeout")
    wait = server.default_wait if wait is None else wait
    given = list(getattr(args, "server_args", []))
    notice = LoadingNotice(wait, quiet=args.quiet or out.as_json)
    if args.action == "restart":
        stop_timeout = _flag_seconds(args, "timeout", zero_ok=True)  # also the stop's, as `server stop --timeout`
        report = server.restart(given or None, stop_timeout=stop_timeout, wait=wait, on_loading=notice)
    else:
        report = server.start(given, wait=wait, on_loading=notice)
    out.result(report.to_json(), _started_lines(report, restart=args.action == "restart"))
    return 0 if report.healthy else 6


def _started_lines(report: ServerReport, *, restart: bool) -> list[str]:
    """What ``server start|restart`` says: what runs where, its log, and what to do when it is not healthy yet."""
    runtime = report.runtime
    assert runtime is not None  # a start always names the runtime it started
    m = runtime.marker
    lines = [f"warning: {report.recovered}"] * bool(report.recovered) + [
        f"{'Restarted' if restart else 'Started'} llama-server {m.tag} ({m.backend}), pid {report.pid}, on {report.url}"
        + ("" if report.healthy else f"; it did not answer /health within {report.waited_seconds:g} s"),
        f"log: {report.log_path}",
    ]
    if not report.healthy:
        lines.append(
            f"It is still running; its last answer was {report.health_detail or 'nothing'}. "
            "`llama-runtime server status` says when it is healthy; `--wait SECONDS` waits longer."
        )
        lines += [f"  log: {line}" for line in report.log_tail]
    if report.override is not None:
        lines.append(f"warning: LLAMA_SERVER_PATH={report.override} is set; apps using it run that binary instead.")
    return lines


def _status_lines(report: ServerReport) -> list[str]:
    """What ``server status`` says."""
    if report.down_after_switch is not None:
        return [server_down_line(report.down_after_switch, report.back_on or "the runtime before it")]
    if not report.running:
        return ["No managed llama-server is running. Start one with `llama-runtime server start -- ARGS`."]
    runtime = report.runtime
    what = f"{runtime.marker.tag} ({runtime.marker.backend})" if runtime else str(report.binary)
    health = "healthy" if report.healthy else f"not healthy ({report.health_detail})"
    return [f"llama-server {what} runs as pid {report.pid} on {report.url}: {health}."]


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

    def __call__(self) -> None:
        now = self._clock()
        if self.quiet:
            return
        if self._said_at is not None and now - self._said_at < LOADING_NOTICE_SECONDS:
            return
        self._said_at = now
        sys.stderr.write(
            f"llama-server is loading its model ({now - self._began:.0f} s so far; waiting up to {self.wait:g} s)...\n"
        )
        sys.stderr.flush()


def register(add: AddParser) -> dict[str, Handler]:
    """Add this module's commands."""
    return {**_register_status(add), **_register_server(add)}
