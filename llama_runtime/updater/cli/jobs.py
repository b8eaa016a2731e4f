"""CLI commands of the scheduled job and the update job: ``check`` and ``job``.

``check`` is what cron or a systemd timer runs. It is quiet when another update
is running (exit 3, no output for people, so cron sends no mail) and exits 0
with ``skipped: rate_limited`` while a stored GitHub backoff lasts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llama_runtime import BusyError
from llama_runtime.updater.cli.common import add_events_flag, cancel_on_signals

if TYPE_CHECKING:
    from llama_runtime import JobError, RuntimeUpdater
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output

#: The jitter sleep; tests replace it so they never wait.
sleep: Callable[[float], None] = time.sleep


def register(add: AddParser) -> dict[str, Handler]:
    """Add ``check`` and ``job`` to the parser."""
    p = add("check", "is a newer release out for the active repo and backend? --apply installs it")
    p.add_argument("--apply", action="store_true", help="install the newer release")
    p.add_argument("--jitter", metavar="DURATION", help="first sleep a random 0..DURATION (e.g. 10m) to spread a fleet")
    p.add_argument(
        "--wait", default="0", metavar="DURATION", help="with --apply, wait this long for a running update (e.g. 10m)"
    )
    add_events_flag(p)
    from llama_runtime.updater.cli.common import add_require_provenance, add_storage_flags

    add_require_provenance(p)
    add_storage_flags(p)
    p = add("job", "show, follow or cancel the update job")
    p.add_argument("action", nargs="?", default="status", choices=("status", "wait", "cancel"))
    p.add_argument("--timeout", default=None, metavar="DURATION", help="how long `job wait` waits (e.g. 90, 10m)")
    add_events_flag(p)
    return {"check": cmd_check, "job": cmd_job}


def updater_from_args(args: argparse.Namespace) -> RuntimeUpdater:
    """A :class:`RuntimeUpdater` over the engine the common flags configure."""
    from llama_runtime.updater.cli.common import settings_from_args, updater_for

    return updater_for(settings_from_args(args))


def cmd_check(args: argparse.Namespace, out: Output) -> int:
    """``llama-runtime check [--apply] [--jitter DURATION] [--wait SECONDS]``."""
    import random

    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import duration_arg, progress_for

    jitter = Vocabulary.duration(args.jitter) if args.jitter else 0.0
    wait = duration_arg(args.wait, "--wait")
    updater = updater_from_args(args)
    if jitter:
        sleep(random.uniform(0.0, jitter))
    bar = progress_for(args) if args.apply else None
    try:
        with cancel_on_signals(updater, out):
            result = updater.check(apply=args.apply, wait=wait, listener=out.events or bar)
    except BusyError as exc:
        if out.events is not None:
            raise
        current = updater.jobs.current()
        payload: dict[str, Any] = {"skipped": "busy", "error": exc.to_json()}
        payload["job"] = current.to_json() if current and current.running else None
        if out.as_json:
            out.result(payload, [])
        return exc.exit_code
    finally:
        if bar is not None:
            bar.close()
    latest = f"{result.latest_version} (build {result.latest})" if result.latest_version else result.latest
    switched = result.outcome is not None and result.outcome.result == "switched"
    lines = [_check_line(result.installed, latest, result.update_available, result.applied, switched=switched)]
    if result.held:
        lines = [f"Held: {latest} is available, but {result.pinned} is pinned; {result.plain_update}."]
    elif result.pinned is not None and not result.applied:
        lines = [f"Pinned to {result.pinned} (the newest release is {latest}); {result.plain_update}."]
    if result.skipped_build is not None and not result.applied:
        lines = [f"Not updated: {result.skipped_build.sentence()}"]
    elif result.skipped:
        lines = [f"Skipped: {result.reason}"]
    elif result.reason:
        lines.append(result.reason)
    lines += [] if args.quiet else [f"warning: {w}" for w in result.warnings]
    payload = result.to_json()
    # ``installed`` (the contract's, a build tag) predates ``status.installed`` (a list);
    # ``active`` is the runtime object status and update report, for the same reader.
    payload["active"] = _active_json(updater)
    out.result(payload, lines)
    return 0


def _active_json(updater: RuntimeUpdater) -> dict[str, Any] | None:
    ready = updater.ensure()
    return ready.runtime.to_json() if ready.runtime is not None else None


def _check_line(
    installed: str | None, latest: str | None, available: bool, applied: bool, *, switched: bool = False
) -> str:
    if applied:  # an installed copy of the build is switched to, not installed again
        done = "Switched to" if switched else "Installed"
        return f"{done} {latest} (was {installed or 'nothing'})" + (": nothing was downloaded." if switched else ".")
    if available:
        return f"Update available: {installed or 'nothing installed'} -> {latest}. Run `llama-runtime check --apply`."
    return f"Up to date: {installed or 'nothing installed'} (latest {latest})."


def cmd_job(args: argparse.Namespace, out: Output) -> int:
    """``llama-runtime job [status|wait|cancel]``."""
    from llama_runtime.updater.cli.common import duration_arg, progress_for

    timeout = None if args.timeout is None else duration_arg(args.timeout, "--timeout")
    updater = updater_from_args(args)
    job = updater.current_job()
    if job is None:
        out.result({"job": None}, ["No update job has run in this home."])
        return 0
    if args.action == "cancel":
        state = job.state()
        if state.running:
            job.cancel()
            out.result({"job": state.to_json(), "cancel_requested": True}, [f"Asked job {job.id} to stop."])
        else:
            out.result({"job": state.to_json(), "cancel_requested": False}, [f"Job {job.id} is already {state.phase}."])
        return 0
    if args.action == "wait" and out.events is not None:
        from llama_runtime.updater.cli.follow import follow_events

        return follow_events(job, out, timeout)
    if args.action == "wait":
        bar = progress_for(args)
        stop = job.subscribe(bar) if bar is not None else None
        state = job.wait(timeout)
        if stop is not None:
            stop()
        if bar is not None:
            bar.close()
    else:
        state = job.state()
    if args.action == "wait" and state.running:
        from llama_runtime.updater.cli.events import BUSY_EXIT, gave_up_error

        error = gave_up_error(state.id, timeout)
        out.result({"job": state.to_json(), "error": error}, [_job_line(state.id, state.describe(), None)])
        return BUSY_EXIT
    out.result({"job": state.to_json()}, [_job_line(state.id, state.describe(), state.error)])
    if state.phase == "failed" and state.error:
        return state.error.exit_code if state.error.exit_code is not None else 1
    return 0


def _job_line(job_id: str, what: str, error: JobError | None) -> str:
    line = f"job {job_id}: {what}"
    if error and isinstance(error.record.get("message"), str):
        line += f" — {error.message}"
    return line
