"""Acquiring a release's assets for one install: free space, download or cache, digest policy, provenance.

The install transaction asks this for the checked bytes of the chosen asset and
its companions, then decides their fate: bytes that were installed and carry a
published digest go to the cache; rejected bytes are deleted (they would only
fail again, and may be hostile); a cancel or a crash keeps them to resume.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import IntegrityError, RemoteError, UserInputError
from llama_runtime.runtime.fsutil import is_disk_full
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.choice.choose import Choice
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR, MAX_ASSET_BYTES
from llama_runtime.updater.fetch.cache import AssetCache, check_free_space, disk_space_errors
from llama_runtime.updater.fetch.download import DownloadResult, download_name, throttled, unpacking_path
from llama_runtime.updater.fetch.partial import discard_partial
from llama_runtime.updater.fetch.ranges import discard_ranged
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import CancelCheck, Progress, ProgressCallback
from llama_runtime.updater.release.release import Asset, Release, path_inside
from llama_runtime.updater.stage.streaming import Fetched, FetchOptions, fetch_asset
from llama_runtime.updater.verify.provenance import Provenance, ProvenanceCheck, combine

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

log = get_logger("llama_runtime.install")

__all__ = ["Acquirer", "download_meta"]


def download_meta(
    release: Release,
    choice: Choice,
    backend_request: str,
    downloads: list[DownloadResult],
    identity: Mapping[str, object] | None,
) -> dict[str, object]:
    """The marker fields of a downloaded install (``downloads``: the main asset first, then its companions)."""
    return {
        "repo": release.repo,
        "tag": release.tag,
        "backend": choice.backend,
        "backend_request": backend_request,
        "asset": choice.asset.name,
        "size": downloads[0].size,
        "sha256": downloads[0].sha256,
        "digest_verified": all(d.digest_verified for d in downloads),
        "source": "download",
        "reason": choice.reason,
        **(identity or {}),
        "extra_assets": tuple(
            {"name": a.name, "size": d.size, "sha256": d.sha256}
            for a, d in zip(choice.extra_assets, downloads[1:], strict=True)
        ),
    }


class Acquirer:
    """Gets the assets of one release onto disk, checked.

    Args:
        home: The llama-runtime home (downloads/ and the cache live there).
        source: Release metadata and the download client; ``None`` for local work only.
        cache: The asset cache looked in first and kept in afterwards.
        options: Ranges and streaming extraction.
        provenance: How build attestations are checked.
    """

    def __init__(
        self,
        home: Home,
        *,
        source: ReleaseSource | None,
        cache: AssetCache,
        options: FetchOptions,
        provenance: ProvenanceCheck,
    ) -> None:
        self.home = home
        self.source = source
        self.cache = cache
        self.options = options
        self.provenance_check = provenance

    def unpacking_path(self, asset: Asset) -> Path:
        """Where the main archive is extracted as it arrives, beside its download."""
        return unpacking_path(self.partial_path(asset))

    def fetch_choice(
        self,
        release: Release,
        choice: Choice,
        *,
        require_digest: bool,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
    ) -> list[Fetched]:
        """The checked bytes of ``choice``: the main asset first (extracted on the way), then its companions.

        Raises:
            DiskSpaceError: The disk has no room for the assets and their extraction.
            IntegrityError: An asset has no digest and one is required, or its bytes do not match.
            NetworkError, CancelledError: The download did not finish (partial bytes kept to resume).
        """
        needed = sum(a.size for a in (choice.asset, *choice.extra_assets)) * (1 + EXTRACTED_SIZE_FACTOR)
        what = f"llama.cpp {release.tag}"
        check_free_space(self.home.root, needed, what=what)
        # The main archive is extracted as it arrives, beside its download: staging/
        # only ever holds trees whose archive matched its digest.
        with disk_space_errors(self.home.root, needed, what):
            # Companions first (zips, not streamed), then the main archive.
            extras = [self.fetch(a, require_digest, emit, cancel, warnings, None) for a in choice.extra_assets]
            unpack_into = self.unpacking_path(choice.asset)
            main = self.fetch(choice.asset, require_digest, emit, cancel, warnings, unpack_into)
        return [main, *extras]

    def fetch(
        self,
        asset: Asset,
        require_digest: bool,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        unpack_into: Path | None,
    ) -> Fetched:
        """One asset's checked bytes, from the cache or the network (a ``.tar.gz`` extracted into ``unpack_into``).

        Raises:
            IntegrityError: It has no published digest and ``require_digest``, or its bytes do not match.
        """
        if asset.sha256 is None:
            if require_digest:
                raise IntegrityError(
                    f"{asset.name} has no published sha256 digest and --require-digest was given; "
                    "refusing to install it."
                )
            message = f"{asset.name} has no published digest (uploaded before June 2025); checked its size only."
            warnings.append(message)
            log.warning("no digest published", asset=asset.name)
        partial = self.partial_path(asset)

        def on_bytes(done: int, total: int | None) -> None:
            emit(Progress("download", done, total, asset.name))

        if self.source is None:
            raise UserInputError("No release source configured for this operation.")
        log.info("downloading", asset=asset.name, size=asset.size, url=asset.download_url, partial=str(partial))
        # Only a duration for the log line, never stored or compared: the real monotonic clock.
        started = time.monotonic()
        try:
            fetched = fetch_asset(
                self.source,
                asset,
                partial,
                cache=self.cache,
                staging=unpack_into,
                max_bytes=min(MAX_ASSET_BYTES, max(asset.size, 1)),
                progress=throttled(on_bytes),
                cancel=cancel,
                options=self.options,
            )
        except OSError as exc:
            if is_disk_full(exc):
                discard_partial(partial)  # the space is what is missing
                discard_ranged(partial)
            raise
        _log_fetched(asset, fetched, time.monotonic() - started)
        return fetched

    def provenance(self, repo: str, assets: tuple[Asset, ...], downloads: list[DownloadResult]) -> Provenance:
        """Each downloaded file's build provenance, combined (before anything is extracted).

        Raises:
            ProvenanceError: A published attestation does not verify.
            ProvenanceMissingError: Provenance is required and one file has none verified.
            RemoteError: The attestations could not be fetched and provenance is required.
        """
        assert self.source is not None  # downloads came from it
        results: list[tuple[str, Provenance]] = []
        checking, asked = self.provenance_check, False
        for asset, download in zip(assets, downloads, strict=True):
            try:
                answer = self.source.attestations(download.sha256)
            except RemoteError as exc:
                if self.provenance_check.require:
                    raise
                results.append((asset.name, Provenance("unverified", f"attestations not fetched: {exc.message}")))
                continue
            if answer and not asked:
                # The signer policy's ref rule needs the default branch: asked once, only when something is published.
                checking, asked = checking.knowing_default_branch(repo, self.source.default_branch()), True
            check = checking.evaluate_answer(asset.name, download.sha256, repo, answer)
            results.append((asset.name, check))
        return combine(results)

    def partial_path(self, asset: Asset) -> Path:
        """The download of ``asset`` in ``downloads/``."""
        repo = str(self.source.repo if self.source else "")
        # The asset name comes from the server: it becomes a path only through path_inside.
        return path_inside(self.home.downloads_dir, download_name(asset.sha256, asset.name, repo=repo, size=asset.size))

    @staticmethod
    def forget(fetched: Fetched) -> None:
        """Delete rejected bytes, in downloads/ or in the cache alike."""
        fetched.download.path.unlink(missing_ok=True)
        if not fetched.cached:
            discard_partial(fetched.download.path)

    def keep(self, fetched: Fetched) -> None:
        """An installed asset with a matching published digest goes to the cache, else away."""
        download = fetched.download
        if fetched.cached:
            return
        if not download.digest_verified:
            discard_partial(download.path)
            return
        try:
            self.cache.store(download.path, download.sha256)
        except OSError as exc:  # the install succeeded; a cache that cannot take it only costs a download
            log.warning("could not keep the download in the cache", path=str(download.path), reason=str(exc))
            discard_partial(download.path)


def _log_fetched(asset: Asset, fetched: Fetched, seconds: float) -> None:
    done = fetched.download
    seconds = max(seconds, 1e-6)
    log.info(
        "downloaded",
        asset=asset.name,
        bytes=done.size,
        resumed_from=done.resumed_from,
        seconds=round(seconds, 2),
        mb_per_s=round((done.size - done.resumed_from) / seconds / 1e6, 1),
        sha256=done.sha256,
        digest_verified=done.digest_verified,
        from_cache=fetched.cached,
    )
