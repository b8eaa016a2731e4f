"""Switching a running llama-server to a newly activated runtime.

The order is what keeps the machine safe (seed 004: never publish the new
engine while the old one failed to stop)::

    staged + verified (server untouched)
      -> stop the running server        failure: pointer unchanged, old server stays
      -> flip the pointer
      -> start the same arguments on the new binary, wait for /health
                                         failure: pointer flipped back, old server restarted
      -> with a model loaded: the inference gate's completion request (gate.py)
                                         failure or (if asked) too slow: the same roll back

Runtimes live in their own directories and only the pointer flips, so no file
a running process uses is ever replaced (Windows cannot replace a running .exe).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from llama_runtime.runtime.errors import SwitchError, VerificationError
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.server import ManagedServer, ServerControl
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.config import SERVER_READY_TIMEOUT_SECONDS
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import Progress, ProgressCallback, silent

if TYPE_CHECKING:
    from llama_runtime.runtime.inference import Speed
    from llama_runtime.runtime.listen import Health
    from llama_runtime.updater.verify.gate import InferenceGate, Verdict

log = get_logger("llama_runtime.swap")

#: A serving llama-server answers /health at once; one that does not within this is not measured.
BASELINE_HEALTH_SECONDS: Final = 2.0
#: SIGTERM grace before SIGKILL when quiescing the old server.
STOP_TIMEOUT_SECONDS: Final = 10.0
#: Seconds between the progress events saying the new server still loads its model.
LOADING_NOTICE_SECONDS: Final = 10.0

# Arguments that make llama-server load a model at start-up (so a restart reloads it).
_MODEL_FLAGS: Final = frozenset({"-m", "--model", "-hf", "--hf-repo", "-mu", "--model-url", "-dr", "--docker-repo"})


@dataclass(frozen=True)
class RunningServer:
    """What was running before the switch, so it can be restored."""

    binary: Path
    args: list[str]


@dataclass(frozen=True)
class SwitchReport:
    """What happened to the server during activation."""

    restarted: bool
    reload_required: bool
    pid_changed: bool = True
    #: The inference gate ran and the new server generated.
    gated: bool = False
    warnings: tuple[str, ...] = ()
    speed: Speed | None = None
    previous_speed: Speed | None = None
    #: A slowdown beyond the limit that stayed within the measured noise, with the figures (else empty).
    noise: str = ""
    answer: str | None = None
    previous_answer: str | None = None

    def gate_json(self) -> dict[str, object]:
        """The ``gate`` object of an update/rollback result."""
        return {
            "checked": self.gated,
            "speed": self.speed.to_json() if self.speed else None,
            "previous_speed": self.previous_speed.to_json() if self.previous_speed else None,
            "within_noise": self.noise or None,
            "answer": self.answer,
            "previous_answer": self.previous_answer,
        }


def describe(runtime: InstalledRuntime | None) -> str:
    """``b7000 (cpu)`` or ``the unmanaged`` for messages."""
    if runtime is None:
        return "unmanaged"
    return f"{runtime.marker.tag} ({runtime.marker.backend})"


def loads_model_at_start(args: Sequence[str]) -> bool:
    """Whether ``args`` name a model, which a restart then loads again by itself."""
    return any(a.split("=", 1)[0] in _MODEL_FLAGS for a in args)


def endpoint(server: ServerControl) -> str | None:
    """Where ``server`` listens, or None (also for app controls written before ``endpoint`` existed)."""
    ask = getattr(server, "endpoint", None)
    where = ask() if callable(ask) else None
    return where if isinstance(where, str) else None


class ServerSwitch:
    """Quiesces a running server around a pointer flip.

    Args:
        server: The process to manage (the home's ManagedServer or an app's own).
        health_timeout: Seconds the new server has to answer /health.
        stop_timeout: SIGTERM grace before SIGKILL.
        gate: The inference gate for servers that load a model; None: /health only.
    """

    def __init__(
        self,
        server: ServerControl,
        *,
        health_timeout: float = SERVER_READY_TIMEOUT_SECONDS,
        stop_timeout: float = STOP_TIMEOUT_SECONDS,
        gate: InferenceGate | None = None,
    ) -> None:
        self.server = server
        self.health_timeout = health_timeout
        self.stop_timeout = stop_timeout
        self.gate = gate
        #: Where the switch's own phases go (``stop_server``, ``health``: docs/events.md).
        self.emit: ProgressCallback = silent

    def measure_current(self, current: InstalledRuntime | None) -> None:
        """Before the old server stops: time it on the gate's request when no figure is on record."""
        if self.gate is None or not self.server.is_running():
            return
        args = self.server.current_args()
        url = endpoint(self.server)
        if url is None or not loads_model_at_start(args):
            return
        # A wedged old server would hold the switch for the gate's whole time limit; it is not measured.
        if self.server.wait_healthy(BASELINE_HEALTH_SECONDS):
            self.gate.baseline(url, args, current)

    def stop_current(self, new: InstalledRuntime, current: InstalledRuntime | None) -> RunningServer | None:
        """Stop the running server, if any, remembering how to start it again.

        Raises:
            SwitchError: It could not be stopped; nothing may be published.
        """
        if not self.server.is_running():
            return None
        binary = self.server.current_binary()
        args = self.server.current_args()
        log.info("stopping llama-server for the switch", binary=str(binary), to=describe(new))
        checkpoint("before_server_stop")
        self.emit(Progress("stop_server", message=f"stopping the running llama-server ({describe(current)})"))
        try:
            self.server.stop(self.stop_timeout)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # Ctrl-C (or exit) while we stopped it: the update is abandoned,
                # and the server must not stay down because of it.
                self._restart_if_down(binary, args, current)
                raise
            # any failure to stop blocks the switch
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            raise SwitchError(
                f"Could not switch llama.cpp to {describe(new)}: stopping the current "
                f"{describe(current)} server failed ({reason}). The current runtime is still active; "
                "stop it and try again.",
                hint="Stop it with `llama-runtime server stop` (or in your app), then run the update again.",
            ) from exc
        if binary is None:
            return None
        return RunningServer(binary=binary, args=args)

    def _restart_if_down(self, binary: Path | None, args: list[str], current: InstalledRuntime | None) -> None:
        try:
            down = binary is not None and not self.server.is_running()
        except Exception:  # cannot tell: starting a second server would be worse
            return
        if down and binary is not None:
            self.restore_old(RunningServer(binary=binary, args=args), current)

    def start_new(
        self, new: InstalledRuntime, running: RunningServer, current: InstalledRuntime | None = None
    ) -> NewServer:
        """Start the previous arguments on the new binary, wait for /health, then run the gate."""
        try:
            self.server.start(new.binary, running.args)
        except Exception as exc:  # a start failure is a failed health check
            log.warning("new llama-server did not start", error=str(exc))
            return NewServer("unhealthy")
        checkpoint("during_health_wait")
        failure, reason = "unhealthy", ""
        self.emit(Progress("health", message=f"waiting for llama-server {describe(new)} to answer /health"))
        if self._wait_healthy(new):
            verdict = self._gate(new, running, current)
            if verdict is None or verdict.ok:
                log.info("llama-server healthy on the new runtime", binary=str(new.binary))
                return NewServer("healthy", verdict=verdict)
            failure, reason = "failed_gate", verdict.reason
        else:
            reason = self._why_not_healthy()
        try:
            self.server.stop(self.stop_timeout)
        except Exception as exc:  # the old server cannot come back while this one runs
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.error("could not stop the rejected new server", error=reason)
            return NewServer("unhealthy_still_running", reason)
        return NewServer("failed_gate" if failure == "failed_gate" else "unhealthy", reason=reason)

    def _wait_healthy(self, new: InstalledRuntime) -> bool:
        """Wait for the new server's /health, saying while it loads its model (the managed server says so)."""
        if not isinstance(self.server, ManagedServer):
            return self.server.wait_healthy(self.health_timeout)
        said: list[float] = []
        clock = time.monotonic

        def loading(answer: Health) -> None:
            if answer.loading and (not said or clock() - said[-1] >= LOADING_NOTICE_SECONDS):
                said.append(clock())
                self.emit(Progress("health", message=f"llama-server {describe(new)} is loading its model"))

        return self.server.wait_healthy(self.health_timeout, on_answer=loading)

    def _why_not_healthy(self) -> str:
        """Why the new server never answered: it exited (with its last words), or it kept silent."""
        try:
            exited = not self.server.is_running()
        except Exception:  # cannot tell: say what is known
            exited = False
        if not exited:
            last = self.server.last_health if isinstance(self.server, ManagedServer) else None
            return f"it did not answer /health within {self.health_timeout:.0f} s" + (
                f" (its last answer: {last.detail})" if last is not None else ""
            )
        # The managed server keeps its log; an app's own server control may not (the protocol does not ask).
        tail = getattr(self.server, "log_tail", None)
        lines = tail() if callable(tail) else []
        words = [line for line in (lines if isinstance(lines, list) else []) if isinstance(line, str)][-2:]
        said = f": {' / '.join(words)}" if words else ""
        return f"its llama-server exited right after it started{said}"

    def _gate(self, new: InstalledRuntime, running: RunningServer, current: InstalledRuntime | None) -> Verdict | None:
        """The gate's verdict on the healthy new server; None when it does not apply."""
        if self.gate is None or not loads_model_at_start(running.args):
            return None
        url = endpoint(self.server)
        if url is None:
            log.warning("the server control does not say where the server listens; inference gate skipped")
            return None
        checkpoint("during_completion_check")
        return self.gate.check(url, running.args, new, current)

    def restore_old(self, running: RunningServer, old: InstalledRuntime | None) -> bool:
        """Start the old server again after a failed switch; whether it is healthy."""
        try:
            self.server.start(running.binary, running.args)
            if self.server.wait_healthy(self.health_timeout):
                return True
            log.error("the restored llama-server is not healthy", binary=str(running.binary))
        except Exception as exc:  # report, never mask the original failure
            log.error("could not restart the previous llama-server", error=str(exc))
        return False


@dataclass(frozen=True)
class NewServer:
    """How the server started on the new runtime fared."""

    outcome: Literal["healthy", "unhealthy", "failed_gate", "unhealthy_still_running"]
    stop_failure: str = ""
    reason: str = ""
    verdict: Verdict | None = None


def switch_with_server(
    switch: ServerSwitch,
    new: InstalledRuntime,
    current: InstalledRuntime | None,
    flip: Callable[[], None],
    unflip: Callable[[], None],
) -> SwitchReport:
    """Stop, flip, restart; on an unhealthy restart (or an interruption) flip back and restore.

    Raises:
        SwitchError: The old server could not be stopped (pointer untouched), or
            the unhealthy new server could not be stopped (pointer flipped back;
            ``new_still_running`` is set and the new runtime must be kept).
        VerificationError: The new server failed its health check or the
            inference gate (rolled back).
    """
    switch.measure_current(current)
    running = switch.stop_current(new, current)
    checkpoint("after_server_stop")
    try:
        flip()
    except BaseException:
        if running is not None:
            switch.restore_old(running, current)
        raise
    if running is None:
        return SwitchReport(restarted=False, reload_required=False, pid_changed=False)
    try:
        started = switch.start_new(new, running, current)
    except BaseException:
        # Interrupted (Ctrl-C) while the new server came up: put everything back.
        _undo(switch, running, current, unflip)
        raise
    if started.outcome == "healthy":
        return _healthy_report(running, started.verdict)
    unflip()
    if started.outcome == "unhealthy_still_running":
        error = SwitchError(
            f"rolled back the pointer to {describe(current)}: the new runtime {describe(new)} failed its checks "
            f"and its server could not be stopped ({started.stop_failure}); it is still running.",
            hint="Stop it with `llama-runtime server stop` (or in your app), then `llama-runtime server start`.",
        )
        error.new_still_running = True
        raise error
    restored = switch.restore_old(running, current)
    again = "is active and running again" if restored else "is active again, but its server did not come back"
    if started.outcome == "failed_gate":
        what = f"failed its inference check ({describe(new)}: {started.reason})"
    else:
        what = f"failed its health check ({describe(new)}: {started.reason})"
    rejected = VerificationError(
        f"rolled back: the new runtime {what}; {describe(current)} {again}.",
        hint=None if restored else "Start it with `llama-runtime server start -- ARGS`.",
    )
    rejected.stage = "completion check" if started.outcome == "failed_gate" else "health check"
    raise rejected


def _healthy_report(running: RunningServer, verdict: Verdict | None) -> SwitchReport:
    report = SwitchReport(restarted=True, reload_required=not loads_model_at_start(running.args))
    if verdict is None:
        return report
    return dataclasses.replace(
        report,
        gated=True,
        warnings=verdict.warnings,
        speed=verdict.speed,
        previous_speed=verdict.previous_speed,
        noise=verdict.noise,
        answer=verdict.answer,
        previous_answer=verdict.previous_answer,
    )


def _undo(
    switch: ServerSwitch, running: RunningServer, current: InstalledRuntime | None, unflip: Callable[[], None]
) -> None:
    try:
        switch.server.stop(switch.stop_timeout)
    except Exception as exc:  # best effort while unwinding
        log.error("could not stop the new llama-server while undoing the switch", error=str(exc))
    unflip()
    switch.restore_old(running, current)
