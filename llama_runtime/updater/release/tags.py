"""Release tags: validation, parsing and ordering (pure, no IO).

Upstream llama.cpp tags are ``bNNNN`` where NNNN is ``git rev-list --count``
(unpadded, so ``b9999 < b10000`` only as integers). Forks decorate that number:
``b9596-mix-e6f2453`` (unslothai), ``b10018-1.3.0`` (AtomicBot), and branch
builds are ``<branch>-bNNNN-<hash>``. ``llama-prebuilt-master-<hash>`` carries
no build number and cannot be ordered.

Since August 2026 upstream also publishes *semver releases* ``vX.Y.Z``
(scheme ``"release"``): they carry no binaries, only ``nightly-tag.txt``
naming the ``bNNNN`` build they stand for (ggml-org/llama.cpp PR #27485).
They never take part in build ordering: two semver tags compare by semver,
a semver tag and a build tag are unorderable (the build a semver release
names is what gets compared, see :mod:`updater.release.channel`).

Ordering invariant: the build number decides; for the same build number a
decorated tag is newer than the bare one (it is a fork rebuilt on top of it).
Two decorations of the same build compare only when both are semantic
versions; otherwise they are unorderable and never count as an upgrade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from packaging.version import InvalidVersion, Version

from llama_runtime.runtime.errors import UserInputError

Scheme = Literal["upstream", "release", "mix", "semver", "branch", "decorated", "prebuilt", "other"]

#: GitHub allows longer refs, but no real llama.cpp tag comes near this; the cap
#: keeps a pasted log line from being taken for a tag.
MAX_TAG_LENGTH: Final[int] = 128

# Characters git and GitHub accept in a tag that are also safe in a directory name.
_TAG_CHARS: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_UPSTREAM: Final = re.compile(r"^b(?P<build>\d+)$")
_MIX: Final = re.compile(r"^b(?P<build>\d+)-mix-(?P<hash>[0-9a-f]{7,40})$")
_SEMVER: Final = re.compile(r"^b(?P<build>\d+)-(?P<semver>\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.+-]+)?)$")
_DECORATED: Final = re.compile(r"^b(?P<build>\d+)-(?P<rest>[A-Za-z0-9._+-]+)$")
_BRANCH: Final = re.compile(r"^(?P<branch>[A-Za-z0-9._+-]+?)-b(?P<build>\d+)-(?P<hash>[0-9a-f]{7,40})$")
_PREBUILT: Final = re.compile(r"^llama-prebuilt-[A-Za-z0-9._-]+-(?P<hash>[0-9a-f]{7,40})$")
# Upstream's semver releases: make-release-desc.sh takes "plain semver tags
# (v<maj>.<min>.<pat>)" only, so no pre-release suffix is accepted here either.
_RELEASE: Final = re.compile(r"^v(?P<semver>\d+\.\d+\.\d+)$")

_EXAMPLE: Final = (
    "use a build tag such as 'b7000', a release such as 'v0.3.0', or a fork's form such as 'b7000-mix-1a2b3c4'"
)


@dataclass(frozen=True)
class TagVersion:
    """A parsed release tag.

    Attributes:
        tag: The tag exactly as published.
        build: The upstream build number, or ``None`` when the tag has none.
        scheme: Which naming scheme the tag follows.
        decoration: What follows the build number (``"mix-e6f2453"``, ``"1.3.0"``),
            ``None`` for a bare ``bNNNN``.
    """

    tag: str
    build: int | None
    scheme: Scheme
    decoration: str | None = None

    @property
    def is_upstream(self) -> bool:
        """Whether this is a plain upstream ``bNNNN`` tag."""
        return self.scheme == "upstream"

    @property
    def is_release_version(self) -> bool:
        """Whether this is a semver release ``vX.Y.Z`` (no binaries; names a build)."""
        return self.scheme == "release"

    def _semver(self) -> Version | None:
        if self.scheme not in ("semver", "release") or self.decoration is None:
            return None
        try:
            return Version(self.decoration)
        except InvalidVersion:
            return None


def validate_tag(tag: str) -> str:
    """Check that ``tag`` is well formed and return it without surrounding blanks.

    Raises:
        UserInputError: Empty, contains spaces, slashes or ``..``, or other
            characters no release tag uses.
    """
    cleaned = tag.strip() if isinstance(tag, str) else ""
    problem: str | None = None
    if not cleaned:
        problem = "is empty"
    elif len(cleaned) > MAX_TAG_LENGTH:
        problem = f"is longer than {MAX_TAG_LENGTH} characters"
    elif any(ch.isspace() for ch in cleaned):
        problem = "contains spaces"
    elif "/" in cleaned or "\\" in cleaned:
        problem = "contains a slash"
    elif ".." in cleaned:
        problem = "contains '..'"
    elif not _TAG_CHARS.match(cleaned):
        problem = "contains characters a release tag cannot have"
    if problem is not None:
        raise UserInputError(f"The tag {tag!r} {problem}; {_EXAMPLE}.")
    return cleaned


def parse_tag(tag: str) -> TagVersion:
    """Parse a release tag into its build number and decoration.

    A well-formed tag in an unknown scheme parses as unorderable
    (``build is None``) rather than failing: ``install-file`` may name one.

    Raises:
        UserInputError: The tag is malformed (see :func:`validate_tag`).
    """
    tag = validate_tag(tag)
    if m := _UPSTREAM.match(tag):
        return TagVersion(tag, int(m["build"]), "upstream")
    if m := _RELEASE.match(tag):
        return TagVersion(tag, None, "release", m["semver"])
    if m := _MIX.match(tag):
        return TagVersion(tag, int(m["build"]), "mix", f"mix-{m['hash']}")
    if m := _SEMVER.match(tag):
        return TagVersion(tag, int(m["build"]), "semver", m["semver"])
    if m := _BRANCH.match(tag):
        return TagVersion(tag, int(m["build"]), "branch", f"{m['branch']}-{m['hash']}")
    if m := _DECORATED.match(tag):
        return TagVersion(tag, int(m["build"]), "decorated", m["rest"])
    if _PREBUILT.match(tag):
        return TagVersion(tag, None, "prebuilt")
    return TagVersion(tag, None, "other")


def compare_tags(a: TagVersion, b: TagVersion) -> int | None:
    """Order two tags: negative when ``a`` is older, 0 when equal, ``None`` if unorderable."""
    if a.tag == b.tag:
        return 0
    if a.is_release_version or b.is_release_version:
        # Semver compares by semver; across the two schemes nothing is ordered.
        va, vb = a._semver(), b._semver()
        if not (a.is_release_version and b.is_release_version) or va is None or vb is None:
            return None
        return (va > vb) - (va < vb)
    if a.build is None or b.build is None:
        return None
    if a.build != b.build:
        return -1 if a.build < b.build else 1
    if a.decoration is None or b.decoration is None:
        # Same build: the decorated one is a rebuild on top of the bare one.
        return -1 if a.decoration is None else 1
    va, vb = a._semver(), b._semver()
    if va is not None and vb is not None:
        return (va > vb) - (va < vb)
    return None


def _as_version(tag: str | TagVersion) -> TagVersion:
    return tag if isinstance(tag, TagVersion) else parse_tag(tag)


def is_upgrade(installed: str | TagVersion | None, candidate: str | TagVersion) -> bool:
    """Whether ``candidate`` is strictly newer than ``installed``.

    Never true for a downgrade, an equal tag or an unorderable pair. With
    nothing installed every candidate is an upgrade.

    Raises:
        UserInputError: One of the tags is malformed.
    """
    cand = _as_version(candidate)
    if installed is None:
        return True
    order = compare_tags(_as_version(installed), cand)
    return order is not None and order < 0


def is_release_version(tag: str) -> bool:
    """Whether ``tag`` is a semver release ``vX.Y.Z`` (never raises)."""
    return isinstance(tag, str) and _RELEASE.match(tag.strip()) is not None


def highest_version(tags: Iterable[str]) -> str | None:
    """The highest semver release ``vX.Y.Z`` in ``tags`` by semver, or ``None``."""
    best: tuple[Version, str] | None = None
    for raw in tags:
        if not is_release_version(raw):
            continue
        version = Version(raw.strip()[1:])
        if best is None or version > best[0]:
            best = (version, raw.strip())
    return best[1] if best is not None else None


def highest_first(tags: Iterable[str]) -> tuple[str, ...]:
    """The semver releases ``vX.Y.Z`` among ``tags``, each once, highest first by semver (others left out)."""
    found = {raw.strip() for raw in tags if is_release_version(raw)}
    return tuple(sorted(found, key=lambda tag: Version(tag[1:]), reverse=True))
