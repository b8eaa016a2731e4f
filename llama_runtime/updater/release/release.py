"""GitHub release JSON turned into small typed records, validated on the way in.

Only fields the updater uses are kept. Anything that is not the GitHub
Releases API shape (an HTML error page, a JSON list where an object belongs,
a missing ``tag_name``) is a :class:`~runtime.errors.RemoteError`, never a
``KeyError`` deep inside the installer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import IntegrityError, RemoteDataError, RemoteError, UserInputError, printable
from llama_runtime.updater.release.tags import MAX_TAG_LENGTH, parse_tag, validate_tag

if TYPE_CHECKING:
    from llama_runtime.updater.release.manifest import BuildManifest

__all__ = [
    "MAX_ASSET_NAME_LENGTH",
    "UPSTREAM_REPOS",
    "check_asset_name",
    "check_release",
    "check_tag",
    "is_ref_name",
    "is_valid_remote_tag",
    "path_inside",
    "printable",
    "quote_remote",
]


# -- release -----------------------------------------------------------------------------------------------------

_SHA256_DIGEST: Final = re.compile(r"^sha256:(?P<hex>[0-9a-f]{64})$")
# Characters of an unreadable digest quoted in a message: enough to recognise
# "sha512:…" or junk, short enough that a hostile value cannot flood the output.
_DIGEST_QUOTE_CHARS: Final[int] = 80


#: The upstream repository under its name and its old one (the organisation was renamed; GitHub redirects).
UPSTREAM_REPOS: Final[frozenset[str]] = frozenset({"ggml-org/llama.cpp", "ggerganov/llama.cpp"})


@dataclass(frozen=True)
class Asset:
    """One file attached to a release.

    Attributes:
        name: The file name, the only stable key for matching.
        size: Bytes, as published.
        download_url: ``browser_download_url`` (302 to the asset host).
        digest: The published digest as given, normally ``"sha256:<hex>"``;
            ``None`` for assets uploaded before GitHub started publishing
            digests (June 2025). A value that is not a sha256 is kept, so that
            it refuses the asset instead of passing for "no digest".
        state: ``"uploaded"`` when complete; anything else is still uploading.
        api_url: The API URL of the asset, when known.
    """

    name: str
    size: int
    download_url: str
    digest: str | None = None
    state: str = "uploaded"
    api_url: str | None = None

    @property
    def digest_problem(self) -> str | None:
        """Why the published digest cannot be checked, or ``None`` (absent or a valid sha256)."""
        if self.digest is None or _SHA256_DIGEST.match(self.digest.lower()):
            return None
        quoted = self.digest[:_DIGEST_QUOTE_CHARS] + ("…" if len(self.digest) > _DIGEST_QUOTE_CHARS else "")
        return f"{self.name} publishes a digest this version cannot check ({quoted!r})"

    @property
    def sha256(self) -> str | None:
        """The published sha256 as lowercase hex, or ``None`` when none is published.

        Raises:
            IntegrityError: A digest is published but is not ``sha256:<64 hex>``;
                installing the asset would skip a check its publisher asked for.
        """
        problem = self.digest_problem
        if problem is not None:
            raise IntegrityError(f"{problem}; refusing to install it unverified.")
        if self.digest is None:
            return None
        match = _SHA256_DIGEST.match(self.digest.lower())
        return match["hex"] if match else None

    @property
    def is_complete(self) -> bool:
        """Whether GitHub finished receiving this asset."""
        return self.state == "uploaded"


@dataclass(frozen=True)
class Release:
    """One GitHub release of a repository.

    ``manifest`` is the release's own build metadata (a fork's
    ``llama-prebuilt-manifest.json``), attached by the source after it was
    read and checked; ``None`` when the release publishes none.
    ``target_commitish`` is what the release was created at (a commit, or a
    branch name), as GitHub sends it; ``None`` when it sends none.
    ``origin`` is where the source read the release's bytes from when the
    repository and tag do not say it exactly (a registry's
    ``oci://host/name@sha256:…``); ``None`` otherwise. It is not part of the
    release's identity (equality ignores it).
    """

    repo: str
    tag: str
    assets: tuple[Asset, ...] = field(default_factory=tuple)
    draft: bool = False
    prerelease: bool = False
    published_at: str | None = None
    manifest: BuildManifest | None = None
    target_commitish: str | None = None
    origin: str | None = field(default=None, compare=False)

    def asset(self, name: str) -> Asset | None:
        """The asset called ``name``, if the release has one."""
        return next((a for a in self.assets if a.name == name), None)


def _require(payload: dict[str, Any], key: str, kind: type, what: str) -> Any:
    value = payload.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RemoteError(f"The release data from GitHub is malformed: {what} has no valid '{key}'.")
    return value


def parse_asset(payload: object) -> Asset:
    """Validate one asset object of the API.

    Raises:
        RemoteError: The object is not an asset of the GitHub API shape.
    """
    if not isinstance(payload, dict):
        raise RemoteError("The release data from GitHub is malformed: an asset is not an object.")
    name = _require(payload, "name", str, "an asset")
    size = _require(payload, "size", int, f"asset {name}")
    url = _require(payload, "browser_download_url", str, f"asset {name}")
    digest = payload.get("digest")
    if digest is not None and not isinstance(digest, str):
        # Kept (as text) rather than refused: one odd asset must not hide the
        # release's other assets, and it must not pass for "no digest" either.
        digest = repr(digest)
    if size < 0:
        raise RemoteError(f"The release data from GitHub is malformed: asset {name} has a negative size.")
    state = payload.get("state", "uploaded")
    api_url = payload.get("url")
    return Asset(
        name=name,
        size=size,
        download_url=url,
        digest=digest,
        state=state if isinstance(state, str) else "unknown",
        api_url=api_url if isinstance(api_url, str) else None,
    )


def parse_release(repo: str, payload: object) -> Release:
    """Validate a release object of the API.

    Args:
        repo: ``owner/name`` the release was asked from.
        payload: Decoded JSON.

    Raises:
        RemoteError: The payload is not a release of the GitHub API shape.
    """
    if not isinstance(payload, dict):
        raise RemoteError("The release data from GitHub is malformed: expected a JSON object.")
    tag = _require(payload, "tag_name", str, "the release")
    assets_raw = payload.get("assets", [])
    if not isinstance(assets_raw, list):
        raise RemoteError(f"The release data from GitHub is malformed: {tag} has no asset list.")
    published = payload.get("published_at")
    target = payload.get("target_commitish")
    return Release(
        repo=repo,
        tag=tag,
        assets=tuple(parse_asset(a) for a in assets_raw),
        draft=bool(payload.get("draft", False)),
        prerelease=bool(payload.get("prerelease", False)),
        published_at=published if isinstance(published, str) else None,
        target_commitish=target if isinstance(target, str) else None,
    )


# -- remote_names: Names a release server sends, checked before they become paths. -------------------------------

#: 255 bytes is NAME_MAX on Linux and macOS: a longer name cannot be a file there.
MAX_ASSET_NAME_LENGTH: Final[int] = 255
#: Characters of a refused remote value quoted in a message: enough to recognise
#: it, short enough that a hostile value cannot flood a terminal or a log.
_QUOTE_CHARS: Final[int] = 60

_ASSET_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Upstream semver releases since Aug 2026 (``v1.2.3``), with an optional pre-release/build
# suffix; forks also publish two-part versions (``v1.1``).
_SEMVER_RELEASE: Final = re.compile(r"^v\d+(?:\.\d+){1,3}(?:[-+][0-9A-Za-z.]+)?$")


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


def is_ref_name(name: str) -> bool:
    """Whether ``name`` can name a branch or tag (git check-ref-format's rules).

    No control characters, space, ``~^:?*[\\``, ``..``, ``@{`` or ``//``; no component that
    starts with ``.`` or ends with ``.lock``; not ``@`` or ``HEAD``; at most 255 characters.
    """
    if not 0 < len(name) <= 255 or name in {"@", "HEAD"} or not name.isprintable():
        return False
    if any(c in name for c in " ~^:?*[\\") or ".." in name or "@{" in name or "//" in name:
        return False
    if name.startswith(("/", "-")) or name.endswith(("/", ".")):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))
