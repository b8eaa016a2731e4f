"""Activation: moving a verified runtime into place and flipping the pointer, a running server with it.

The pointer flip (one ``os.replace`` of ``active.json``) is the commit point of
every install, switch and rollback. A running llama-server is stopped, switched
and restarted around it under the switch lock (see :mod:`.swap`); when it does
not come up healthy the pointer is flipped back.

Invariants:
    * Nothing the pointer names is ever deleted, nor a directory a server that
      would not stop still runs from.
    * The rollback target (``previous``) is always a complete runtime or none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from llama_runtime.runtime.errors import CorruptStateError, SwitchError, UserInputError
from llama_runtime.runtime.fingerprint import record_runtime
from llama_runtime.runtime.fsutil import fsync_directory, remove_tree_quietly
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.runtime.marker import InstallMarker
from llama_runtime.runtime.procinfo import process_start_ticks
from llama_runtime.runtime.server import SERVER_LOCK_TIMEOUT_SECONDS, ManagedServer, ServerControl
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.runtime.trial import ServerToRestore, Trial, begin_trial, end_trial
from llama_runtime.runtime.trust import accept_runtime, has_record
from llama_runtime.updater.activate.attempts import UpdateOutcome
from llama_runtime.updater.activate.swap import ServerSwitch, SwitchReport, describe, switch_with_server
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.config import GatePolicy
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import ProgressCallback, silent
from llama_runtime.updater.verify.gate import InferenceGate

log = get_logger("llama_runtime.install")

__all__ = ["Activation"]


class Activation:
    """Makes runtimes active in one home (the caller holds the update lock).

    Args:
        home: The llama-runtime home.
        server: A running llama-server to stop, switch and restart around the flip.
        gate: The inference gate's policy for the restarted server (None: /health alone).
        clock: The time recorded with a speed measurement.
        health_timeout: Seconds a restarted server has to answer /health.
    """

    def __init__(
        self,
        home: Home,
        *,
        server: ServerControl | None,
        gate: GatePolicy | None,
        clock: Callable[[], str],
        health_timeout: float,
    ) -> None:
        self.home = home
        self.server = server
        self.gate = gate
        self.clock = clock
        self.health_timeout = health_timeout

    def activate_staged(
        self,
        staging: Path,
        marker: InstallMarker,
        active: InstalledRuntime | None,
        warnings: list[str],
        *,
        snapshot: HomeSnapshot | None = None,
        emit: ProgressCallback = silent,
    ) -> UpdateOutcome:
        """Move the verified ``staging`` tree into runtimes/ and make it active.

        ``snapshot`` is the caller's one look at the home under the lock (default: read now).

        Raises:
            SwitchError: A running server could not be switched; the pointer is unchanged.
        """
        snapshot = snapshot or HomeSnapshot.read(self.home)
        old_pointer = snapshot.pointer  # a damaged pointer reads as empty: this activation repairs it
        name = self.home.new_runtime_name(marker.repo, marker.tag, marker.backend)
        final = self.home.runtime_path(name)
        os.replace(staging, final)
        fsync_directory(self.home.runtimes_dir)
        installed = InstalledRuntime(name=name, path=final, marker=marker)
        accept_runtime(self.home.root, name, final)  # before any stamp: the modes change ctimes
        record_runtime(self.home.root, name, final, marker)  # its bytes were verified in staging
        # Over a damaged active runtime, the intact previous one stays the rollback target.
        previous = active.name if active else snapshot.intact(old_pointer.previous)
        new_pointer = Pointer(active=name, previous=previous)
        try:
            report = self.switch(installed, active, old_pointer, new_pointer, emit=emit)
        except BaseException as exc:
            # Never delete what the pointer names (an un-flip that itself failed),
            # nor what a server that would not stop still runs from.
            still_running = isinstance(exc, SwitchError) and exc.new_still_running
            if not self._pointer_names(name) and not still_running:
                remove_tree_quietly(final)
            raise
        checkpoint("after_pointer_flip")
        log.info("activated", tag=marker.tag, backend=marker.backend, runtime=name)
        return UpdateOutcome("installed", installed, active, (*warnings, *report.warnings), server=report)

    def activate_installed(
        self,
        target: InstalledRuntime,
        active: InstalledRuntime | None,
        warnings: list[str],
        *,
        snapshot: HomeSnapshot | None = None,
        emit: ProgressCallback = silent,
    ) -> UpdateOutcome:
        """Make the installed (and verified) ``target`` active; ``active`` becomes the rollback target.

        ``snapshot`` is the caller's one look at the home under the lock (default: read now).

        Raises:
            SwitchError: A running server could not be switched; nothing changed.
        """
        snapshot = snapshot or HomeSnapshot.read(self.home)
        old_pointer = snapshot.pointer  # a damaged pointer reads as empty: this activation repairs it
        previous = active.name if active else snapshot.intact(old_pointer.previous)
        if previous == target.name:  # nothing was active: the target stops being the rollback target
            previous = None
        if not has_record(self.home.root, target.name):  # installed before trust records: every file was just hashed
            accept_runtime(self.home.root, target.name, target.path)
        record_runtime(self.home.root, target.name, target.path, target.marker)  # the caller hashed every file
        report = self.switch(target, active, old_pointer, Pointer(active=target.name, previous=previous), emit=emit)
        log.info("switched", tag=target.marker.tag, backend=target.marker.backend, runtime=target.name)
        return UpdateOutcome("switched", target, active, (*warnings, *report.warnings), server=report)

    def rollback_target(self, snapshot: HomeSnapshot) -> InstalledRuntime:
        """The previous runtime, whose recorded files are all there in size (``snapshot``: the caller's look).

        Raises:
            UserInputError: There is no previous runtime to go back to.
            CorruptStateError: The pointer or the previous runtime is damaged.
        """
        if snapshot.pointer_error is not None:
            raise snapshot.pointer_error
        pointer = snapshot.pointer
        if not pointer.previous:
            raise UserInputError("There is no previous runtime to roll back to.")
        target = snapshot.load(pointer.previous)
        problems = snapshot.problems(target)
        if problems:
            raise CorruptStateError(
                f"The previous runtime {target.marker.tag} ({target.marker.backend}) is damaged "
                f"({'; '.join(problems[:3])}); nothing was changed.",
                hint="Install the release again with `llama-runtime update --tag "
                f"{target.marker.tag} --backend {target.marker.backend}`.",
            )
        return target

    def rollback(
        self, snapshot: HomeSnapshot, target: InstalledRuntime
    ) -> tuple[InstalledRuntime, InstalledRuntime | None, SwitchReport]:
        """Re-activate the verified previous runtime ``target``; the current one becomes previous.

        ``snapshot`` is the caller's one look at the home under the lock.

        Raises:
            SwitchError, VerificationError: The server could not be switched; nothing changed.
        """
        pointer = snapshot.pointer
        current = snapshot.find(pointer.active)
        report = self.switch(target, current, pointer, Pointer(active=target.name, previous=pointer.active))
        return target, current, report

    def switch(
        self,
        new: InstalledRuntime,
        current: InstalledRuntime | None,
        old_pointer: Pointer,
        new_pointer: Pointer,
        *,
        emit: ProgressCallback = silent,
    ) -> SwitchReport:
        """Flip the pointer from ``old_pointer`` to ``new_pointer``, switching a running server with it.

        ``emit`` gets the switch's ``stop_server`` and ``health`` phases when a server runs.
        """

        def flip() -> None:
            checkpoint("before_pointer_flip")
            self.home.write_pointer(new_pointer)

        def unflip() -> None:
            self.home.write_pointer(old_pointer)

        if self.server is None:
            flip()
            return SwitchReport(restarted=False, reload_required=False, pid_changed=False)
        gate = (
            InferenceGate(self.gate, clock=self.clock, state_dir=self.home.root)
            if self.gate and self.gate.enabled
            else None
        )
        switch = ServerSwitch(self.server, health_timeout=self.health_timeout, gate=gate)
        switch.emit = emit
        # The switch lock (not only update.lock): `server start/stop` take just this one,
        # so a download never blocks them, and a start never races the flip.
        with UpdateLock(self.home.switch_lock_path).hold("switch", timeout=SERVER_LOCK_TIMEOUT_SECONDS):
            on_trial = self._begin_trial(new, current, old_pointer)
            try:
                report = switch_with_server(switch, new, current, flip, unflip)
            except Exception:
                self._end_trial(on_trial)  # the verdict: rolled back (or never switched)
                raise
            except BaseException:
                # Interrupted: the undo ran; a pointer not back where it was is for recovery to finish.
                if on_trial and self._pointer_is(old_pointer):
                    end_trial(self.home)
                raise
            self._end_trial(on_trial)  # the verdict: healthy (and generating, with a model)
            return report

    def _begin_trial(self, new: InstalledRuntime, current: InstalledRuntime | None, old_pointer: Pointer) -> bool:
        """Record ``new`` as on trial before a running server is stopped; whether a trial began (runtime.trial)."""
        assert self.server is not None
        if not self.server.is_running():
            return False  # nothing is restarted, so nothing is checked: the flip alone is the switch
        binary = self.server.current_binary()
        restore = None
        if binary is not None:
            managed = isinstance(self.server, ManagedServer) and self.server.server_dir == self.home.server_dir
            state = self.server.record.running() if isinstance(self.server, ManagedServer) else None
            cwd = state.cwd if state is not None else None
            restore = ServerToRestore(binary, tuple(self.server.current_args()), cwd, managed)
        pid = os.getpid()
        trial = Trial(
            runtime=new.name,
            name=describe(new),
            before=old_pointer,
            before_name=describe(current) if current is not None else "no managed runtime",
            server=restore,
            pid=pid,
            proc_start=process_start_ticks(pid),
            since=time.time(),
        )
        begin_trial(self.home, trial)
        checkpoint("after_trial_begins")
        return True

    def _end_trial(self, on_trial: bool) -> None:
        if on_trial:
            end_trial(self.home)

    def _pointer_is(self, pointer: Pointer) -> bool:
        try:
            return self.home.read_pointer() == pointer
        except CorruptStateError:
            return False

    def _pointer_names(self, name: str) -> bool:
        """Whether the pointer names ``name``; an unreadable pointer names nothing we wrote."""
        try:
            return self.home.read_pointer().active == name
        except CorruptStateError:
            return False
