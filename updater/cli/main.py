"""``llama-runtime``: the command line, per ``shared/reference/cli-contract.md``.

Every command takes ``--json``: stdout then carries exactly one JSON object;
logs go to stderr. Errors map to the contract's exit codes through the
exception tree; nothing ever ends in a traceback. Heavy imports (httpx, the
installer) happen inside the commands that need them, so ``status`` starts
fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from llama_runtime.runtime.errors import BusyError, LlamaRuntimeError, UserInputError
from llama_runtime.runtime.text import printable
from llama_runtime.updater.cli.common import (
    GLOBAL_EPILOG,
    add_events_flag,
    cancel_on_signals,
    duration_arg,
    explain_failure,
    outcome_lines,
    progress_for,
    provenance_line,
    user_tag,
)

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
    from llama_runtime.updater.choice.decide import ActiveState
    from llama_runtime.updater.cli.events import EventStream
    from llama_runtime.updater.config import Settings
    from llama_runtime.updater.engine import Engine


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors become exit-2 errors in our format."""

    def error(self, message: str) -> NoReturn:
        raise UserInputError(f"{message[0].upper()}{message[1:]}. See `{self.prog} --help`.")


class Output:
    """Writes the one result of a command: JSON, JSON Lines events, or sentences for people."""

    def __init__(self, as_json: bool, events: EventStream | None = None, log_json: bool = False) -> None:
        self.as_json = as_json or events is not None
        #: With ``--events``: the JSON Lines stream; the result and the error are its last line.
        self.events = events
        #: With ``--log-json`` (and no ``--json``): errors as a JSON line on stderr.
        self.log_json = log_json

    def result(self, payload: dict[str, Any], lines: Sequence[str]) -> None:
        if self.events is not None:
            self.events.result(payload)
        elif self.as_json:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        else:
            for line in lines:
                # Tags and names may come from a release server: show escapes, never send them.
                sys.stdout.write(printable(line) + "\n")
        sys.stdout.flush()

    def error(self, exc: LlamaRuntimeError) -> None:
        if self.events is not None:
            self.events.error(exc)
        elif self.as_json:
            sys.stdout.write(json.dumps({"error": exc.to_json()}, indent=2, sort_keys=True) + "\n")
            sys.stdout.flush()
        elif self.log_json:  # one JSON line, like every other line on stderr
            line = {"level": "error", "event": exc.message, "error": exc.to_json(), "timestamp": _utc_timestamp()}
            sys.stderr.write(json.dumps(line, sort_keys=True) + "\n")
        else:
            sys.stderr.write(f"error: {printable(exc.message)}\n")
            if exc.hint:
                sys.stderr.write(f"  next: {printable(exc.hint)}\n")


def _utc_timestamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The global options: listed once at the top level, accepted (unlisted) after a command too."""
    default = None if top else argparse.SUPPRESS

    def shown(text: str) -> str:
        return text if top else argparse.SUPPRESS

    parser.add_argument("--home", default=default, help=shown("llama-runtime home (LLAMA_RUNTIME_HOME)"))
    parser.add_argument(
        "--api-url", default=default, help=shown("GitHub API base or mirror (LLAMA_RUNTIME_GITHUB_API)")
    )
    parser.add_argument("--repo", default=default, help=shown("OWNER/NAME to take releases from (LLAMA_RUNTIME_REPO)"))
    parser.add_argument(
        "--backend", default=default, help=shown("auto, cpu, cuda, vulkan, rocm, metal, … (LLAMA_RUNTIME_BACKEND)")
    )
    flag = False if top else argparse.SUPPRESS
    parser.add_argument("--json", action="store_true", default=flag, help=shown("one JSON object on stdout"))
    parser.add_argument(
        "--log-json", action="store_true", default=flag, help=shown("log lines and errors on stderr as JSON")
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help=shown("-v: each step (release, asset, download, checks); -vv: also every request and candidate"),
    )
    parser.add_argument(
        "--channel",
        default=default,
        help=shown(
            "stable (the newest release, e.g. v0.3.0, resolved to its build) or nightly (the newest bNNNN build) "
            "(LLAMA_RUNTIME_CHANNEL; default: the active runtime's, else stable)"
        ),
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=flag,
        help=shown("no progress bar, warnings or log lines; results and errors only"),
    )
    parser.add_argument("--no-progress", action="store_true", default=flag, help=shown("no progress bar"))


class _VersionAction(argparse.Action):
    """``--version``: the tool's own version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        sys.stdout.write(f"llama-runtime {tool_version()}\n")
        sys.stdout.flush()
        parser.exit(0)


def tool_version() -> str:
    """The installed version of llama-runtime."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-runtime-updater")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``llama-runtime``."""
    from llama_runtime.updater.cli.gateopts import add_gate_arguments

    parser = _Parser(
        prog="llama-runtime", description="Keep llama.cpp's llama-server current, verified and rollback-safe."
    )
    _common(parser, top=True)
    parser.add_argument("--version", action=_VersionAction, help="print llama-runtime's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=GLOBAL_EPILOG)
        _common(p, top=False)
        return p

    add("status", "what is active, what is installed, whether an override is in force")
    p = add("update", "resolve, download, verify and activate a release; roll back on failure")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tag", help="exact release tag: a build such as b7000 or a release such as v0.3.0")
    which.add_argument("--latest", action="store_true", help="the newest release (default)")
    p.add_argument("--cuda-version", help="CUDA line to prefer, e.g. 12 or 12.4")
    p.add_argument("--require-digest", action="store_true", help="refuse assets without a published sha256")
    add_require_provenance(p)
    p.add_argument(
        "--wait", default="0", metavar="DURATION", help="wait this long for another update to finish (90, 30s, 10m)"
    )
    add_events_flag(p)
    add_gate_arguments(p, smoke=True)
    p = add("plan", "what update would install and why; downloads nothing")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tag", help="plan for this release tag, e.g. b7000")
    which.add_argument("--latest", action="store_true", help="plan for the newest release (default)")
    p.add_argument("--platform", help="plan for another machine: OS-ARCH, e.g. windows-x64")
    p.add_argument("--cuda-version", help="CUDA version the (other) machine's driver supports; with --host, the line")
    p.add_argument(
        "--host",
        metavar="FILE",
        dest="host_file",
        help="plan for the machine FILE describes: the host object `doctor --json` printed there",
    )
    p.add_argument("--explain", action="store_true", help="list every candidate and why it was taken or dropped")
    p = add("rollback", "re-activate the previously active runtime")
    add_gate_arguments(p, smoke=False)
    p = add("doctor", "re-verify the active runtime and say what to do")
    p.add_argument("--repair", action="store_true", help="point the pointer at a verified runtime if it is damaged")
    for module in EXTENSIONS:
        COMMANDS.update(importlib.import_module(module).register(add))
    return parser


def add_require_provenance(parser: argparse.ArgumentParser) -> None:
    """The ``--require-provenance`` flag (also LLAMA_RUNTIME_REQUIRE_PROVENANCE=1)."""
    parser.add_argument(
        "--require-provenance",
        action="store_true",
        help="refuse an asset without a verified build attestation (LLAMA_RUNTIME_REQUIRE_PROVENANCE=1)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    from llama_runtime.updater.config import resolve_settings

    return resolve_settings(
        home=args.home,
        api_url=args.api_url,
        repo=args.repo,
        backend=args.backend,
        require_provenance=bool(getattr(args, "require_provenance", False)),
        channel=args.channel,
    )


def home_for(settings: Settings) -> Home:
    from llama_runtime.runtime.layout import Home

    return Home(settings.home)


def engine_for(settings: Settings) -> Engine:
    """The engine every command builds its collaborators from (the one composition root)."""
    from llama_runtime.updater.engine import Engine

    return Engine(settings)


def _runtime_line(label: str, runtime: InstalledRuntime | None) -> str:
    if runtime is None:
        return f"{label}: none"
    m = runtime.marker
    named = f"{m.release_version} (build {m.tag})" if m.release_version else m.tag
    return f"{label}: {m.repo} {named} ({m.backend}) at {runtime.path}"


def _override_json() -> dict[str, Any] | None:
    from llama_runtime.runtime.binary import VERSION_TIMEOUT_SECONDS, server_override, version_line
    from llama_runtime.runtime.runner import run_process

    path = server_override()
    if path is None:
        return None
    version = None
    if path.is_file():
        done = run_process([str(path), "--version"], VERSION_TIMEOUT_SECONDS, None)
        version = version_line(done.output) if done.returncode == 0 else None
    return {"path": str(path), "exists": path.is_file(), "version": version}


# -- commands -----------------------------------------------------------------


_REPAIR_HINT = (
    "Run `llama-runtime doctor --repair` to point at a verified runtime, "
    "or `llama-runtime update` to install one again."
)


def read_active(home: Home) -> tuple[Pointer, InstalledRuntime | None]:
    """The pointer and the intact active runtime; damage is an exit-6 error naming the repair."""
    from llama_runtime.runtime.errors import CorruptStateError, ForeignMarkerError
    from llama_runtime.updater.install.recovery import damage

    try:
        pointer = home.read_pointer()
        active = home.load(pointer.active) if pointer.active else None
    except ForeignMarkerError:
        raise
    except CorruptStateError as exc:
        raise CorruptStateError(exc.message, hint=_REPAIR_HINT) from None
    problems = damage(active) if active else []
    if active and problems:
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise CorruptStateError(
            f"The active runtime {active.marker.tag} ({active.marker.backend}) in {active.path} is damaged: {shown}.",
            hint=_REPAIR_HINT,
        )
    return pointer, active


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.runtime.failed_builds import load_failed
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.updater.cli.gateopts import speed_table

    settings = settings_from_args(args)
    home = home_for(settings)
    pointer, active = read_active(home)
    installed = home.installed()
    previous = next((r for r in installed if r.name == pointer.previous), None)
    override = _override_json()
    busy = home.lock_path.exists() and UpdateLock(home.lock_path).is_held()
    speeds, speed_lines = speed_table(active, previous)
    skipped = load_failed(home.root)
    payload = {
        "active": active.to_json() if active else None,
        "previous": previous.to_json() if previous else None,
        "installed": [r.to_json() for r in installed],
        "override": override["path"] if override else None,
        "override_info": override,
        "update_running": busy,
        "home": str(home.root),
        "speeds": speeds,
        "skipped_builds": [dataclasses.asdict(b) for b in skipped],
    }
    lines = [_runtime_line("active", active)]
    if active is None:
        lines.append("Nothing is installed yet. Run `llama-runtime update` to install the latest llama.cpp.")
    else:
        lines.append(f"binary: {active.binary}")
        lines.append(provenance_line(active))
    if previous:
        lines.append(_runtime_line("previous", previous) + "  (`llama-runtime rollback` goes back to it)")
    lines.append(f"installed runtimes: {len(installed)} in {home.runtimes_dir}")
    lines += speed_lines
    if override:
        lines.append(
            f"override: LLAMA_SERVER_PATH={override['path']} ({override['version'] or 'does not run'}) is in force; "
            "apps run that binary, not the managed one."
        )
    if busy:
        lines.append("An update is running right now.")
    for build in skipped:
        lines.append(f"skipped (failed here; `update --tag {build.tag}` retries): {build.describe()}")
    out.result(payload, lines)
    return 0


def cmd_update(args: argparse.Namespace, out: Output) -> int:
    """``update``: runs as the home's update job, so ``job status/wait/cancel`` follow it from elsewhere."""
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.choice.decide import UpdateRequest
    from llama_runtime.updater.cli.gateopts import with_gate

    settings = with_gate(args, settings_from_args(args))  # bad input is exit 2 before anything changes
    tag = _tag_or_none(args.tag)
    updater = RuntimeUpdater.from_engine(engine_for(settings))
    request = UpdateRequest(
        repo=settings.repo,
        tag=tag,
        backend=settings.backend if settings.backend_explicit else None,
        cuda_version=args.cuda_version,
        require_digest=args.require_digest,
        channel=settings.channel,
    )
    had_active = _has_active(updater.home)
    bar = progress_for(args)
    listener = out.events if out.events is not None else bar
    try:
        with cancel_on_signals(updater, out):
            job = updater.run_update(
                request, wait=duration_arg(args.wait, "--wait"), operation="update", listener=listener
            )
        if job.exception is not None:
            raise job.exception
    except BusyError:
        if out.events is not None and tag is None:
            from llama_runtime.updater.cli.events import attach_events

            return attach_events(updater, out, busy=updater.busy_error())
        raise updater.busy_error() from None
    except LlamaRuntimeError as exc:
        explain_failure(exc, had_active=had_active)
        raise
    finally:
        if bar is not None:
            bar.close()
    outcome = job.outcome
    if outcome is None:
        raise LlamaRuntimeError(f"The update job {job.id} ended without a result ({job.state().phase}).")
    warnings = list(outcome.warnings)
    override = _override_json()
    if override:
        warnings.append(
            f"LLAMA_SERVER_PATH={override['path']} is set: apps keep running that binary, "
            "not the runtime just installed."
        )
    payload = outcome.to_json()
    payload["warnings"] = warnings
    lines = outcome_lines(outcome) + ([] if args.quiet else [f"warning: {w}" for w in warnings])
    out.result(payload, lines)
    return 0


def _has_active(home: Home) -> bool:
    """Whether the pointer names a runtime (a damaged pointer counts: something was there)."""
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        return home.read_pointer().active is not None
    except CorruptStateError:
        return True


def _tag_or_none(tag: str | None) -> str | None:
    return None if tag is None else user_tag(tag)


def _active_state(home: Home) -> ActiveState | None:
    """The active runtime as the decision sees it; ``None`` when nothing usable is active."""
    from llama_runtime.runtime.errors import CorruptStateError
    from llama_runtime.updater.install.recovery import active_state

    try:
        pointer = home.read_pointer()
        active = home.load(pointer.active) if pointer.active else None
    except CorruptStateError:
        return None
    return active_state(active) if active else None


def cmd_plan(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.updater.choice.decide import UpdateRequest, channel_request, decide
    from llama_runtime.updater.choice.host import detect_host, host_for_platform
    from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote

    settings = settings_from_args(args)
    tag = _tag_or_none(args.tag)
    # --platform and --cuda-version describe the machine to plan for (its driver's
    # CUDA version); they do not pin a CUDA line.
    cuda_line = None
    if args.host_file:
        from pathlib import Path

        from llama_runtime.updater.choice.host_file import load_host_file

        if args.platform:
            raise UserInputError("Give --host FILE or --platform, not both: the file already names the platform.")
        host = load_host_file(Path(args.host_file))
        cuda_line = args.cuda_version  # the file has the driver; --cuda-version pins the line
    elif args.platform:
        host = host_for_platform(args.platform, args.cuda_version)
    elif args.cuda_version:
        host = dataclasses.replace(detect_host(), cuda_driver_version=args.cuda_version.strip())
    else:
        host = detect_host()
    # What update would do on this machine compares with the active runtime;
    # a plan for another machine (--platform) has none.
    active = None if args.platform or args.host_file else _active_state(home_for(settings))
    request = UpdateRequest(
        repo=settings.repo, tag=tag, backend=settings.backend, cuda_version=cuda_line, channel=settings.channel
    )
    channel = channel_request(request, active.marker if active else None)
    with engine_for(settings).open_source(etag_cache=False) as client:
        resolved = resolve_tag_remote(client, tag) if tag else resolve_latest_remote(client, channel)
    release = resolved.release
    plan = decide(request, active, release, host)
    plan.raise_if_refused()
    choice = plan.choice
    if choice is None:
        raise AssertionError("unreachable: a plan with a release names its asset")
    payload: dict[str, Any] = {
        "repo": release.repo,
        "tag": release.tag,
        "version": resolved.version,
        "channel": channel,
        "backend": choice.backend,
        "backend_request": settings.backend,
        "asset": choice.asset.name,
        "extra_assets": [a.name for a in choice.extra_assets],
        "size": choice.asset.size + sum(a.size for a in choice.extra_assets),
        "reason": choice.reason,
        "host": host.to_json(),
        "action": plan.action,
        "warnings": list(plan.warnings),
    }
    named = f"{resolved.version} (build {release.tag})" if resolved.version else release.tag
    lines = [
        f"{release.repo} {named}: {choice.asset.name} ({choice.backend})",
        *[f"  + {a.name}" for a in choice.extra_assets],
        f"why: {choice.reason}",
    ]
    if args.explain:
        payload["resolution"] = [f"channel {channel}", *resolved.notes]
        lines.append(f"resolved through the {channel} channel" + "".join(f"; {n}" for n in resolved.notes))
        payload["candidates"] = [
            {"asset": c.asset_name, "backend": c.backend, "taken": c.taken, "why": c.why} for c in choice.candidates
        ]
        lines.append("candidates:")
        lines += [f"  {'*' if c.taken else '-'} {c.asset_name}: {c.why}" for c in choice.candidates]
        lines.append("host facts:")
        lines += [f"  {k}: {v}" for k, v in host.to_json().items() if k != "sources"]
        lines += [f"  {fact} from: {where}" for fact, where in host.sources]
    out.result(payload, lines)
    return 0


def cmd_rollback(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.updater.cli.gateopts import gate_lines, with_gate

    settings = with_gate(args, settings_from_args(args))
    active, previous, server = engine_for(settings).installer().rollback()
    payload = {
        "result": "switched",
        "active": active.to_json(),
        "previous": previous.to_json() if previous else None,
        "server_restarted": server.restarted,
        "reload_required": server.reload_required,
        "gate": server.gate_json(),
        "warnings": list(server.warnings),
    }
    lines = [f"Rolled back: {active.marker.tag} ({active.marker.backend}) is active again."]
    if server.restarted:
        lines.append(f"The running llama-server was restarted on {active.marker.tag}.")
        if server.reload_required:
            lines.append("Reload your model to use it.")
    lines += gate_lines(server)
    lines += [f"warning: {w}" for w in server.warnings]
    if previous:
        lines.append(f"{previous.marker.tag} is kept as the previous runtime; run rollback again to return to it.")
    out.result(payload, lines)
    return 0


def cmd_doctor(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.updater.api.doctor import run_doctor
    from llama_runtime.updater.choice.host import detect_host

    settings = settings_from_args(args)
    report = run_doctor(
        home_for(settings),
        repair=args.repair,
        host=detect_host().to_json(),
        reinstall=_reinstaller(settings) if args.repair else None,
    )
    payload = report.to_json()
    if not report.healthy:  # the contract's error object, beside the report
        failed = "; ".join(f"{f.check}: {f.detail}" for f in report.findings if not f.ok) or "see the checks"
        error: dict[str, object] = {"code": "unhealthy", "message": f"doctor found problems: {failed}.", "exit_code": 6}
        if report.advice:
            error["hint"] = report.advice[0]
        payload.setdefault("error", error)
    out.result(payload, report.lines())
    return 0 if report.healthy else 6


def _reinstaller(settings: Settings) -> Callable[[InstalledRuntime], InstalledRuntime]:
    """``doctor --repair``'s in-place repair: the damaged build again, by ``update``'s own path."""

    def reinstall(damaged: InstalledRuntime) -> InstalledRuntime:
        from llama_runtime.updater.install.transaction import UpdateRequest

        m = damaged.marker
        engine = engine_for(dataclasses.replace(settings, repo=m.repo))
        with engine.open_source() as source:
            # backend None: the installer keeps the damaged runtime's stored request.
            return engine.installer(source).update(UpdateRequest(repo=m.repo, tag=m.tag)).active

    return reinstall


Handler = Callable[[argparse.Namespace, "Output"], int]
AddParser = Callable[[str, str], argparse.ArgumentParser]

#: Modules that add commands: each has ``register(add: AddParser) -> dict[str, Handler]``
#: and keeps its heavy imports inside its handlers.
EXTENSIONS: list[str] = [
    "llama_runtime.updater.cli.offline",
    "llama_runtime.updater.cli.server",
    "llama_runtime.updater.cli.jobs",
    "llama_runtime.updater.cli.lifecycle",
    "llama_runtime.updater.cli.gate",
    "llama_runtime.updater.cli.completion",
]

COMMANDS: dict[str, Handler] = {
    "status": cmd_status,
    "update": cmd_update,
    "plan": cmd_plan,
    "rollback": cmd_rollback,
    "doctor": cmd_doctor,
}


def _active_now(args: argparse.Namespace | None) -> str:
    """Which runtime the pointer names right now, as words; never raises."""
    try:
        if args is None:
            raise LookupError("no home yet")
        home = home_for(settings_from_args(args))
    except Exception as exc:  # bad settings: the interruption is still the news
        reason = getattr(exc, "message", None) or type(exc).__name__
        return f"the active runtime could not be read ({reason}); `llama-runtime status` shows it"
    return home.describe_active()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llama-runtime``; returns the exit code of the contract."""
    argv = list(sys.argv[1:] if argv is None else argv)
    server_args: list[str] = []
    if "--" in argv:  # everything after -- belongs to llama-server (`server start -- ARGS`)
        cut = argv.index("--")
        argv, server_args = argv[:cut], argv[cut + 1 :]
    out = Output(
        as_json="--json" in argv,
        events=_events_stream() if "--events" in argv else None,
        log_json="--log-json" in argv,
    )
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        from llama_runtime.updater.cli.completion import maybe_complete

        maybe_complete(parser)  # a shell asking for completions gets them and nothing runs
        args = parser.parse_args(argv)
        args.server_args = server_args
        if not getattr(args, "events", False):
            out.events = None
        out.as_json = bool(args.json) or out.events is not None
        out.log_json = bool(args.log_json)
        from llama_runtime.updater.logs import configure_logging

        level = "error" if args.quiet else "debug" if args.verbose > 1 else "info" if args.verbose else "warning"
        configure_logging(json_lines=args.log_json, level=level)
        if not args.command:
            if out.as_json:
                raise UserInputError(f"No command given. Choose one of: {', '.join(sorted(COMMANDS))}.")
            build_parser().print_help()
            return 2
        return COMMANDS[args.command](args, out)
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more can be said on stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except LlamaRuntimeError as exc:
        try:
            out.error(exc)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exc.exit_code
    except OSError as exc:
        from llama_runtime.runtime.errors import FileSystemError

        io_error = FileSystemError.from_os_error(exc)
        out.error(io_error)
        return io_error.exit_code
    except KeyboardInterrupt:
        from llama_runtime.runtime.errors import CancelledError

        # The truth, read from the pointer now: a Ctrl-C after the flip changed it.
        interrupted = CancelledError(f"Interrupted; {_active_now(args)}.")
        with contextlib.suppress(OSError):
            out.error(interrupted)
        return interrupted.exit_code
    except Exception as exc:  # a bug: say so in one line, never a traceback
        if os.environ.get("LLAMA_RUNTIME_DEBUG"):
            raise
        err = LlamaRuntimeError(
            f"Internal error ({type(exc).__name__}: {exc}). The active runtime is unchanged. "
            "Please report this with LLAMA_RUNTIME_DEBUG=1 output."
        )
        out.error(err)
        return 1


def _events_stream() -> EventStream:
    from llama_runtime.updater.cli.events import EventStream

    return EventStream()


if __name__ == "__main__":
    sys.exit(main())
