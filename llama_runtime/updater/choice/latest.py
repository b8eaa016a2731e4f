"""Which release is "latest" (pure, no IO).

The one place that answers "which of these releases is the newest build": the
GitHub source, the static mirror's ``releases/latest`` and ``mirror sync
--latest N`` all ask here, and the ordering itself is :mod:`.tags`'s.

A picker is a plain function ``(releases) -> Release | None``. What the
network verbs call "latest" is the channel resolver's answer
(:func:`.channel.resolve_latest`: stable follows upstream's semver release to
its build, nightly takes the highest build, prereleases included); this
module keeps the build ordering it and the mirror's ``releases/latest`` share.

Invariant: only published (non-draft, non-prerelease) plain upstream ``bN``
releases are candidates, ordered by the integer ``N`` (``b9999 < b10000``);
``None`` when there is none, and the caller then asks the source's own
``releases/latest``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from llama_runtime.runtime.errors import BackendUnavailableError, ReleaseIncompleteError, UserInputError
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.channel import ResolvedRelease
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.release.tags import TagVersion, compare_tags, parse_tag

__all__ = [
    "Available",
    "LatestPicker",
    "available_builds",
    "build_number",
    "highest_build_tag",
    "newest_releases",
    "pick_latest",
]


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
            as one since August 2026; see :mod:`.channel`).
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


# -- available: Which published releases this host could install (``list --available``), without... --------------


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
        builds: What the channel offers (:func:`~.channel.channel_builds`: the
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
