"""The install pipeline: from a planned release, or archives on disk, to an active runtime.

The steps, in order (each finishes before the next; nothing is published early)::

    free space -> download + sha256 (main archive extracted as it arrives)
      -> provenance -> extract into staging/ -> probe binary, build identity, smoke model
      -> write marker (last) -> read it back and check it -> activate

Every install takes this path, downloads and ``install-file`` alike. The caller
holds the update lock. Invariant: any failure before activation removes what was
staged and re-raises; rejected bytes are deleted, a cancel keeps them to resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.clock import epoch_of
from llama_runtime.runtime.errors import (
    CancelledError,
    DiskSpaceError,
    IntegrityError,
    MacOSTooOldError,
    RemoteError,
    UserInputError,
    VerificationError,
)
from llama_runtime.runtime.failed_builds import FailedBuild, forget_failed, record_failed
from llama_runtime.runtime.fsutil import fsync_tree, is_disk_full, remove_tree_quietly
from llama_runtime.runtime.layout import Home, HomeSnapshot, InstalledRuntime
from llama_runtime.runtime.marker import InstallMarker, write_marker
from llama_runtime.updater.activate.activation import Activation
from llama_runtime.updater.activate.attempts import UpdateOutcome
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.choice.choose import Choice
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR, MAX_ASSET_BYTES
from llama_runtime.updater.fetch.cache import AssetCache, check_free_space, disk_full_error, disk_space_errors
from llama_runtime.updater.fetch.download import DownloadResult, download_name, throttled, unpacking_path
from llama_runtime.updater.fetch.partial import discard_partial
from llama_runtime.updater.fetch.ranges import discard_ranged
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import CancelCheck, Progress, ProgressCallback
from llama_runtime.updater.release.release import Asset, Release, path_inside
from llama_runtime.updater.stage.archive import ExtractResult
from llama_runtime.updater.stage.streaming import Fetched, FetchOptions, fetch_asset
from llama_runtime.updater.verify.attested import ATTESTED_UPSTREAM_BUNDLE_MISSING, remember_attested, was_attested
from llama_runtime.updater.verify.installed import Staged, extract_staged, marker_from_meta, new_staging_path
from llama_runtime.updater.verify.provenance import Provenance, ProvenanceCheck, combine, with_build_commit
from llama_runtime.updater.verify.verifier import Verifier, at_stage
from llama_runtime.updater.verify.verify import Expected, read_back_marker

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = ["Acquirer", "InstallPipeline", "PlannedInstall", "download_meta"]


# -- acquire: Acquiring a release's assets for one install: free space, download or cache, diges... --------------

log = get_logger("llama_runtime.install")


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
            if check.status == "absent" and was_attested(self.home.root, download.sha256):
                # Verified here before: its builder attests it, only this source lacks the proof.
                check = Provenance("unverified", f"{ATTESTED_UPSTREAM_BUNDLE_MISSING} ({check.reason})")
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


# -- pipeline ----------------------------------------------------------------------------------------------------

log = get_logger("llama_runtime.install")


@dataclass(frozen=True)
class PlannedInstall:
    """What a plan asks to install.

    Attributes:
        release: The release to install.
        choice: Its asset (and companions) for this host.
        backend_request: The backend request the marker stores (what later updates follow).
        require_digest: Refuse an asset without a published sha256.
        identity: Marker fields naming the release as asked (``release_version``, ``channel``)
            and how the update got to this build (``attempts``).
    """

    release: Release
    choice: Choice
    backend_request: str
    require_digest: bool
    identity: Mapping[str, object]


class InstallPipeline:
    """Carries one install from bytes to an active runtime.

    Args:
        home: The llama-runtime home.
        acquirer: Gets the assets' checked bytes.
        verifier: Checks the staged tree.
        activation: Moves it into place and flips the pointer.
        clock: Returns the install time.
    """

    def __init__(
        self,
        home: Home,
        *,
        acquirer: Acquirer,
        verifier: Verifier,
        activation: Activation,
        clock: Callable[[], str],
    ) -> None:
        self.home = home
        self.acquirer = acquirer
        self.verifier = verifier
        self.activation = activation
        self.clock = clock

    def install_release(
        self,
        planned: PlannedInstall,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        *,
        snapshot: HomeSnapshot | None = None,
    ) -> UpdateOutcome:
        """Download, check and install the planned release; a build that fails verification is remembered.

        ``snapshot`` is the caller's one look at the home under the lock (default: read when needed).
        """
        release, choice = planned.release, planned.choice
        with self._remembering_failure(planned):
            fetched = self.acquirer.fetch_choice(
                release, choice, require_digest=planned.require_digest, emit=emit, cancel=cancel, warnings=warnings
            )
            downloads = [f.download for f in fetched]
            warnings.extend(self.acquirer.provenance_check.warnings_for(release.repo))
            checkpoint("after_download")
            meta = download_meta(release, choice, planned.backend_request, downloads, planned.identity)
            try:
                staged = self._check_provenance(release, choice, fetched[0], downloads, meta, emit)
                outcome = self.install_archives(
                    [d.path for d in downloads],
                    meta,
                    active=active,
                    emit=emit,
                    cancel=cancel,
                    warnings=warnings,
                    staged=staged,
                    snapshot=snapshot,
                )
            except (IntegrityError, VerificationError, MacOSTooOldError, DiskSpaceError):
                # Rejected bytes would only fail again (and may be hostile), and are never
                # cached as good for the next candidate or update; a full disk needs the
                # space back. A cancel or a crash keeps them to resume.
                for f in fetched:
                    self.acquirer.forget(f)
                raise
            for f in fetched:
                self.acquirer.keep(f)
            return outcome

    @contextmanager
    def _remembering_failure(self, planned: PlannedInstall) -> Iterator[None]:
        """Record a build that fails verification as failed; forget that record once it installs."""
        release, choice = planned.release, planned.choice
        try:
            yield
        except (VerificationError, MacOSTooOldError) as exc:
            # It fails the same way next time: the scheduled job must not fetch it every hour.
            record_failed(
                self.home.root,
                FailedBuild(
                    release.repo, release.tag, choice.asset.name, choice.backend, exc.message, epoch_of(self.clock())
                ),
            )
            raise
        forget_failed(self.home.root, release.repo, release.tag, choice.asset.name)

    def _check_provenance(
        self,
        release: Release,
        choice: Choice,
        main: Fetched,
        downloads: list[DownloadResult],
        meta: dict[str, object],
        emit: ProgressCallback,
    ) -> tuple[Path, ExtractResult] | None:
        """Record the downloads' provenance in ``meta``; then a streamed extraction becomes a staged candidate.

        Returns:
            The staging directory the main archive now lies in, with what its
            extraction wrote; ``None`` when it was not extracted while it downloaded.
        """
        unpacking = self.acquirer.unpacking_path(choice.asset)
        try:
            emit(Progress("verify", message="checking build provenance"))
            assets = (choice.asset, *choice.extra_assets)
            result = self.acquirer.provenance(release.repo, assets, downloads)
            meta["provenance"] = with_build_commit(result, release.target_commitish).to_marker()
            if main.extracted is None:
                return None
            staging = new_staging_path(self.home)
            os.replace(unpacking, staging)  # digest (and provenance) checked: now a candidate
            return staging, main.extracted
        except BaseException:
            remove_tree_quietly(unpacking)
            raise

    def install_archives(
        self,
        archives: list[Path],
        meta: dict[str, object],
        *,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        staged: tuple[Path, ExtractResult] | None = None,
        snapshot: HomeSnapshot | None = None,
    ) -> UpdateOutcome:
        """Extract ``archives`` (main first), verify, write the marker and activate.

        The caller holds the update lock. ``meta`` carries the marker fields
        that describe where the archives came from. ``staged`` is a staging
        directory the main archive was already extracted into (while it
        downloaded, its digest checked since), with what that wrote.
        ``snapshot`` is the caller's one look at the home (default: read now).
        """
        self.verifier.check_smoke_model()
        snapshot = snapshot or HomeSnapshot.read(self.home)
        staging = staged[0] if staged is not None else new_staging_path(self.home)
        try:
            emit(Progress("verify", message="extracting"))
            main = staged[1] if staged is not None else None
            with at_stage("extraction"):
                tree = extract_staged(archives, staging, str(meta["asset"]), cancel, main)
            checkpoint("after_extract")
            log.info("extracted", files=len(tree.files), bytes=sum(r.size for r in tree.files.values()))
            _stop_if_cancelled(cancel, meta)
            marker = self._verified_marker(tree, meta, active, emit, warnings, snapshot.next_sequence())
            _stop_if_cancelled(cancel, meta)  # verification can take long; the flip has not begun
            fsync_tree(staging)
            write_marker(staging, marker)
            checkpoint("after_marker")
            with at_stage("marker check"):
                read_back_marker(staging, Expected(marker.repo, marker.tag, marker.backend_request, marker.backend))
            emit(Progress("activate", message="activating"))
            outcome = self.activation.activate_staged(staging, marker, active, warnings, snapshot=snapshot)
            if marker.provenance.get("status") == "verified":
                digests = [marker.sha256, *(str(e.get("sha256", "")) for e in marker.extra_assets)]
                remember_attested(self.home.root, digests)
            return outcome
        except BaseException as exc:
            remove_tree_quietly(staging)  # best effort: never hides the error on its way out
            if is_disk_full(exc):
                needed = sum(a.stat().st_size for a in archives) * EXTRACTED_SIZE_FACTOR
                raise disk_full_error(self.home.root, needed, f"llama.cpp {meta['tag']}") from exc
            raise

    def _verified_marker(
        self,
        tree: Staged,
        meta: dict[str, object],
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
        sequence: int,
    ) -> InstallMarker:
        """Verify the staged ``tree`` and describe it in its install marker (not written yet).

        ``sequence`` is one more than any installed runtime's: the install order no clock can upset.
        """
        verified = self.verifier.verify_staged(
            tree, tag=str(meta["tag"]), backend=str(meta["backend"]), active=active, emit=emit, warnings=warnings
        )
        return marker_from_meta(
            meta,
            tree,
            verified,
            installed_at=self.clock(),
            sequence=sequence,
            host=self.verifier.host.to_json(),
        )


def _stop_if_cancelled(cancel: CancelCheck, meta: dict[str, object]) -> None:
    """A cancel is honoured until activation begins (docs/events.md): nothing is activated then."""
    if cancel():
        raise CancelledError(f"The update to {meta['tag']} was cancelled before activation; nothing was activated.")
