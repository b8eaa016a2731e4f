"""The verification steps of an install, bound to the seams they need (host, process runner, gate).

:mod:`~llama_runtime.updater.verify.verify` holds the checks themselves; this
module runs them for the transaction: a staged tree (minimum macOS, the probe,
the build identity, the smoke model), and an installed runtime about to be
activated again (every file, the marker, the probe).

Every step raises :class:`~llama_runtime.runtime.errors.VerificationError` (or a
subclass) and changes nothing; the caller discards what it staged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from llama_runtime.runtime.binary import ProcessRunner
from llama_runtime.runtime.confine import confined
from llama_runtime.runtime.errors import VerificationError
from llama_runtime.runtime.inference import InferenceResult
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.sandbox import Sandbox
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.config import GatePolicy
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import Progress, ProgressCallback
from llama_runtime.updater.stage.staged import Staged
from llama_runtime.updater.verify.compute import (
    ComputeOutcome,
    check_model,
    compute_args,
    judge_answer,
    passed_record,
    skipped_record,
)
from llama_runtime.updater.verify.gate import InferenceGate, args_fingerprint, validate_gguf
from llama_runtime.updater.verify.installed import Verified, verify_installed
from llama_runtime.updater.verify.smoke import (
    SmokeReport,
    SmokeRun,
    live_server_beside,
    smoke_args,
    smoke_check,
    store_smoke_figure,
)
from llama_runtime.updater.verify.verify import check_build, check_macos_minimum, parse_version_output, probe_binary

log = get_logger("llama_runtime.install")

__all__ = ["Verifier", "at_stage", "host_has_device"]


def host_has_device(backend: str, host: HostFacts) -> bool:
    """Whether ``host`` reports a device that a ``backend`` build must list."""
    return {
        "cuda": host.nvidia_driver is not None,
        "vulkan": host.vulkan,
        "rocm": host.rocm,
        "metal": host.metal,
    }.get(backend, False)


class Verifier:
    """Runs the verification steps of an install.

    Args:
        host: Host facts (a callable so detection runs only when needed, then once).
        runner: Runs the binary (the process seam); a staged one runs confined
            (:func:`~llama_runtime.runtime.confine.confined`).
        env: Environment for the probed binary (a staged one sees only what confinement passes).
        gate: The inference gate's policy; its smoke model, if any, must generate.
        clock: The time recorded with a speed measurement.
        staging_dir: Where smoke runs keep their scratch directory.
        sandbox: The sandbox every run of a build not yet accepted goes through.
        compute_check: Run the shipped model on every switch when no smoke model replaces it
            (``--no-compute-check``: False, recorded in the marker).
    """

    def __init__(
        self,
        *,
        host: Callable[[], HostFacts],
        runner: ProcessRunner,
        env: Mapping[str, str] | None,
        gate: GatePolicy | None,
        clock: Callable[[], str],
        staging_dir: Path,
        sandbox: Sandbox | None = None,
        compute_check: bool = True,
    ) -> None:
        self._host_probe = host
        self._host: HostFacts | None = None
        self.runner = runner
        #: Where builds not yet accepted run: no secret, no home, no process or file of ours in reach.
        self.sandbox = sandbox or Sandbox()
        self.compute_check = compute_check
        self.env = env
        self.gate = gate
        self.clock = clock
        self.staging_dir = staging_dir
        #: What the smoke model showed in the newest verification (for the update's output).
        self.smoke_report: SmokeReport | None = None
        #: What computed in the newest verification, for the marker (``compute_check``).
        self.compute_record: dict[str, object] = {}
        self._smoke_result: tuple[str, str, InferenceResult] | None = None

    @property
    def host(self) -> HostFacts:
        """Host facts, detected once."""
        if self._host is None:
            self._host = self._host_probe()
        return self._host

    def check_smoke_model(self) -> None:
        """A smoke model that is missing or not GGUF is bad input, found before anything changes."""
        if self.gate is not None and self.gate.smoke_model is not None:
            validate_gguf(self.gate.smoke_model)

    def verify_staged(
        self,
        staged: Staged,
        *,
        tag: str,
        backend: str,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
    ) -> Verified:
        """Check that the staged binary runs on this host as the build ``tag`` of ``backend``.

        Raises:
            MacOSTooOldError: The binary needs a newer macOS.
            VerificationError: It does not run, lists no device, is another build,
                or fails the smoke model.
        """
        check_macos_minimum(staged.binary, self.host)
        with at_stage("device check"):  # --version, the backend's library, --list-devices
            report = probe_binary(
                staged.binary,
                backend=backend,
                files=list(staged.files),
                host_has_device=host_has_device(backend, self.host),
                runner=confined(self.runner, self.sandbox, readable=(staged.directory,)),
                env=self.env,
            )
        log.info("binary runs", version=report.version, devices=list(report.devices))
        identity = parse_version_output(report.version)
        # The binary itself must be the build that was asked for (exit 6 otherwise).
        with at_stage("build check"):
            build_check = check_build(tag, identity)
        name = f"{tag} ({backend})"
        speeds = self.smoke(staged.binary, name, active, emit, warnings, root=staged.directory, backend=backend)
        return Verified(
            report=report,
            identity=identity,
            build_check=build_check,
            speeds=speeds,
            compute_check=self.compute_record,
        )

    def verify_installed(self, target: InstalledRuntime, snapshot: HomeSnapshot | None = None) -> None:
        """Check an installed runtime as strictly as a fresh install (files, marker, probe).

        With the locked operation's ``snapshot``, a file it already hashed is not hashed again.

        Raises:
            VerificationError: It is damaged or does not run.
        """
        verify_installed(
            target,
            host_has_device=host_has_device(target.marker.backend, self.host),
            runner=self.runner,
            env=self.env,
            digest=snapshot.sha256 if snapshot is not None else None,
        )

    def smoke(
        self,
        binary: Path,
        name: str,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
        *,
        root: Path | None = None,
        backend: str = "cpu",
    ) -> dict[str, dict[str, object]]:
        """Compute with ``binary`` (staged, or installed and about to be used) before it serves.

        The user's smoke model when there is one, else the compute check's shipped model
        (:mod:`.compute`) unless it was turned off; what ran is kept in :attr:`compute_record`.

        Args:
            binary: The llama-server.
            name: ``tag (backend)``, for messages.
            active: The runtime active now (the smoke model's speed baseline).
            emit: Progress.
            warnings: Where warnings go.
            root: The runtime folder the run may read (default: the binary's folder).
            backend: The backend the build serves (the compute check puts every layer on its device).

        Returns:
            The speed record for the runtime's marker.

        Raises:
            VerificationError: It did not generate, computed a wrong answer, or is slower than allowed.
        """
        if self.gate is None or self.gate.smoke_model is None:
            self.compute_record = self._compute_check(binary, name, root, backend, emit)
            return {}
        model = self.gate.smoke_model
        self.compute_record = {"model": model.name, "by": "the smoke model (--smoke-model)"}
        beside = live_server_beside(self.staging_dir.parent, self.gate)
        if beside is not None:
            warnings.append(
                f"The smoke model {model.name} ran beside the running llama-server (pid {beside}) on the same device: "
                "both share it, and the smoke figures are slower for it (give the smoke run another device "
                "with --smoke-args '--device ...')."
            )
        emit(Progress("verify", message=f"generating with {model.name}"))
        smoke = SmokeRun(
            self.staging_dir, InferenceGate(self.gate, clock=self.clock), sandbox=self.sandbox, env=self.env
        )
        verdict, record, result = smoke_check(
            smoke, binary, new_name=name, active=active, policy=self.gate, clock=self.clock
        )
        fingerprint = args_fingerprint(smoke_args(model, self.gate.smoke_args))
        self._smoke_result = (model.name, fingerprint, result)
        self.smoke_report = SmokeReport(
            model=model.name,
            args=tuple(self.gate.smoke_args),
            ok=result.ok,
            reason=result.reason,
            answer=result.content,
            speed=result.speed,
            beside_live_server=beside,
        )
        if not verdict.ok:
            error = VerificationError(f"The runtime {name} was rejected: {verdict.reason}.")
            error.stage = "completion check"
            raise error
        warnings.extend(verdict.warnings)
        return record

    def _compute_check(
        self, binary: Path, name: str, root: Path | None, backend: str, emit: ProgressCallback
    ) -> dict[str, object]:
        """Run the shipped model on ``binary``'s device and compare its answer (:mod:`.compute`).

        Raises:
            VerificationError: It died or answered wrongly (stage ``compute check``).
        """
        if not self.compute_check:
            return skipped_record("turned off (--no-compute-check)")
        model = check_model()
        emit(Progress("verify", message="computing on the check model"))
        smoke = SmokeRun(
            self.staging_dir,
            InferenceGate(self.gate or GatePolicy(), clock=self.clock),
            sandbox=self.sandbox,
            env=self.env,
        )
        started = time.monotonic()
        result = smoke.run(binary, model, args=compute_args(model, backend), root=root)
        outcome = ComputeOutcome(result.ok, result.reason, result.content, time.monotonic() - started)
        why = result.reason if not result.ok else judge_answer(result.content)
        if why:
            error = VerificationError(f"The runtime {name} failed the compute check: {why}.")
            error.stage = "compute check"
            raise error
        log.info("compute check passed", answer=result.content, seconds=round(outcome.seconds or 0.0, 3))
        return passed_record(outcome, backend)

    def keep_smoke_figure(self, target: InstalledRuntime) -> None:
        """Keep the newest smoke result of the installed ``target`` in the home's state (never in its directory)."""
        if self._smoke_result is None:
            return
        key, fingerprint, result = self._smoke_result
        if result.ok and result.speed is not None:
            store_smoke_figure(self.staging_dir.parent, target, key, fingerprint, result, self.clock())


@contextmanager
def at_stage(stage: str) -> Iterator[None]:
    """Name ``stage`` on a :class:`VerificationError` raised inside (an inner, narrower name wins)."""
    try:
        yield
    except VerificationError as exc:
        exc.stage = exc.stage or stage
        raise
