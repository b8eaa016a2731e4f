"""Which published releases this host could install (``list --available``), without IO.

Each release is asked the same question ``update`` asks — which asset fits this
host and backend — and the releases with an answer are listed, newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llama_runtime.runtime.errors import BackendUnavailableError, ReleaseIncompleteError
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.latest import any_build_number
from llama_runtime.updater.release.channel import ResolvedRelease
from llama_runtime.updater.release.release import Release

__all__ = ["Available", "available_builds"]


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
