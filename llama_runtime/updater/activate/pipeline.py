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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llama_runtime.runtime.clock import epoch_of
from llama_runtime.runtime.errors import (
    CancelledError,
    DiskSpaceError,
    IntegrityError,
    MacOSTooOldError,
    VerificationError,
)
from llama_runtime.runtime.failed_builds import FailedBuild, forget_failed, record_failed
from llama_runtime.runtime.fsutil import fsync_tree, is_disk_full, remove_tree_quietly
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import InstallMarker, write_marker
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.updater.activate.acquire import Acquirer, download_meta
from llama_runtime.updater.activate.activation import Activation
from llama_runtime.updater.activate.outcome import UpdateOutcome
from llama_runtime.updater.checkpoints import checkpoint
from llama_runtime.updater.choice.choose import Choice
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR
from llama_runtime.updater.fetch.cache import disk_full_error
from llama_runtime.updater.fetch.download import DownloadResult
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import CancelCheck, Progress, ProgressCallback
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.stage.archive import ExtractResult
from llama_runtime.updater.stage.streaming import Fetched
from llama_runtime.updater.verify.provenance import with_build_commit
from llama_runtime.updater.verify.staging import Staged, extract_staged, marker_from_meta, new_staging_path
from llama_runtime.updater.verify.verifier import Verifier, at_stage
from llama_runtime.updater.verify.verify import Expected, read_back_marker

log = get_logger("llama_runtime.install")

__all__ = ["InstallPipeline", "PlannedInstall"]


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
            return self.activation.activate_staged(staging, marker, active, warnings, snapshot=snapshot)
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
