"""Commands that bring a machine back to a good runtime: ``rollback`` and ``doctor [--repair]``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from llama_runtime.updater.cli.context import engine_for, home_for, settings_from_args

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.cli.output import Output
    from llama_runtime.updater.cli.parser import AddParser, Handler
    from llama_runtime.updater.config import Settings

#: ``doctor``'s exit code when it finds problems: the contract's "local state damaged".
_UNHEALTHY_EXIT = 6


def register(add: AddParser) -> dict[str, Handler]:
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
    """``doctor [--repair]``: re-verify the active runtime; exit 6 when something is wrong."""
    from llama_runtime.updater.api.doctor import run_doctor
    from llama_runtime.updater.choice.host_detect import detect_host

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
        error: dict[str, object] = {
            "code": "unhealthy",
            "message": f"doctor found problems: {failed}.",
            "exit_code": _UNHEALTHY_EXIT,
        }
        if report.advice:
            error["hint"] = report.advice[0]
        payload.setdefault("error", error)
    out.result(payload, report.lines())
    return 0 if report.healthy else _UNHEALTHY_EXIT


def _reinstaller(settings: Settings) -> Callable[[InstalledRuntime], InstalledRuntime]:
    """``doctor --repair``'s in-place repair: the damaged build again, by ``update``'s own path."""

    def reinstall(damaged: InstalledRuntime) -> InstalledRuntime:
        from llama_runtime.updater.choice.decide import UpdateRequest

        m = damaged.marker
        engine = engine_for(dataclasses.replace(settings, repo=m.repo))
        with engine.open_source() as source:
            # backend None: the installer keeps the damaged runtime's stored request.
            return engine.installer(source).update(UpdateRequest(repo=m.repo, tag=m.tag)).active

    return reinstall
