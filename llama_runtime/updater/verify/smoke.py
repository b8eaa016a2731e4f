"""Probe before publish: the staged llama-server generates with a small model before activation.

The smoke model (``--smoke-model``, or stored with ``gate --smoke-model``) runs
on a private port with the user's own server arguments for it
(``--smoke-args``: device, ``-ngl``, threads, context), so the build is tried
on the device it will serve on. Running it beside a live server on the same
device is allowed but said (its figures share the device). The result goes to
the update's output (``smoke`` in JSON, one line in text).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from llama_runtime.runtime.confine import confined_env, library_dirs, scratch_dir
from llama_runtime.runtime.exits import exit_meaning
from llama_runtime.runtime.fsutil import remove_tree_quietly
from llama_runtime.runtime.inference import InferenceResult, Speed
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.listen import arg_value, free_port
from llama_runtime.runtime.sandbox import Confinement, Sandbox
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.config import GatePolicy
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.verify.gate import (
    InferenceGate,
    Verdict,
    args_fingerprint,
    judge,
    recorded_speed,
)
from llama_runtime.updater.verify.measures import Measure, load_measure, store_measure

log = get_logger("llama_runtime.smoke")

#: The gate's prompt and tokens need well under 128 tokens of context; a small
#: context keeps the smoke server's memory small next to a user's running server.
SMOKE_CTX_SIZE: Final = 512
#: A smoke model is small; mapping it and compiling kernels takes seconds, not minutes.
SMOKE_HEALTH_TIMEOUT_SECONDS: Final = 120.0


_CONTEXT_FLAGS: Final = frozenset({"-c", "--ctx-size"})
_PARALLEL_FLAGS: Final = frozenset({"-np", "--parallel"})


def smoke_args(model: Path, extra: Sequence[str] = ()) -> list[str]:
    """The server arguments of a smoke run: the model, the user's ``extra`` (device, ``-ngl``, threads,
    context), and a small context and one slot unless ``extra`` names them (the address is added at start)."""
    names = {a.split("=", 1)[0] for a in extra}
    args = ["-m", str(model)]
    if not names & _CONTEXT_FLAGS:
        args += ["--ctx-size", str(SMOKE_CTX_SIZE)]
    if not names & _PARALLEL_FLAGS:
        args += ["--parallel", "1"]
    return [*args, *extra]


def shares_device(live_args: Sequence[str], smoke: Sequence[str]) -> bool:
    """Whether a live server with ``live_args`` may compute on the device the smoke run uses (pure).

    Only explicitly different devices (``--device``) tell them apart; unknown is shared.
    """
    live, mine = (
        arg_value(live_args, "--device") or arg_value(live_args, "-dev"),
        arg_value(smoke, "--device") or arg_value(smoke, "-dev"),
    )
    return live is None or mine is None or live == mine


@dataclass(frozen=True)
class SmokeReport:
    """What the smoke model showed, for the update's output (``smoke`` in JSON)."""

    model: str
    args: tuple[str, ...]
    ok: bool
    reason: str
    answer: str
    speed: Speed | None
    beside_live_server: int | None  # the live server's pid, when one ran on the same device

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dictionary."""
        return {
            "model": self.model,
            "args": list(self.args),
            "ok": self.ok,
            "reason": self.reason or None,
            "answer": self.answer,
            "speed": self.speed.to_json() if self.speed else None,
            "beside_live_server": self.beside_live_server,
        }

    def line(self) -> str:
        """One line for people."""
        if not self.ok:
            return f"smoke model {self.model}: failed ({self.reason})."
        figures = (
            f"prompt {self.speed.prompt_per_second:.1f}, generation {self.speed.predicted_per_second:.1f} tokens/s"
            if self.speed
            else "not timed"
        )
        beside = f"; beside the live llama-server (pid {self.beside_live_server})" if self.beside_live_server else ""
        return f"smoke model {self.model}: generated {self.answer!r} ({figures}{beside})."


@dataclass(frozen=True)
class SmokeRun:
    """Runs one binary on a model on a private port, in the sandbox, and asks for the gate's completion.

    Args:
        scratch: A directory for the smoke server's state and log (removed afterwards).
        gate: The gate that sends and times the request.
        sandbox: Where the server runs (:mod:`~llama_runtime.runtime.sandbox`): its files,
            processes and network confined, none of the user's secrets or files in reach.
        env: Environment the smoke server's is made from (None: ours); only what
            :mod:`~llama_runtime.runtime.confine` passes reaches it, with an empty home and
            working directory, removed afterwards.
        health_timeout: Seconds the smoke server has to answer /health.
    """

    scratch: Path
    gate: InferenceGate
    sandbox: Sandbox = field(default_factory=Sandbox)
    env: Mapping[str, str] | None = None
    health_timeout: float = SMOKE_HEALTH_TIMEOUT_SECONDS

    def run(
        self, binary: Path, model: Path, *, args: Sequence[str] | None = None, root: Path | None = None
    ) -> InferenceResult:
        """Start ``binary`` on ``model`` (sandboxed), probe it, stop it; never raises for a failed generation.

        Args:
            binary: The llama-server to run.
            model: The GGUF it loads (the only file of the user's it may read).
            args: Its server arguments (default: the smoke model's, :func:`smoke_args`).
            root: The runtime folder it may read (default: the binary's folder).
        """
        directory = self.scratch / f"smoke-{secrets.token_hex(4)}"
        port = free_port()
        server = ManagedServer(directory, port=port)
        full = list(args) if args is not None else smoke_args(model.absolute(), self.gate.policy.smoke_args)
        given = os.environ if self.env is None else self.env
        try:
            with scratch_dir() as home:
                rules = Confinement(
                    scratch=home,
                    readable=(root or binary.parent, model.absolute(), *library_dirs(given)),
                    network="loopback",
                    bind_port=port,
                    shader_cache=self.sandbox.shader_cache,
                )
                env = confined_env(given, home, self.sandbox.shader_cache)
                server.start(binary, full, env=env, cwd=home, wrap=lambda argv: self.sandbox.wrap(argv, rules))
                try:
                    return self._measure(server, full, rules)
                finally:
                    server.stop()
        finally:
            remove_tree_quietly(directory)  # best effort: never replaces the gate's own outcome

    def _measure(self, server: ManagedServer, args: list[str], rules: Confinement) -> InferenceResult:
        if not server.wait_healthy(self.health_timeout):
            return InferenceResult(False, self._why_not_up(server, rules))
        url = server.endpoint()
        if url is None:
            return InferenceResult(False, "it did not record a port")
        result = self.gate.measure(url, args)
        if result.ok:
            return result
        ended = server.exit_status()
        if ended is not None:  # it died answering: the crash is the news, not the dropped connection
            return InferenceResult(False, f"it died computing: {self._ended(server, ended, rules)}")
        return result

    def _why_not_up(self, server: ManagedServer, rules: Confinement) -> str:
        ended = server.exit_status()
        if ended is None:
            return f"it did not answer /health within {self.health_timeout:g} s{_log_tail(server)}"
        return f"it died loading the model: {self._ended(server, ended, rules)}"

    def _ended(self, server: ManagedServer, code: int, rules: Confinement) -> str:
        code = self.sandbox.returncode(code, rules)
        return exit_meaning(code, "\n".join(server.log_tail(lines=40, max_bytes=65536)))


def smoke_check(
    smoke: SmokeRun,
    staged_binary: Path,
    *,
    new_name: str,
    active: InstalledRuntime | None,
    policy: GatePolicy,
    clock: Callable[[], str],
) -> tuple[Verdict, dict[str, dict[str, object]], InferenceResult]:
    """Run the smoke model on the staged binary (and on the active one when it has no figure on record).

    Returns:
        The verdict, the speed record to put in the new runtime's marker, and what the run showed.
    """
    model = policy.smoke_model
    assert model is not None
    key, fingerprint = model.name, args_fingerprint(smoke_args(model, policy.smoke_args))
    old_speed = _on_record(smoke.scratch.parent, active, key, fingerprint)
    if active is not None and old_speed is None and policy.max_slowdown is not None:
        old_speed = _baseline(smoke, active, model, key, fingerprint, clock)
    result = smoke.run(staged_binary, model)
    if not result.ok:
        return Verdict(False, f"it failed to generate with the smoke model {model.name}: {result.reason}"), {}, result
    if result.speed is None:
        return Verdict(True), {}, result
    active_name = f"{active.marker.tag} ({active.marker.backend})" if active else "the active runtime"
    verdict = judge(old_speed, result.speed, policy, old_name=active_name, new_name=new_name)
    record = {key: {**result.speed.to_json(), "args": fingerprint, "measured_at": clock()}}
    return verdict, record, result


def live_server_beside(home_root: Path, policy: GatePolicy) -> int | None:
    """The pid of the home's running llama-server when the smoke run would share its device, else None."""
    server = ManagedServer(home_root / "server")
    state = server.record.running()
    if state is None or policy.smoke_model is None:
        return None
    return state.pid if shares_device(state.args, smoke_args(policy.smoke_model, policy.smoke_args)) else None


def _baseline(
    smoke: SmokeRun, active: InstalledRuntime, model: Path, key: str, fingerprint: str, clock: Callable[[], str]
) -> Speed | None:
    """The active runtime's figure on the smoke model, measured now and kept in the home's state (.measures)."""
    result = smoke.run(active.binary, model)
    if not result.ok or result.speed is None:
        log.warning("the active runtime could not run the smoke model", reason=result.reason)
        return None
    store_smoke_figure(smoke.scratch.parent, active, key, fingerprint, result, clock())
    return result.speed


def _on_record(home_root: Path, runtime: InstalledRuntime | None, key: str, fingerprint: str) -> Speed | None:
    """``runtime``'s smoke figure: the home's state first, then what its marker got at install."""
    if runtime is None:
        return None
    measure = load_measure(home_root, runtime.name, key, fingerprint)
    if measure is not None and measure.speed is not None:
        return measure.speed
    return recorded_speed(runtime, key, fingerprint)


def store_smoke_figure(
    home_root: Path, runtime: InstalledRuntime, key: str, fingerprint: str, result: InferenceResult, when: str
) -> None:
    """Keep an installed runtime's smoke result in the home's state: its directory is never written again."""
    samples = result.samples or ((result.speed,) if result.speed else ())
    store_measure(
        home_root,
        Measure(runtime.name, key, fingerprint, result.content, result.speed, tuple(samples), when),
    )


def _log_tail(server: ManagedServer) -> str:
    """``: <last line of its log>`` (llama-server says there why it would not start), or nothing."""
    try:
        lines = server.log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; its log ends: {lines[-1].strip()[:200]}" if lines else ""
