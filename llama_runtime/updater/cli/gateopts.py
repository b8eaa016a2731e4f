"""The inference gate's options and sentences, shared by ``update``, ``use``, ``rollback`` and ``status``.

No import of other ``cli`` modules (``cli.common`` and the commands import this one).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_runtime.runtime.inference import Speed
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.config import Settings
    from llama_runtime.updater.verify.gate import GatePolicy


def add_gate_arguments(parser: argparse.ArgumentParser, *, smoke: bool) -> None:
    """The gate's per-command options (they win over the stored settings)."""
    parser.add_argument(
        "--max-slowdown",
        metavar="PCT",
        help="roll back when the new runtime is more than PCT slower on the gate's request (e.g. 20%%), or off; "
        "default: warn beyond 20%%",
    )
    parser.add_argument(
        "--on-slowdown",
        choices=("warn", "rollback"),
        help="what a larger slowdown does (with --max-slowdown: rollback)",
    )
    parser.add_argument("--no-gate", action="store_true", help="switch a running server on /health alone")
    parser.add_argument("--gate-timeout", type=float, metavar="SECONDS", help="time limit of the completion request")
    if smoke:
        parser.add_argument(
            "--smoke-model",
            metavar="PATH.gguf",
            help="run the staged llama-server on this model first",
        )


def policy_from_args(args: argparse.Namespace, home_root: Path) -> GatePolicy:
    """Stored settings, overridden by this command's flags; the smoke model is checked.

    Raises:
        UserInputError: A malformed percentage, or a smoke model that is missing or not GGUF.
    """
    from llama_runtime.updater.verify.gate import load_gate_settings, parse_slowdown, validate_gguf

    policy = load_gate_settings(home_root)
    if args.max_slowdown is not None:
        policy = policy.with_slowdown(parse_slowdown(args.max_slowdown), args.on_slowdown or "rollback")
    elif args.on_slowdown is not None:
        policy = dataclasses.replace(policy, on_slowdown=args.on_slowdown)
    if args.no_gate:
        policy = dataclasses.replace(policy, enabled=False)
    if args.gate_timeout is not None:
        policy = dataclasses.replace(policy, timeout=positive_seconds(args.gate_timeout, "--gate-timeout"))
    smoke = getattr(args, "smoke_model", None)
    if smoke:
        policy = dataclasses.replace(policy, smoke_model=Path(smoke))
    if policy.smoke_model is not None:
        policy = dataclasses.replace(policy, smoke_model=validate_gguf(policy.smoke_model))
    return policy


def with_gate(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` carrying this command's gate policy (stored settings, then its flags)."""
    return dataclasses.replace(settings, gate=policy_from_args(args, Path(settings.home).expanduser().absolute()))


def positive_seconds(value: float, flag: str) -> float:
    from llama_runtime.runtime.errors import UserInputError

    if not 0 < value <= 3600:
        raise UserInputError(f"Invalid {flag} {value:g}. Use a number of seconds between 0 and 3600.")
    return value


def speed_text(speed: Speed | None) -> str:
    """``prompt 42.1 tokens/s, generation 39.9 tokens/s`` (or ``not measured``)."""
    if speed is None:
        return "not measured"
    return f"prompt {speed.prompt_per_second:.1f} tokens/s, generation {speed.predicted_per_second:.1f} tokens/s"


def gate_lines(report: SwitchReport | None) -> list[str]:
    """What the gate did in a switch, for people."""
    if report is None or not report.gated:
        return []
    lines = [f"The new server generated on the gate's request: {speed_text(report.speed)}."]
    if report.previous_speed is not None:
        lines.append(f"  the previous runtime on the same request: {speed_text(report.previous_speed)}.")
    return lines


def speed_table(
    active: InstalledRuntime | None, previous: InstalledRuntime | None
) -> tuple[dict[str, object], list[str]]:
    """The ``speeds`` object of ``status`` and its lines: each model's figures, active beside previous."""
    now = dict(active.marker.speeds) if active else {}
    before = dict(previous.marker.speeds) if previous else {}
    payload: dict[str, object] = {"active": now, "previous": before}
    models = sorted(set(now) | set(before))
    if not models:
        return payload, []
    lines = ["speed on the gate's request (tokens/s, prompt / generation):"]
    for model in models:
        cells = [
            f"{label} {runtime.marker.tag} {_pair(figures.get(model))}"
            for label, runtime, figures in (("active", active, now), ("previous", previous, before))
            if runtime is not None
        ]
        lines.append(f"  {model}: " + "   ".join(cells))
    return payload, lines


def _pair(record: dict[str, object] | None) -> str:
    if not record:
        return "-"
    return f"{_number(record.get('prompt_per_second'))} / {_number(record.get('predicted_per_second'))}"


def _number(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"
