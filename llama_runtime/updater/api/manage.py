"""The runtime manager's verbs behind :class:`~updater.api.service.RuntimeUpdater`.

``use``, ``rollback``, ``remove``, ``install_file``, ``gc``, ``doctor`` and
``plan``: each one composes the internals the CLI used to compose itself, so an
app and ``llama-runtime`` run the same code. Each returns a public result
(:mod:`~updater.api.manage`); ``doctor(repair=True)`` runs as the home's job.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import is_disk_full

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home, InstalledRuntime
    from llama_runtime.runtime.pin import Pin
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.activate.gc import GcItem, GcReport
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.api.context import UseCaseContext
    from llama_runtime.updater.api.doctor import DoctorReport
    from llama_runtime.updater.api.job_store import JobListener, JobState
    from llama_runtime.updater.choice.decide import ActiveState, Plan
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.progress import CancelCheck, ProgressCallback
    from llama_runtime.updater.release.channel import ResolvedRelease
    from llama_runtime.updater.release.release import Release

__all__ = [
    "DoctorCheck",
    "DoctorResult",
    "GcResult",
    "JobRecords",
    "PinResult",
    "PlanCandidate",
    "PlanResult",
    "RemoveResult",
    "RollbackResult",
    "doctor",
    "gc",
    "install_file",
    "pin",
    "plan",
    "remove",
    "rollback",
    "select",
    "unpin",
    "use",
    "user_tag",
]


# -- results: What ``RuntimeUpdater``'s verbs return: small frozen, typed results. -------------------------------


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return MappingProxyType(dict(mapping)) if mapping is not None else None


@dataclass(frozen=True)
class RollbackResult:
    """The previous runtime is active again (:meth:`RuntimeUpdater.rollback`).

    Attributes:
        active: The runtime now active (the one that was previous).
        previous: The runtime that was active, kept as the new rollback target.
        server: What happened to a running ``llama-server`` (restart, the inference gate).
    """

    active: InstalledRuntime
    previous: InstalledRuntime | None
    server: SwitchReport

    def to_json(self) -> dict[str, object]:
        """The ``rollback`` object of the CLI contract."""
        return {
            "result": "switched",
            "active": self.active.to_json(),
            "previous": self.previous.to_json() if self.previous else None,
            "server_restarted": self.server.restarted,
            "reload_required": self.server.reload_required,
            "gate": self.server.gate_json(),
            "warnings": list(self.server.warnings),
        }


@dataclass(frozen=True)
class RemoveResult:
    """An installed runtime was deleted (:meth:`RuntimeUpdater.remove`).

    Attributes:
        removed: The runtime as it was before it was deleted.
        freed_bytes: Bytes its directory held.
    """

    removed: InstalledRuntime
    freed_bytes: int

    def to_json(self) -> dict[str, object]:
        """The ``remove`` object of the CLI contract."""
        return {"removed": self.removed.to_json(), "freed_bytes": self.freed_bytes}


@dataclass(frozen=True)
class PinResult:
    """The home's pin after ``pin`` or ``unpin`` (:meth:`RuntimeUpdater.pin`, :meth:`RuntimeUpdater.unpin`).

    Attributes:
        pinned: The pinned build now, or ``None``.
        before: The pinned tag before (``None``: nothing was pinned).
        active: The active runtime, if any (a pin need not be active yet).
        checked: How the pinned tag was found to exist: ``installed`` (here), ``resolved: ASSET`` (the
            release source lists it and an asset fits this machine), or ``not checked: WHY`` (``force``).
    """

    pinned: Pin | None
    before: str | None
    active: InstalledRuntime | None
    checked: str | None = None

    def to_json(self) -> dict[str, object]:
        """The ``pin``/``unpin`` object of the CLI contract (``active``: the active build's tag)."""
        payload: dict[str, object] = {
            "pinned": self.pinned.to_json() if self.pinned is not None else None,
            "before": self.before,
            "active": self.active.marker.tag if self.active is not None else None,
        }
        if self.checked is not None:
            payload["checked"] = self.checked
        return payload

    def lines(self) -> list[str]:
        """The result in sentences."""
        if self.pinned is None:
            was = f"{self.before} is no longer pinned" if self.before else "Nothing was pinned"
            return [f"{was}: `check --apply`, scheduled jobs and a plain `update` move to the newest build."]
        tag = self.pinned.tag
        lines = [
            f"Pinned {self.pinned.repo} {tag}: `check --apply`, scheduled jobs and a plain `update` stay on it; "
            "`llama-runtime unpin` releases it."
        ]
        if self.checked is not None and self.checked.startswith("not checked"):
            lines.append(f"warning: {tag} is pinned unchecked ({self.checked.removeprefix('not checked: ')}).")
        if self.active is None or self.active.marker.tag != tag:
            lines.append(f"{tag} is not active yet: `llama-runtime update` installs it.")
        return lines


@dataclass(frozen=True)
class GcResult:
    """What one garbage collection removed, or would remove (:meth:`RuntimeUpdater.gc`).

    Attributes:
        dry_run: Nothing was deleted; ``removed`` is what would be.
        removed: Each runtime, download or leftover removed (or to remove).
        kept: Runtime name -> why it was kept (active, previous, in use, among the newest).
        failed: Paths that could not be removed.
    """

    dry_run: bool
    removed: tuple[GcItem, ...] = ()
    kept: Mapping[str, str] = field(default_factory=dict)
    failed: tuple[str, ...] = ()

    @property
    def freed_bytes(self) -> int:
        """Bytes freed (or that would be freed)."""
        return sum(item.size_bytes for item in self.removed)

    @classmethod
    def from_report(cls, report: GcReport) -> GcResult:
        """The frozen copy of a finished gc run's report."""
        return cls(report.dry_run, tuple(report.removed), MappingProxyType(dict(report.kept)), tuple(report.failed))

    def to_json(self) -> dict[str, object]:
        """The ``gc`` object of the CLI contract."""
        return {
            "dry_run": self.dry_run,
            "freed_bytes": self.freed_bytes,
            "removed": [item.to_json() for item in self.removed],
            "kept": dict(self.kept),
            "failed": list(self.failed),
        }


@dataclass(frozen=True)
class DoctorCheck:
    """One check ``doctor`` made and how it came out."""

    check: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class DoctorResult:
    """The home and the active runtime re-verified (:meth:`RuntimeUpdater.doctor`).

    Attributes:
        healthy: Every check passed, or a repair restored a verified runtime.
        active: The active runtime after the checks (and the repair), if one verifies.
        checks: Every check, in the order it ran.
        repaired: What a repair did, for people; ``None`` when nothing was repaired.
        advice: What to do next, for people (first the most useful).
        host: This machine's facts with their sources (``plan --host`` reads this object).
        job_id: The job a repair ran as (``job status`` shows it); ``None`` without ``repair``.
    """

    healthy: bool
    active: InstalledRuntime | None
    checks: tuple[DoctorCheck, ...]
    repaired: str | None
    advice: tuple[str, ...]
    host: Mapping[str, Any] | None
    job_id: str | None = None

    @classmethod
    def from_report(cls, report: DoctorReport, *, job_id: str | None = None) -> DoctorResult:
        """The frozen copy of a finished doctor report."""
        return cls(
            healthy=report.healthy,
            active=report.active,
            checks=tuple(DoctorCheck(f.check, f.ok, f.detail) for f in report.findings),
            repaired=report.repaired,
            advice=tuple(report.advice),
            host=_frozen(report.host),
            job_id=job_id,
        )

    def _report(self) -> DoctorReport:
        from llama_runtime.updater.api.doctor import DoctorReport, Finding

        return DoctorReport(
            findings=[Finding(c.check, c.ok, c.detail) for c in self.checks],
            active=self.active,
            repaired=self.repaired,
            advice=list(self.advice),
            host=dict(self.host) if self.host is not None else None,
        )

    @property
    def error_message(self) -> str | None:
        """The one sentence a person reads when the result is unhealthy; ``None`` when healthy."""
        return self._report().error_message()

    def to_json(self) -> dict[str, object]:
        """The ``doctor`` object of the CLI contract (with ``error`` when unhealthy)."""
        return self._report().to_json()

    def lines(self, *, quiet: bool = False) -> list[str]:
        """The report for people, one check a line (``quiet``: without the passed checks and the host)."""
        return self._report().lines(quiet=quiet)


@dataclass(frozen=True)
class PlanCandidate:
    """One asset the decision weighed (``plan --explain``)."""

    asset: str
    backend: str
    taken: bool
    why: str


@dataclass(frozen=True)
class PlanResult:
    """What ``update`` would install and why; nothing was downloaded (:meth:`RuntimeUpdater.plan`).

    Attributes:
        repo: Where the release comes from.
        tag: The release's build tag.
        version: Its semver release name, when it has one.
        channel: ``stable`` or ``nightly``: what "newest" meant.
        backend: The concrete backend of the chosen asset.
        backend_request: What was asked for (``auto`` or a backend).
        asset: The runtime archive's file name.
        extra_assets: Further assets it needs (e.g. CUDA runtime libraries).
        size: Bytes all of them take to download.
        reason: Why this asset, for people.
        host: The machine planned for (this one, ``platform`` or ``host_file``'s).
        action: What ``update`` would do (the decision's action, e.g. ``install``).
        warnings: Sentences for people about the plan.
        resolution: How the release was found (the channel's notes, the build metadata's).
        candidates: Every asset weighed, the chosen one ``taken``.
        host_sources: Host fact -> where it was read from.
    """

    repo: str
    tag: str
    version: str | None
    channel: str
    backend: str
    backend_request: str
    asset: str
    extra_assets: tuple[str, ...]
    size: int
    reason: str
    host: Mapping[str, Any]
    action: str
    warnings: tuple[str, ...] = ()
    resolution: tuple[str, ...] = ()
    candidates: tuple[PlanCandidate, ...] = ()
    host_sources: tuple[tuple[str, str], ...] = ()

    def to_json(self, *, explain: bool = False) -> dict[str, Any]:
        """The ``plan`` object of the CLI contract; ``explain`` adds ``resolution`` and ``candidates``."""
        payload: dict[str, Any] = {
            "repo": self.repo,
            "tag": self.tag,
            "version": self.version,
            "channel": self.channel,
            "backend": self.backend,
            "backend_request": self.backend_request,
            "asset": self.asset,
            "extra_assets": list(self.extra_assets),
            "size": self.size,
            "reason": self.reason,
            "host": dict(self.host),
            "action": self.action,
            "warnings": list(self.warnings),
        }
        if explain:
            payload["resolution"] = [f"channel {self.channel}", *self.resolution]
            payload["candidates"] = [
                {"asset": c.asset, "backend": c.backend, "taken": c.taken, "why": c.why} for c in self.candidates
            ]
        return payload


class JobRecords(Protocol):
    """The home's job records, read-only: what :attr:`RuntimeUpdater.jobs` offers an app."""

    def current(self) -> JobState | None:
        """The newest job's state (running or finished), if any job ever ran."""

    def get(self, job_id: str) -> JobState | None:
        """One job's state; ``None`` when it has no (readable) record."""


# -- manage ------------------------------------------------------------------------------------------------------


#: A semver release tag missing parts or written ``V…``: upstream's make-release-desc.sh takes
#: "plain semver tags (v<maj>.<min>.<pat>)" only (PR #27485), so these name no release.
_DIGEST_PIN: Final = re.compile(r"sha256:[0-9a-f]{64}")
_PARTIAL_SEMVER: Final = re.compile(r"^(?:[vV][0-9]+(?:\.[0-9]+)?|V[0-9]+\.[0-9]+\.[0-9]+)$")


def user_tag(tag: str) -> str:
    """A tag as a person typed it, checked; a bare build number is refused with the tag it means.

    Raises:
        UserInputError: Malformed, or a bare number such as ``7000`` (did you mean ``b7000``?).
    """
    from llama_runtime.updater.release.tags import validate_tag

    tag, at, pin = tag.partition("@")  # TAG@sha256:<hex>: a manifest digest pin (registry sources)
    if at and not _DIGEST_PIN.fullmatch(pin):
        raise UserInputError(
            f"'{pin[:80]}' is not a manifest digest; pin a build as TAG@sha256:<64 lowercase hex digits>."
        )
    cleaned = validate_tag(tag)
    if cleaned.isdigit() or (cleaned[:1] == "B" and cleaned[1:].isdigit()):  # 7000, B7000
        meant = f"b{cleaned.lstrip('B')}"
        raise UserInputError(
            f"'{cleaned}' is not a release tag; did you mean {meant}?",
            hint="llama.cpp builds are tagged bNNNN (e.g. b7000).",
        )
    if _PARTIAL_SEMVER.match(cleaned):  # v1, v0.2, V1.2.3: never a tag upstream publishes
        raise UserInputError(
            f"'{cleaned}' is not a release tag: releases are tagged vMAJOR.MINOR.PATCH, all three parts and "
            "a lower-case v (e.g. v0.3.0); builds are tagged bNNNN (e.g. b7000).",
            hint="`llama-runtime list --available` shows the published builds and their releases.",
        )
    return f"{cleaned}@{pin}" if at else cleaned


def select(ctx: UseCaseContext, tag: str, repo: str | None) -> InstalledRuntime:
    """The installed runtime ``tag`` (or a runtime name) means, narrowed by ``repo`` and the updater's backend."""
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.verify.installed import select_installed

    return select_installed(
        ctx.home.installed(),
        user_tag(tag),
        repo=validate_repo(repo) if repo is not None else None,
        backend=ctx.explicit_backend,
    )


def use(ctx: UseCaseContext, tag: str, repo: str | None, progress: ProgressCallback | None) -> UpdateOutcome:
    """Activate the installed ``tag`` through the same verification and server switch as an update.

    The tag is looked up before the lock (a bad or unknown tag is refused at once) and again under
    it: ``gc`` or ``remove`` may have deleted the runtime while this waited.
    """
    select(ctx, tag, repo)

    def again_under_the_lock() -> str:
        try:
            return select(ctx, tag, repo).name
        except UserInputError as exc:
            raise UserInputError(
                f"{tag} is no longer installed: it was removed (by `gc` or `remove`) while `use` waited; "
                f"the active runtime is unchanged. {exc.message}",
                hint=f"`llama-runtime list` shows what is installed; `update --tag {tag}` installs it again.",
            ) from None

    return ctx.engine.installer().use(again_under_the_lock, progress=progress)


def rollback(ctx: UseCaseContext) -> RollbackResult:
    """The previous runtime becomes active again, through the same checks as an update."""
    active, previous, server = ctx.engine.installer().rollback()
    return RollbackResult(active, previous, server)


def pin(ctx: UseCaseContext, tag: str | None, *, force: bool = False) -> PinResult:
    """Pin ``tag`` (the active build when ``None``), under the update lock so no update is halfway.

    A tag not installed here is resolved first, as ``plan --tag`` resolves it (the release, and an
    asset that fits this machine), outside the lock: a typo never freezes a home.

    Raises:
        UserInputError: ``tag`` is malformed, or none was given and nothing is active.
        ReleaseNotFoundError: The source does not list ``tag`` (unless ``force``).
        BackendUnavailableError: No asset of it fits this machine and backend (unless ``force``).
        RemoteError: The source cannot be asked right now (unless ``force``).
        BusyError: An update holds the lock.
    """
    from llama_runtime.runtime.lock import NO_WAIT
    from llama_runtime.runtime.pin import Pin, load_pin, save_pin
    from llama_runtime.updater.api.ready import active_marker

    ctx.home.ensure()
    chosen = user_tag(tag) if tag is not None else None
    checked = _pin_checked(ctx, chosen, force=force) if chosen is not None else "installed"
    with ctx.engine.installer().lock.hold("pin", timeout=NO_WAIT):
        marker, _problem = active_marker(ctx.home)
        chosen = chosen if chosen is not None else (marker.tag if marker is not None else None)
        if chosen is None:
            raise UserInputError(
                "Nothing is active to pin; name the build to pin.", hint="e.g. `llama-runtime pin b7000`."
            )
        repo = marker.repo if tag is None and marker is not None else ctx.repo
        before = _pin_or_none(ctx.home.root)
        save_pin(ctx.home.root, Pin(repo, chosen))
        return PinResult(load_pin(ctx.home.root), before, _active_runtime(ctx.home), checked)


def _pin_checked(ctx: UseCaseContext, tag: str, *, force: bool) -> str:
    """How ``tag`` was found to exist: installed here, or resolved through the release source.

    Raises:
        RemoteError, BackendUnavailableError: It could not be resolved, and not ``force``.
    """
    from llama_runtime.runtime.errors import BackendUnavailableError, ReleaseNotFoundError, RemoteError

    if any(r.marker.tag == tag and r.marker.repo == ctx.repo for r in ctx.home.installed()):
        return "installed"
    try:
        found = plan(ctx, tag, platform=None, cuda_version=None, host_file=None)
    except (RemoteError, BackendUnavailableError) as exc:
        if not force:
            if isinstance(exc, ReleaseNotFoundError):
                exc.hint = f"Nothing was pinned. Check the tag (`llama-runtime list --available`); {_FORCE_HINT}"
            elif exc.hint is None:
                exc.hint = f"Nothing was pinned. {_FORCE_HINT}"
            raise
        return f"not checked: {exc.message}"
    return f"resolved: {found.asset}"


#: What pins a tag the release source cannot confirm right now (offline, a mirror not synced yet).
_FORCE_HINT = "`llama-runtime pin --force TAG` pins it unchecked (e.g. offline, or a mirror not synced yet)."


def _active_runtime(home: Home) -> InstalledRuntime | None:
    """The runtime the pointer names, or ``None`` (nothing, or damaged: a pin need not be active)."""
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        pointer = home.read_pointer()
        return home.load(pointer.active) if pointer.active else None
    except CorruptStateError:
        return None


def unpin(ctx: UseCaseContext) -> PinResult:
    """Remove the home's pin (a damaged pin file too), under the update lock.

    Raises:
        BusyError: An update holds the lock.
    """
    from llama_runtime.runtime.lock import NO_WAIT
    from llama_runtime.runtime.pin import clear_pin

    ctx.home.ensure()
    with ctx.engine.installer().lock.hold("unpin", timeout=NO_WAIT):
        before = _pin_or_none(ctx.home.root)
        clear_pin(ctx.home.root)
        return PinResult(None, before, _active_runtime(ctx.home))


def _pin_or_none(home_root: Path) -> str | None:
    """The pinned tag, or ``None`` when there is none or the pin file is damaged (about to be replaced)."""
    from llama_runtime.runtime.errors import CorruptStateError
    from llama_runtime.runtime.pin import load_pin

    try:
        found = load_pin(home_root)
    except CorruptStateError:
        return None
    return found.tag if found is not None else None


def remove(ctx: UseCaseContext, tag: str, repo: str | None) -> RemoveResult:
    """Delete the installed ``tag``; the active and the previous runtime are refused."""
    from llama_runtime.updater.activate.gc import remove_runtime

    ctx.home.check_safe()  # nothing is deleted, nor even looked up, through a link the tool did not make
    target = select(ctx, tag, repo)
    item = remove_runtime(ctx.home, target.name)
    return RemoveResult(target, item.size_bytes)


def install_file(
    ctx: UseCaseContext,
    archive: Path,
    *,
    tag: str | None,
    repo: str | None,
    sha256: str | None,
    attestation: Path | None,
    allow_no_device: bool = False,
) -> UpdateOutcome:
    """Install a release archive or an exported bundle from disk, as a download would be installed."""
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.offline.offline import InstallFileRequest
    from llama_runtime.updater.offline.offline import install_file as install
    from llama_runtime.updater.release.tags import validate_tag

    request = InstallFileRequest(
        archive=archive.expanduser(),
        default_repo=validate_repo(repo) if repo is not None else ctx.file_repo(),
        tag=validate_tag(tag) if tag is not None else None,
        repo=validate_repo(repo) if repo is not None else None,
        backend=ctx.explicit_backend,
        sha256=sha256,
        attestation=attestation.expanduser() if attestation is not None else None,
        allow_no_device=allow_no_device,
    )
    return install(ctx.engine.installer(), request)


def gc(ctx: UseCaseContext, *, keep: int | None, dry_run: bool, cache_only: bool) -> GcResult:
    """Remove old runtimes, downloads and leftovers (or, ``dry_run``, say what would go)."""
    from llama_runtime.updater.activate.gc import collect_garbage

    # One meaning of N for gc and update: runtimes kept in all (activate.gc.others_to_keep).
    count = ctx.engine.settings.keep if keep is None else keep
    report = collect_garbage(ctx.home, keep=count, dry_run=dry_run, cache_only=cache_only)
    return GcResult.from_report(report)


def doctor(ctx: UseCaseContext, *, repair: bool, listener: JobListener | None) -> DoctorResult:
    """Re-verify the home and the active runtime; ``repair`` runs as the home's job.

    Raises:
        BusyError: ``repair`` while another job or update runs (``job status`` shows it).
    """
    from llama_runtime.updater.api.doctor import run_doctor

    host = ctx.engine.host().to_json()
    require = ctx.engine.settings.require_provenance
    if not repair:
        return DoctorResult.from_report(run_doctor(ctx.home, host=host))
    reports: list[DoctorReport] = []

    def work(progress: ProgressCallback, cancel: CancelCheck) -> tuple[dict[str, object], UpdateOutcome | None]:
        report = run_doctor(
            ctx.home,
            repair=True,
            host=host,
            reinstall=_reinstaller(ctx, progress, cancel),
            require_provenance=require,
        )
        reports.append(report)
        return report.to_json(), None

    try:
        job = ctx.runner().start_work(
            work,
            tag=None,
            join=False,
            refuse_locked=True,
            operation="doctor",
            background=False,
            listener=listener,
            phase="verify",
        )
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        # No room for the job record: the repair runs without one (the update lock still keeps it
        # alone), since freeing a full disk is what a repair may be needed for.
        from llama_runtime.updater.progress import silent

        work(silent, lambda: False)
        return DoctorResult.from_report(reports[-1])
    if job.exception is not None:
        raise job.exception
    return DoctorResult.from_report(reports[-1], job_id=job.id)


def _reinstaller(
    ctx: UseCaseContext, progress: ProgressCallback, cancel: CancelCheck
) -> Callable[[InstalledRuntime], InstalledRuntime]:
    """``doctor --repair``'s in-place repair: the damaged build again, by ``update``'s own path."""

    def reinstall(damaged: InstalledRuntime) -> InstalledRuntime:
        from llama_runtime.updater.choice.decide import UpdateRequest
        from llama_runtime.updater.engine import Engine
        from llama_runtime.updater.offline.offline import reinstall_from_cache

        m = damaged.marker
        core = ctx.engine
        engine = Engine(dataclasses.replace(core.settings, repo=m.repo), core.seams)
        # The archives the cache still holds first: a repair needs no network when its bytes are at hand.
        offline = reinstall_from_cache(engine.installer(None), damaged)
        if offline is not None:
            return offline.active
        with engine.open_source() as source:
            # backend None: the installer keeps the damaged runtime's stored request.
            request = UpdateRequest(repo=m.repo, tag=m.tag)
            return engine.installer(source).update(request, progress=progress, cancel=cancel).active

    return reinstall


def plan(
    ctx: UseCaseContext,
    tag: str | None,
    *,
    platform: str | None,
    cuda_version: str | None,
    host_file: Path | None,
) -> PlanResult:
    """The release, asset and action ``update`` would take, and why; downloads nothing."""
    from llama_runtime.runtime.pin import pinned_tag
    from llama_runtime.updater.choice.decide import UpdateRequest, channel_request, decide, held_request
    from llama_runtime.updater.verify.installed import active_state

    host, cuda_line = _plan_host(platform, cuda_version, host_file, ctx.engine.host)
    # What update would do on this machine compares with the active runtime;
    # a plan for another machine (platform, host_file) has none.
    active = None if platform or host_file else _active_or_none(ctx.home, active_state)
    # Like update: without a backend the active runtime's stored request decides (auto when none).
    request = UpdateRequest(
        repo=ctx.repo,
        tag=tag,
        backend=ctx.backend_request,
        cuda_version=cuda_line,
        channel=ctx.channel,
        # Like update: a plain request on this machine stays on the home's pin.
        pinned=None if platform or host_file else pinned_tag(ctx.home.root, ctx.repo),
    )
    request, held = held_request(request)
    channel = channel_request(request, active.marker if active else None)
    with ctx.engine.open_source(etag_cache=False) as client:
        resolved = client.resolve(channel, tag=request.tag or None)
    decision = decide(request, active, resolved.release, host)
    decision.raise_if_refused()
    if held is not None:
        decision = dataclasses.replace(decision, warnings=(*decision.warnings, held))
    return _plan_result(resolved, decision, channel, host)


def _active_or_none(home: Home, state_of: Callable[[InstalledRuntime], ActiveState]) -> ActiveState | None:
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        pointer = home.read_pointer()
        active = home.load(pointer.active) if pointer.active else None
    except CorruptStateError:
        return None
    return state_of(active) if active else None


def _plan_result(resolved: ResolvedRelease, decision: Plan, channel: str, host: HostFacts) -> PlanResult:
    release, choice = resolved.release, decision.choice
    if choice is None:
        raise AssertionError("unreachable: a plan with a release names its asset")
    return PlanResult(
        repo=release.repo,
        tag=release.tag,
        version=resolved.version,
        channel=channel,
        backend=choice.backend,
        backend_request=decision.backend_request,
        asset=choice.asset.name,
        extra_assets=tuple(a.name for a in choice.extra_assets),
        size=choice.asset.size + sum(a.size for a in choice.extra_assets),
        reason=choice.reason,
        host=host.to_json(),
        action=decision.action,
        warnings=tuple(decision.warnings),
        resolution=(*resolved.notes, *_metadata_notes(release)),
        candidates=tuple(PlanCandidate(c.asset_name, c.backend, c.taken, c.why) for c in choice.candidates),
        host_sources=tuple(host.sources),
    )


def _plan_host(
    platform: str | None, cuda_version: str | None, host_file: Path | None, this_host: Callable[[], HostFacts]
) -> tuple[HostFacts, str | None]:
    """The machine to plan for (``this_host`` unless another is named), and the CUDA line to pin.

    The CUDA line is pinned only with ``host_file``.

    ``platform`` and ``cuda_version`` describe the machine (its driver's CUDA
    version); they do not pin a CUDA line. With ``host_file`` the file has the
    driver, so ``cuda_version`` pins the line.

    Raises:
        UserInputError: Both ``host_file`` and ``platform``, or either one malformed.
    """
    from llama_runtime.updater.choice.host import host_for_platform, parse_cuda_version

    cuda = parse_cuda_version(cuda_version) if cuda_version is not None else None
    if host_file is not None:
        from llama_runtime.updater.choice.host import load_host_file

        if platform:
            raise UserInputError("Give --host FILE or --platform, not both: the file already names the platform.")
        return load_host_file(host_file), cuda
    if platform:
        return host_for_platform(platform, cuda), None
    if cuda is not None:
        return dataclasses.replace(this_host(), cuda_driver_version=cuda), None
    return this_host(), None


def _metadata_notes(release: Release) -> list[str]:
    """What the release's own build metadata contributed, or why it did not."""
    from llama_runtime.updater.release.manifest import MANIFEST_ASSET

    if release.manifest is not None:
        return [f"GPU coverage of its bundles from its {MANIFEST_ASSET}"]
    if release.asset(MANIFEST_ASSET) is not None:
        return [f"its {MANIFEST_ASSET} was not read (another schema, or still uploading): bundles chosen by name"]
    return []
