"""Which build a ``llama-server`` says it is, checked against the build asked for (pure).

``llama-server --version`` prints (on stderr) one of two shapes:

* since semantic versioning (ggml-org/llama.cpp PR #26839, Aug 2026):
  ``version: 0.1.1-dev (build 10470, commit 74a7c897)``
* before: ``version: 7000 (abcdef1)``

The build number is ``git rev-list --count HEAD`` at build time
(``cmake/build-info.cmake``). It is ``0`` when git was not available and
``1`` in a depth-1 clone (lemonade-sdk/llamacpp-rocm PR #145: "Every nightly
llama-server reports 'build 1' because the workflow does a shallow clone").
Neither number says anything about the release, and no llama.cpp release was
ever tagged ``b0`` or ``b1``, so both count as *unverifiable*: recorded, not
failed. Any other number must equal the requested tag's build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from llama_runtime.runtime.errors import UserInputError, VerificationError
from llama_runtime.updater.release.tags import parse_tag

BuildCheck = Literal["verified", "unverifiable"]

_SEMVER_FORM: Final = re.compile(
    r"version:\s*(?P<version>[0-9][0-9A-Za-z.+-]*)\s*\(\s*build\s+(?P<build>\d+)\s*,\s*commit\s+(?P<commit>[^)\s]*)\s*\)"
)
_BUILD_FORM: Final = re.compile(r"version:\s*(?P<build>\d+)\s*\(\s*(?P<commit>[^)\s]*)\s*\)")
#: Build numbers a binary reports when it cannot know its own (no git: 0; a
#: depth-1 clone: 1). No release carries them.
UNKNOWN_BUILDS: Final[frozenset[int]] = frozenset({0, 1})


@dataclass(frozen=True)
class BinaryIdentity:
    """What ``--version`` said.

    Attributes:
        raw: The output, stripped (what the marker records).
        build: The build number, or ``None`` when the output has none.
        version: The semver the binary reports (new format), else ``None``.
        commit: The short commit hash, if printed.
    """

    raw: str
    build: int | None
    version: str | None = None
    commit: str | None = None


def parse_version_output(output: str) -> BinaryIdentity:
    """Read the build number out of ``llama-server --version`` output (either format)."""
    raw = output.strip()
    if m := _SEMVER_FORM.search(raw):
        return BinaryIdentity(raw, int(m["build"]), m["version"], m["commit"] or None)
    if m := _BUILD_FORM.search(raw):
        return BinaryIdentity(raw, int(m["build"]), None, m["commit"] or None)
    return BinaryIdentity(raw, None)


def check_build(tag: str, identity: BinaryIdentity) -> BuildCheck:
    """Whether the binary is the build ``tag`` names.

    Returns:
        ``"verified"`` when the numbers agree; ``"unverifiable"`` when the tag
        or the binary carries no usable build number.

    Raises:
        VerificationError: The binary reports another build (both numbers named).
    """
    try:
        expected = parse_tag(tag).build
    except UserInputError:
        expected = None
    reported = identity.build
    if expected is None or reported is None or reported in UNKNOWN_BUILDS:
        return "unverifiable"
    if reported != expected:
        raise VerificationError(
            f"asked for build {expected} ({tag}) but the new llama-server reports build {reported} "
            f"({identity.raw.splitlines()[0][:120] if identity.raw else 'no output'})"
        )
    return "verified"


__all__ = ["UNKNOWN_BUILDS", "BinaryIdentity", "BuildCheck", "check_build", "parse_version_output"]
