"""The Installer: the one orchestrator of update, use and rollback, each as one transaction.

The sequence (each step finishes before the next; nothing is published early)::

    lock -> read state -> resolve release -> choose asset -> (up to date? stop)
      -> free space -> download + sha256 -> extract into staging/
      -> probe binary -> write marker (last) -> read it back and check it
      -> rename into runtimes/ -> flip the pointer (one os.replace)

This module is the front: it takes the update lock, gathers the decision core's
inputs (active marker, release, host facts), and carries the plan out: up to
date, a switch to an installed runtime, or an install through
:mod:`.pipeline` (its ``acquire`` section: the assets' bytes), whose steps live one concept each:
:mod:`~llama_runtime.updater.stage.staged` (the staged tree) and
:mod:`~llama_runtime.updater.verify.installed` (its marker),
:mod:`~llama_runtime.updater.verify.verifier` (probe, build identity, smoke model) and :mod:`.activation`
(the pointer flip with a running server).

With the backend request ``auto``, a build rejected after install (its device
check, build check or completion check) gives way to the next candidate in the
same update, under the same lock (:mod:`.attempts`); each try is one install
as above, and the update's result lists them all.

Invariant: until the pointer flips, the active runtime and the pointer are
untouched; any failure before that removes what was staged and re-raises. The
pointer flip is the commit point; after it nothing can fail the update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from llama_runtime.runtime.binary import ProcessRunner, run_process
from llama_runtime.runtime.clock import SYSTEM_CLOCK, utc_iso
from llama_runtime.runtime.errors import (
    CancelledError,
    CorruptStateError,
    ForeignMarkerError,
    LlamaRuntimeError,
    ProvenanceMissingError,
    UserInputError,
    VerificationError,
)
from llama_runtime.runtime.failed_builds import load_failed
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.lock import NO_WAIT, UpdateLock
from llama_runtime.runtime.marker import AUTO, provenance_summary
from llama_runtime.runtime.pin import pinned_tag
from llama_runtime.runtime.sandbox import Sandbox, sandbox_for
from llama_runtime.runtime.server import ServerControl
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.runtime.spans import span
from llama_runtime.runtime.trial import finish_abandoned_trial, read_trial
from llama_runtime.updater.activate.activation import Activation
from llama_runtime.updater.activate.attempts import (
    CANDIDATE_FAILURES,
    Attempt,
    CandidatesFailedError,
    UpdateOutcome,
    next_plan,
)
from llama_runtime.updater.activate.gc import clean_leftovers
from llama_runtime.updater.activate.pipeline import Acquirer, InstallPipeline, PlannedInstall, StoragePolicy
from llama_runtime.updater.activate.standing import keep_standing
from llama_runtime.updater.activate.swap import SwitchReport
from llama_runtime.updater.choice.decide import (
    ActiveState,
    Plan,
    UpdateRequest,
    channel_request,
    decide,
    held_request,
    settled,
)
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.config import SERVER_READY_TIMEOUT_SECONDS, GatePolicy
from llama_runtime.updater.fetch.cache import AssetCache
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import CancelCheck, Progress, ProgressCallback, silent
from llama_runtime.updater.release.channel import Channel, ResolvedRelease
from llama_runtime.updater.stage.streaming import FetchOptions
from llama_runtime.updater.verify.installed import active_state, describe
from llama_runtime.updater.verify.provenance import ProvenanceCheck
from llama_runtime.updater.verify.verifier import Verifier

if TYPE_CHECKING:
    from llama_runtime.updater.release.release import Release
    from llama_runtime.updater.sources.source import BuildSource

log = get_logger("llama_runtime.install")


def utc_now() -> str:
    """Current UTC time, ISO 8601 with milliseconds and a ``Z`` (:func:`runtime.clock.utc_iso`)."""
    return utc_iso(SYSTEM_CLOCK.time())


class Installer:
    """Installs releases into a :class:`~runtime.layout.Home`.

    Args:
        home: The llama-runtime home.
        source: Release metadata and the download client.
        host: Host facts (a callable so detection runs only when needed).
        runner: Runs the staged binary (the process seam).
        env: Environment for the probed binary.
        clock: Returns the install time.
        server: A running llama-server to stop, switch and restart around
            activation (the home's ManagedServer, or an app's own process).
        health_timeout: Seconds a restarted server has to answer /health.
        gate: The inference gate's policy (the default: on, slowdowns warn);
            None switches servers on /health alone.
        provenance: How build attestations are checked (default: from the environment).
        fetch_options: Ranges and streaming extraction (default: 4 ranges, streamed tar.gz).
        storage: Sharing identical files, companion reuse and retention (default: share, keep all).
        sandbox: Where builds not yet accepted run (default: this host's strongest, hiding the
            user's home and this one).
        compute_check: Run the shipped model on every switch unless a smoke model replaces it.
    """

    def __init__(
        self,
        home: Home,
        *,
        source: BuildSource | None = None,
        host: Callable[[], HostFacts],
        runner: ProcessRunner = run_process,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], str] = utc_now,
        server: ServerControl | None = None,
        health_timeout: float = SERVER_READY_TIMEOUT_SECONDS,
        gate: GatePolicy | None = GatePolicy(),  # noqa: B008 - frozen, so one shared default is safe
        provenance: ProvenanceCheck | None = None,
        fetch_options: FetchOptions | None = None,
        storage: StoragePolicy | None = None,
        sandbox: Sandbox | None = None,
        compute_check: bool = True,
    ) -> None:
        self.home = home
        self.provenance = provenance or ProvenanceCheck()
        self.source = source
        self.clock = clock
        self.lock = UpdateLock(home.lock_path)
        self.cache = AssetCache.of(home)
        self.verifier = Verifier(
            host=host,
            runner=runner,
            env=env,
            gate=gate,
            clock=clock,
            staging_dir=home.staging_dir,
            sandbox=sandbox or sandbox_for(home.root),
            compute_check=compute_check,
        )
        self.activation = Activation(home, server=server, gate=gate, clock=clock, health_timeout=health_timeout)
        self.acquirer = Acquirer(
            home, source=source, cache=self.cache, options=fetch_options or FetchOptions(), provenance=self.provenance
        )
        self.pipeline = InstallPipeline(
            home,
            acquirer=self.acquirer,
            verifier=self.verifier,
            activation=self.activation,
            clock=clock,
            storage=storage,
        )

    # -- state -------------------------------------------------------------

    @property
    def host(self) -> HostFacts:
        """Host facts, detected once."""
        return self.verifier.host

    def active(self, snapshot: HomeSnapshot | None = None) -> InstalledRuntime | None:
        """The active runtime, or ``None`` when nothing is installed.

        Args:
            snapshot: The home as the caller's locked operation read it (default: read now).

        Raises:
            CorruptStateError: The pointer or the active runtime is damaged.
        """
        return (snapshot or HomeSnapshot.read(self.home)).active()

    def previous(self, snapshot: HomeSnapshot | None = None) -> InstalledRuntime | None:
        """The rollback target, if it is still an installed runtime (see :meth:`active` for ``snapshot``)."""
        return (snapshot or HomeSnapshot.read(self.home)).previous()

    # -- update ------------------------------------------------------------

    def update(
        self,
        request: UpdateRequest,
        *,
        progress: ProgressCallback | None = None,
        cancel: CancelCheck | None = None,
        lock_timeout: float = NO_WAIT,
    ) -> UpdateOutcome:
        """Install ``request`` (or find it already active) under the update lock.

        Raises:
            LlamaRuntimeError: Any failure; the active runtime is then unchanged.
        """
        self.verifier.check_smoke_model()
        self.home.ensure()
        with self.lock.hold("update", timeout=lock_timeout):
            recovered = self.finish_trial(progress or silent)
            self.verifier.smoke_report = None
            # Read the state under the lock, once: another process may have
            # installed this very release while we waited.
            snapshot = self.read_state()
            # The pin is read once, under the lock: a plain request in a pinned home asks for the pinned tag.
            request, held = held_request(replace(request, pinned=pinned_tag(self.home.root, request.repo)))
            outcome = self._update_locked(request, snapshot, progress or silent, cancel or (lambda: False))
            outcome = keep_standing(self.home.root, request, outcome)
            if held is not None:
                outcome = replace(outcome, warnings=(*outcome.warnings, held))
            return with_recovery(replace(outcome, smoke=self.verifier.smoke_report), recovered)

    def finish_trial(self, emit: ProgressCallback) -> str | None:
        """Revert a switch whose owner died before its check's verdict (caller holds the lock; runtime.trial).

        Returns:
            The sentence saying what was reverted, or None when no trial was abandoned.
        """
        recovered = finish_abandoned_trial(self.home, health_timeout=self.activation.health_timeout)
        if recovered is not None:
            log.warning("abandoned trial reverted", message=recovered)
            emit(Progress("activate", message=recovered))
        return recovered

    def read_state(self) -> HomeSnapshot:
        """The home as this locked operation sees it, less what interrupted updates left (caller holds the lock)."""
        snapshot = HomeSnapshot.read(self.home)
        removed = clean_leftovers(self.home, snapshot)
        return snapshot.without({r.path.name for r in removed if r.path.parent == self.home.runtimes_dir})

    def _update_locked(
        self, request: UpdateRequest, snapshot: HomeSnapshot, emit: ProgressCallback, cancel: CancelCheck
    ) -> UpdateOutcome:
        """Decide on ``request`` and carry the plan out (the caller holds the update lock)."""
        active = self._active_for_replacement(snapshot)
        # A half-deleted or rewritten active runtime is never "up to date": reinstall
        # over it (sizes of every file plus the binary's sha256: see active_state).
        state = active_state(active, snapshot) if active else None
        replaced = active if state is not None and state.intact else None  # damaged: no rollback target
        # Like the backend request: an explicit channel wins, else the stored one survives.
        channel = channel_request(request, active.marker if active else None)
        plan = settled(request, state)
        resolved: ResolvedRelease | None = None
        if plan is None and request.tag:
            # A pinned build already on disk: switch to it, no network needed.
            there = self._installed_settling(request, active, snapshot)
            if there is not None:  # every job starts with resolve, also one that needs no network
                emit(Progress("resolve", message=f"{request.tag} is installed as {there.name}"))
            if there is not None and self.reverify(there, emit, snapshot):
                switched = self.activate_installed(there, replaced, emit, [], verified=True, snapshot=snapshot)
                tried = Attempt(there.marker.asset, there.marker.backend, "switched", None, there.marker.reason)
                return replace(switched, attempts=(tried,))
        if plan is None:
            plan, resolved = self._decide(request, snapshot, active, state, channel, emit)
        _log_plan(plan)
        warnings = [*(resolved.notes if resolved else ()), *plan.warnings]
        for warning in warnings:
            log.warning("plan", warning=warning)
        plan.raise_if_refused()
        if plan.action == "up_to_date" and active is not None:
            return UpdateOutcome(
                "up_to_date", active, snapshot.previous(), tuple(warnings), reason=plan.reason, skipped=plan.skipped
            )
        identity = {
            "release_version": resolved.version if resolved else None,
            "channel": channel,
            # Not marker fields: how the pipeline's device check treats a backend asked for by name.
            "explicit_backend": request.backend not in (None, AUTO),
            "allow_no_device": request.allow_no_device,
        }
        walk = _Walk(request, snapshot, state, active, replaced, identity)
        return replace(self._walk_down(plan, walk, emit, cancel, warnings), reason=plan.reason)

    # -- trying candidates -----------------------------------------------------

    def _walk_down(
        self, plan: Plan, walk: _Walk, emit: ProgressCallback, cancel: CancelCheck, warnings: list[str]
    ) -> UpdateOutcome:
        """Carry ``plan`` out; under ``auto``, a build rejected on this machine gives way to the next one.

        Each try is verified like any install and leaves nothing behind when it fails
        (:mod:`.attempts`); an explicit backend request has no next one.

        Raises:
            CandidatesFailedError: ``auto`` tried several builds and every one was rejected.
            LlamaRuntimeError: Anything else that ended the update; the active runtime is unchanged.
        """
        walking = plan.backend_request == AUTO
        server_was_up = walking and self._server_running()
        attempts: list[Attempt] = []
        while True:
            if plan.release is None or plan.choice is None:
                raise AssertionError(f"unreachable: a {plan.action} plan names its release and asset")
            release, choice = plan.release, plan.choice
            this_try = list(dict.fromkeys([*warnings, *plan.warnings]))  # a failed try's warnings go with it
            try:
                outcome = self._carry_out(plan, walk, emit, cancel, this_try, attempts)
            except CANDIDATE_FAILURES as exc:
                if not walking:
                    raise
                attempts.append(Attempt.failed(choice, exc))
                # The home changed only if the try left its runtime directory (a server that would
                # not stop runs from it): look again, so the next try sees it and numbers after it.
                walk = replace(walk, snapshot=HomeSnapshot.read(self.home))
                log.warning("candidate rejected", asset=choice.asset.name, stage=attempts[-1].stage, reason=exc.message)
                plan = self._next_or_raise(exc, release, walk, attempts, server_was_up)
                _log_plan(plan)
                assert plan.choice is not None  # next_plan plans name their asset
                if cancel():
                    raise CancelledError(
                        f"The update to {release.tag} was cancelled after {attempts[-1].describe()}, "
                        f"before trying {plan.choice.asset.name}; nothing was activated."
                    ) from exc
                emit(Progress("resolve", message=f"{attempts[-1].describe()}; trying {plan.choice.asset.name}"))
                continue
            return replace(outcome, attempts=(*attempts, Attempt.ended(choice, outcome.result)))

    def _carry_out(
        self,
        plan: Plan,
        walk: _Walk,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        attempts: list[Attempt],
    ) -> UpdateOutcome:
        """One try: keep the active runtime, switch to an installed copy, or install the plan's build."""
        assert plan.release is not None and plan.choice is not None  # checked by the caller
        if plan.action == "up_to_date" and walk.active is not None:  # the next candidate is what runs now
            return UpdateOutcome("up_to_date", walk.active, walk.snapshot.previous(), tuple(warnings))
        if plan.action == "switch" and plan.switch_to is not None:
            there = walk.snapshot.load(plan.switch_to)
            if self.reverify(there, emit, walk.snapshot):
                return self.activate_installed(
                    there, walk.replaced, emit, warnings, verified=True, snapshot=walk.snapshot
                )
        # The marker of the build that wins says how the update got there (this try last).
        tried = [*attempts, Attempt.ended(plan.choice, "installed")]
        identity = {**walk.identity, "attempts": tuple(a.to_json() for a in tried)}
        planned = PlannedInstall(plan.release, plan.choice, plan.backend_request, walk.request.require_digest, identity)
        return self.pipeline.install_release(planned, walk.replaced, emit, cancel, warnings, snapshot=walk.snapshot)

    def _next_or_raise(
        self,
        exc: LlamaRuntimeError,
        release: Release,
        walk: _Walk,
        attempts: list[Attempt],
        server_was_up: bool,
    ) -> Plan:
        """The plan for the next candidate after ``exc`` rejected the last one (skipped builds join ``attempts``).

        Raises:
            LlamaRuntimeError: ``exc`` itself when it was the only try; else
                :class:`CandidatesFailedError` naming every try.
        """
        if server_was_up and not self._server_running():
            # The failed switch could not bring the old server back: another switch would
            # start from a machine that is no longer as it was.
            plan, why = None, "the previous runtime's llama-server did not come back after the failed try"
        else:
            failed = {b.key: b.reason for b in load_failed(self.home.root)}  # with the try just recorded
            plan, skipped, why = next_plan(
                walk.request,
                walk.state,
                release,
                self.host,
                tried=attempts,
                installed=self._others(walk.snapshot, walk.active),
                failed=failed,
            )
            attempts.extend(skipped)
        if plan is not None:
            return plan
        log.warning("no other candidate", reason=why)
        if sum(a.outcome == "failed" for a in attempts) == 1:
            raise exc  # one build tried: its own error (and exit code) says it all
        raise CandidatesFailedError(release.tag, attempts, why) from exc

    def _server_running(self) -> bool:
        """Whether the server activation switches is running now (unknown reads as not)."""
        server = self.activation.server
        if server is None:
            return False
        try:
            return server.is_running()
        except Exception:  # an app's own control may fail to tell; then no further switch is risked
            return False

    def _decide(
        self,
        request: UpdateRequest,
        snapshot: HomeSnapshot,
        active: InstalledRuntime | None,
        state: ActiveState | None,
        channel: Channel,
        emit: ProgressCallback,
    ) -> tuple[Plan, ResolvedRelease]:
        """Resolve the release and ask the decision core what to do with it."""
        emit(Progress("resolve", message="resolving the release"))
        others = self._others(snapshot, active)
        failed = {b.key: b.reason for b in load_failed(self.home.root)}
        resolved = self._resolve(request, channel)
        return decide(request, state, resolved.release, self.host, installed=others, failed=failed), resolved

    def _others(self, snapshot: HomeSnapshot, active: InstalledRuntime | None) -> list[ActiveState]:
        """The installed runtimes other than ``active`` that an update may switch to."""
        return [active_state(r, snapshot) for r in snapshot.others(active)]

    def _active_for_replacement(self, snapshot: HomeSnapshot) -> InstalledRuntime | None:
        try:
            return snapshot.active()
        except ForeignMarkerError:
            raise
        except CorruptStateError as exc:
            # A damaged active runtime must not block the repair by update.
            log.warning("active runtime unusable; installing over it", reason=exc.message)
            return None

    def _installed_settling(
        self, request: UpdateRequest, active: InstalledRuntime | None, snapshot: HomeSnapshot
    ) -> InstalledRuntime | None:
        """The newest intact installed runtime (not the active one) that a pinned ``request`` is settled by.

        The backend request is the active runtime's, as for any update; the rule is
        the decision core's :func:`settled`, asked about each installed runtime.
        """
        stored = active.marker.backend_request if active else AUTO
        for runtime in reversed(snapshot.others(active)):  # newest first
            if settled(request, active_state(runtime, snapshot), stored=stored) is not None:
                return runtime
        return None

    def _resolve(self, request: UpdateRequest, channel: Channel) -> ResolvedRelease:
        if self.source is None:
            raise UserInputError("No release source configured for this operation.")
        with span("resolve"):
            return self.source.resolve(channel, tag=request.tag or None)

    # -- switching to what is installed ---------------------------------------

    def use(
        self, name: str | Callable[[], str], *, progress: ProgressCallback | None = None, lock_timeout: float = NO_WAIT
    ) -> UpdateOutcome:
        """Activate the installed runtime ``name`` (no download), verified like a fresh install.

        Args:
            name: The runtime's directory name, or what finds it, called under the lock (``gc`` or
                ``remove`` may delete a runtime between a look-up and the lock).
            progress: Receives the verification's progress events.
            lock_timeout: Seconds to wait for the update lock.

        Raises:
            CorruptStateError: ``name`` is no longer a complete runtime.
            VerificationError: It fails verification; the active runtime is unchanged.
            SwitchError: A running server could not be switched; nothing changed.
        """
        emit = progress or silent
        self.home.ensure()
        with self.lock.hold("use", timeout=lock_timeout):
            recovered = self.finish_trial(emit)
            self.verifier.smoke_report = None
            snapshot = HomeSnapshot.read(self.home)
            target = snapshot.load(name() if callable(name) else name)
            active = self._active_for_replacement(snapshot)
            if active is not None and active.name == target.name and not snapshot.problems(active, hash_binary=True):
                return with_recovery(UpdateOutcome("up_to_date", active, snapshot.previous()), recovered)
            outcome = self.activate_installed(target, active, emit, [], snapshot=snapshot)
            return with_recovery(replace(outcome, smoke=self.verifier.smoke_report), recovered)

    def reverify(self, target: InstalledRuntime, emit: ProgressCallback, snapshot: HomeSnapshot | None = None) -> bool:
        """Whether the installed ``target`` still passes verification (a failure is logged).

        For callers that would otherwise install the same build again: a copy
        that fails is installed afresh, and gc removes the damaged duplicate.
        """
        emit(Progress("verify", message=f"verifying the installed {describe(target)}"))
        try:
            self.verifier.verify_installed(target, snapshot)
        except VerificationError as exc:
            log.warning("installed copy fails verification; installing it again", reason=exc.message)
            return False
        return True

    def activate_installed(
        self,
        target: InstalledRuntime,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
        *,
        verified: bool = False,
        snapshot: HomeSnapshot | None = None,
    ) -> UpdateOutcome:
        """Verify the installed ``target`` again and make it active, switching a running server with it.

        The caller holds the update lock; ``active`` is what is active now, as
        ``snapshot`` (the caller's one look at the home) saw it.

        Raises:
            ProvenanceMissingError: Provenance is required and ``target``'s is not verified.
            VerificationError: ``target`` fails verification; nothing changed.
            SwitchError: A running server could not be switched; nothing changed.
        """
        self.require_provenance_of(target)
        if not verified:
            emit(Progress("verify", message=f"verifying the installed {describe(target)}"))
            self.verifier.verify_installed(target, snapshot)
        name = f"{target.marker.tag} ({target.marker.backend})"
        self.verifier.smoke(
            target.binary, name, active, emit, warnings, root=target.path, backend=target.marker.backend
        )
        self.verifier.keep_smoke_figure(target)  # in the home's state: an installed runtime is never written
        emit(Progress("activate", message="activating"))
        return self.activation.activate_installed(target, active, warnings, snapshot=snapshot, emit=emit)

    def require_provenance_of(self, target: InstalledRuntime) -> None:
        """Refuse an installed ``target`` whose recorded provenance is not verified, when provenance is required.

        Raises:
            ProvenanceMissingError: Provenance is required and ``target``'s is not verified.
        """
        recorded = provenance_summary(target.marker)
        if self.provenance.require and recorded["status"] != "verified":
            raise ProvenanceMissingError(
                f"The installed {describe(target)} has provenance '{recorded['status']}' ({recorded.get('reason')}) "
                "and --require-provenance was given; nothing was switched."
            )

    # -- rollback ----------------------------------------------------------

    def rollback(
        self, *, lock_timeout: float = NO_WAIT
    ) -> tuple[InstalledRuntime, InstalledRuntime | None, SwitchReport]:
        """Re-activate the previous runtime; the current one becomes previous.

        A running server is switched to the previous runtime too (and switched
        back, with the pointer, if it does not come up healthy).

        Raises:
            UserInputError: There is no previous runtime to go back to.
            CorruptStateError: The previous runtime is damaged; nothing changed.
            ProvenanceMissingError: Provenance is required and the previous runtime's is not verified.
            VerificationError: The previous runtime fails verification (a file's sha256, its marker,
                its binary), or the server could not be switched; nothing changed.
            SwitchError: The server could not be switched; nothing changed.
        """
        self.home.ensure()
        with self.lock.hold("rollback", timeout=lock_timeout):
            trial = read_trial(self.home)
            if self.finish_trial(silent) is not None and trial is not None:
                # The revert of the abandoned switch is the rollback asked for: the build on trial is left.
                snapshot = HomeSnapshot.read(self.home)
                back = snapshot.active()
                if back is not None:
                    report = SwitchReport(restarted=trial.server is not None, reload_required=False)
                    return back, snapshot.find(trial.runtime), report
            snapshot = HomeSnapshot.read(self.home)
            target = self.activation.rollback_target(snapshot)
            self.require_provenance_of(target)
            self._verify_rollback_target(target, snapshot)
            return self.activation.rollback(snapshot, target)

    def _verify_rollback_target(self, target: InstalledRuntime, snapshot: HomeSnapshot) -> None:
        """Every file of the previous runtime hashed, its marker and its binary checked, as ``use`` does.

        Raises:
            VerificationError: ``target`` is damaged or does not run; nothing changed.
        """
        try:
            self.verifier.verify_installed(target, snapshot)
        except VerificationError as exc:
            raise VerificationError(
                f"Cannot roll back: the previous runtime {describe(target)} fails verification "
                f"({exc.message.rstrip('.')}); nothing was changed, the active runtime stays.",
                hint=f"Install it again with `llama-runtime update --tag {target.marker.tag} "
                f"--backend {target.marker.backend}`, or keep the active runtime.",
            ) from None


@dataclass(frozen=True)
class _Walk:
    """What every try of one update shares: the request, the state it started from, the marker's identity."""

    request: UpdateRequest
    snapshot: HomeSnapshot  # the one look at the home this update took under the lock
    state: ActiveState | None
    active: InstalledRuntime | None
    replaced: InstalledRuntime | None  # the rollback target (None when the active one is damaged)
    identity: Mapping[str, object]


def with_recovery(outcome: UpdateOutcome, recovered: str | None) -> UpdateOutcome:
    """``outcome`` whose warnings begin with what reverting an abandoned trial did."""
    return outcome if recovered is None else replace(outcome, warnings=(recovered, *outcome.warnings))


def _log_plan(plan: Plan) -> None:
    """-v: what was decided and why; -vv: every candidate asset and why it was taken or dropped."""
    release, choice = plan.release, plan.choice
    log.info(
        "decided",
        action=plan.action,
        release=release.tag if release else None,
        asset=choice.asset.name if choice else None,
        backend=choice.backend if choice else None,
        size=choice.asset.size if choice else None,
        reason=plan.reason,
    )
    for candidate in choice.candidates if choice else ():
        log.debug("candidate", asset=candidate.asset_name, taken=candidate.taken, why=candidate.why)


__all__ = ["Installer", "utc_now", "with_recovery"]
