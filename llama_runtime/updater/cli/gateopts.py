"""The inference gate's options and sentences, shared by ``update``, ``use``, ``rollback`` and ``status``.

No import of other ``cli`` modules (``cli.common`` and the commands import this one).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from llama_runtime import GatePolicy, InstalledRuntime, Settings, Speed, SwitchReport


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
    parser.add_argument(
        "--gate-timeout",
        metavar="SECONDS",
        help="overall time limit of one completion check, seconds above 0 up to 3600, or auto "
        "(default: scaled to the model's size and the device; docs/inference-gate.md)",
    )
    if smoke:
        parser.add_argument(
            "--smoke-model",
            metavar="PATH.gguf",
            help="run the staged llama-server on this model first",
        )
        parser.add_argument(
            "--smoke-args",
            metavar="ARGS",
            help="llama-server arguments for the smoke run, one string (e.g. '--device Vulkan0 -ngl 99 -t 8 -c 1024')",
        )


def parse_slowdown(text: str) -> float | None:
    """``--max-slowdown``: ``20%``, ``20`` or ``off`` as a fraction (0.2) or ``None``.

    Raises:
        UserInputError: Anything else.
    """
    from llama_runtime import Vocabulary

    return Vocabulary.slowdown(text)


def gate_settings_json(policy: GatePolicy) -> dict[str, object]:
    """``policy`` as ``gate --json`` prints it (the stored object)."""
    from llama_runtime import Vocabulary

    return Vocabulary.gate_json(policy)


def policy_from_args(args: argparse.Namespace, home_root: Path) -> GatePolicy:
    """Stored settings, overridden by this command's flags; the smoke model is checked.

    Raises:
        UserInputError: A malformed percentage, or a smoke model that is missing or not GGUF.
    """
    from llama_runtime import Vocabulary, load_gate_settings

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
    extra = getattr(args, "smoke_args", None)
    if extra is not None:
        policy = dataclasses.replace(policy, smoke_args=split_args(extra, "--smoke-args"))
    if policy.smoke_model is not None:
        policy = dataclasses.replace(policy, smoke_model=Vocabulary.gguf(policy.smoke_model))
    return policy


def with_gate(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` carrying this command's gate policy (stored settings, then its flags)."""
    return dataclasses.replace(settings, gate=policy_from_args(args, Path(settings.home).expanduser().absolute()))


def positive_seconds(value: str, flag: str) -> float | None:
    """``value`` as seconds above 0 and at most 3600, or None for ``auto`` (scaled).

    Raises:
        UserInputError: Anything else; the message says what is accepted.
    """
    import math

    from llama_runtime import UserInputError

    text = str(value).strip().lower()
    if text == "auto":
        return None
    try:
        seconds = float(text.removesuffix("s"))
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 3600:  # NaN fails too
        raise UserInputError(
            f"Invalid {flag} '{value}'. Give a number of seconds greater than 0 and at most 3600 (for example 120), "
            "or auto to scale the limit to the model and device."
        )
    return seconds


def split_args(text: str, flag: str) -> tuple[str, ...]:
    """``text`` split as a shell would (quotes kept together).

    Raises:
        UserInputError: Unbalanced quotes, or more than 64 arguments.
    """
    import shlex

    from llama_runtime import UserInputError

    try:
        parts = shlex.split(text)
    except ValueError as exc:
        raise UserInputError(f"Invalid {flag} '{text}': {exc}. Give the arguments as one quoted string.") from None
    if len(parts) > 64:
        raise UserInputError(f"Invalid {flag}: {len(parts)} arguments; give at most 64.")
    return tuple(parts)


def speed_text(speed: Speed | None) -> str:
    """``prompt 42.1 tokens/s, generation 39.9 tokens/s`` (or ``not measured``)."""
    if speed is None:
        return "not measured"
    return f"prompt {speed.prompt_per_second:.1f} tokens/s, generation {speed.predicted_per_second:.1f} tokens/s"


def gate_lines(report: SwitchReport | None) -> list[str]:
    """What the gate did in a switch, for people."""
    if report is None or not report.gated:
        return []
    lines = [f"The new server generated on the gate's request: {speed_text(report.speed)} (medians)."]
    if report.previous_speed is not None:
        lines.append(f"  the previous runtime on the same request: {speed_text(report.previous_speed)}.")
    if report.noise:
        lines.append(f"  {report.noise}.")
    if report.answer is not None:
        lines.append(f"  its greedy answer: {report.answer!r}")
    return lines


def speed_lines(
    speeds: Mapping[str, Mapping[str, object]], active: InstalledRuntime | None, previous: InstalledRuntime | None
) -> list[str]:
    """``status``'s ``speeds`` for people: each model's figures, active beside previous."""
    now, before = speeds.get("active", {}), speeds.get("previous", {})
    models = sorted(set(now) | set(before))
    if not models:
        return []
    lines = ["speed on the gate's request (tokens/s, prompt / generation):"]
    for model in models:
        cells = [
            f"{label} {runtime.marker.tag} {_pair(figures.get(model))}"
            for label, runtime, figures in (("active", active, now), ("previous", previous, before))
            if runtime is not None
        ]
        lines.append(f"  {model}: " + "   ".join(cells))
    return lines


def _pair(record: object) -> str:
    if not record:
        return "-"
    if not isinstance(record, dict):
        return "?"
    return f"{_number(record.get('prompt_per_second'))} / {_number(record.get('predicted_per_second'))}"


def _number(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"
