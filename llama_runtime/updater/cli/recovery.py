"""Commands that bring a machine back to a good runtime: ``rollback`` and ``doctor [--repair]``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llama_runtime.updater.cli.common import settings_from_args, updater_for

if TYPE_CHECKING:
    from llama_runtime.updater.cli.main import AddParser, Handler, Output

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
    out.result(payload, report.lines())
    return 0 if report.healthy else _UNHEALTHY_EXIT
