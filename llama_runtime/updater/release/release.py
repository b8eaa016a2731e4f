"""GitHub release JSON turned into small typed records, validated on the way in.

Only fields the updater uses are kept. Anything that is not the GitHub
Releases API shape (an HTML error page, a JSON list where an object belongs,
a missing ``tag_name``) is a :class:`~runtime.errors.RemoteError`, never a
``KeyError`` deep inside the installer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import IntegrityError, RemoteError

if TYPE_CHECKING:
    from llama_runtime.updater.sources.build_manifest import BuildManifest

_SHA256_DIGEST: Final = re.compile(r"^sha256:(?P<hex>[0-9a-f]{64})$")
# Characters of an unreadable digest quoted in a message: enough to recognise
# "sha512:…" or junk, short enough that a hostile value cannot flood the output.
_DIGEST_QUOTE_CHARS: Final[int] = 80


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
    """

    repo: str
    tag: str
    assets: tuple[Asset, ...] = field(default_factory=tuple)
    draft: bool = False
    prerelease: bool = False
    published_at: str | None = None
    manifest: BuildManifest | None = None
    target_commitish: str | None = None

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
