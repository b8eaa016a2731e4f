"""CLI commands for the runtimes on this machine: ``list``, ``use``, ``remove``, ``which``.

The verbs of a runtime manager (``uv python list/find/uninstall``, LM Studio's
``lms runtime ls/select/remove``): ``use`` activates what is installed through
the same verification and server switch as ``update``; ``remove`` deletes what
is neither active nor the rollback target; ``which`` prints one path for scripts.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llama_runtime import NothingActiveError, UserInputError
from llama_runtime.updater.cli.common import add_events_flag, settings_from_args, updater_for

if TYPE_CHECKING:
    from llama_runtime import RuntimeEntry, Settings
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


# -- lifecycle ---------------------------------------------------------------------------------------------------

#: Releases ``list --available`` shows by default: a screenful, and one page of the API.
AVAILABLE_DEFAULT: int = 10


def _register_lifecycle(add: AddParser) -> dict[str, Handler]:
    """Add ``list``, ``use``, ``remove`` and ``which``."""
    from llama_runtime.updater.cli.gateopts import add_gate_arguments
    from llama_runtime.updater.cli.main import installed_tags

    p = add("list", "installed runtimes; --available also lists releases that fit this host")
    p.add_argument("--available", action="store_true", help="also list the newest releases this host can install")
    p.add_argument(
        "--limit", type=int, default=AVAILABLE_DEFAULT, metavar="N", help="with --available: at most N releases"
    )
    p = add("use", "activate an installed runtime (no download), verified like an update")
    tag = p.add_argument("tag", metavar="TAG", help="an installed build, e.g. b7000, or a runtime name from `list`")
    tag.completer = installed_tags  # type: ignore[attr-defined]  # argcomplete's hook on an argparse Action
    add_events_flag(p)
    add_gate_arguments(p, smoke=False)
    p = add("remove", "delete an installed runtime that is neither active nor previous")
    tag = p.add_argument("tag", metavar="TAG", help="an installed build, e.g. b7000, or a runtime name from `list`")
    tag.completer = installed_tags  # type: ignore[attr-defined]
    add("which", "print the llama-server apps run: LLAMA_SERVER_PATH when set, else the active one (exit 5: none)")
    return {"list": cmd_list, "use": cmd_use, "remove": cmd_remove, "which": cmd_which}


def _repo_filter(settings: Settings) -> str | None:
    """The repository to match installed runtimes against, only when one was asked for."""
    return settings.repo if settings.repo_explicit else None


def cmd_use(args: argparse.Namespace, out: Output) -> int:
    """``use TAG``: switch to an installed runtime."""
    from llama_runtime.updater.cli.common import outcome_lines, progress_bar, settings_from_args, updater_for
    from llama_runtime.updater.cli.gateopts import with_gate

    settings = with_gate(args, settings_from_args(args))
    updater = updater_for(settings)
    with progress_bar(args) as bar:
        outcome = updater.use(args.tag, repo=_repo_filter(settings), progress=out.events or bar)
    lines = outcome_lines(outcome) + ([] if args.quiet else [f"warning: {w}" for w in outcome.warnings])
    out.result(outcome.to_json(), lines)
    return 0


def cmd_remove(args: argparse.Namespace, out: Output) -> int:
    """``remove TAG``: delete an installed runtime that is neither active nor previous."""
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import settings_from_args, updater_for

    settings = settings_from_args(args)
    result = updater_for(settings).remove(args.tag, repo=_repo_filter(settings))
    m, where = result.removed.marker, result.removed.path
    out.result(
        result.to_json(),
        [f"Removed {m.repo} {m.tag} ({m.backend}) from {where}; freed {Vocabulary.size(result.freed_bytes)}."],
    )
    return 0


def cmd_which(args: argparse.Namespace, out: Output) -> int:
    """``which``: the ``llama-server`` apps run, one line (exit 5 when there is none).

    ``LLAMA_SERVER_PATH`` in force is what apps run, so it is the answer (exit 0,
    also with nothing managed active): ``$(llama-runtime which)`` and ``status``
    name the same binary. ``managed`` keeps the active runtime's binary.
    """
    import sys

    status = updater_for(settings_from_args(args)).status()
    managed = str(status.active.binary) if status.active is not None else None
    override = status.override.path if status.override is not None else None
    if override is None and managed is None:
        raise NothingActiveError(
            "No runtime is active, so there is no llama-server to run.",
            hint="Run `llama-runtime update` to install the latest llama.cpp.",
        )
    if override is not None and not out.as_json:
        behind = f"the managed runtime {managed} is not used" if managed else "no managed runtime is active"
        sys.stderr.write(f"warning: LLAMA_SERVER_PATH={override} is in force; {behind}.\n")
    binary = str(override) if override is not None else managed
    payload = {"binary": binary, "override": str(override) if override else None, "managed": managed}
    out.result(payload, [str(binary)])
    return 0


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    """``list [--available]``: installed runtimes, and what the remote offers this host."""
    if args.limit < 1:
        raise UserInputError(f"--limit must be 1 or more, not {args.limit}.")
    result = updater_for(settings_from_args(args)).list(available=args.available, limit=args.limit)
    lines = []
    for entry in result.installed:
        lines.append(_installed_line(entry))
        if entry.damage:
            lines.append(f"    damaged: {'; '.join(entry.damage[:3])} ({_repair_hint(entry)})")
    if not lines:
        lines = ["No runtimes installed. Run `llama-runtime update`."]
    lines.append(f"home: {result.home_bytes / 1e6:.1f} MB on disk in all (files shared by runtimes counted once)")
    # Never chosen, listed with why: `gc` removes them, `doctor --repair` points away from them.
    lines += [f"damaged: {d.name}: {d.reason}" for d in result.damaged]
    if result.trial is not None:
        lines.append(f"trial: {result.trial.describe()}.")
    if result.available is not None:
        lines.append(f"available from {result.repo} for this machine (newest first):")
        lines += [
            f"  {a.tag:<10} {a.backend:<8} {a.asset}" + ("  (installed)" if a.installed else "")
            for a in result.available
        ]
        if not result.available:
            lines.append("  none")
    out.result(result.to_json(), lines)
    return 0


def _repair_hint(entry: RuntimeEntry) -> str:
    if entry.active:
        return "`llama-runtime doctor --repair` installs it again"
    m = entry.runtime.marker
    again = f"`llama-runtime update --tag {m.tag} --backend {m.backend}` installs it again"
    if entry.previous:
        return again
    return f"`llama-runtime remove {entry.runtime.name}` deletes it; {again}"  # a copy `doctor --repair` set aside


def _installed_line(entry: RuntimeEntry) -> str:
    flags = ["active"] if entry.active else ["previous"] if entry.previous else []
    if entry.damage:
        flags.append("DAMAGED")
    own_mb, shared_mb = entry.own_bytes / 1e6, entry.shared_bytes / 1e6
    m = entry.runtime.marker
    named = f"{m.tag} ({m.release_version})" if m.release_version else m.tag  # the build and the semver release
    return (
        f"{'*' if entry.active else ' '} {named:<19} {m.backend:<8} "
        f"{own_mb:8.1f} MB own + {shared_mb:.1f} MB shared  {m.installed_at}  {entry.runtime.name} "
        f"{' '.join(flags)}".rstrip()
    )


# -- recovery: Back to a good runtime: ``rollback`` and ``doctor [--repair]``. -----------------------------------

#: ``doctor``'s exit code when it finds problems: the contract's "local state damaged".
_UNHEALTHY_EXIT = 6


def _register_recovery(add: AddParser) -> dict[str, Handler]:
    """Add ``rollback`` and ``doctor``."""
    from llama_runtime.updater.cli.gateopts import add_gate_arguments

    p = add("rollback", "re-activate the previously active runtime")
    add_gate_arguments(p, smoke=False)
    p = add("doctor", "re-verify the active runtime and say what to do")
    p.add_argument("--repair", action="store_true", help="point the pointer at a verified runtime if it is damaged")
    return {"rollback": cmd_rollback, "doctor": cmd_doctor}


def cmd_rollback(args: argparse.Namespace, out: Output) -> int:
    """``rollback``: the previous runtime becomes active again, through the same checks as an update."""
    from llama_runtime.updater.cli.gateopts import gate_lines, with_gate

    result = updater_for(with_gate(args, settings_from_args(args))).rollback()
    active, previous, server = result.active, result.previous, result.server
    payload = result.to_json()
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
    """``doctor [--repair]``: re-verify the active runtime; exit 6 when something is wrong."""
    # A repair runs as the home's job: `job status` sees it, and no update runs beside it.
    report = updater_for(settings_from_args(args)).doctor(repair=args.repair)
    payload = report.to_json()
    if not report.healthy:  # the contract's error object, beside the report
        failed = "; ".join(f"{c.check}: {c.detail}" for c in report.checks if not c.ok) or "see the checks"
        error: dict[str, object] = {
            "code": "unhealthy",
            "message": f"doctor found problems: {failed}.",
            "exit_code": _UNHEALTHY_EXIT,
        }
        if report.advice:
            error["hint"] = report.advice[0]
        payload.setdefault("error", error)
    out.result(payload, report.lines(quiet=bool(getattr(args, "quiet", False))))
    return 0 if report.healthy else _UNHEALTHY_EXIT


def register(add: AddParser) -> dict[str, Handler]:
    """Add this module's commands."""
    return {**_register_lifecycle(add), **_register_recovery(add)}
