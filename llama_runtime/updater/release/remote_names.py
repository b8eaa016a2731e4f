"""Names a release server sends, checked before they become paths, files or terminal text.

A mirror (``--api-url``), a fork or a tampered plain-http answer can put
anything into ``tag_name`` and asset ``name``. This module is the one place
that decides whether such a name may be used; everything that turns remote
data into a path goes through it.

Rules (a violation is :class:`RemoteDataError`, exit 8, "the server sent …"):
    * a tag follows the tag grammar: ``bNNNN``, ``vX.Y.Z``, or a fork
      decoration :func:`~updater.release.tags.parse_tag` understands;
    * an asset name is a plain file name of ``[A-Za-z0-9._+-]`` (GitHub itself
      renames uploads to such names), not ``.``/``..`` and not hidden;
    * the release answered for ``tags/T`` is the release ``T``;
    * a path built from remote data stays directly inside its directory.

Pure except for :func:`path_inside`, which only builds and compares paths.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from llama_runtime.runtime.errors import IntegrityError, UserInputError
from llama_runtime.runtime.text import printable
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.release.tags import MAX_TAG_LENGTH, parse_tag, validate_tag

__all__ = [
    "MAX_ASSET_NAME_LENGTH",
    "RemoteDataError",
    "check_asset_name",
    "check_release",
    "check_tag",
    "is_valid_remote_tag",
    "path_inside",
    "printable",
    "quote_remote",
]

#: 255 bytes is NAME_MAX on Linux and macOS: a longer name cannot be a file there.
MAX_ASSET_NAME_LENGTH: Final[int] = 255
#: Characters of a refused remote value quoted in a message: enough to recognise
#: it, short enough that a hostile value cannot flood a terminal or a log.
_QUOTE_CHARS: Final[int] = 60

_ASSET_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Upstream semver releases since Aug 2026 (``v1.2.3``), with an optional pre-release/build
# suffix; forks also publish two-part versions (``v1.1``).
_SEMVER_RELEASE: Final = re.compile(r"^v\d+(?:\.\d+){1,3}(?:[-+][0-9A-Za-z.]+)?$")


class RemoteDataError(IntegrityError):
    """The release server sent data that breaks the rules (a name that is not a plain name)."""

    code = "remote_data_invalid"


def quote_remote(value: object) -> str:
    """``repr`` of a remote value, shortened: safe for a terminal (escapes are escaped)."""
    text = value if isinstance(value, str) else repr(value)
    short = text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "…"
    return ascii(short)


def is_valid_remote_tag(tag: object) -> bool:
    """Whether ``tag`` follows the tag grammar (see the module docstring)."""
    if not isinstance(tag, str) or len(tag) > MAX_TAG_LENGTH or tag != tag.strip():
        return False
    if _SEMVER_RELEASE.match(tag):
        return True
    try:
        validate_tag(tag)
    except UserInputError:
        return False
    return parse_tag(tag).scheme != "other"


def check_tag(tag: object, *, what: str = "a release") -> str:
    """``tag`` when it follows the tag grammar.

    Raises:
        RemoteDataError: It does not (exit 8).
    """
    if not is_valid_remote_tag(tag):
        raise RemoteDataError(
            f"The server sent {what} tagged {quote_remote(tag)}, which is not a release tag "
            "(bNNNN, vX.Y.Z or a fork's decorated build); nothing was kept."
        )
    return str(tag)


def check_asset_name(name: object, *, tag: str) -> str:
    """``name`` when it is a plain file name of ``[A-Za-z0-9._+-]``.

    Raises:
        RemoteDataError: It is not (exit 8).
    """
    if isinstance(name, str) and len(name) <= MAX_ASSET_NAME_LENGTH and _ASSET_NAME.match(name) and ".." not in name:
        return name
    raise RemoteDataError(
        f"The server sent an asset of {tag} named {quote_remote(name)}, which is not a plain file name "
        "(letters, digits and . _ + -); nothing was kept."
    )


def check_release(release: Release, *, asked: str | None = None) -> Release:
    """``release`` when its tag and every asset name follow the rules.

    Args:
        release: A release about to be used (installed, planned, compared).
        asked: The tag that was asked for, if one was; the release must be it.

    Raises:
        RemoteDataError: A rule is broken (exit 8).
    """
    tag = check_tag(release.tag)
    if asked is not None and tag != asked:
        raise RemoteDataError(f"The server sent release {quote_remote(tag)} when asked for {asked}; nothing was kept.")
    for asset in release.assets:
        check_asset_name(asset.name, tag=tag)
    return release


def path_inside(directory: Path, name: str) -> Path:
    """``directory / name`` after checking it names an entry directly inside ``directory``.

    Raises:
        RemoteDataError: ``name`` has a separator, is ``.``/``..``/empty, or the
            joined path would not be a child of ``directory``.
    """
    candidate = directory / name
    plain = name not in ("", ".", "..") and "/" not in name and "\\" not in name and "\x00" not in name
    if not plain or candidate.parent != directory or candidate.name != name:
        raise RemoteDataError(
            f"The server sent a name ({quote_remote(name)}) that would leave {directory}; nothing was kept."
        )
    return candidate
