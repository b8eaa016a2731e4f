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

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.activate.gc import GcItem, GcReport
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.api.doctor import DoctorReport
    from llama_runtime.updater.api.job_store import JobListener, JobState
    from llama_runtime.updater.api.service import RuntimeUpdater
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
    "PlanCandidate",
    "PlanResult",
    "RemoveResult",
    "RollbackResult",
    "doctor",
    "gc",
    "install_file",
    "plan",
    "remove",
    "rollback",
    "select",
    "use",
    "user_tag",
]


# -- results: What :class:`~updater.api.service.RuntimeUpdater`'s verbs return: small frozen, ty... --------------


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
_PARTIAL_SEMVER: Final = re.compile(r"^(?:[vV][0-9]+(?:\.[0-9]+)?|V[0-9]+\.[0-9]+\.[0-9]+)$")


def user_tag(tag: str) -> str:
    """A tag as a person typed it, checked; a bare build number is refused with the tag it means.

    Raises:
        UserInputError: Malformed, or a bare number such as ``7000`` (did you mean ``b7000``?).
    """
    from llama_runtime.updater.release.tags import validate_tag

    cleaned = validate_tag(tag)
    if cleaned.isdigit() or (cleaned[:1] == "B" and cleaned[1:].isdigit()):  # 7000, B7000
        meant = f"b{cleaned.lstrip('B')}"
        raise UserInputError(
            f"'{cleaned}' is not a release tag; did you mean {meant}?",
            hint="llama.cpp builds are tagged bNNNN (e.g. b7000).",
        )
    if _PARTIAL_SEMVER.match(cleaned):  # v1, v0.2, V1.2.3: never a tag upstream publishes (issue 29)
        raise UserInputError(
            f"'{cleaned}' is not a release tag: releases are tagged vMAJOR.MINOR.PATCH, all three parts and "
            "a lower-case v (e.g. v0.3.0); builds are tagged bNNNN (e.g. b7000).",
            hint="`llama-runtime list --available` shows the published builds and their releases.",
        )
    return cleaned


def select(updater: RuntimeUpdater, tag: str, repo: str | None) -> InstalledRuntime:
    """The installed runtime ``tag`` (or a runtime name) means, narrowed by ``repo`` and the updater's backend."""
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.verify.installed import select_installed

    return select_installed(
        updater.home.installed(),
        user_tag(tag),
        repo=validate_repo(repo) if repo is not None else None,
        backend=None if updater.backend == "auto" else updater.backend,
    )


def use(updater: RuntimeUpdater, tag: str, repo: str | None, progress: ProgressCallback | None) -> UpdateOutcome:
    """Activate the installed ``tag`` through the same verification and server switch as an update.

    The tag is looked up before the lock (a bad or unknown tag is refused at once) and again under
    it: ``gc`` or ``remove`` may have deleted the runtime while this waited.
    """
    select(updater, tag, repo)

    def again_under_the_lock() -> str:
        try:
            return select(updater, tag, repo).name
        except UserInputError as exc:
            raise UserInputError(
                f"{tag} is no longer installed: it was removed (by `gc` or `remove`) while `use` waited; "
                f"the active runtime is unchanged. {exc.message}",
                hint=f"`llama-runtime list` shows what is installed; `update --tag {tag}` installs it again.",
            ) from None

    return updater._core.installer().use(again_under_the_lock, progress=progress)


def rollback(updater: RuntimeUpdater) -> RollbackResult:
    """The previous runtime becomes active again, through the same checks as an update."""
    active, previous, server = updater._core.installer().rollback()
    return RollbackResult(active, previous, server)


def remove(updater: RuntimeUpdater, tag: str, repo: str | None) -> RemoveResult:
    """Delete the installed ``tag``; the active and the previous runtime are refused."""
    from llama_runtime.updater.activate.gc import remove_runtime

    updater.home.check_safe()  # nothing is deleted, nor even looked up, through a link the tool did not make
    target = select(updater, tag, repo)
    item = remove_runtime(updater.home, target.name)
    return RemoveResult(target, item.size_bytes)


def install_file(
    updater: RuntimeUpdater,
    archive: Path,
    *,
    tag: str | None,
    repo: str | None,
    sha256: str | None,
    attestation: Path | None,
) -> UpdateOutcome:
    """Install a release archive or an exported bundle from disk, as a download would be installed."""
    from llama_runtime.updater.config import validate_repo
    from llama_runtime.updater.offline.offline import InstallFileRequest
    from llama_runtime.updater.offline.offline import install_file as install
    from llama_runtime.updater.release.tags import validate_tag

    request = InstallFileRequest(
        archive=archive.expanduser(),
        default_repo=validate_repo(repo) if repo is not None else updater._file_repo(),
        tag=validate_tag(tag) if tag is not None else None,
        repo=validate_repo(repo) if repo is not None else None,
        backend=None if updater.backend == "auto" else updater.backend,
        sha256=sha256,
        attestation=attestation.expanduser() if attestation is not None else None,
    )
    return install(updater._core.installer(), request)


def gc(updater: RuntimeUpdater, *, keep: int | None, dry_run: bool, cache_only: bool) -> GcResult:
    """Remove old runtimes, downloads and leftovers (or, ``dry_run``, say what would go)."""
    from llama_runtime.updater.activate.gc import DEFAULT_KEEP, collect_garbage

    report = collect_garbage(
        updater.home, keep=DEFAULT_KEEP if keep is None else keep, dry_run=dry_run, cache_only=cache_only
    )
    return GcResult.from_report(report)


def doctor(updater: RuntimeUpdater, *, repair: bool, listener: JobListener | None) -> DoctorResult:
    """Re-verify the home and the active runtime; ``repair`` runs as the home's job.

    Raises:
        BusyError: ``repair`` while another job or update runs (``job status`` shows it).
    """
    from llama_runtime.updater.api.doctor import run_doctor

    host = updater._core.host().to_json()
    if not repair:
        return DoctorResult.from_report(run_doctor(updater.home, host=host))
    reports: list[DoctorReport] = []

    def work(progress: ProgressCallback, cancel: CancelCheck) -> tuple[dict[str, object], UpdateOutcome | None]:
        report = run_doctor(updater.home, repair=True, host=host, reinstall=_reinstaller(updater, progress, cancel))
        reports.append(report)
        return report.to_json(), None

    job = updater._runner().start_work(
        work,
        tag=None,
        join=False,
        refuse_locked=True,
        operation="doctor",
        background=False,
        listener=listener,
        phase="verify",
    )
    if job.exception is not None:
        raise job.exception
    return DoctorResult.from_report(reports[-1], job_id=job.id)


def _reinstaller(
    updater: RuntimeUpdater, progress: ProgressCallback, cancel: CancelCheck
) -> Callable[[InstalledRuntime], InstalledRuntime]:
    """``doctor --repair``'s in-place repair: the damaged build again, by ``update``'s own path."""

    def reinstall(damaged: InstalledRuntime) -> InstalledRuntime:
        from llama_runtime.updater.choice.decide import UpdateRequest
        from llama_runtime.updater.engine import Engine

        m = damaged.marker
        core = updater._core
        engine = Engine(dataclasses.replace(core.settings, repo=m.repo), core.seams)
        with engine.open_source() as source:
            # backend None: the installer keeps the damaged runtime's stored request.
            request = UpdateRequest(repo=m.repo, tag=m.tag)
            return engine.installer(source).update(request, progress=progress, cancel=cancel).active

    return reinstall


def plan(
    updater: RuntimeUpdater,
    tag: str | None,
    *,
    platform: str | None,
    cuda_version: str | None,
    host_file: Path | None,
) -> PlanResult:
    """The release, asset and action ``update`` would take, and why; downloads nothing."""
    from llama_runtime.updater.choice.decide import UpdateRequest, channel_request, decide
    from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote
    from llama_runtime.updater.verify.installed import active_state

    host, cuda_line = _plan_host(platform, cuda_version, host_file, updater._host)
    # What update would do on this machine compares with the active runtime;
    # a plan for another machine (platform, host_file) has none.
    active = None if platform or host_file else _active_or_none(updater, active_state)
    # Like update: without a backend the active runtime's stored request decides (auto when none).
    request = UpdateRequest(
        repo=updater.repo,
        tag=tag,
        backend=updater._backend_request,
        cuda_version=cuda_line,
        channel=updater.channel,
    )
    channel = channel_request(request, active.marker if active else None)
    with updater._core.open_source(etag_cache=False) as client:
        resolved = resolve_tag_remote(client, tag) if tag else resolve_latest_remote(client, channel)
    decision = decide(request, active, resolved.release, host)
    decision.raise_if_refused()
    return _plan_result(resolved, decision, channel, host)


def _active_or_none(updater: RuntimeUpdater, state_of: Callable[[InstalledRuntime], ActiveState]) -> ActiveState | None:
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        pointer = updater.home.read_pointer()
        active = updater.home.load(pointer.active) if pointer.active else None
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
    from llama_runtime.updater.sources.resolve import MANIFEST_ASSET

    if release.manifest is not None:
        return [f"GPU coverage of its bundles from its {MANIFEST_ASSET}"]
    if release.asset(MANIFEST_ASSET) is not None:
        return [f"its {MANIFEST_ASSET} was not read (another schema, or still uploading): bundles chosen by name"]
    return []
