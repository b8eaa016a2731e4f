"""The one update decision (pure, no IO): what to do about a request, given what is active.

Every caller asks here — ``update`` (the installer), ``check`` (the scheduled
job, apps), ``plan`` and the API's button — so "is there an update", "what
would be installed" and "install it" cannot drift apart. The IO layers only
gather the inputs (the active marker, the resolved release, host facts) and
carry out the :class:`Plan`.

The inputs::

    request  (repo, tag or latest, backend request or none, CUDA pin)
    active   (the active runtime's marker and whether its files are intact)
    release  (the release the request resolved to; see :func:`pick_latest`)
    host     (what this machine can run)

The rules, in order (``mode="update"``, what a person asked for):

0. A plain request (no tag) in a home pinned to a tag asks for that tag
   (:func:`held_request`): only ``unpin`` or an explicit ``--tag`` moves a pin.
1. The backend request is the request's own (explicit), else the active
   runtime's stored one, else ``auto`` (:func:`backend_request`); the channel
   the same way, else ``stable`` (:func:`channel_request`), before resolving.
2. A tag that the intact active runtime already is, for that backend
   request, is up to date — the installer asks :func:`settled` before any
   network; :func:`decide` gives the same answer with the asset attached.
   An explicit ``auto`` is never settled early: it detects afresh at any tag.
   An explicit backend settles when the active build is of that backend (the
   caller then records the request); another backend is installed.
3. The asset comes from :func:`~.choose.choose_asset`. A stored (not explicit)
   request that can no longer be served, or that detection is sure this host
   cannot serve (no ROCm GPU, no Vulkan loader), is re-detected as ``auto``
   with a note; an explicit or ``auto`` request that cannot be served is refused.
4. A stored request never trades a working GPU runtime for a CPU build (a
   runtime whose GPU detection is sure is absent is not a working one).
5. The same repo, tag, backend and asset as the intact active runtime is up
   to date; so is a "latest" that is older than the active build (a lagging
   mirror): never a downgrade unless the tag is pinned.
6. An intact installed runtime that is exactly the choice is switched to
   (only when the caller passes ``installed``); otherwise install.

``mode="upgrade_only"`` (the scheduled check) answers a narrower question:
is the release a strictly newer build of the active repository with a build
for the backend request? It never falls back, never installs across
repositories, never installs an unorderable tag and never leaves a pin (a
newer build is then reported as held).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from llama_runtime.runtime.errors import (
    BackendUnavailableError,
    LlamaRuntimeError,
    ReleaseIncompleteError,
    UserInputError,
    VerificationError,
)
from llama_runtime.runtime.failed_builds import SkippedBuild
from llama_runtime.runtime.marker import is_gpu_backend
from llama_runtime.updater.choice.choose import Choice, choose_asset
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.channel import DEFAULT_CHANNEL, Channel, ResolvedRelease, parse_channel
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.release.tags import TagVersion, compare_tags, is_upgrade, parse_tag

if TYPE_CHECKING:
    from llama_runtime.runtime.marker import InstallMarker
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.release.release import Release

__all__ = [
    "Action",
    "ActiveState",
    "Available",
    "LatestPicker",
    "Mode",
    "Plan",
    "UpdateRequest",
    "available_builds",
    "backend_request",
    "build_number",
    "channel_request",
    "decide",
    "held_request",
    "highest_build_tag",
    "newest_releases",
    "pick_latest",
    "settled",
    "upgrade_verdict",
]


# -- decide ------------------------------------------------------------------------------------------------------

#: ``install``: download and activate ``choice``; ``switch``: activate the
#: installed runtime ``switch_to``; ``up_to_date``: nothing to do; ``refuse``:
#: the request cannot be served here (``error`` says why).
Action = Literal["install", "switch", "up_to_date", "refuse"]
#: ``update``: what a person or app asked for; ``upgrade_only``: the scheduled check.
Mode = Literal["update", "upgrade_only"]


@dataclass(frozen=True)
class UpdateRequest:
    """What the caller asked for.

    ``backend`` is ``None`` when the caller gave none: then the active
    runtime's stored request is used, or ``auto``. ``channel`` likewise
    (:func:`channel_request`). ``tag`` is a build (``b7000``) or a semver
    release (``v0.3.0``, resolved to its build before :func:`decide`).
    ``pinned`` is the home's pinned tag for ``repo`` (read by the caller);
    ``pin``: a success pins ``tag`` (a person's ``update --tag``, never the
    scheduled job's); ``held``: ``tag`` is the pin's, not asked for (:func:`held_request`).
    ``allow_no_device``: an explicit GPU backend whose build lists no device of it is
    installed with a warning instead of refused. ``follow_exact``: the channel is followed
    wherever it goes, down too (a fleet rolled back by moving its channel tag); otherwise an
    older build than the active one is never installed without a tag.
    """

    repo: str
    tag: str | None = None
    backend: str | None = None
    cuda_version: str | None = None
    require_digest: bool = False
    channel: str | None = None
    pinned: str | None = None
    pin: bool = False
    allow_no_device: bool = False
    held: bool = False
    retry_skipped: bool = False
    follow_exact: bool = False


@dataclass(frozen=True)
class ActiveState:
    """What the decision needs to know about the active runtime.

    Attributes:
        marker: Its install marker.
        intact: Its files are all there as installed (a damaged runtime is never up to date).
        name: Its directory name under ``runtimes/`` (for ``switch``).
    """

    marker: InstallMarker
    intact: bool = True
    name: str = ""


@dataclass(frozen=True)
class Plan:
    """The decision: what to do, with what, and why.

    Attributes:
        action: See :data:`Action`.
        backend_request: The backend request to record with the runtime.
        release: The release decided on (``None`` when settled before resolving).
        choice: The asset to install (``install``/``switch``, and ``up_to_date`` after a choice).
        warnings: Sentences for people (a fallback, a kept newer build).
        reason: Why, in one sentence.
        error: For ``refuse``: the error to report (its exit code is the contract's).
        switch_to: For ``switch``: the installed runtime's name.
        held: For the scheduled check: the newer build a pin holds back.
        skipped: The newest build, passed over because it failed verification here before.
    """

    action: Action
    backend_request: str
    release: Release | None = None
    choice: Choice | None = None
    warnings: tuple[str, ...] = ()
    reason: str = ""
    error: LlamaRuntimeError | None = None
    switch_to: str | None = None
    held: str | None = None
    skipped: SkippedBuild | None = None

    @property
    def changes(self) -> bool:
        """Whether carrying out the plan changes the active runtime."""
        return self.action in ("install", "switch")

    def raise_if_refused(self) -> None:
        """Raise the refusal's error (``refuse`` only).

        Raises:
            LlamaRuntimeError: The plan refuses.
        """
        if self.action == "refuse" and self.error is not None:
            raise self.error


def backend_request(request: UpdateRequest, active: InstallMarker | None) -> tuple[str, bool]:
    """The backend request to serve and whether the caller gave it explicitly."""
    if request.backend is not None:
        return request.backend, True
    if active is not None:
        return active.backend_request, False
    return "auto", False


def channel_request(request: UpdateRequest, active: InstallMarker | None) -> Channel:
    """What "latest" means for ``request``: its own channel, else the active runtime's stored one, else stable.

    Raises:
        UserInputError: The request's (or the marker's) channel is not a channel.
    """
    # A registry channel tag passed the settings' check, or was stored by an install from a registry:
    # the source says whether it has such a tag (its BuildSource.resolve).
    if request.channel is not None:
        return parse_channel(request.channel, registry=True)
    if active is not None and active.channel:
        return parse_channel(active.channel, "the active runtime's marker", registry=True)
    return DEFAULT_CHANNEL


def held_request(request: UpdateRequest) -> tuple[UpdateRequest, str | None]:
    """A plain request in a pinned home asks for the pinned tag; the note says how to move.

    A request with a tag of its own (a person's ``--tag``) is not held: it moves the pin.
    """
    if request.tag is not None or request.pinned is None:
        return request, None
    pinned = request.pinned
    note = (
        f"{pinned} is pinned, so a plain update stays on it; "
        f"`llama-runtime unpin` releases it, `llama-runtime update --tag TAG` moves it to TAG."
    )
    return replace(request, tag=pinned, held=True), note


def settled(request: UpdateRequest, active: ActiveState | None, *, stored: str | None = None) -> Plan | None:
    """``up_to_date`` when a pinned tag is already the intact active runtime, else ``None``.

    Decided without the release, so the caller asks no network. ``stored`` is the backend
    request that stands when the request gives none (default: ``active``'s own).
    """
    if active is None or not active.intact or request.tag is None:
        return None
    marker = active.marker
    explicit = request.backend is not None
    wanted = request.backend if request.backend is not None else (stored or marker.backend_request)
    # A semver tag is settled by the release the active runtime was installed as.
    if marker.repo != request.repo or request.tag not in (marker.tag, marker.release_version):
        return None
    # An explicit auto detects afresh: the host may have gained (or lost) a GPU.
    stored_auto = not explicit and marker.backend_request == "auto"
    if (wanted == "auto" and stored_auto) or (wanted != "auto" and marker.backend == wanted):
        return Plan("up_to_date", wanted, reason=f"{marker.tag} ({marker.backend}) is already active.")
    return None


def decide(
    request: UpdateRequest,
    active: ActiveState | None,
    release: Release,
    host: HostFacts,
    *,
    mode: Mode = "update",
    installed: Sequence[ActiveState] = (),
    failed: Mapping[tuple[str, str, str], str] | None = None,
) -> Plan:
    """What to do about ``request`` now that it resolved to ``release`` (see the module's rules).

    Args:
        request: What was asked for.
        active: The active runtime, or ``None`` when nothing (usable) is active.
        release: The release the request resolved to.
        host: The machine to install on.
        mode: ``update`` (default) or ``upgrade_only`` (the scheduled check).
        installed: Other installed runtimes that ``update`` may switch to instead of downloading.
        failed: Builds that failed verification here, ``(repo, tag, asset) -> reason``: skipped
            unless asked for by tag (see ``runtime.failed_builds``).

    Raises:
        UserInputError: The request itself is malformed (an unknown backend).
    """
    if mode == "upgrade_only":
        return _upgrade_only(request, active, release, host, failed or {})
    early = settled(request, active)
    warnings: list[str] = []
    marker = active.marker if active is not None else None
    wanted, explicit = backend_request(request, marker)
    try:
        choice, wanted = _choose(release, host, wanted, explicit, request.cuda_version, warnings)
    except BackendUnavailableError as exc:
        if early is not None:
            return replace(early, release=release)
        return Plan("refuse", wanted, release, warnings=tuple(warnings), reason=exc.message, error=exc)
    if choice.backend == "cuda" and host.cuda_driver_version is None and host.nvidia_unsure is not None:
        warnings.append(
            f"Cannot tell whether an NVIDIA driver is usable here ({host.nvidia_unsure}); "
            "the CUDA build's device check after install decides."
        )
    if early is not None:
        return replace(early, release=release, choice=choice, warnings=tuple(warnings))
    refusal = _gpu_to_cpu_refusal(marker, release, choice, explicit, host)
    if refusal is not None:
        return Plan("refuse", wanted, release, choice, tuple(warnings), refusal.message, error=refusal)
    return _plan_for_choice(request, active, release, choice, wanted, warnings, installed, failed or {})


def _plan_for_choice(
    request: UpdateRequest,
    active: ActiveState | None,
    release: Release,
    choice: Choice,
    wanted: str,
    warnings: list[str],
    installed: Sequence[ActiveState],
    failed: Mapping[tuple[str, str, str], str],
) -> Plan:
    """Given a usable ``choice``: already active, kept newer, skipped as failed, switch, or install."""
    if active is not None and active.intact:
        if _same_build(active.marker, release, choice):
            return Plan("up_to_date", wanted, release, choice, tuple(warnings), f"{release.tag} is already active.")
        if request.tag is None and not request.follow_exact and _newer_than(active.marker, release, choice):
            kept = active.marker.tag
            warnings.append(
                f"The newest release {release.tag} is older than the active {kept}; "
                f"kept {kept}. Pin --tag {release.tag} to go back on purpose."
            )
            return Plan("up_to_date", wanted, release, choice, tuple(warnings), f"{kept} is newer than {release.tag}.")
    skip = _failed_before(request, release, choice, failed)
    if skip is not None:
        said = skip.sentence()
        if active is not None and active.intact:
            return Plan("up_to_date", wanted, release, choice, (*warnings, said), said, skipped=skip)
        return Plan("refuse", wanted, release, choice, tuple(warnings), said, error=VerificationError(said))
    for other in installed:
        if other.intact and other.name and _same_build(other.marker, release, choice):
            why = f"{release.tag} ({choice.backend}) is already installed as {other.name}."
            return Plan("switch", wanted, release, choice, tuple(warnings), why, switch_to=other.name)
    return Plan("install", wanted, release, choice, tuple(warnings), choice.reason)


def _choose(
    release: Release, host: HostFacts, wanted: str, explicit: bool, cuda_version: str | None, warnings: list[str]
) -> tuple[Choice, str]:
    """The asset for ``wanted``, falling back to ``auto`` for a stored request that cannot be served."""
    try:
        return choose_asset(release, host, wanted, cuda_version=cuda_version), wanted
    except BackendUnavailableError as exc:
        if explicit or wanted == "auto":
            raise
        warnings.append(
            f"The stored backend request '{wanted}' can no longer be served ({exc.message}); "
            "re-detected: falling back to auto."
        )
        return choose_asset(release, host, "auto", cuda_version=cuda_version), "auto"


def _gpu_to_cpu_refusal(
    active: InstallMarker | None, release: Release, choice: Choice, explicit: bool, host: HostFacts
) -> BackendUnavailableError | None:
    if explicit or active is None or not is_gpu_backend(active.backend) or is_gpu_backend(choice.backend):
        return None
    if host.sure_absent(active.backend) is not None:
        return None  # no driver or device at all: the GPU runtime is not a working one here
    return BackendUnavailableError(
        f"Refusing to replace the working {active.backend} runtime "
        f"({active.tag}) with a {choice.backend} build of {release.tag}: "
        f"no {active.backend} build fits this machine.",
        hint=f"Keep {active.tag}, or ask for it explicitly with --backend {choice.backend}.",
    )


def _same_build(marker: InstallMarker, release: Release, choice: Choice) -> bool:
    return (
        marker.repo == release.repo
        and marker.tag == release.tag
        and marker.backend == choice.backend
        and marker.asset == choice.asset.name
    )


def _newer_than(marker: InstallMarker, release: Release, choice: Choice) -> bool:
    """Whether the active build is newer than ``release`` (a lagging mirror, a pinned newer build)."""
    if marker.repo != release.repo or marker.backend != choice.backend:
        return False
    return compare_tags(parse_tag(marker.tag), parse_tag(release.tag)) == 1


def _failed_before(
    request: UpdateRequest, release: Release, choice: Choice, failed: Mapping[tuple[str, str, str], str]
) -> SkippedBuild | None:
    """The skipped build when ``choice`` failed verification here and was not asked for again."""
    reason = failed.get((release.repo, release.tag, choice.asset.name))
    # Asked for by tag (not only held there by a pin), or with --retry-skipped, it is tried again.
    asked = (request.tag is not None and not request.held) or request.retry_skipped
    if reason is None or asked or request.allow_no_device:
        return None
    until = f"a newer build appears, or `update --retry-skipped` (or `update --tag {release.tag}`) asks for it"
    return SkippedBuild(release.tag, choice.backend, reason, until)


def _upgrade_only(
    request: UpdateRequest,
    active: ActiveState | None,
    release: Release,
    host: HostFacts,
    failed: Mapping[tuple[str, str, str], str],
) -> Plan:
    marker = active.marker if active is not None else None
    wanted, _ = backend_request(request, marker)
    try:
        choice = choose_asset(release, host, wanted)
    except ReleaseIncompleteError as exc:  # still uploading: no update yet, and no lower backend either
        return Plan("refuse", wanted, release, reason=f"{exc.message} The next check looks again.", error=exc)
    except BackendUnavailableError as exc:
        _, reason = upgrade_verdict(marker, request.repo, release.tag, False, backend=wanted)
        return Plan("refuse", wanted, release, reason=reason, error=exc)
    available, reason = upgrade_verdict(
        marker, request.repo, release.tag, True, backend=wanted, follow_exact=request.follow_exact
    )
    if available and request.pinned is not None and request.pinned != release.tag:
        held = (
            f"{release.tag} is available but held: {request.pinned} is pinned. "
            f"`llama-runtime unpin` releases it; `llama-runtime update --tag {release.tag}` moves to it."
        )
        return Plan("up_to_date", wanted, release, choice, reason=held, held=release.tag)
    skip = _failed_before(request, release, choice, failed) if available else None
    if skip is not None:
        return Plan("up_to_date", wanted, release, choice, (skip.sentence(),), reason=skip.sentence(), skipped=skip)
    return Plan("install" if available else "up_to_date", wanted, release, choice, reason=reason)


def upgrade_verdict(
    active: InstallMarker | None,
    repo: str,
    latest_tag: str,
    has_backend_build: bool,
    *,
    backend: str | None = None,
    follow_exact: bool = False,
) -> tuple[bool, str]:
    """Whether ``latest_tag`` is a strictly newer build for ``active``, and why.

    ``backend`` names the backend request the build was looked up for (wording only).
    ``follow_exact``: an older build of the same repository is taken too (the channel moved back).
    """
    if not has_backend_build:
        wanted = backend or (active.backend if active else "the requested backend")
        return False, f"{latest_tag} has no {wanted} build for this machine."
    if active is None:
        return True, f"Nothing is installed; {latest_tag} can be installed."
    if active.repo != repo:
        return False, f"The active runtime comes from {active.repo}, not {repo}; switching needs an explicit update."
    try:
        newer = is_upgrade(active.tag, latest_tag)
    except UserInputError:
        newer = False
    if newer:
        return True, f"{latest_tag} is newer than the active {active.tag}."
    if active.tag == latest_tag:
        return False, f"{active.tag} is the newest release."
    if follow_exact and _orderable(active.tag, latest_tag):
        return True, f"The channel names {latest_tag}, older than the active {active.tag}; following it back down."
    return False, f"{latest_tag} is not newer than the active {active.tag}; never downgrading."


def _orderable(a: str, b: str) -> bool:
    """Whether the two tags have an order (an unorderable pair is never followed down)."""
    try:
        return compare_tags(parse_tag(a), parse_tag(b)) is not None
    except UserInputError:
        return False


# -- latest ------------------------------------------------------------------------------------------------------

#: Chooses the latest of a page of releases, or ``None`` when none qualifies.
LatestPicker = Callable[[Sequence[Release]], Release | None]


def build_number(tag: str) -> int | None:
    """The integer ``N`` of a plain upstream ``bN`` tag, else ``None`` (so b9999 < b10000)."""
    parsed = _upstream(tag)
    return parsed.build if parsed is not None else None


def _upstream(tag: str) -> TagVersion | None:
    try:
        parsed = parse_tag(tag)
    except UserInputError:
        return None
    return parsed if parsed.is_upstream else None


def any_build_number(tag: str) -> int | None:
    """The build ``N`` of any tag that has one: ``bN`` or a fork's ``bN-mix-<hash>``.

    ``None`` for a tag without one, and for a remote tag no release can have (never a candidate).
    """
    try:
        return parse_tag(tag).build
    except UserInputError:
        return None


def _numbered(tag: str, decorated: bool) -> TagVersion | None:
    if not decorated:
        return _upstream(tag)
    try:
        parsed = parse_tag(tag)
    except UserInputError:
        return None
    return parsed if parsed.build is not None else None


def _published_builds(
    releases: Iterable[Release], prereleases: bool = False, decorated: bool = False
) -> list[tuple[TagVersion, Release]]:
    found = []
    for release in releases:
        skip = release.draft or (release.prerelease and not prereleases)
        parsed = None if skip else _numbered(release.tag, decorated)
        if parsed is not None:
            found.append((parsed, release))
    return found


def _build_key(pair: tuple[TagVersion, Release]) -> int:
    # Plain upstream tags always carry a build; compare_tags orders them by it alone.
    return pair[0].build or 0


def newest_releases(
    releases: Iterable[Release],
    count: int,
    *,
    below: int | None = None,
    prereleases: bool = False,
    decorated: bool = False,
) -> list[Release]:
    """The ``count`` published ``bN`` releases with the highest ``N``, newest first.

    Args:
        releases: A page of releases.
        count: How many.
        below: Only builds under this number (the ones older than a channel's latest).
        prereleases: Count prerelease builds too (upstream publishes every build
            as one since August 2026; see :mod:`~llama_runtime.updater.release.channel`).
        decorated: Count a fork's decorated build tags (``bN-mix-<hash>``) too:
            right when every release is of one repository (a mirror of a fork).
    """
    found = [p for p in _published_builds(releases, prereleases, decorated) if below is None or _build_key(p) < below]
    numbered = sorted(found, key=_build_key, reverse=True)
    return [release for _, release in numbered[:count]]


def pick_latest(releases: Sequence[Release]) -> Release | None:
    """The published, non-prerelease ``bN`` release with the highest ``N`` (the default picker)."""
    best: tuple[TagVersion, Release] | None = None
    for pair in _published_builds(releases):
        if best is None or (compare_tags(best[0], pair[0]) or 0) < 0:
            best = pair
    return best[1] if best is not None else None


def highest_build_tag(tags: Iterable[str]) -> str | None:
    """The tag with the highest build among ``tags`` (a mirror's ``releases/latest``).

    Plain ``bN`` tags when there are any; a fork's mirror has only decorated
    ones (``bN-mix-<hash>``), and then the highest ``N`` of those.
    """
    listed = list(tags)
    numbered = [parsed for tag in listed if (parsed := _upstream(tag)) is not None]
    numbered = numbered or [parsed for tag in listed if (parsed := _numbered(tag, True)) is not None]
    return max(numbered, key=lambda parsed: parsed.build or 0).tag if numbered else None


# -- available: Which published releases this host could install (``list --available``). -------------------------


@dataclass(frozen=True)
class Available:
    """One release this host can install, with the asset ``update`` would take."""

    tag: str
    version: str | None
    asset: str
    backend: str
    installed: bool

    def to_json(self) -> dict[str, object]:
        """An item of ``list --available``'s ``available``."""
        return {
            "tag": self.tag,
            "version": self.version,
            "asset": self.asset,
            "backend": self.backend,
            "installed": self.installed,
        }


def _newest_first(releases: Iterable[Release]) -> list[Release]:
    """Releases with a build number, highest first (unorderable ones are never "available")."""
    numbered = [(n, r) for r in releases if (n := any_build_number(r.tag)) is not None]
    return [r for _n, r in sorted(numbered, key=lambda pair: pair[0], reverse=True)]


def available_builds(
    builds: Iterable[ResolvedRelease],
    host: HostFacts,
    backend: str,
    *,
    installed: set[tuple[str, str]],
    limit: int,
    enrich: Callable[[Release], Release | None] | None = None,
) -> list[Available]:
    """The newest ``limit`` builds that have an asset for ``host`` and ``backend``.

    Args:
        builds: What the channel offers (:func:`~llama_runtime.updater.release.channel.channel_builds`: the
            same resolver as "latest", so a listed build is one update would take).
        host: The machine to install on.
        backend: The backend request (``auto`` or a name).
        installed: ``(tag, asset)`` pairs already installed.
        limit: How many to return at most.
        enrich: Completes a release before its asset is chosen (the source
            attaches a fork's build manifest); called only for the releases
            examined. ``None`` from it drops the release (its metadata is bad).
    """
    found: list[Available] = []
    by_tag = {b.build_tag: b for b in builds}
    for release in _newest_first(b.release for b in by_tag.values()):
        if len(found) >= limit:
            break
        if enrich is not None:
            completed = enrich(release)
            if completed is None:
                continue
            release = completed
        try:
            choice = choose_asset(release, host, backend)
        except (BackendUnavailableError, ReleaseIncompleteError):
            continue  # no build for this host, or not finished uploading yet
        name = choice.asset.name
        version = by_tag[release.tag].version
        found.append(Available(release.tag, version, name, choice.backend, (release.tag, name) in installed))
    return found
