"""The inference gate's stored settings: ``<home>/gate.json``.

An app sets them once (``llama-runtime gate --smoke-model PATH`` or
:func:`save_gate_settings`) and every later update, scheduled or from a
button, applies them. Flags given to one command win over them.

The file is data, not trust: a value of the wrong type is ignored (the default
applies) and never fails an update.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Final

from llama_runtime.runtime.record import read_record, write_record
from llama_runtime.updater.verify.gate import GatePolicy, validate_gguf

GATE_SETTINGS_NAME: Final = "gate.json"
_ON_SLOWDOWN: Final = ("warn", "rollback")


def gate_settings_path(home_root: Path) -> Path:
    """Where the stored gate settings of a home live."""
    return home_root / GATE_SETTINGS_NAME


def load_gate_settings(home_root: Path) -> GatePolicy:
    """The stored policy, or the default one when nothing (valid) is stored."""
    try:
        payload = read_record(gate_settings_path(home_root))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return GatePolicy()
    if not isinstance(payload, dict):
        return GatePolicy()
    policy = GatePolicy()
    enabled = payload.get("enabled")
    if isinstance(enabled, bool):
        policy = dataclasses.replace(policy, enabled=enabled)
    timeout = payload.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and 0 < timeout <= 3600:
        policy = dataclasses.replace(policy, timeout=float(timeout))
    if "max_slowdown" in payload:
        value = payload["max_slowdown"]
        if value is None or (isinstance(value, float | int) and not isinstance(value, bool) and 0 < value < 1):
            policy = dataclasses.replace(policy, max_slowdown=None if value is None else float(value))
    on_slowdown = payload.get("on_slowdown")
    if on_slowdown in _ON_SLOWDOWN:
        policy = dataclasses.replace(policy, on_slowdown=on_slowdown)
    smoke = payload.get("smoke_model")
    if isinstance(smoke, str) and smoke:
        policy = dataclasses.replace(policy, smoke_model=Path(smoke))
    return policy


def save_gate_settings(home_root: Path, policy: GatePolicy) -> Path:
    """Store ``policy`` for later updates of this home; returns the file written.

    Raises:
        UserInputError: The smoke model does not exist or is not a GGUF file.
    """
    smoke = validate_gguf(policy.smoke_model) if policy.smoke_model is not None else None
    path = gate_settings_path(home_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, gate_settings_json(dataclasses.replace(policy, smoke_model=smoke)))
    return path


def gate_settings_json(policy: GatePolicy) -> dict[str, object]:
    """``policy`` as the stored (and printed) JSON object."""
    return {
        "enabled": policy.enabled,
        "timeout": policy.timeout,
        "max_slowdown": policy.max_slowdown,
        "on_slowdown": policy.on_slowdown,
        "smoke_model": str(policy.smoke_model) if policy.smoke_model else None,
    }
