"""``llama-runtime gate``: show the inference gate's stored settings, or store them.

With options it stores them (``<home>/gate.json``) for every later update of the
home, the scheduled ones and an app's ``RuntimeUpdater`` included.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.updater.cli.gateopts import positive_seconds, split_args

if TYPE_CHECKING:
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


def register(add: AddParser) -> dict[str, Handler]:
    """Add the ``gate`` command."""
    p = add("gate", "show or store the inference gate's settings for later updates")
    smoke = p.add_mutually_exclusive_group()
    smoke.add_argument("--smoke-model", metavar="PATH.gguf", help="a small model every update runs before activating")
    smoke.add_argument("--no-smoke-model", action="store_true", help="forget the stored smoke model")
    p.add_argument("--smoke-args", metavar="ARGS", help="llama-server arguments for the smoke run (one string)")
    p.add_argument("--max-slowdown", metavar="PCT", help="largest tolerated slowdown (e.g. 20%%), or off")
    p.add_argument("--on-slowdown", choices=("warn", "rollback"), help="what a larger slowdown does")
    onoff = p.add_mutually_exclusive_group()
    onoff.add_argument("--enable", action="store_true", help="run the gate after switches (the default)")
    onoff.add_argument("--disable", action="store_true", help="switch servers on /health alone")
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        help="overall time limit of one completion check (above 0, up to 3600), or auto (scaled; the default)",
    )
    return {"gate": cmd_gate}


def cmd_gate(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.updater.cli.common import settings_from_args, updater_for
    from llama_runtime.updater.cli.gateopts import gate_settings_json, parse_slowdown

    updater = updater_for(settings_from_args(args))
    policy = updater.gate_settings()
    changes: dict[str, object] = {}
    if args.smoke_model:
        changes["smoke_model"] = Path(args.smoke_model)
    if args.no_smoke_model:
        changes["smoke_model"] = None
    if args.smoke_args is not None:
        changes["smoke_args"] = split_args(args.smoke_args, "--smoke-args")
    if args.max_slowdown is not None:
        changes["max_slowdown"] = parse_slowdown(args.max_slowdown)
    if args.on_slowdown is not None:
        changes["on_slowdown"] = args.on_slowdown
    if args.enable or args.disable:
        changes["enabled"] = bool(args.enable)
    if args.timeout is not None:
        changes["timeout"] = positive_seconds(args.timeout, "--timeout")
    if changes:
        policy = updater.gate_settings(dataclasses.replace(policy, **changes))  # type: ignore[arg-type]
    payload = gate_settings_json(policy)
    slow = "off" if policy.max_slowdown is None else f"{policy.max_slowdown:.0%} ({policy.on_slowdown})"
    limit = "auto (scaled to the model and device)" if policy.timeout is None else f"{policy.timeout:g} s"
    lines = [
        f"inference gate: {'on' if policy.enabled else 'off'}, time limit {limit}, max slowdown {slow}",
        f"smoke model: {policy.smoke_model or 'none'}"
        + (f" (arguments: {' '.join(policy.smoke_args)})" if policy.smoke_args else ""),
    ]
    if changes:
        lines.append("Stored; later updates of this home apply these settings.")
    out.result(payload, lines)
    return 0
