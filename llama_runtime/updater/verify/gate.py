"""The inference gate: a switch is complete only once the new server generates.

After a switch restarts llama-server on a new runtime and ``/health`` answers,
the gate sends the fixed completion request of :mod:`runtime.inference`. A
failure (error, timeout, empty output) fails the switch like an unhealthy
server: flip back, restart the old server, exit 6 with the reason.

The same request times prompt and generation speed. Each runtime's marker keeps
its figures per model (``speeds``), so the new runtime is compared with the one
it replaces on the very same request and server arguments; when the old
runtime has no figure on record, it is measured before its server is stopped.
A drop beyond ``max_slowdown`` warns, or rolls back when the caller asked for
that (see the README, "Inference gate", for why warning is the default).

Pure decisions (:func:`model_key`, :func:`slowdown`, :func:`judge`) do no IO.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import read_cache, remove_tree_quietly, write_record
from llama_runtime.runtime.inference import (
    GATE_SAMPLES,
    GATE_TIMEOUT_SECONDS,
    InferenceResult,
    Speed,
    probe_inference,
)
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.listen import arg_value
from llama_runtime.runtime.marker import read_marker, write_marker
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.logs import get_logger, warn_state

# -- gate --------------------------------------------------------------------------------------------------------

log = get_logger("llama_runtime.gate")

#: Below this drop two runs of the same build differ by noise alone: on a real
#: model on a GPU repeated 16-token timings vary by a few percent; 20 % is a
#: change a user notices (and a regression reported upstream is usually 30 %+).
DEFAULT_MAX_SLOWDOWN: Final = 0.20
#: The first four bytes of every GGUF file (ggml's gguf.h, GGUF_MAGIC).
GGUF_MAGIC: Final = b"GGUF"

OnSlowdown = Literal["warn", "rollback"]
_MODEL_PATH_FLAGS: Final = ("-m", "--model")
_MODEL_REPO_FLAGS: Final = ("-hf", "--hf-repo", "-mu", "--model-url", "-dr", "--docker-repo")
# Arguments that change where a server listens, not how fast it computes.
_ADDRESS_FLAGS: Final = frozenset({"--host", "--port", "--api-key", "--api-key-file"})


@dataclass(frozen=True)
class GatePolicy:
    """How a switch is judged.

    Attributes:
        enabled: Run the completion request after a switch with a loaded model.
        timeout: Seconds the new server has to answer all samples.
        samples: Identical requests per measurement (the best figures count).
        max_slowdown: Largest tolerated drop of tokens/s (0.2 = 20 %); None: never compare.
        on_slowdown: What a larger drop does.
        smoke_model: A small GGUF the staged build must run before activation.
    """

    enabled: bool = True
    timeout: float = GATE_TIMEOUT_SECONDS
    samples: int = GATE_SAMPLES
    max_slowdown: float | None = DEFAULT_MAX_SLOWDOWN
    on_slowdown: OnSlowdown = "warn"
    smoke_model: Path | None = None

    def with_slowdown(self, max_slowdown: float | None, on_slowdown: OnSlowdown) -> GatePolicy:
        """A copy with another slowdown rule."""
        return dataclasses.replace(self, max_slowdown=max_slowdown, on_slowdown=on_slowdown)


@dataclass(frozen=True)
class Verdict:
    """The gate's judgement of one new runtime."""

    ok: bool
    reason: str = ""
    warnings: tuple[str, ...] = ()
    speed: Speed | None = None
    previous_speed: Speed | None = None


# -- pure decisions ------------------------------------------------------------------


def parse_slowdown(text: str) -> float | None:
    """``20%``, ``20`` or ``off`` as a fraction (0.2) or None.

    Raises:
        UserInputError: Anything else.
    """
    value = text.strip().lower()
    if value in {"off", "none", "no"}:
        return None
    try:
        percent = float(value.removesuffix("%"))
    except ValueError:
        percent = -1.0
    if not 0 < percent < 100:
        raise UserInputError(
            f"Invalid --max-slowdown '{text}'. Use a percentage between 0 and 100 (for example 20%), or off."
        )
    return percent / 100


def model_key(args: Sequence[str]) -> str | None:
    """The model a server with ``args`` loads at start (its file name or repo), or None."""
    for flag in _MODEL_PATH_FLAGS:
        value = arg_value(args, flag)
        if value:
            return Path(value).name
    for flag in _MODEL_REPO_FLAGS:
        value = arg_value(args, flag)
        if value:
            return value
    return None


def args_fingerprint(args: Sequence[str]) -> str:
    """Twelve hex digits naming the arguments that shape speed (not the address)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _ADDRESS_FLAGS:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:12]


def api_key(args: Sequence[str]) -> str | None:
    """The key a server started with ``args`` demands (``--api-key``, or the first of ``--api-key-file``)."""
    key = arg_value(args, "--api-key")
    if key:
        return key.split(",")[0]
    path = arg_value(args, "--api-key-file")
    if path:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        return next((line.strip() for line in lines if line.strip()), None)
    return None


def slowdown(old: Speed, new: Speed) -> float:
    """The larger relative drop of prompt and generation speed (0 when not slower)."""
    drops = (
        1 - new.prompt_per_second / old.prompt_per_second,
        1 - new.predicted_per_second / old.predicted_per_second,
    )
    return max(0.0, *drops)


def judge(old: Speed | None, new: Speed | None, policy: GatePolicy, *, old_name: str, new_name: str) -> Verdict:
    """Whether ``new`` is acceptably fast next to ``old`` under ``policy``."""
    if old is None or new is None or policy.max_slowdown is None:
        return Verdict(True, speed=new, previous_speed=old)
    drop = slowdown(old, new)
    if drop <= policy.max_slowdown:
        return Verdict(True, speed=new, previous_speed=old)
    sentence = (
        f"{new_name} is {drop:.0%} slower than {old_name} on the same request "
        f"(prompt {new.prompt_per_second:.1f} vs {old.prompt_per_second:.1f} tokens/s, "
        f"generation {new.predicted_per_second:.1f} vs {old.predicted_per_second:.1f} tokens/s; "
        f"the limit is {policy.max_slowdown:.0%})"
    )
    if policy.on_slowdown == "rollback":
        return Verdict(False, sentence, speed=new, previous_speed=old)
    return Verdict(True, warnings=(sentence + ".",), speed=new, previous_speed=old)


# -- the figures in the marker ---------------------------------------------------------


def recorded_speed(runtime: InstalledRuntime | None, key: str, fingerprint: str) -> Speed | None:
    """The figure ``runtime`` has on record for ``key`` measured with the same arguments."""
    if runtime is None:
        return None
    record = runtime.marker.speeds.get(key)
    if record is None or record.get("args") != fingerprint:
        return None
    return Speed.from_json(record)


def record_speed(runtime: InstalledRuntime, key: str, fingerprint: str, speed: Speed, measured_at: str) -> None:
    """Keep ``speed`` in ``runtime``'s marker."""
    record_speeds(runtime, {key: {**speed.to_json(), "args": fingerprint, "measured_at": measured_at}})


def record_speeds(runtime: InstalledRuntime, records: Mapping[str, Mapping[str, object]]) -> None:
    """Merge ``records`` (model key -> figures) into ``runtime``'s marker, read again so no field is lost."""
    if not records:
        return
    marker = read_marker(runtime.path)
    speeds = {**marker.speeds, **{key: dict(value) for key, value in records.items()}}
    write_marker(runtime.path, dataclasses.replace(marker, speeds=speeds))


# -- the gate ------------------------------------------------------------------------------


Probe = Callable[..., InferenceResult]


class InferenceGate:
    """Runs the completion request on running servers and judges the new runtime.

    Args:
        policy: What to check and what a slowdown does.
        clock: The measurement time written next to the figures.
        probe: The request seam (:func:`runtime.inference.probe_inference`).
    """

    def __init__(self, policy: GatePolicy, *, clock: Callable[[], str], probe: Probe = probe_inference) -> None:
        self.policy = policy
        self.clock = clock
        self.probe = probe

    def measure(self, url: str, args: Sequence[str]) -> InferenceResult:
        """The completion request against the server at ``url`` started with ``args``."""
        return self.probe(url, timeout=self.policy.timeout, samples=self.policy.samples, api_key=api_key(args))

    def baseline(self, url: str, args: Sequence[str], current: InstalledRuntime | None) -> None:
        """Measure the running old server when ``current`` has no figure for its model on record.

        A failure here is the old runtime's, not the new one's: it is logged and
        the switch goes on (the new build may be the fix).
        """
        key = model_key(args)
        if key is None or current is None or self.policy.max_slowdown is None:
            return
        fingerprint = args_fingerprint(args)
        if recorded_speed(current, key, fingerprint) is not None:
            return
        result = self.measure(url, args)
        if not result.ok or result.speed is None:
            log.warning("could not measure the running server before the switch", reason=result.reason)
            return
        record_speed(current, key, fingerprint, result.speed, self.clock())
        log.info("measured the running server", model=key, **result.speed.to_json())

    def check(self, url: str, args: Sequence[str], new: InstalledRuntime, current: InstalledRuntime | None) -> Verdict:
        """Does the new server at ``url`` generate, and fast enough next to ``current``?"""
        result = self.measure(url, args)
        if not result.ok:
            return Verdict(False, f"its completion request failed: {result.reason}")
        key = model_key(args)
        if key is None or result.speed is None:
            return Verdict(True)
        fingerprint = args_fingerprint(args)
        old = _reread(current)
        verdict = judge(
            recorded_speed(old, key, fingerprint),
            result.speed,
            self.policy,
            old_name=_name(current),
            new_name=_name(new),
        )
        record_speed(new, key, fingerprint, result.speed, self.clock())
        return verdict


def _reread(runtime: InstalledRuntime | None) -> InstalledRuntime | None:
    """``runtime`` with its marker as on disk now (a baseline may have just been written)."""
    if runtime is None:
        return None
    return dataclasses.replace(runtime, marker=read_marker(runtime.path))


def _name(runtime: InstalledRuntime | None) -> str:
    return f"{runtime.marker.tag} ({runtime.marker.backend})" if runtime else "the unmanaged runtime"


def validate_gguf(path: str | Path) -> Path:
    """``path`` as an absolute path to a GGUF file.

    Raises:
        UserInputError: It does not exist, is not a file, or does not start with the GGUF magic.
    """
    model = Path(path).expanduser().absolute()
    try:
        with open(model, "rb") as handle:
            head = handle.read(len(GGUF_MAGIC))
    except FileNotFoundError:
        raise UserInputError(f"The model {model} does not exist. Give the path of a .gguf model file.") from None
    except IsADirectoryError:
        raise UserInputError(f"{model} is a directory. Give the path of a .gguf model file.") from None
    except OSError as exc:
        raise UserInputError(f"Cannot read the model {model}: {exc.strerror or exc}.") from None
    if head != GGUF_MAGIC:
        raise UserInputError(
            f"{model} is not a GGUF model (it does not start with 'GGUF'). Give a .gguf file that llama-server loads."
        )
    return model


# -- gate_store: The inference gate's stored settings: ``<home>/gate.json``. -------------------------------------

GATE_SETTINGS_NAME: Final = "gate.json"
_ON_SLOWDOWN: Final = ("warn", "rollback")


def gate_settings_path(home_root: Path) -> Path:
    """Where the stored gate settings of a home live."""
    return home_root / GATE_SETTINGS_NAME


def load_gate_settings(home_root: Path) -> GatePolicy:
    """The stored policy, or the default one when nothing (valid) is stored."""
    payload = read_cache(gate_settings_path(home_root), warn=warn_state)
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


# -- smoke: Probe before publish: the staged llama-server generates with a small model before ac... --------------

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
