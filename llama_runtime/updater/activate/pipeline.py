"""The install pipeline: from a planned release, or archives on disk, to an active runtime.

The steps, in order (each finishes before the next; nothing is published early)::

    free space -> download + sha256 (main archive extracted as it arrives; a CUDA companion an
      installed runtime holds verified is reused instead: activate.companions)
      -> provenance -> extract into staging/ -> share identical files (activate.sharing)
      -> probe binary, build identity, smoke model
      -> write marker (last) -> read it back and check it -> activate -> keep N runtimes (gc)

Every install takes this path, downloads and ``install-file`` alike. The caller
holds the update lock. Invariant: any failure before activation removes what was
staged and re-raises; rejected bytes are deleted, a cancel keeps them to resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import InstallMarker, write_marker
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.runtime.spans import span
from llama_runtime.updater.activate.activation import Activation
from llama_runtime.updater.activate.attempts import UpdateOutcome
from llama_runtime.updater.activate.companions import ReusedCompanion, companion_entry, find_reusable, place_reused
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
from llama_runtime.updater.stage.staged import Staged, extract_staged, new_staging_path
from llama_runtime.updater.stage.streaming import Fetched, FetchOptions, fetch_asset
from llama_runtime.updater.verify.attested import ATTESTED_UPSTREAM_BUNDLE_MISSING, remember_attested, was_attested
from llama_runtime.updater.verify.install_facts import InstallFacts
from llama_runtime.updater.verify.installed import marker_from_facts
from llama_runtime.updater.verify.provenance import (
    Provenance,
    ProvenanceCheck,
    combine,
    record_each_provenance,
    with_build_commit,
)
from llama_runtime.updater.verify.verifier import Verifier, at_stage
from llama_runtime.updater.verify.verify import Expected, check_requested_device, read_back_marker

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import BuildSource

__all__ = ["Acquirer", "InstallPipeline", "PlannedInstall", "StoragePolicy", "download_facts"]


# -- acquire: A release's assets for one install: space, download or cache, digests. -----------------------------

log = get_logger("llama_runtime.install")


def download_facts(
    release: Release,
    choice: Choice,
    backend_request: str,
    downloads: list[DownloadResult],
    identity: Mapping[str, object] | None,
    reused: Sequence[ReusedCompanion] = (),
) -> InstallFacts:
    """The marker fields of a downloaded install (``downloads``: the main asset first, then its companions).

    ``reused`` are the companions not downloaded (their files come from an installed runtime):
    ``downloads`` holds only the others.
    """
    fetched = [a for a in choice.extra_assets if a.name not in {r.asset.name for r in reused}]
    facts = InstallFacts(
        repo=release.repo,
        tag=release.tag,
        backend=choice.backend,
        backend_request=backend_request,
        asset=choice.asset.name,
        size=downloads[0].size,
        sha256=downloads[0].sha256,
        digest_verified=all(d.digest_verified for d in downloads),
        source="download",
        reason=choice.reason,
        extra_assets=(
            *(
                {"name": a.name, "size": d.size, "sha256": d.sha256}
                for a, d in zip(fetched, downloads[1:], strict=True)
            ),
            *(r.facts_entry() for r in reused),
        ),
        companion_from=reused[0].donor.marker.tag if reused else "",
    )
    return facts.with_identity(identity)


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
        source: BuildSource | None,
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
        skip: frozenset[str] = frozenset(),
    ) -> list[Fetched]:
        """The checked bytes of ``choice``: the main asset first (extracted on the way), then its companions.

        Companions named in ``skip`` are not fetched (an installed runtime's files serve).

        Raises:
            DiskSpaceError: The disk has no room for the assets and their extraction.
            IntegrityError: An asset has no digest and one is required, or its bytes do not match.
            NetworkError, CancelledError: The download did not finish (partial bytes kept to resume).
        """
        companions = [a for a in choice.extra_assets if a.name not in skip]
        needed = sum(a.size for a in (choice.asset, *companions)) * (1 + EXTRACTED_SIZE_FACTOR)
        what = f"llama.cpp {release.tag}"
        check_free_space(self.home.root, needed, what=what)
        # The main archive is extracted as it arrives, beside its download: staging/
        # only ever holds trees whose archive matched its digest.
        with disk_space_errors(self.home.root, needed, what):
            # Companions first (zips, not streamed), then the main archive.
            extras = [self.fetch(a, require_digest, emit, cancel, warnings, None) for a in companions]
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

    def provenance(
        self,
        repo: str,
        assets: tuple[Asset, ...],
        downloads: list[DownloadResult],
    ) -> list[tuple[str, Provenance]]:
        """Each downloaded file's build provenance, checked against its own attestation (before anything is extracted).

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
                branch = self.source.repository().trusted_default_branch
                checking, asked = checking.knowing_default_branch(repo, branch), True
            check = checking.evaluate_answer(asset.name, download.sha256, repo, answer)
            if check.status == "absent" and was_attested(self.home.root, download.sha256):
                # Verified here before: its builder attests it, only this source lacks the proof.
                check = Provenance("unverified", f"{ATTESTED_UPSTREAM_BUNDLE_MISSING} ({check.reason})")
            results.append((asset.name, check))
        return results

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
        "taken from the download cache (its sha256 checked)" if fetched.cached else "downloaded",
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


@dataclass(frozen=True)
class StoragePolicy:
    """How an install spends disk and downloads.

    Attributes:
        keep: Runtimes kept after each successful install (``gc.retain_after_update``); 0 keeps all.
        share: Hard-link staged files identical to installed runtimes' (``activate.sharing``).
        fresh_companion: Download CUDA companions even when an installed runtime's serve
            (``activate.companions``).
    """

    keep: int = 0
    share: bool = True
    fresh_companion: bool = False


class InstallPipeline:
    """Carries one install from bytes to an active runtime.

    Args:
        home: The llama-runtime home.
        acquirer: Gets the assets' checked bytes.
        verifier: Checks the staged tree.
        activation: Moves it into place and flips the pointer.
        clock: Returns the install time.
        storage: Sharing identical files and retention after the install.
    """

    def __init__(
        self,
        home: Home,
        *,
        acquirer: Acquirer,
        verifier: Verifier,
        activation: Activation,
        clock: Callable[[], str],
        storage: StoragePolicy | None = None,
    ) -> None:
        self.home = home
        self.acquirer = acquirer
        self.verifier = verifier
        self.activation = activation
        self.clock = clock
        self.storage = storage or StoragePolicy()

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
        with self._remembering_failure(planned):
            snapshot = snapshot or HomeSnapshot.read(self.home)
            reused = self._reusable(planned.choice, snapshot)
            if reused:
                try:
                    return self._install_downloaded(planned, active, emit, cancel, warnings, snapshot, reused)
                except VerificationError as exc:
                    # The reused files may be what this build cannot use: its own companion decides.
                    donor = reused[0].donor.marker.tag
                    warnings.append(
                        f"{planned.release.tag} did not pass its checks with the CUDA runtime files reused from "
                        f"{donor} ({exc.message}); downloaded its own companion and tried again."
                    )
                    log.warning("reused companion rejected", donor=donor, reason=exc.message)
                    snapshot = HomeSnapshot.read(self.home)
            return self._install_downloaded(planned, active, emit, cancel, warnings, snapshot, ())

    def _reusable(self, choice: Choice, snapshot: HomeSnapshot) -> list[ReusedCompanion]:
        """The choice's companions an installed runtime holds verified (none with ``--fresh-companion``)."""
        if self.storage.fresh_companion or not choice.extra_assets:
            return []
        from llama_runtime.updater.verify.installed import damage

        donors = [r for r in snapshot.runtimes if not damage(r, snapshot=snapshot)]
        return find_reusable(
            choice.extra_assets, donors, snapshot.sha256, require_verified=self.acquirer.provenance_check.require
        )

    def _install_downloaded(
        self,
        planned: PlannedInstall,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        snapshot: HomeSnapshot,
        reused: Sequence[ReusedCompanion],
    ) -> UpdateOutcome:
        """Fetch what ``reused`` does not cover, check it and install; keep the good bytes, drop the rejected."""
        release, choice = planned.release, planned.choice
        with span("download"):  # the archive's transfer, with its extraction when it streams
            fetched = self.acquirer.fetch_choice(
                release,
                choice,
                require_digest=planned.require_digest,
                emit=emit,
                cancel=cancel,
                warnings=warnings,
                skip=frozenset(r.asset.name for r in reused),
            )
        downloads = [f.download for f in fetched]
        warnings.extend(self.acquirer.provenance_check.warnings_for(release.repo))
        checkpoint("after_download")
        facts = download_facts(release, choice, planned.backend_request, downloads, planned.identity, reused)
        # A registry's manifest, when the bytes came from one.
        facts = replace(facts, source=release.origin or facts.source)
        try:
            with span("provenance"):
                facts, staged = self._check_provenance(release, choice, fetched[0], downloads, facts, emit, reused)
            outcome = self.install_archives(
                [d.path for d in downloads],
                facts,
                active=active,
                emit=emit,
                cancel=cancel,
                warnings=warnings,
                staged=staged,
                snapshot=snapshot,
                reused=reused,
            )
        except (IntegrityError, VerificationError, MacOSTooOldError, DiskSpaceError) as exc:
            # Rejected bytes would only fail again (and may be hostile), and are never
            # cached as good for the next candidate or update; a full disk needs the
            # space back. A cancel or a crash keeps them to resume. Bytes that failed only
            # beside reused companion files go to the cache for the fresh try (which drops them if it fails too).
            retried = bool(reused) and isinstance(exc, VerificationError)
            for f in fetched:
                if retried:
                    self.acquirer.keep(f)
                else:
                    self.acquirer.forget(f)
            raise
        for f in fetched:
            self.acquirer.keep(f)
        with span("trim"):
            self.retain(warnings)
        return outcome

    def retain(self, warnings: list[str]) -> None:
        """Trim the home to the kept runtimes after a successful install; trouble only warns (it is done)."""
        from llama_runtime.runtime.errors import LlamaRuntimeError
        from llama_runtime.updater.activate.gc import retain_after_update

        try:
            report = retain_after_update(self.home, self.storage.keep)
        except (LlamaRuntimeError, OSError) as exc:
            warnings.append(f"Old runtimes were not trimmed after the update: {exc}")
            return
        warnings.extend(f"Could not remove {failed} after the update." for failed in report.failed)

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
        facts: InstallFacts,
        emit: ProgressCallback,
        reused: Sequence[ReusedCompanion] = (),
    ) -> tuple[InstallFacts, tuple[Path, ExtractResult] | None]:
        """Record the downloads' provenance in ``facts``; then a streamed extraction becomes a staged candidate.

        Returns:
            ``facts`` with the provenance recorded; the staging directory the main archive now
            lies in, with what its extraction wrote (``None`` when it was not extracted while it downloaded).
        """
        unpacking = self.acquirer.unpacking_path(choice.asset)
        try:
            emit(Progress("verify", message="checking build provenance"))
            skipped = {r.asset.name for r in reused}
            assets = (choice.asset, *(a for a in choice.extra_assets if a.name not in skipped))
            each = self.acquirer.provenance(release.repo, assets, downloads)
            result = combine([*each, *((r.name, r.provenance()) for r in reused)])
            facts = replace(facts, provenance=with_build_commit(result, release.target_commitish).to_marker())
            facts = record_each_provenance(facts, each[1:], keep={r.asset.name for r in reused})
            if main.extracted is None:
                return facts, None
            staging = new_staging_path(self.home)
            os.replace(unpacking, staging)  # digest (and provenance) checked: now a candidate
            return facts, (staging, main.extracted)
        except BaseException:
            remove_tree_quietly(unpacking)
            raise

    def install_archives(
        self,
        archives: list[Path],
        facts: InstallFacts,
        *,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        staged: tuple[Path, ExtractResult] | None = None,
        snapshot: HomeSnapshot | None = None,
        reused: Sequence[ReusedCompanion] = (),
    ) -> UpdateOutcome:
        """Extract ``archives`` (main first), place ``reused`` companion files, verify, write the marker and activate.

        The caller holds the update lock. ``facts`` carry the marker fields
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
            with at_stage("extraction"), span("extract"):
                tree = extract_staged(archives, staging, facts.asset, cancel, main)
                facts = _record_companions(tree, facts, reused)
            checkpoint("after_extract")
            log.info("extracted", files=len(tree.files), bytes=sum(r.size for r in tree.files.values()))
            _stop_if_cancelled(cancel, facts)
            self._share(tree, snapshot, warnings)
            with span("verify"):
                marker = self._verified_marker(tree, facts, active, emit, warnings, snapshot.next_sequence())
            _stop_if_cancelled(cancel, facts)  # verification can take long; the flip has not begun
            with span("fsync tree"):
                fsync_tree(staging, ahead=tree.ahead)
            with span("marker"):
                write_marker(staging, marker)
                checkpoint("after_marker")
                with at_stage("marker check"):
                    read_back_marker(staging, Expected(marker.repo, marker.tag, marker.backend_request, marker.backend))
            emit(Progress("activate", message="activating"))
            with span("switch"):
                outcome = self.activation.activate_staged(
                    staging, marker, active, warnings, snapshot=snapshot, emit=emit
                )
            if marker.provenance.get("status") == "verified":
                digests = [marker.sha256, *(str(e.get("sha256", "")) for e in marker.extra_assets)]
                remember_attested(self.home.root, digests)
            return outcome
        except BaseException as exc:
            remove_tree_quietly(staging)  # best effort: never hides the error on its way out
            if is_disk_full(exc):
                needed = sum(a.stat().st_size for a in archives) * EXTRACTED_SIZE_FACTOR
                raise disk_full_error(self.home.root, needed, f"llama.cpp {facts.tag}") from exc
            raise

    def _share(self, tree: Staged, snapshot: HomeSnapshot, warnings: list[str]) -> None:
        """Store the staged files identical to installed runtimes' once, before they are verified."""
        if not self.storage.share:
            return
        from llama_runtime.updater.activate.sharing import share_identical

        shared = share_identical(tree, snapshot.runtimes, snapshot.sha256)
        if (warning := shared.warning()) is not None:
            warnings.append(warning)

    def _verified_marker(
        self,
        tree: Staged,
        facts: InstallFacts,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
        sequence: int,
    ) -> InstallMarker:
        """Verify the staged ``tree`` and describe it in its install marker (not written yet).

        ``sequence`` is one more than any installed runtime's: the install order no clock can upset.
        """
        verified = self.verifier.verify_staged(
            tree, tag=facts.tag, backend=facts.backend, active=active, emit=emit, warnings=warnings
        )
        device_warning = None
        if facts.explicit_backend:  # asked for by name: no device of it is a failure, never a CPU fallback
            with at_stage("device check"):
                device_warning = check_requested_device(
                    facts.backend_request,
                    facts.backend,
                    verified.report.devices,
                    allow_no_device=facts.allow_no_device,
                )
        marker = marker_from_facts(
            facts,
            tree,
            verified,
            installed_at=self.clock(),
            sequence=sequence,
            host=self.verifier.host.to_json(),
        )
        if device_warning is None:
            return marker
        warnings.append(device_warning)
        return replace(marker, device_warning=device_warning)


def _record_companions(tree: Staged, facts: InstallFacts, reused: Sequence[ReusedCompanion]) -> InstallFacts:
    """Place the reused companion files; ``facts`` with each companion's files in its ``extra_assets`` entry.

    The entries of downloaded companions come first, in the archives' order (``download_facts``).
    """
    for reuse in reused:
        placed, _links = place_reused(reuse, tree)
        tree.files.update(placed)
    entries = [dict(e) for e in facts.extra_assets]
    bin_dir = tree.binary.parent
    for entry, (files, links) in zip(entries, tree.companions, strict=False):

        def beside(rel: str) -> str:
            return (tree.directory / rel).relative_to(bin_dir).as_posix()

        entry.update(
            companion_entry({beside(r): f for r, f in files.items()}, {beside(r): t for r, t in links.items()})
        )
    return replace(facts, extra_assets=tuple(entries))


def _stop_if_cancelled(cancel: CancelCheck, facts: InstallFacts) -> None:
    """A cancel is honoured until activation begins (docs/events.md): nothing is activated then."""
    if cancel():
        raise CancelledError(f"The update to {facts.tag} was cancelled before activation; nothing was activated.")
