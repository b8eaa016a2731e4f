"""The install transaction: stage, verify, write the marker, activate, or roll back.

The sequence (each step finishes before the next; nothing is published early)::

    lock -> read state -> resolve release -> choose asset -> (up to date? stop)
      -> free space -> download + sha256 -> extract into staging/
      -> probe binary -> write marker (last) -> read it back and check it
      -> rename into runtimes/ -> flip the pointer (one os.replace)

Invariant: until the pointer flips, the active runtime and the pointer are
untouched; any failure before that removes what was staged and re-raises. The
pointer flip is the commit point; after it nothing can fail the update.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from llama_runtime.runtime.errors import (
    CorruptStateError,
    DiskSpaceError,
    ForeignMarkerError,
    IntegrityError,
    LlamaRuntimeError,
    MacOSTooOldError,
    ProvenanceMissingError,
    SwitchError,
    UnsafeArchiveError,
    UserInputError,
    VerificationError,
)
from llama_runtime.runtime.failed_builds import FailedBuild, forget_failed, load_failed, record_failed
from llama_runtime.runtime.fsutil import fsync_directory, fsync_tree, remove_tree_quietly
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.lock import NO_WAIT, UpdateLock
from llama_runtime.runtime.marker import (
    MARKER_NAME,
    FileRecord,
    InstallMarker,
    marker_path,
    provenance_summary,
    write_marker,
)
from llama_runtime.runtime.process import SERVER_LOCK_TIMEOUT_SECONDS, ServerControl
from llama_runtime.runtime.runner import ProcessRunner, run_process
from llama_runtime.updater.choice.channel import Channel, ResolvedRelease
from llama_runtime.updater.choice.choose import Choice
from llama_runtime.updater.choice.decide import Plan, UpdateRequest, backend_request, channel_request, decide, settled
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR, MAX_ASSET_BYTES, SERVER_READY_TIMEOUT_SECONDS
from llama_runtime.updater.install.archive import (
    ExtractResult,
    check_links_inside,
    extract_archive,
    find_server_binary,
)
from llama_runtime.updater.install.cache import AssetCache
from llama_runtime.updater.install.checkpoints import checkpoint
from llama_runtime.updater.install.download import DownloadResult, check_free_space, discard_partial, throttled
from llama_runtime.updater.install.fetch import Fetched, FetchOptions, fetch_asset
from llama_runtime.updater.install.gate import GatePolicy, InferenceGate, record_speeds, validate_gguf
from llama_runtime.updater.install.identity import check_build, parse_version_output
from llama_runtime.updater.install.installed import describe, verify_installed
from llama_runtime.updater.install.provenance import Provenance, ProvenanceCheck, combine
from llama_runtime.updater.install.ranges import discard_ranged
from llama_runtime.updater.install.recovery import (
    active_state,
    clean_leftovers,
    damage,
    disk_full_error,
    disk_space_errors,
    download_name,
    is_disk_full,
    unpacking_path,
)
from llama_runtime.updater.install.smoke import SmokeRun, smoke_check
from llama_runtime.updater.install.swap import (
    ServerSwitch,
    SwitchReport,
    switch_with_server,
)
from llama_runtime.updater.install.verify import Expected, check_macos_minimum, probe_binary, read_back_marker
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.sources.release import Asset, Release
from llama_runtime.updater.sources.remote_names import path_inside
from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote

if TYPE_CHECKING:
    from llama_runtime.updater.sources.source import ReleaseSource

log = get_logger("llama_runtime.install")

Phase = Literal["resolve", "download", "verify", "activate", "done"]


@dataclass(frozen=True)
class Progress:
    """One progress event of an update."""

    phase: Phase
    done_bytes: int = 0
    total_bytes: int | None = None
    message: str = ""


ProgressCallback = Callable[[Progress], None]
CancelCheck = Callable[[], bool]


@dataclass(frozen=True)
class UpdateOutcome:
    """The result of :meth:`Installer.update`."""

    result: Literal["installed", "switched", "up_to_date"]
    active: InstalledRuntime
    previous: InstalledRuntime | None
    warnings: tuple[str, ...] = ()
    server: SwitchReport | None = None

    def to_json(self) -> dict[str, object]:
        """The ``update`` object of the CLI contract."""
        return {
            "result": self.result,
            "active": self.active.to_json(),
            "previous": self.previous.to_json() if self.previous else None,
            "warnings": list(self.warnings),
            "server_restarted": bool(self.server and self.server.restarted),
            "reload_required": bool(self.server and self.server.reload_required),
            "gate": self.server.gate_json() if self.server else None,
        }


@dataclass
class _Staged:
    directory: Path
    binary_rel: str
    files: dict[str, FileRecord] = field(default_factory=dict)


def _pointer_names(home: Home, name: str) -> bool:
    """Whether the pointer names ``name``; an unreadable pointer names nothing we wrote."""
    try:
        return home.read_pointer().active == name
    except CorruptStateError:
        return False


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def utc_now() -> str:
    """Current UTC time, ISO 8601 with milliseconds and a ``Z``.

    Milliseconds, because "newest" (gc, doctor --repair) orders runtimes by this
    field and two installs can finish within one second.
    """
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def host_has_device(backend: str, host: HostFacts) -> bool:
    """Whether ``host`` reports a device that a ``backend`` build must list."""
    return {
        "cuda": host.nvidia_driver is not None,
        "vulkan": host.vulkan,
        "rocm": host.rocm,
        "metal": host.metal,
    }.get(backend, False)


class Installer:
    """Installs releases into a :class:`~runtime.layout.Home`.

    Args:
        home: The llama-runtime home.
        source: Release metadata and the download client.
        host: Host facts (a callable so detection runs only when needed).
        runner: Runs the staged binary (the process seam).
        env: Environment for the probed binary.
        clock: Returns the install time.
        server: A running llama-server to stop, switch and restart around
            activation (the home's ManagedServer, or an app's own process).
        health_timeout: Seconds a restarted server has to answer /health.
        gate: The inference gate's policy (the default: on, slowdowns warn);
            None switches servers on /health alone.
        provenance: How build attestations are checked (default: 4 ranges, streamed tar.gz).
        fetch_options: Ranges and streaming extraction (default: 4 ranges, streamed tar.gz).
    """

    def __init__(
        self,
        home: Home,
        *,
        source: ReleaseSource | None = None,
        host: Callable[[], HostFacts],
        runner: ProcessRunner = run_process,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], str] = utc_now,
        server: ServerControl | None = None,
        health_timeout: float = SERVER_READY_TIMEOUT_SECONDS,
        gate: GatePolicy | None = GatePolicy(),  # noqa: B008 - frozen, so one shared default is safe
        provenance: ProvenanceCheck | None = None,
        fetch_options: FetchOptions | None = None,
    ) -> None:
        self.home = home
        self.provenance = provenance or ProvenanceCheck.from_env()
        self.source = source
        self._host_probe = host
        self._host: HostFacts | None = None
        self.runner = runner
        self.env = env
        self.clock = clock
        self.server = server
        self.health_timeout = health_timeout
        self.gate = gate
        self.lock = UpdateLock(home.lock_path)
        self.cache = AssetCache.of(home)
        self.fetch_options = fetch_options or FetchOptions()

    # -- state -------------------------------------------------------------

    @property
    def host(self) -> HostFacts:
        """Host facts, detected once."""
        if self._host is None:
            self._host = self._host_probe()
        return self._host

    def active(self) -> InstalledRuntime | None:
        """The active runtime, or ``None`` when nothing is installed.

        Raises:
            CorruptStateError: The pointer or the active runtime is damaged.
        """
        pointer = self.home.read_pointer()
        return self.home.load(pointer.active) if pointer.active else None

    def previous(self) -> InstalledRuntime | None:
        """The rollback target, if it is still a complete runtime."""
        pointer = self.home.read_pointer()
        if not pointer.previous:
            return None
        try:
            return self.home.load(pointer.previous)
        except CorruptStateError:
            return None

    # -- update ------------------------------------------------------------

    def update(
        self,
        request: UpdateRequest,
        *,
        progress: ProgressCallback | None = None,
        cancel: CancelCheck | None = None,
        lock_timeout: float = NO_WAIT,
    ) -> UpdateOutcome:
        """Install ``request`` (or find it already active) under the update lock.

        Raises:
            LlamaRuntimeError: Any failure; the active runtime is then unchanged.
        """
        emit = progress or (lambda _event: None)
        self._check_smoke_model()
        self.home.ensure()
        with self.lock.hold("update", timeout=lock_timeout):
            # Re-read the state under the lock: another process may have
            # installed this very release while we waited.
            clean_leftovers(self.home)
            active = self._active_for_replacement()
            # A half-deleted or rewritten active runtime is never "up to date": reinstall
            # over it (sizes of every file plus the binary's sha256: see active_state).
            state = active_state(active) if active else None
            replaced = active if state is not None and state.intact else None  # damaged: no rollback target
            # Like the backend request: an explicit channel wins, else the stored one survives.
            channel = channel_request(request, active.marker if active else None)
            plan = settled(request, state)
            resolved: ResolvedRelease | None = None
            if plan is None and request.tag:
                # A pinned build already on disk: switch to it, no network needed.
                there = self._installed_settling(request, active)
                if there is not None and self.reverify(there, emit):
                    return self.activate_installed(there, replaced, emit, [], verified=True)
            if plan is None:
                emit(Progress("resolve", message="resolving the release"))
                others = [active_state(r) for r in self.home.installed() if active is None or r.name != active.name]
                failed = {b.key: b.reason for b in load_failed(self.home.root)}
                resolved = self._resolve(request, channel)
                plan = decide(request, state, resolved.release, self.host, installed=others, failed=failed)
            _log_plan(plan)
            warnings = [*(resolved.notes if resolved else ()), *plan.warnings]
            for warning in warnings:
                log.warning("plan", warning=warning)
            plan.raise_if_refused()
            if plan.action == "up_to_date" and active is not None:
                return UpdateOutcome("up_to_date", active, self.previous(), tuple(warnings))
            if plan.action == "switch" and plan.switch_to is not None:
                there = self.home.load(plan.switch_to)
                if self.reverify(there, emit):
                    return self.activate_installed(there, replaced, emit, warnings, verified=True)
            if plan.release is None or plan.choice is None:
                raise AssertionError(f"unreachable: a {plan.action} plan names its release and asset")
            release, choice = plan.release, plan.choice
            try:
                outcome = self._install_release(
                    release,
                    choice,
                    plan.backend_request,
                    request,
                    replaced,
                    emit,
                    cancel or (lambda: False),
                    warnings,
                    {"release_version": resolved.version if resolved else None, "channel": channel},
                )
            except (VerificationError, MacOSTooOldError) as exc:
                # It fails the same way next time: the scheduled job must not fetch it every hour.
                record_failed(
                    self.home.root,
                    FailedBuild(release.repo, release.tag, choice.asset.name, choice.backend, exc.message, time.time()),
                )
                raise
            forget_failed(self.home.root, release.repo, release.tag, choice.asset.name)
            return outcome

    def _check_smoke_model(self) -> None:
        """A smoke model that is missing or not GGUF is bad input, found before anything changes."""
        if self.gate is not None and self.gate.smoke_model is not None:
            validate_gguf(self.gate.smoke_model)

    def _active_for_replacement(self) -> InstalledRuntime | None:
        try:
            return self.active()
        except ForeignMarkerError:
            raise
        except CorruptStateError as exc:
            # A damaged active runtime must not block the repair by update.
            log.warning("active runtime unusable; installing over it", reason=exc.message)
            return None

    def _installed_settling(self, request: UpdateRequest, active: InstalledRuntime | None) -> InstalledRuntime | None:
        """The newest intact installed runtime (not the active one) that a pinned ``request`` is settled by.

        The backend request is the active runtime's, as for any update; the rule is
        the decision core's :func:`settled`, asked about each installed runtime.
        """
        wanted, _ = backend_request(request, active.marker if active else None)
        pinned = replace(request, backend=wanted)
        for runtime in reversed(self.home.installed()):  # newest first
            if active is not None and runtime.name == active.name:
                continue
            if settled(pinned, active_state(runtime)) is not None:
                return runtime
        return None

    def _resolve(self, request: UpdateRequest, channel: Channel) -> ResolvedRelease:
        if self.source is None:
            raise UserInputError("No release source configured for this operation.")
        if request.tag:
            return resolve_tag_remote(self.source, request.tag)
        return resolve_latest_remote(self.source, channel)

    def _install_release(
        self,
        release: Release,
        choice: Choice,
        backend_request: str,
        request: UpdateRequest,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        identity: Mapping[str, object] | None = None,
    ) -> UpdateOutcome:
        assets = (choice.asset, *choice.extra_assets)
        needed = sum(a.size for a in assets) * (1 + EXTRACTED_SIZE_FACTOR)
        what = f"llama.cpp {release.tag}"
        check_free_space(self.home.root, needed, what=what)
        # The main archive is extracted as it arrives, beside its download: staging/
        # only ever holds trees whose archive matched its digest.
        unpacking = unpacking_path(self._partial_path(choice.asset))
        with disk_space_errors(self.home.root, needed, what):
            # Companions first (zips, not streamed), then the main archive.
            extras = [self._download(a, request, emit, cancel, warnings, None) for a in choice.extra_assets]
            main = self._download(choice.asset, request, emit, cancel, warnings, unpacking)
        fetched = [main, *extras]
        downloads = [f.download for f in fetched]
        checkpoint("after_download")
        staging = self._new_staging()
        digest_verified = all(d.digest_verified for d in downloads)
        meta = {
            "repo": release.repo,
            "tag": release.tag,
            "backend": choice.backend,
            "backend_request": backend_request,
            "asset": choice.asset.name,
            "size": downloads[0].size,
            "sha256": downloads[0].sha256,
            "digest_verified": digest_verified,
            "source": "download",
            "reason": choice.reason,
            **(identity or {}),
            "extra_assets": tuple(
                {"name": a.name, "size": d.size, "sha256": d.sha256}
                for a, d in zip(choice.extra_assets, downloads[1:], strict=True)
            ),
        }
        try:
            try:
                emit(Progress("verify", message="checking build provenance"))
                meta["provenance"] = self._provenance(release.repo, assets, downloads).to_marker()
                if main.extracted is not None:
                    os.replace(unpacking, staging)  # digest (and provenance) checked: now a candidate
            except BaseException:
                remove_tree_quietly(unpacking)
                raise
            outcome = self.install_archives(
                [d.path for d in downloads],
                meta,
                active=active,
                emit=emit,
                cancel=cancel,
                warnings=warnings,
                staged=(staging, main.extracted) if main.extracted is not None else None,
            )
        except (IntegrityError, VerificationError, DiskSpaceError):
            # Rejected bytes would only fail again (and may be hostile); a full
            # disk needs the space back. A cancel or a crash keeps them to resume.
            for f in fetched:
                self._forget(f)
            raise
        for f in fetched:
            self._keep_in_cache(f)
        return outcome

    def _provenance(self, repo: str, assets: tuple[Asset, ...], downloads: list[DownloadResult]) -> Provenance:
        """Each downloaded file's build provenance, combined (before anything is extracted).

        Raises:
            ProvenanceError: A published attestation does not verify.
            ProvenanceMissingError: Provenance is required and one file has none verified.
            RemoteError: The attestations could not be fetched and provenance is required.
        """
        from llama_runtime.runtime.errors import RemoteError

        assert self.source is not None  # downloads came from it
        results: list[tuple[str, Provenance]] = []
        for asset, download in zip(assets, downloads, strict=True):
            try:
                answer = self.source.attestations(download.sha256)
            except RemoteError as exc:
                if self.provenance.require:
                    raise
                results.append((asset.name, Provenance("unverified", f"attestations not fetched: {exc.message}")))
                continue
            results.append((asset.name, self.provenance.evaluate_answer(asset.name, download.sha256, repo, answer)))
        return combine(results)

    def _partial_path(self, asset: Asset) -> Path:
        """The download of ``asset`` in ``downloads/``."""
        repo = str(self.source.repo if self.source else "")
        # The asset name comes from the server: it becomes a path only through path_inside.
        return path_inside(self.home.downloads_dir, download_name(asset.sha256, asset.name, repo=repo, size=asset.size))

    def _new_staging(self) -> Path:
        """A fresh staging path (not created yet) that recovery knows by its owner's pid."""
        return self.home.staging_dir / f"{os.getpid()}-{secrets.token_hex(4)}"

    def _forget(self, fetched: Fetched) -> None:
        """Delete rejected bytes, in downloads/ or in the cache alike."""
        fetched.download.path.unlink(missing_ok=True)
        if not fetched.cached:
            discard_partial(fetched.download.path)

    def _keep_in_cache(self, fetched: Fetched) -> None:
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

    def _download(
        self,
        asset: Asset,
        request: UpdateRequest,
        emit: ProgressCallback,
        cancel: CancelCheck,
        warnings: list[str],
        unpack_into: Path | None,
    ) -> Fetched:
        expected_sha = asset.sha256
        if expected_sha is None:
            if request.require_digest:
                raise IntegrityError(
                    f"{asset.name} has no published sha256 digest and --require-digest was given; "
                    "refusing to install it."
                )
            message = f"{asset.name} has no published digest (uploaded before June 2025); checked its size only."
            warnings.append(message)
            log.warning("no digest published", asset=asset.name)
        partial = self._partial_path(asset)

        def on_bytes(done: int, total: int | None) -> None:
            emit(Progress("download", done, total, asset.name))

        if self.source is None:
            raise UserInputError("No release source configured for this operation.")
        log.info("downloading", asset=asset.name, size=asset.size, url=asset.download_url, partial=str(partial))
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
                options=self.fetch_options,
            )
            done = fetched.download
            seconds = max(time.monotonic() - started, 1e-6)
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
            return fetched
        except OSError as exc:
            if is_disk_full(exc):
                discard_partial(partial)  # the space is what is missing
                discard_ranged(partial)
            raise

    # -- shared by downloads and install-file --------------------------------

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
    ) -> UpdateOutcome:
        """Extract ``archives`` (main first), verify, write the marker and activate.

        The caller holds the update lock. ``meta`` carries the marker fields
        that describe where the archives came from. ``staged`` is a staging
        directory the main archive was already extracted into (while it
        downloaded, its digest checked since), with what that wrote.
        """
        self._check_smoke_model()
        staging = staged[0] if staged is not None else self._new_staging()
        try:
            emit(Progress("verify", message="extracting"))
            main = staged[1] if staged is not None else None
            staged_files = self._extract(archives, staging, str(meta["asset"]), cancel, main)
            checkpoint("after_extract")
            log.info("extracted", files=len(staged_files.files), bytes=sum(r.size for r in staged_files.files.values()))
            backend = str(meta["backend"])
            check_macos_minimum(staging / staged_files.binary_rel, self.host)
            report = probe_binary(
                staging / staged_files.binary_rel,
                backend=backend,
                files=list(staged_files.files),
                host_has_device=host_has_device(backend, self.host),
                runner=self.runner,
                env=self.env,
            )
            log.info("binary runs", version=report.version, devices=list(report.devices))
            identity = parse_version_output(report.version)
            # The binary itself must be the build that was asked for (exit 6 otherwise).
            build_check = check_build(str(meta["tag"]), identity)
            speeds = self._smoke(
                staging / staged_files.binary_rel, f"{meta['tag']} ({backend})", active, emit, warnings
            )
            marker = InstallMarker(
                repo=str(meta["repo"]),
                tag=str(meta["tag"]),
                backend=backend,
                backend_request=str(meta["backend_request"]),
                asset=str(meta["asset"]),
                size=int(str(meta["size"])),
                sha256=str(meta["sha256"]),
                digest_verified=bool(meta["digest_verified"]),
                installed_at=self.clock(),
                sequence=self._next_sequence(),
                binary=staged_files.binary_rel,
                version=report.version,
                devices=report.devices,
                files=staged_files.files,
                source=str(meta.get("source", "download")),
                extra_assets=tuple(meta.get("extra_assets", ())),  # type: ignore[arg-type]
                host=self.host.to_json(),
                reason=str(meta.get("reason", "")),
                speeds=speeds,
                provenance=dict(meta.get("provenance") or {}),  # type: ignore[call-overload]
                release_version=_text_or_none(meta.get("release_version")),
                channel=str(meta.get("channel") or ""),
                reported_build=identity.build,
                build_check=build_check,
            )
            fsync_tree(staging)
            write_marker(staging, marker)
            checkpoint("after_marker")
            expected = Expected(marker.repo, marker.tag, marker.backend_request, backend)
            read_back_marker(staging, expected)
            emit(Progress("activate", message="activating"))
            return self._activate(staging, marker, active, warnings)
        except BaseException as exc:
            remove_tree_quietly(staging)  # best effort: never hides the error on its way out
            if is_disk_full(exc):
                needed = sum(a.stat().st_size for a in archives) * EXTRACTED_SIZE_FACTOR
                raise disk_full_error(self.home.root, needed, f"llama.cpp {meta['tag']}") from exc
            raise

    def _smoke(
        self,
        binary: Path,
        name: str,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
    ) -> dict[str, dict[str, object]]:
        """Run the smoke model on ``binary`` (staged, or installed and about to be used).

        Returns:
            The speed record for the runtime's marker.

        Raises:
            VerificationError: It did not generate, or is slower than allowed.
        """
        if self.gate is None or self.gate.smoke_model is None:
            return {}
        emit(Progress("verify", message=f"generating with {self.gate.smoke_model.name}"))
        smoke = SmokeRun(self.home.staging_dir, InferenceGate(self.gate, clock=self.clock), env=self.env)
        verdict, record = smoke_check(smoke, binary, new_name=name, active=active, policy=self.gate, clock=self.clock)
        if not verdict.ok:
            raise VerificationError(f"The runtime {name} was rejected: {verdict.reason}.")
        warnings.extend(verdict.warnings)
        return record

    def _next_sequence(self) -> int:
        """One more than any installed runtime's: the install order no clock can upset (caller holds the lock)."""
        return 1 + max((r.marker.sequence for r in self.home.installed()), default=0)

    def _extract(
        self, archives: list[Path], staging: Path, asset_name: str, cancel: CancelCheck, main: ExtractResult | None
    ) -> _Staged:
        result = main if main is not None else extract_archive(archives[0], staging, cancel=cancel)
        records = {p: FileRecord(size=s, sha256=h) for p, (s, h) in result.files.items()}
        binary = find_server_binary(staging)
        if binary is None:
            raise VerificationError(f"{asset_name} contains no llama-server binary.")
        for extra in archives[1:]:
            records.update(self._merge_extra(extra, staging, binary.parent, asset_name, cancel))
        if os.path.lexists(marker_path(staging)):
            # The marker is written last, at this very path: an archive's file of that
            # name would be replaced by it and the fresh runtime would look damaged.
            raise UnsafeArchiveError(
                f"Refusing {asset_name}: it ships a file named {MARKER_NAME}, the name of the install marker."
            )
        rel = binary.relative_to(staging).as_posix()
        return _Staged(directory=staging, binary_rel=rel, files=records)

    @staticmethod
    def _merge_extra(
        extra: Path, staging: Path, bin_dir: Path, asset_name: str, cancel: CancelCheck
    ) -> dict[str, FileRecord]:
        """Put a companion archive's files (the CUDA runtime) beside ``llama-server``.

        The binaries find their libraries next to themselves ($ORIGIN,
        Windows' DLL search order), so that is where they must land; a single
        top-level directory of the companion is dropped. Links move as links.
        """
        side = staging.with_name(staging.name + ".extra")
        records: dict[str, FileRecord] = {}
        try:
            found = extract_archive(extra, side, cancel=cancel)
            entries = [*found.files, *found.symlinks]
            tops = {e.split("/", 1)[0] for e in entries}
            strip = len(tops) == 1 and all("/" in e for e in entries)
            moved_links: dict[str, str] = {}
            for rel in entries:
                placed = rel.split("/", 1)[1] if strip else rel
                target = bin_dir / placed
                if target.exists() or target.is_symlink():
                    raise IntegrityError(f"{extra.name} would overwrite {placed} of {asset_name}.")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(side / rel, target)
                if rel in found.files:
                    size, sha = found.files[rel]
                    records[target.relative_to(staging).as_posix()] = FileRecord(size=size, sha256=sha)
                else:
                    moved_links[target.relative_to(staging).as_posix()] = found.symlinks[rel]
            # A link checked inside the companion's tree may point elsewhere from its new place.
            check_links_inside(staging, moved_links, extra.name)
        finally:
            remove_tree_quietly(side)
        return records

    def _activate(
        self,
        staging: Path,
        marker: InstallMarker,
        active: InstalledRuntime | None,
        warnings: list[str],
    ) -> UpdateOutcome:
        try:
            old_pointer = self.home.read_pointer()
        except CorruptStateError:
            old_pointer = Pointer()  # a damaged pointer is what this update repairs
        name = self.home.new_runtime_name(marker.repo, marker.tag, marker.backend)
        final = self.home.runtime_path(name)
        os.replace(staging, final)
        fsync_directory(self.home.runtimes_dir)
        installed = InstalledRuntime(name=name, path=final, marker=marker)
        # Over a damaged active runtime, the intact previous one stays the rollback target.
        previous = active.name if active else self._intact(old_pointer.previous)
        new_pointer = Pointer(active=name, previous=previous)
        try:
            report = self._switch(installed, active, old_pointer, new_pointer)
        except BaseException as exc:
            # Never delete what the pointer names (an un-flip that itself failed),
            # nor what a server that would not stop still runs from.
            still_running = isinstance(exc, SwitchError) and exc.new_still_running
            if not _pointer_names(self.home, name) and not still_running:
                remove_tree_quietly(final)
            raise
        checkpoint("after_pointer_flip")
        log.info("activated", tag=marker.tag, backend=marker.backend, runtime=name)
        return UpdateOutcome("installed", installed, active, (*warnings, *report.warnings), server=report)

    def _intact(self, name: str | None) -> str | None:
        """``name`` when it is a complete runtime, else ``None``."""
        if not name:
            return None
        try:
            return name if not damage(self.home.load(name)) else None
        except CorruptStateError:
            return None

    def _switch(
        self, new: InstalledRuntime, current: InstalledRuntime | None, old_pointer: Pointer, new_pointer: Pointer
    ) -> SwitchReport:
        """Flip the pointer from ``old_pointer`` to ``new_pointer``, switching a running server with it."""

        def flip() -> None:
            checkpoint("before_pointer_flip")
            self.home.write_pointer(new_pointer)

        def unflip() -> None:
            self.home.write_pointer(old_pointer)

        if self.server is None:
            flip()
            return SwitchReport(restarted=False, reload_required=False, pid_changed=False)
        gate = InferenceGate(self.gate, clock=self.clock) if self.gate and self.gate.enabled else None
        switch = ServerSwitch(self.server, health_timeout=self.health_timeout, gate=gate)
        # The switch lock (not only update.lock): `server start/stop` take just this one,
        # so a download never blocks them, and a start never races the flip.
        with UpdateLock(self.home.switch_lock_path).hold("switch", timeout=SERVER_LOCK_TIMEOUT_SECONDS):
            return switch_with_server(switch, new, current, flip, unflip)

    # -- switching to what is installed ---------------------------------------

    def use(
        self, name: str, *, progress: ProgressCallback | None = None, lock_timeout: float = NO_WAIT
    ) -> UpdateOutcome:
        """Activate the installed runtime ``name`` (no download), verified like a fresh install.

        Raises:
            CorruptStateError: ``name`` is no longer a complete runtime.
            VerificationError: It fails verification; the active runtime is unchanged.
            SwitchError: A running server could not be switched; nothing changed.
        """
        emit = progress or (lambda _event: None)
        self.home.ensure()
        with self.lock.hold("use", timeout=lock_timeout):
            target = self.home.load(name)
            active = self._active_for_replacement()
            if active is not None and active.name == target.name and not damage(active, hash_binary=True):
                return UpdateOutcome("up_to_date", active, self.previous())
            return self.activate_installed(target, active, emit, [])

    def _verify_installed(self, target: InstalledRuntime) -> None:
        verify_installed(
            target,
            host_has_device=host_has_device(target.marker.backend, self.host),
            runner=self.runner,
            env=self.env,
        )

    def reverify(self, target: InstalledRuntime, emit: ProgressCallback) -> bool:
        """Whether the installed ``target`` still passes verification (a failure is logged).

        For callers that would otherwise install the same build again: a copy
        that fails is installed afresh, and gc removes the damaged duplicate.
        """
        emit(Progress("verify", message=f"verifying the installed {describe(target)}"))
        try:
            self._verify_installed(target)
        except VerificationError as exc:
            log.warning("installed copy fails verification; installing it again", reason=exc.message)
            return False
        return True

    def activate_installed(
        self,
        target: InstalledRuntime,
        active: InstalledRuntime | None,
        emit: ProgressCallback,
        warnings: list[str],
        *,
        verified: bool = False,
    ) -> UpdateOutcome:
        """Verify the installed ``target`` again and make it active, switching a running server with it.

        The caller holds the update lock; ``active`` is what is active now.

        Raises:
            ProvenanceMissingError: Provenance is required and ``target``'s is not verified.
            VerificationError: ``target`` fails verification; nothing changed.
            SwitchError: A running server could not be switched; nothing changed.
        """
        recorded = provenance_summary(target.marker)
        if self.provenance.require and recorded["status"] != "verified":
            raise ProvenanceMissingError(
                f"The installed {describe(target)} has provenance '{recorded['status']}' ({recorded.get('reason')}) "
                "and --require-provenance was given; nothing was switched."
            )
        if not verified:
            emit(Progress("verify", message=f"verifying the installed {describe(target)}"))
            self._verify_installed(target)
        name = f"{target.marker.tag} ({target.marker.backend})"
        record_speeds(target, self._smoke(target.binary, name, active, emit, warnings))
        emit(Progress("activate", message="activating"))
        try:
            old_pointer = self.home.read_pointer()
        except CorruptStateError:
            old_pointer = Pointer()  # a damaged pointer is what this switch repairs
        previous = active.name if active else self._intact(old_pointer.previous)
        if previous == target.name:  # nothing was active: the target stops being the rollback target
            previous = None
        report = self._switch(target, active, old_pointer, Pointer(active=target.name, previous=previous))
        log.info("switched", tag=target.marker.tag, backend=target.marker.backend, runtime=target.name)
        return UpdateOutcome("switched", target, active, (*warnings, *report.warnings), server=report)

    # -- rollback ----------------------------------------------------------

    def rollback(
        self, *, lock_timeout: float = NO_WAIT
    ) -> tuple[InstalledRuntime, InstalledRuntime | None, SwitchReport]:
        """Re-activate the previous runtime; the current one becomes previous.

        A running server is switched to the previous runtime too (and switched
        back, with the pointer, if it does not come up healthy).

        Raises:
            UserInputError: There is no previous runtime to go back to.
            CorruptStateError: The previous runtime is damaged; nothing changed.
            SwitchError, VerificationError: The server could not be switched; nothing changed.
        """
        self.home.ensure()
        with self.lock.hold("rollback", timeout=lock_timeout):
            pointer = self.home.read_pointer()
            if not pointer.previous:
                raise UserInputError("There is no previous runtime to roll back to.")
            target = self.home.load(pointer.previous)
            problems = damage(target)
            if problems:
                raise CorruptStateError(
                    f"The previous runtime {target.marker.tag} ({target.marker.backend}) is damaged "
                    f"({'; '.join(problems[:3])}); nothing was changed.",
                    hint="Install the release again with `llama-runtime update --tag "
                    f"{target.marker.tag} --backend {target.marker.backend}`.",
                )
            try:
                current = self.home.load(pointer.active) if pointer.active else None
            except CorruptStateError:
                current = None
            report = self._switch(target, current, pointer, Pointer(active=target.name, previous=pointer.active))
            return target, current, report


def _log_plan(plan: Plan) -> None:
    """-v: what was decided and why; -vv: every candidate asset and why it was taken or dropped."""
    release, choice = plan.release, plan.choice
    log.info(
        "decided",
        action=plan.action,
        release=release.tag if release else None,
        asset=choice.asset.name if choice else None,
        backend=choice.backend if choice else None,
        size=choice.asset.size if choice else None,
        reason=plan.reason,
    )
    for candidate in choice.candidates if choice else ():
        log.debug("candidate", asset=candidate.asset_name, taken=candidate.taken, why=candidate.why)


__all__ = [
    "Installer",
    "LlamaRuntimeError",
    "Progress",
    "UpdateOutcome",
    "UpdateRequest",
    "host_has_device",
]
