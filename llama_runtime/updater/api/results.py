"""What :class:`~updater.api.service.RuntimeUpdater`'s verbs return: small frozen, typed results.

Each result holds what the CLI's ``--json`` object of the same verb shows, as
attributes; ``to_json()`` gives that object (the CLI prints exactly it). The
runtime objects inside are :class:`~runtime.layout.InstalledRuntime` values,
re-exported by :mod:`llama_runtime` like every type a public result holds.

``update``, ``use`` and ``install_file`` return
:class:`~updater.activate.outcome.UpdateOutcome` (the ``update`` object of the
CLI contract); the other verbs return the classes below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.activate.gc import GcItem, GcReport
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.api.doctor import DoctorReport
    from llama_runtime.updater.api.job_store import JobState

__all__ = [
    "DoctorCheck",
    "DoctorResult",
    "GcResult",
    "JobRecords",
    "PlanCandidate",
    "PlanResult",
    "RemoveResult",
    "RollbackResult",
]


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

    def lines(self) -> list[str]:
        """The report for people, one check a line."""
        return self._report().lines()


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
