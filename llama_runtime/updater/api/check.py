"""``check``: is a strictly newer build out for the active runtime? With ``apply``, install it.

The IO around the scheduled check's decision: read the active marker and the
stored rate-limit backoff, ask the release source (one conditional request
when nothing changed), store the next backoff, let the one update decision
(:func:`~updater.choice.decide.decide`, ``mode="upgrade_only"``) answer, and
run the update as a job others can follow. The back-off state lives in
:mod:`~updater.api.backoff`, shared with ``update``.

Invariants:
    * The active runtime's recorded tag is the baseline even when its binary
      is damaged (never a downgrade); the damage is reported in ``problem``.
    * The decision and ``apply`` use one backend request: the updater's
      explicit backend, else the active runtime's stored request.
    * A pin holds: a newer build is reported as ``held``, never applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.clock import when_text
from llama_runtime.runtime.errors import RateLimitError, RemoteError, UserInputError
from llama_runtime.runtime.failed_builds import SkippedBuild
from llama_runtime.runtime.pin import pinned_tag
from llama_runtime.updater.api.backoff import (
    DEFAULT_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    Backoff,
    clamp_not_before,
    not_before_after_error,
    not_before_after_success,
)
from llama_runtime.updater.api.jobs import refuse_if_locked, validate_seconds
from llama_runtime.updater.api.ready import active_marker
from llama_runtime.updater.choice.decide import (
    ActiveState,
    Plan,
    UpdateRequest,
    backend_request,
    channel_request,
    decide,
)

if TYPE_CHECKING:
    from llama_runtime.runtime.clock import Clock
    from llama_runtime.runtime.errors import RateLimitError
    from llama_runtime.runtime.marker import InstallMarker
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.api.context import UseCaseContext
    from llama_runtime.updater.api.job_store import JobListener
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.release.channel import Channel
    from llama_runtime.updater.release.release import Release
    from llama_runtime.updater.sources.source import BuildSource

__all__ = [
    "DEFAULT_BACKOFF_SECONDS",
    "MAX_BACKOFF_SECONDS",
    "Backoff",
    "clamp_not_before",
    "not_before_after_error",
    "not_before_after_success",
    "run_check",
]


# -- schedule: The scheduled check's pure decisions; its rate-limit back-off lives in api.backoff. ---------------

# A jitter beyond a day is a typo, not a fleet-spreading strategy.
MAX_JITTER_SECONDS: Final[float] = 24 * 3600.0
_DURATION: Final = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[smh]?)$")
_UNIT_SECONDS: Final[dict[str, float]] = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class CheckResult:
    """The answer of the scheduled check.

    Attributes:
        installed: Tag of the active runtime, or ``None`` when nothing is installed.
        latest: The build tag the channel calls latest, or ``None`` when the check was skipped.
        latest_version: The semver release (``v0.3.0``) that build was reached through, if any.
        update_available: A strictly newer build for the same repo and backend exists.
        applied: The update was installed by this check (``--apply``).
        skipped: ``"rate_limited"`` when a stored backoff says not to ask yet.
        not_before: Epoch seconds before which the next check will skip, if any.
        reason: Why ``update_available`` is what it is, for people.
        outcome: What the update installed when ``applied`` (its ``to_json()`` is the ``update`` object).
        problem: What is wrong with the active runtime (e.g. a damaged binary),
            or ``None``; the decision still compares against its recorded tag.
        warnings: Releases passed over to find ``latest``, and why (a stable
            release still being cut, a build still uploading), for people.
        pinned: The tag the home is pinned to (``llama-runtime pin``), or ``None``.
        held: The newer build the pin holds back (then ``update_available`` is false).
        skipped_build: The newest build, passed over because it failed verification here before
            (``update --retry-skipped`` tries it again); then ``update_available`` is false.
    """

    installed: str | None
    latest: str | None
    update_available: bool
    latest_version: str | None = None
    applied: bool = False
    skipped: str | None = None
    not_before: float | None = None
    reason: str = ""
    outcome: UpdateOutcome | None = None
    problem: str | None = None
    warnings: list[str] = field(default_factory=list)
    pinned: str | None = None
    held: str | None = None
    skipped_build: SkippedBuild | None = None

    @property
    def plain_update(self) -> str | None:
        """While pinned, what a plain ``update`` would do, in words (``None`` without a pin)."""
        if self.pinned is None:
            return None
        if self.installed == self.pinned:
            return f"a plain `update` stays on the pinned {self.pinned}; `llama-runtime unpin` lets it move again"
        was = f"from {self.installed} " if self.installed else ""
        return (
            f"a plain `update` moves {was}to the pinned {self.pinned}; `llama-runtime unpin` lets it follow the newest"
        )

    def to_json(self) -> dict[str, Any]:
        """The ``check`` object of the CLI contract."""
        payload = {f.name: getattr(self, f.name) for f in fields(self)}
        payload["outcome"] = self.outcome.to_json() if self.outcome is not None else None
        payload["warnings"] = list(self.warnings)
        payload["plain_update"] = self.plain_update
        payload["skipped_build"] = self.skipped_build.to_json() if self.skipped_build else None
        return payload


def parse_duration(text: str) -> float:
    """Seconds in ``"90"``, ``"30s"``, ``"10m"`` or ``"1.5h"``.

    Raises:
        UserInputError: Not a duration of at most 24 hours.
    """
    match = _DURATION.match(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise UserInputError(f"Malformed duration {text!r}; use a number with s, m or h, e.g. '10m'.")
    seconds = float(match["n"]) * _UNIT_SECONDS[match["unit"]]
    if seconds > MAX_JITTER_SECONDS:
        raise UserInputError(f"Duration {text!r} is longer than 24 hours; use at most '24h'.")
    return seconds


# -- check -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Latest:
    """What the release source answered: the channel's build and when to ask next."""

    tag: str
    version: str | None  # the semver release the build was reached through, if any
    release: Release | None  # None: the build is the one installed (nothing more to look up)
    not_before: float | None  # the backoff the answer's rate-limit headers ask for
    warnings: tuple[str, ...] = ()  # releases passed over on the way, and why


def run_check(ctx: UseCaseContext, *, apply: bool, wait: float, listener: JobListener | None) -> CheckResult:
    """The scheduled check of the context's home; see :meth:`~updater.api.service.RuntimeUpdater.check`.

    Raises:
        UserInputError: ``wait`` is negative or not finite.
        BusyError: ``apply`` and another update holds the lock (after ``wait``).
        RateLimitError: GitHub refused right now; the backoff is stored.
        RemoteError: Network or GitHub failures.
    """
    wait = validate_seconds(wait, "wait")
    home = ctx.home
    home.ensure()
    marker, problem = active_marker(home)
    installed = marker.tag if marker else None
    backoff = Backoff(home.cache_dir)
    clock = ctx.engine.seams.clock
    now = clock.time()
    not_before = backoff.not_before(now)
    if not_before is not None and now < not_before:
        return _skipped(installed, not_before, problem, now)
    if apply and not wait:
        refuse_if_locked(home, ctx.jobs)
    pinned = pinned_tag(home.root, ctx.repo)
    request = UpdateRequest(
        repo=ctx.repo,
        backend=ctx.explicit_backend,
        channel=ctx.channel,
        pinned=pinned,
        follow_exact=ctx.engine.settings.follow_exact,
    )
    channel = channel_request(request, marker)
    latest = _ask_latest(ctx.engine, backoff, channel, marker, clock)
    if pinned is not None and pinned == latest.version:  # a semver pin names this very build
        request = replace(request, pinned=latest.tag)
    plan = _decide(ctx, request, marker, latest)
    available = plan.action == "install"
    reason = _with_problem(plan.reason, problem, available, marker)
    if not (apply and available):
        return CheckResult(
            installed,
            latest.tag,
            available,
            latest_version=latest.version,
            not_before=latest.not_before,
            reason=reason,
            problem=problem,
            warnings=list(latest.warnings),
            pinned=pinned,
            held=plan.held,
            skipped_build=plan.skipped,
        )
    outcome = _apply(ctx, latest, plan.backend_request, channel, wait, listener)
    return CheckResult(
        installed,
        latest.tag,
        True,
        latest_version=latest.version,
        applied=True,
        not_before=latest.not_before,
        reason=reason,
        outcome=outcome,
        problem=problem,
        warnings=list(latest.warnings),
        pinned=pinned,
    )


def _skipped(installed: str | None, not_before: float, problem: str | None, now: float) -> CheckResult:
    """The answer while a stored rate-limit backoff runs: no request is made."""
    reason = f"The source's rate limit was reached; the check resumes after {when_text(not_before, now)}."
    return CheckResult(
        installed, None, False, skipped="rate_limited", not_before=not_before, reason=reason, problem=problem
    )


def _ask_latest(
    engine: Engine, backoff: Backoff, channel: Channel, marker: InstallMarker | None, clock: Clock
) -> _Latest:
    """Ask the source for the channel's build; store the backoff its answer (or refusal) asks for.

    Raises:
        RateLimitError: GitHub refused; the backoff it asks for is stored first.
    """
    with engine.open_source() as source:
        try:
            tag, version, release, warnings = _latest_for_check(source, channel, marker)
        except RateLimitError as exc:
            refused_at = clock.time()
            backoff.set(not_before_after_error(exc, refused_at), exc.message, now=refused_at)
            raise
        answered_at = clock.time()
        after = not_before_after_success(source.net.quota, answered_at)
    if after is not None:
        backoff.set(after, "the last request used GitHub's remaining quota", now=answered_at)
    else:
        backoff.clear()
    return _Latest(tag, version, release, after, warnings)


def _latest_for_check(
    source: BuildSource, channel: Channel, marker: InstallMarker | None
) -> tuple[str, str | None, Release | None, tuple[str, ...]]:
    """``(build tag, semver, build release, warnings)``; the release is ``None`` when the
    build is the one installed (nothing more to look up: one request for stable)."""
    installed = marker.tag if marker is not None and marker.repo == source.repo else None
    found = source.resolve(channel, installed=installed)
    release = None if installed == found.build_tag else found.release
    return found.build_tag, found.version, release, found.notes


def _decide(ctx: UseCaseContext, request: UpdateRequest, marker: InstallMarker | None, latest: _Latest) -> Plan:
    """The decision on the channel's build: ``install`` when it is newer here, with why and the backend request."""
    from llama_runtime.runtime.failed_builds import load_failed

    if latest.release is None:  # the channel's build is the active one: nothing newer to look up
        return Plan("up_to_date", backend_request(request, marker)[0], reason=f"{latest.tag} is the newest release.")
    active = ActiveState(marker) if marker is not None else None
    failed = {b.key: b.reason for b in load_failed(ctx.home.root)}
    return decide(request, active, latest.release, ctx.engine.host(), mode="upgrade_only", failed=failed)


def _with_problem(reason: str, problem: str | None, available: bool, marker: InstallMarker | None) -> str:
    """``reason``, plus what is wrong with the active runtime and, with nothing newer, how to reinstall it."""
    if problem is None:
        return reason
    reason = f"{reason} {problem}"
    if not available and marker is not None:
        reason += f" Reinstall it with `llama-runtime update --tag {marker.tag}`."
    return reason


def _apply(
    ctx: UseCaseContext,
    latest: _Latest,
    backend: str,
    channel: Channel,
    wait: float,
    listener: JobListener | None,
) -> UpdateOutcome:
    """Install the newer build as a job others can follow; what it installed.

    Raises:
        LlamaRuntimeError: The update failed (the error that ended the job).
    """
    from llama_runtime.runtime.marker import parse_backend

    # The semver release when there is one, so the runtime records both names.
    apply_request = UpdateRequest(
        repo=ctx.repo, tag=latest.version or latest.tag, backend=parse_backend(backend), channel=channel
    )
    job = ctx.runner().run_here(apply_request, wait=wait, operation="schedule", listener=listener)
    if job.outcome is None:
        raise RemoteError(f"The update to {latest.tag} ended without a result ({job.state().phase}).")
    return job.outcome
