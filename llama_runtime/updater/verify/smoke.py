"""Probe before publish: the staged llama-server generates with a small model before activation.

For machines where no server runs yet (so there is nothing to switch and gate),
``update --smoke-model PATH.gguf`` (or the stored ``smoke_model`` setting)
starts the staged binary on that model on a private loopback port, sends the
gate's completion request, and stops it again. Only then is the marker written
and the pointer flipped; a failure is exit 6 with the active runtime untouched.

The smoke server's state lives in its own directory beside the staged runtime,
never in the home's ``server/``: the user's own managed server is not touched.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llama_runtime.runtime.fsutil import remove_tree_quietly
from llama_runtime.runtime.inference import InferenceResult, Speed
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.process import ManagedServer
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.verify.gate import (
    GatePolicy,
    InferenceGate,
    Verdict,
    args_fingerprint,
    judge,
    record_speed,
    recorded_speed,
)

log = get_logger("llama_runtime.smoke")

#: The gate's prompt and tokens need well under 128 tokens of context; a small
#: context keeps the smoke server's memory small next to a user's running server.
SMOKE_CTX_SIZE: Final = 512
#: A smoke model is small; mapping it and compiling kernels takes seconds, not minutes.
SMOKE_HEALTH_TIMEOUT_SECONDS: Final = 120.0


def smoke_args(model: Path) -> list[str]:
    """The server arguments of a smoke run (the address is added at start)."""
    return ["-m", str(model), "--ctx-size", str(SMOKE_CTX_SIZE), "--parallel", "1"]


@dataclass(frozen=True)
class SmokeRun:
    """Runs one binary on the smoke model on a private port and asks for the gate's completion.

    Args:
        scratch: A directory for the smoke server's state and log (removed afterwards).
        gate: The gate that sends and times the request.
        env: Environment of the smoke server (None inherits).
        health_timeout: Seconds the smoke server has to answer /health.
    """

    scratch: Path
    gate: InferenceGate
    env: Mapping[str, str] | None = None
    health_timeout: float = SMOKE_HEALTH_TIMEOUT_SECONDS

    def run(self, binary: Path, model: Path) -> InferenceResult:
        """Start ``binary`` on ``model``, probe it, stop it; never raises for a failed generation."""
        directory = self.scratch / f"smoke-{secrets.token_hex(4)}"
        server = ManagedServer(directory)
        args = smoke_args(model)
        try:
            server.start(binary, args, env=self.env)
            try:
                if not server.wait_healthy(self.health_timeout):
                    return InferenceResult(
                        False, f"it did not answer /health within {self.health_timeout:g} s{_log_tail(server)}"
                    )
                url = server.endpoint()
                if url is None:
                    return InferenceResult(False, "it did not record a port")
                return self.gate.measure(url, args)
            finally:
                server.stop()
        finally:
            remove_tree_quietly(directory)  # best effort: never replaces the gate's own outcome


def smoke_check(
    smoke: SmokeRun,
    staged_binary: Path,
    *,
    new_name: str,
    active: InstalledRuntime | None,
    policy: GatePolicy,
    clock: Callable[[], str],
) -> tuple[Verdict, dict[str, dict[str, object]]]:
    """Run the smoke model on the staged binary (and on the active one when it has no figure on record).

    Returns:
        The verdict, and the speed record to put in the new runtime's marker.
    """
    model = policy.smoke_model
    assert model is not None
    key, fingerprint = model.name, args_fingerprint(smoke_args(model))
    old_speed = recorded_speed(active, key, fingerprint)
    if active is not None and old_speed is None and policy.max_slowdown is not None:
        old_speed = _baseline(smoke, active, model, key, fingerprint, clock)
    result = smoke.run(staged_binary, model)
    if not result.ok:
        return Verdict(False, f"it failed to generate with the smoke model {model.name}: {result.reason}"), {}
    if result.speed is None:
        return Verdict(True), {}
    active_name = f"{active.marker.tag} ({active.marker.backend})" if active else "the active runtime"
    verdict = judge(old_speed, result.speed, policy, old_name=active_name, new_name=new_name)
    record = {key: {**result.speed.to_json(), "args": fingerprint, "measured_at": clock()}}
    return verdict, record


def _baseline(
    smoke: SmokeRun, active: InstalledRuntime, model: Path, key: str, fingerprint: str, clock: Callable[[], str]
) -> Speed | None:
    """The active runtime's figure on the smoke model, measured now and kept in its marker."""
    result = smoke.run(active.binary, model)
    if not result.ok or result.speed is None:
        log.warning("the active runtime could not run the smoke model", reason=result.reason)
        return None
    record_speed(active, key, fingerprint, result.speed, clock())
    return result.speed


def _log_tail(server: ManagedServer) -> str:
    """``: <last line of its log>`` (llama-server says there why it would not start), or nothing."""
    try:
        lines = server.log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; its log ends: {lines[-1].strip()[:200]}" if lines else ""
