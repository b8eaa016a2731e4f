"""What "latest" means: the release channels, resolved over release data (pure, no IO).

Since August 2026 ggml-org/llama.cpp publishes in two schemes at once
(ggml-org/llama.cpp PR #27485; lemonade-sdk/lemonade PR #3450; hybridgroup/yzma PR #297):

* every ``bNNNN`` build release (the ones with binaries) is a **prerelease**;
* semver releases ``vX.Y.Z`` are the non-prerelease ones (``/releases/latest``
  returns one); they carry **no binaries**, only ``nightly-tag.txt`` holding
  the ``bNNNN`` build they stand for.

Forks (unslothai, janhq, …) keep publishing plain non-prerelease ``bNNNN``
releases with binaries. Both shapes resolve through the same functions:

* ``stable``: the newest non-draft, non-prerelease release (semver releases by
  semver, build releases by build number; semver wins when both exist),
  followed through its ``nightly-tag.txt`` when it has no binaries. A newest
  semver release that has no ``nightly-tag.txt`` (yet, or ever) is passed
  over, with a warning, for the newest older one that names a published build:
  make-release.yml creates the release first and uploads the file after it,
  and never when no ``bNNNN`` tag points at the release commit (its "no
  nightly tag found for the release commit" branch; PR #27485).
* ``nightly``: the highest ``bNNNN`` build, prereleases included, skipping a
  build that is still uploading.

Invariant: whatever the channel, the result is a *build* release (one with
binaries); ``version`` is the semver release it was reached through, or ``None``.
The IO layer (:mod:`updater.sources.resolve`) only fetches what these
functions ask for, so "is there an update" and "install it" cannot disagree.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from packaging.version import Version

from llama_runtime.runtime.errors import IntegrityError, ReleaseIncompleteError, ReleaseNotFoundError, UserInputError
from llama_runtime.updater.release.assetnames import parse_asset_name
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import compare_tags, highest_version, is_release_version, parse_tag

#: What "latest" means: ``stable`` or ``nightly`` anywhere, or, on an OCI registry source, a channel
#: tag its admin moves (``mirror promote --to candidate``): the build that tag names now.
Channel = str
CHANNELS: Final[tuple[Literal["stable", "nightly"], ...]] = ("stable", "nightly")
DEFAULT_CHANNEL: Final[Channel] = "stable"
#: A registry channel tag: a plain tag name that is neither a build (``bN``) nor a semver release.
_REGISTRY_CHANNEL: Final = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")

#: The one asset of an upstream semver release (make-release.yml, PR #27485).
NIGHTLY_TAG_ASSET: Final[str] = "nightly-tag.txt"
#: The file holds one tag (~8 bytes); anything much larger is broken or hostile.
MAX_NIGHTLY_TAG_BYTES: Final[int] = 1024
#: Older semver releases ``stable`` looks at when the newest names no build. Each
#: costs one API request; upstream cuts one release at a time by hand
#: (make-release.yml, workflow_dispatch), so one release in progress, or one
#: that never got its pointer, is passed over with room to spare.
MAX_STABLE_FALLBACKS: Final[int] = 3


@dataclass(frozen=True)
class ResolvedRelease:
    """The build a request resolved to.

    Attributes:
        build_tag: The ``bNNNN`` (or fork) tag whose binaries get installed.
        version: The semver release (``vX.Y.Z``) it was reached through, or ``None``.
        release: The build release itself, with its assets.
        notes: Releases passed over on the way, and why (for ``--explain`` and ``check``).
    """

    build_tag: str
    version: str | None
    release: Release
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StableFallback:
    """An older semver release ``stable`` may fall back to, as far as it was looked up.

    Attributes:
        tag: The semver tag (``v0.6.0``).
        release: The release published under it; ``None`` when none is (a bare tag).
        named: The build its ``nightly-tag.txt`` names, once read.
        build: The release of that build, once looked up (``None``: not published,
            or not looked up because it is the one installed).
    """

    tag: str
    release: Release | None = None
    named: str | None = None
    build: Release | None = None


def parse_channel(value: str, source: str = "--channel", *, registry: bool = False) -> Channel:
    """``stable`` or ``nightly`` (case and blanks ignored); with ``registry``, also a channel tag of the registry.

    Raises:
        UserInputError: Anything else; the message lists the valid channels.
    """
    cleaned = value.strip().lower() if isinstance(value, str) else ""
    for channel in CHANNELS:
        if cleaned == channel:
            return channel
    if registry and is_registry_channel(cleaned):
        return cleaned
    where = (
        "; a registry source (--api-url oci://…) also follows a channel tag such as candidate or canary"
        if not registry
        else "; or a channel tag of the registry (lowercase letters, digits, '.', '_', '-'; not a build or version)"
    )
    raise UserInputError(
        f"Unknown channel {value!r} (from {source}); use 'stable' (the newest release, e.g. v0.3.0, "
        f"resolved to its build) or 'nightly' (the newest bNNNN build){where}."
    )


def is_registry_channel(name: str) -> bool:
    """Whether ``name`` can be a registry's own channel tag (not stable/nightly, a build or a version)."""
    if name in CHANNELS or not _REGISTRY_CHANNEL.match(name) or is_release_version(name):
        return False
    return not (name.startswith("b") and name[1:].isdigit())


def _has_binaries(release: Release) -> bool:
    return any(parse_asset_name(a.name) is not None for a in release.assets)


def pointer_asset(release: Release) -> Asset | None:
    """The ``nightly-tag.txt`` of a release that has no binaries of its own, else ``None``.

    A release that carries runtime archives is a build, whatever else it holds.
    """
    if _has_binaries(release):
        return None
    return release.asset(NIGHTLY_TAG_ASSET)


def missing_pointer(release: Release) -> str | None:
    """Why a semver release names no build yet (``"v0.7.0 has no nightly-tag.txt yet"``), else ``None``.

    make-release.yml creates ``vX.Y.Z`` (non-prerelease, no assets) before it
    uploads ``nightly-tag.txt``, and uploads none when no ``bNNNN`` tag points at
    the release commit: a release without the file, or with the file still
    arriving, names nothing. A build, or a release that is no semver release, has
    nothing missing here.
    """
    if not _is_semver_release(release.tag) or _has_binaries(release):
        return None
    pointer = release.asset(NIGHTLY_TAG_ASSET)
    if pointer is None:
        return f"{release.tag} has no {NIGHTLY_TAG_ASSET} yet"
    if not pointer.is_complete:
        return f"{release.tag} has its {NIGHTLY_TAG_ASSET} still uploading (state {pointer.state!r})"
    return None


def older_versions(tags: Iterable[str], below: str, limit: int = MAX_STABLE_FALLBACKS) -> list[str]:
    """The semver release tags in ``tags`` lower than ``below``, highest first, at most ``limit``.

    Anything that is no ``vX.Y.Z`` (remote data: a bare ``v1``, a build tag) is ignored.
    """
    if not is_release_version(below):
        return []
    top = Version(below.strip()[1:])
    found = {Version(t.strip()[1:]): t.strip() for t in tags if is_release_version(t)}
    return [found[v] for v in sorted((v for v in found if v < top), reverse=True)][: max(0, limit)]


def _fallback_problem(candidate: StableFallback, installed: str | None) -> str | None:
    """Why ``candidate`` cannot stand in for the newest stable release, or ``None`` when it can."""
    release = candidate.release
    if release is None:
        return f"{candidate.tag}: no release is published for the tag"
    if release.draft or release.prerelease:
        return f"{candidate.tag}: it is a draft or a prerelease"
    problem = missing_pointer(release)
    if problem is not None:
        return problem
    if candidate.named is None:
        return f"{candidate.tag}: its {NIGHTLY_TAG_ASSET} was not read"
    if candidate.named == installed:
        return None  # it was published when it was installed: not looked up again
    if candidate.build is None or candidate.build.draft:
        return f"{candidate.tag}: it names {candidate.named}, which is not published"
    return None


def fallback_stable(
    skipped: str, candidates: Iterable[StableFallback], installed: str | None = None
) -> tuple[StableFallback, tuple[str, ...]]:
    """The first of ``candidates`` (highest first) that names a published build, and the warnings to show.

    Args:
        skipped: Why the newest stable release was passed over (:func:`missing_pointer`).
        candidates: Older semver releases, highest first; may be lazy (each is
            looked up only when the one before it did not qualify).
        installed: The build installed now: a candidate naming it qualifies
            without its build being looked up.

    Returns:
        The candidate and the warnings, the first naming the release skipped
        (``"v0.7.0 has no nightly-tag.txt yet (a release in progress?); using v0.6.0 → b11429"``).

    Raises:
        ReleaseIncompleteError: None qualifies (exit 7: try again once the release is out).
    """
    passed: list[str] = []
    for candidate in candidates:
        problem = _fallback_problem(candidate, installed)
        if problem is None:
            assert candidate.named is not None  # a qualifying candidate names its build
            note = f"{skipped} (a release in progress?); using {candidate.tag} → {candidate.named}"
            return candidate, (note, *(f"skipped {p}" for p in passed))
        passed.append(problem)
    tried = f" ({'; '.join(passed)})" if passed else ""
    raise ReleaseIncompleteError(
        f"{skipped} (a release in progress?), and no older release names a published build{tried}.",
        hint="Try again in a few minutes, or use --channel nightly or --tag bNNNN for a build.",
    )


def _stable_fallbacks(
    releases: Sequence[Release], skipped: Release, nightly_tags: Mapping[str, str]
) -> list[StableFallback]:
    """The older semver releases among ``releases``, as :func:`fallback_stable` takes them."""
    published = {r.tag: r for r in _published(releases) if not r.prerelease}
    found = []
    for tag in older_versions(published, skipped.tag):
        release = published[tag]
        if _has_binaries(release):  # a semver-tagged build (a fork's) stands for itself
            found.append(StableFallback(tag, release, tag, release))
            continue
        named = nightly_tags.get(tag)
        build = next((r for r in releases if named is not None and r.tag == named and r.repo == skipped.repo), None)
        found.append(StableFallback(tag, release, named, build))
    return found


def parse_nightly_tag(content: bytes | str, release_tag: str) -> str:
    """The build tag a ``nightly-tag.txt`` names.

    Raises:
        IntegrityError: Too long, not text, or not a build tag with a number
            (remote data that breaks the rules: exit 8).
    """
    raw = content.encode("utf-8", "replace") if isinstance(content, str) else content
    where = f"{NIGHTLY_TAG_ASSET} of {release_tag}"
    if len(raw) > MAX_NIGHTLY_TAG_BYTES:
        raise IntegrityError(f"{where} is {len(raw)} bytes long; a build tag fits in {MAX_NIGHTLY_TAG_BYTES}.")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise IntegrityError(f"{where} is not text; it must name a build such as b10485.") from None
    try:
        parsed = parse_tag(text)
    except UserInputError:
        parsed = None
    if parsed is None or parsed.build is None:
        shown = text[:40] + ("…" if len(text) > 40 else "")
        raise IntegrityError(f"{where} says {shown!r}, which is not a build tag such as b10485.")
    return parsed.tag


def _published(releases: Iterable[Release]) -> list[Release]:
    return [r for r in releases if not r.draft]


def _is_semver_release(tag: str) -> bool:
    # Remote data: a malformed tag is never user input here (the caller's checks refuse it later).
    try:
        return parse_tag(tag).is_release_version
    except UserInputError:
        return False


def _is_build(release: Release) -> bool:
    try:
        return parse_tag(release.tag).build is not None
    except UserInputError:
        return False


def _newest_build(releases: Sequence[Release]) -> Release | None:
    """The release with the highest build tag; unorderable pairs keep the first seen."""
    best: Release | None = None
    for release in releases:
        if not _is_build(release):
            continue
        if best is None:
            best = release
            continue
        order = compare_tags(parse_tag(best.tag), parse_tag(release.tag))
        if order is not None and order < 0:
            best = release
    return best


def stable_candidate(releases: Iterable[Release]) -> Release | None:
    """The newest non-draft, non-prerelease release: what ``stable`` starts from.

    Semver releases decide by semver when there are any (upstream today);
    otherwise the highest build tag (forks, and upstream before August 2026).
    """
    stable = [r for r in _published(releases) if not r.prerelease]
    version = highest_version(r.tag for r in stable)
    if version is not None:
        return next(r for r in stable if r.tag.strip() == version)
    return _newest_build(stable)


def upload_problem(release: Release, older: Release | None = None) -> str | None:
    """Why ``release`` looks still uploading, or ``None``.

    An asset in a state other than ``uploaded`` (GitHub's ``open``) is still
    arriving. The release workflow also attaches files one by one after
    publishing, so a build with fewer runtime archives than the build before
    it (``older``) is treated the same: its preferred asset may not be there yet.
    Archives are compared by family, the toolkit version left out: a build that
    renamed one (CUDA 13.3 -> 13.4) has as many archives as the build before it.
    """
    pending = sorted((a.name, a.state) for a in release.assets if not a.is_complete)
    if pending:
        shown = ", ".join(f"{name} in state {state!r}" for name, state in pending[:3])
        return f"{release.tag} is still uploading ({shown})"
    if older is None:
        return None
    mine, theirs = _runtime_names(release), _runtime_names(older)
    missing = sorted(theirs - mine)  # Counter difference: families with fewer archives than before
    if missing:
        return (
            f"{release.tag} has {mine.total()} of the {theirs.total()} runtime archives {older.tag} has "
            f"(no {missing[0].replace('{tag}', release.tag).replace('{version}', '*')} yet); "
            "it is probably still uploading"
        )
    return None


#: A toolkit version inside a name ("cuda-13.4", "openvino-2026.4.1", "rocm-10.0"). Renames of it
#: (CUDA 13.3 -> 13.4, ROCm 7.14 -> 10.0, OpenVINO 2026.4 -> 2026.4.1) are not a missing archive.
_TOOLKIT_VERSION: Final = re.compile(r"(?<=-)\d+(?:\.\d+)+(?=-)")


def _runtime_names(release: Release) -> Counter[str]:
    """How many runtime archives of each family a release has, comparable across builds.

    A family is the name with the tag as ``{tag}`` and the toolkit version as ``{version}``
    (``llama-{tag}-bin-ubuntu-cuda-{version}-x64.tar.gz``): counted, so two CUDA lines of one
    platform stay two, and a renamed toolkit stays the same family.
    """
    families: Counter[str] = Counter()
    for asset in release.assets:
        if parse_asset_name(asset.name) is None:
            continue
        families[_TOOLKIT_VERSION.sub("{version}", asset.name.replace(release.tag, "{tag}"))] += 1
    return families


def _nightly(releases: Sequence[Release]) -> ResolvedRelease:
    builds = [r for r in _published(releases) if _is_build(r)]
    notes: list[str] = []
    while builds:
        best = _newest_build(builds)
        assert best is not None  # builds is not empty and holds only build tags
        rest = [r for r in builds if r is not best]
        problem = upload_problem(best, _newest_build(rest))
        if problem is None:
            return ResolvedRelease(best.tag, None, best, tuple(notes))
        notes.append(f"skipped {problem}")
        builds = rest
    raise ReleaseNotFoundError("No complete bNNNN build release found" + (f" ({'; '.join(notes)})" if notes else "."))


def follow_pointer(release: Release, nightly_tag: str, build: Release | None) -> ResolvedRelease:
    """Resolve a release without binaries through the build its ``nightly-tag.txt`` named.

    Args:
        release: The semver (or other binary-less) release.
        nightly_tag: What :func:`parse_nightly_tag` read from its pointer.
        build: The release published under ``nightly_tag``, if it was found.

    Raises:
        ReleaseNotFoundError: The named build is not published (or is a draft).
        IntegrityError: The build found is not the one named.
    """
    if build is None or build.draft:
        raise ReleaseNotFoundError(
            f"{release.tag} names build {nightly_tag} in its {NIGHTLY_TAG_ASSET}, "
            f"but no release {nightly_tag} is published in {release.repo}."
        )
    if build.tag != nightly_tag or build.repo != release.repo:
        raise IntegrityError(f"{release.tag} names {nightly_tag}, but the release found is {build.repo} {build.tag}.")
    version = release.tag if _is_semver_release(release.tag) else None
    return ResolvedRelease(build.tag, version, build)


def resolve_release(release: Release, nightly_tags: Mapping[str, str], releases: Iterable[Release]) -> ResolvedRelease:
    """One release to the build it stands for: itself, or the build its pointer names.

    Args:
        release: A release asked for by tag or picked as "latest".
        nightly_tags: Release tag -> the build its ``nightly-tag.txt`` named
            (already read by the IO layer).
        releases: Where to find that build.

    Raises:
        ReleaseNotFoundError: A pointer release whose pointer was not read or
            whose build is not among ``releases``.
        ReleaseIncompleteError: A semver release with neither binaries nor a
            (complete) pointer: probably still being cut (exit 7).
    """
    problem = missing_pointer(release)
    if problem is not None:
        raise ReleaseIncompleteError(
            f"{problem}: release {release.tag} of {release.repo} is published but names no build, so it is "
            f"probably still being cut (make-release.yml creates the release first and uploads "
            f"{NIGHTLY_TAG_ASSET} after it, and never when no bNNNN tag points at its commit).",
            hint="Try again in a few minutes; `llama-runtime update` installs the newest stable release that "
            "names its build, and --tag bNNNN a build directly.",
        )
    pointer = pointer_asset(release)
    if pointer is None:
        return ResolvedRelease(release.tag, None, release)
    named = nightly_tags.get(release.tag)
    if named is None:
        raise ReleaseNotFoundError(f"The {NIGHTLY_TAG_ASSET} of {release.tag} was not read; cannot resolve its build.")
    build = next((r for r in releases if r.tag == named and r.repo == release.repo), None)
    return follow_pointer(release, named, build)


def channel_builds(
    releases: Sequence[Release], channel: Channel, nightly_tags: Mapping[str, str] | None = None
) -> list[ResolvedRelease]:
    """Every build ``channel`` offers among ``releases``, each once (``list --available``).

    ``stable``: the builds non-prerelease releases stand for (a plain build
    release itself; a semver release's named build when it is among
    ``releases``). ``nightly``: every published build. Order is not defined.
    """
    pointers = dict(nightly_tags or {})
    published = _published(releases)
    if channel == "nightly":
        version_of = {build: tag for tag, build in pointers.items() if _is_semver_release(tag)}
        found = [ResolvedRelease(r.tag, version_of.get(r.tag), r) for r in published if _is_build(r)]
    else:
        found = []
        for release in (r for r in published if not r.prerelease):
            try:
                found.append(resolve_release(release, pointers, published))
            except (ReleaseNotFoundError, ReleaseIncompleteError):
                continue  # its build is not among these releases, its pointer was not read, or it has none yet
    unique: dict[str, ResolvedRelease] = {}
    for item in found:
        kept = unique.get(item.build_tag)
        if kept is None or (kept.version is None and item.version is not None):
            unique[item.build_tag] = item
    return list(unique.values())


def resolve_latest(
    releases: Sequence[Release], channel: Channel, nightly_tags: Mapping[str, str] | None = None
) -> ResolvedRelease:
    """The build ``channel`` calls latest among ``releases``.

    Args:
        releases: Release data (any order): a list page, or ``/releases/latest``
            plus the build it names.
        channel: ``stable`` or ``nightly``.
        nightly_tags: Release tag -> build named by its ``nightly-tag.txt``.

    Raises:
        ReleaseNotFoundError: Nothing qualifies (the message says why).
        ReleaseIncompleteError: The newest stable release names no build yet,
            and no older one names a published build.
    """
    pointers = dict(nightly_tags or {})
    if channel == "nightly":
        found = _nightly(releases)
        version = next((v for v, b in pointers.items() if b == found.build_tag and v.startswith("v")), None)
        return ResolvedRelease(found.build_tag, version, found.release, found.notes)
    start = stable_candidate(releases)
    if start is None:
        raise ReleaseNotFoundError(
            "No stable release found (every release is a draft or a prerelease); "
            "use --channel nightly for the newest build."
        )
    skipped = missing_pointer(start)
    if skipped is None:
        return resolve_release(start, pointers, releases)
    chosen, notes = fallback_stable(skipped, _stable_fallbacks(releases, start, pointers))
    return with_notes(follow_fallback(chosen), notes)


def follow_fallback(chosen: StableFallback) -> ResolvedRelease:
    """The build a qualifying :class:`StableFallback` names, once its build was looked up.

    Raises:
        ReleaseNotFoundError: Its build was not looked up (it qualified as the installed one).
        IntegrityError: The build found is not the one named.
    """
    assert chosen.release is not None and chosen.named is not None  # it qualified
    return follow_pointer(chosen.release, chosen.named, chosen.build)


def with_notes(found: ResolvedRelease, notes: Sequence[str]) -> ResolvedRelease:
    """``found`` with ``notes`` before the ones it has."""
    return replace(found, notes=(*notes, *found.notes)) if notes else found


__all__ = [
    "CHANNELS",
    "DEFAULT_CHANNEL",
    "MAX_NIGHTLY_TAG_BYTES",
    "MAX_STABLE_FALLBACKS",
    "NIGHTLY_TAG_ASSET",
    "Channel",
    "ResolvedRelease",
    "StableFallback",
    "channel_builds",
    "fallback_stable",
    "follow_fallback",
    "follow_pointer",
    "is_registry_channel",
    "missing_pointer",
    "older_versions",
    "parse_channel",
    "parse_nightly_tag",
    "pointer_asset",
    "resolve_latest",
    "resolve_release",
    "stable_candidate",
    "upload_problem",
    "with_notes",
]
