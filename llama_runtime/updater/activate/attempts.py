"""What ``auto`` tried in one update: each candidate's outcome, and which candidate comes next.

When the backend request is ``auto`` and the chosen build fails after it was
installed into staging — its ``--version``/``--list-devices`` run (the device
check), the build number it reports, the completion check (the smoke model, or
the inference gate of a running server) — the update tries the build the
chooser ranks next, in the same update and under the same lock
(:meth:`~updater.activate.installer.Installer.update`). Every try is an
:class:`Attempt`: in the update's result (``attempts``), in the marker of the
runtime that won, and in the error that ends the update when none did.

"Next" is what the decision core would choose if the builds already tried were
not in the release (:func:`next_plan`): the same ranking, the same rule that a
stored request never trades a GPU runtime for CPU, the same switch to a copy
that is installed already. A build that failed here in an earlier update
(``runtime.failed_builds``) is skipped without a download.

Invariants:
    * A failed try leaves nothing active and nothing cached from it: the
      pipeline removes what it staged and deletes its bytes before the next try.
    * An explicit backend request never tries another build.
    * At most :data:`MAX_CANDIDATE_TRIES` builds are tried in one update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Literal

from llama_runtime.runtime.errors import LlamaRuntimeError, MacOSTooOldError, ReleaseIncompleteError, VerificationError
from llama_runtime.runtime.failed_builds import SkippedBuild
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.updater.activate.swap import SwitchReport
from llama_runtime.updater.choice.decide import ActiveState, Plan, UpdateRequest, decide

if TYPE_CHECKING:
    from llama_runtime.updater.choice.choose import Choice
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.release.release import Release
    from llama_runtime.updater.verify.smoke import SmokeReport

__all__ = [
    "CANDIDATE_FAILURES",
    "MAX_CANDIDATE_TRIES",
    "Attempt",
    "AttemptOutcome",
    "CandidatesFailedError",
    "UpdateOutcome",
    "next_plan",
    "stage_of",
]


# -- attempts ----------------------------------------------------------------------------------------------------

#: ``installed``/``switched``/``up_to_date``: the try that ended the update (as its ``result``);
#: ``failed``: rejected after install, nothing kept; ``skipped``: failed here before, not downloaded.
AttemptOutcome = Literal["installed", "switched", "up_to_date", "failed", "skipped"]

#: What makes a candidate give way to the next one: the build itself was rejected on this
#: machine. Anything else (a digest mismatch, the network, a full disk, a cancel) ends the update.
CANDIDATE_FAILURES: Final[tuple[type[LlamaRuntimeError], ...]] = (VerificationError, MacOSTooOldError)

#: Each try downloads a whole build. Upstream's richest host (Linux x64 with an NVIDIA GPU and a
#: Level Zero GPU) ranks six: CUDA 13.4, CUDA 12.8, SYCL fp16, SYCL fp32, Vulkan, CPU
#: (../shared/reference/upstream-2026-10.md, from release.yml's asset names). More is a fork's
#: release with many variants: the update stops there rather than fetch every one.
MAX_CANDIDATE_TRIES: Final = 6


@dataclass(frozen=True)
class Attempt:
    """One candidate build an update tried (or skipped) and how that ended.

    Attributes:
        asset: The runtime archive's file name.
        backend: Its concrete backend.
        outcome: See :data:`AttemptOutcome`.
        stage: The check that rejected it (``device check``, ``completion check`` …);
            ``None`` unless ``failed`` or ``skipped``.
        reason: Why, for people (the check's own sentence; the chooser's for a winner).
    """

    asset: str
    backend: str
    outcome: AttemptOutcome
    stage: str | None = None
    reason: str = ""

    @classmethod
    def failed(cls, choice: Choice, exc: LlamaRuntimeError) -> Attempt:
        """The try of ``choice`` that ``exc`` rejected."""
        return cls(choice.asset.name, choice.backend, "failed", stage_of(exc), exc.message)

    @classmethod
    def ended(cls, choice: Choice, outcome: AttemptOutcome) -> Attempt:
        """The try of ``choice`` that ended the update with ``outcome``."""
        return cls(choice.asset.name, choice.backend, outcome, None, choice.reason)

    def to_json(self) -> dict[str, object]:
        """One item of the ``attempts`` list (the update result, the marker, the error)."""
        return {
            "asset": self.asset,
            "backend": self.backend,
            "outcome": self.outcome,
            "stage": self.stage,
            "reason": self.reason,
        }

    def describe(self) -> str:
        """One clause for people: ``llama-…-cuda-12.4-x64.tar.gz (cuda) failed its device check (…)``."""
        what = f"{self.asset} ({self.backend})"
        if self.outcome == "failed":
            return f"{what} failed its {self.stage} ({self.reason.rstrip('.')})"
        if self.outcome == "skipped":
            return f"{what} was skipped ({self.reason.rstrip('.')})"
        return {
            "installed": f"{what} was installed",
            "switched": f"{what} was switched to (already installed)",
            "up_to_date": f"{what} is already active",
        }[self.outcome]


class CandidatesFailedError(VerificationError):
    """Every build ``auto`` tried was rejected; nothing was activated (exit 6).

    Args:
        tag: The release's tag.
        attempts: Every try, in order.
        why_no_more: Why no further candidate was tried.
    """

    def __init__(self, tag: str, attempts: Sequence[Attempt], why_no_more: str) -> None:
        tries = [a for a in attempts if a.outcome == "failed"]
        listed = "; ".join(f"{n}) {a.describe()}" for n, a in enumerate(attempts, 1))
        super().__init__(
            f"auto tried {len(tries)} builds of {tag} and none passed its checks on this machine: {listed}. "
            f"No other candidate: {why_no_more.rstrip('.')}. Nothing was activated."
        )
        self.attempts = tuple(attempts)
        self.stage = (tries[-1].stage or "") if tries else ""

    def to_json(self) -> dict[str, object]:
        """The ``error`` object, with the ``attempts`` that were made."""
        return {**super().to_json(), "attempts": [a.to_json() for a in self.attempts]}


def stage_of(exc: LlamaRuntimeError) -> str:
    """The check that rejected a candidate, in words (``verification`` where nothing says which)."""
    if isinstance(exc, MacOSTooOldError):
        return "macOS check"
    return (exc.stage if isinstance(exc, VerificationError) else "") or "verification"


def next_plan(
    request: UpdateRequest,
    active: ActiveState | None,
    release: Release,
    host: HostFacts,
    *,
    tried: Sequence[Attempt],
    installed: Sequence[ActiveState],
    failed: Mapping[tuple[str, str, str], str],
) -> tuple[Plan | None, list[Attempt], str]:
    """What ``auto`` does after the builds ``tried`` of ``release`` were rejected (pure, no IO).

    Returns:
        The plan for the best build not tried yet (``None`` when there is none), the
        builds skipped on the way because they failed here before (never with a pinned
        tag: asking by tag tries again), and, with no plan, why not.
    """
    if sum(a.outcome == "failed" for a in tried) >= MAX_CANDIDATE_TRIES:
        return None, [], f"{MAX_CANDIDATE_TRIES} builds were tried, the most one update tries"
    gone = {a.asset for a in tried}
    skipped: list[Attempt] = []
    while True:
        remaining = replace(release, assets=tuple(a for a in release.assets if a.name not in gone))
        try:
            plan = decide(request, active, remaining, host, installed=installed, failed=failed)
        except ReleaseIncompleteError as exc:  # never settle for a lower backend while a better one uploads
            return None, skipped, exc.message
        choice = plan.choice
        # The decision core turns a build that failed here before into "up to date" or a
        # refusal; on the way down it is one more build not to fetch again.
        reason = _failed_before(request, active, release, choice, failed)
        if choice is not None and reason is not None:
            skipped.append(Attempt(choice.asset.name, choice.backend, "skipped", "earlier update", reason))
            gone.add(choice.asset.name)
            continue
        if choice is None:  # the chooser found nothing left: every build that can run here was tried
            return None, skipped, f"{release.tag} has no other build that can run on this machine"
        if plan.action == "refuse":  # a stored request never trades a working GPU runtime for CPU
            return None, skipped, plan.reason
        return plan, skipped, ""


def _failed_before(
    request: UpdateRequest,
    active: ActiveState | None,
    release: Release,
    choice: Choice | None,
    failed: Mapping[tuple[str, str, str], str],
) -> str | None:
    """Why ``choice`` is skipped: it failed here before, is not asked for by tag, and is not what runs now."""
    if choice is None or request.tag is not None:
        return None
    key = (release.repo, release.tag, choice.asset.name)
    if active is not None and active.intact and (active.marker.repo, active.marker.tag, active.marker.asset) == key:
        return None
    return failed.get(key)


# -- outcome: What an update reports when it ends. ---------------------------------------------------------------


@dataclass(frozen=True)
class UpdateOutcome:
    """The result of :meth:`~llama_runtime.updater.activate.installer.Installer.update`.

    ``attempts`` are the candidate builds the update tried, in order, the last one
    the build that ended it (see :mod:`.attempts`); empty when nothing was tried.
    """

    result: Literal["installed", "switched", "up_to_date"]
    active: InstalledRuntime
    previous: InstalledRuntime | None
    warnings: tuple[str, ...] = ()
    server: SwitchReport | None = None
    attempts: tuple[Attempt, ...] = ()
    #: What the smoke model showed before activation (None when none is configured).
    smoke: SmokeReport | None = None
    #: The tag this update pinned the home to (``update --tag``), or None.
    pinned: str | None = None
    #: Why the update chose what it did, in one sentence (the decision's reason; empty when it decided nothing).
    reason: str = ""
    #: The newest build, passed over because it failed verification here before (``update --retry-skipped``).
    skipped: SkippedBuild | None = None

    def to_json(self) -> dict[str, object]:
        """The ``update`` object of the CLI contract."""
        return {
            "result": self.result,
            "active": self.active.to_json(),
            "previous": self.previous.to_json() if self.previous else None,
            "warnings": list(self.warnings),
            "server_restarted": bool(self.server and self.server.restarted),
            "reload_required": bool(self.server and self.server.reload_required),
            "gate": self.server.gate_json() if self.server else None,
            "attempts": [a.to_json() for a in self.attempts],
            "smoke": self.smoke.to_json() if self.smoke else None,
            "pinned": self.pinned,
            "reason": self.reason,
            "skipped": self.skipped.to_json() if self.skipped else None,
        }
