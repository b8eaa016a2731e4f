"""Installing without a network: a release archive already on disk, or a bundle.

Both go through :meth:`~llama_runtime.updater.activate.pipeline.InstallPipeline.install_archives`, the one
path every install takes (safe extraction, probe, marker, read-back,
activation, rollback); this module only decides what to feed it.

A *bundle* (``llama-runtime export``, :mod:`.export`) is read and checked by
:mod:`.export` (its ``bundle`` section): every file against the marker's ``files`` (size and sha256)
before anything is extracted.

Invariants:
    * The caller's file is only read, never modified: it is copied (and hashed
      on the way) into a private work directory, and the copy is what gets
      extracted, so the recorded sha256 is that of the bytes installed.
    * The work directory is removed whatever happens.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Final

from llama_runtime.runtime.errors import (
    BackendUnavailableError,
    CorruptStateError,
    DigestMismatchError,
    ForeignMarkerError,
    UserInputError,
)
from llama_runtime.runtime.fsutil import is_disk_full, remove_tree_quietly, sha256_file
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import InstallMarker
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.updater.activate.attempts import UpdateOutcome
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.config import EXTRACTED_SIZE_FACTOR, MAX_ASSET_BYTES
from llama_runtime.updater.fetch.cache import check_free_space, disk_full_error
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.offline.export import read_bundle_marker, repack_bundle
from llama_runtime.updater.progress import silent
from llama_runtime.updater.release.assetnames import AssetInfo, parse_asset_name
from llama_runtime.updater.verify.install_facts import InstallFacts
from llama_runtime.updater.verify.installed import damage, find_build, verify_files
from llama_runtime.updater.verify.provenance import (
    Provenance,
    ProvenanceCheck,
    combine,
    read_attestation_file,
    record_each_provenance,
)

__all__ = ["InstallFileRequest", "install_file", "reinstall_from_cache"]

log = get_logger("llama_runtime.install")

# Copy and hash in 1 MiB pieces: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
_HEX: Final[frozenset[str]] = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class InstallFileRequest:
    """What ``install-file`` was asked.

    ``tag``, ``repo`` and ``backend`` are ``None`` when the caller gave none;
    ``default_repo`` then applies to plain archives. A ``backend`` given by name must list a
    device of it, as for ``update``, unless ``allow_no_device`` (a machine image made elsewhere).
    """

    archive: Path
    default_repo: str
    tag: str | None = None
    repo: str | None = None
    backend: str | None = None
    sha256: str | None = None
    attestation: Path | None = None
    allow_no_device: bool = False


@dataclass(frozen=True)
class _Copy:
    path: Path
    size: int
    sha256: str


# -- pure decisions ----------------------------------------------------------------------


def normalize_sha256(value: str | None) -> str | None:
    """``HEX`` or ``sha256:HEX`` as 64 lowercase hex digits.

    Raises:
        UserInputError: Not a sha256.
    """
    if value is None:
        return None
    hexpart = value.strip().lower().removeprefix("sha256:")
    if len(hexpart) != 64 or not set(hexpart) <= _HEX:
        raise UserInputError(f"--sha256 '{value}' is not a sha256; give 64 hex digits.")
    return hexpart


def archive_facts(request: InstallFileRequest, info: AssetInfo | None, host_platform: str) -> InstallFacts:
    """Marker fields for a plain release archive, from the request and its name (its bytes not read yet).

    Raises:
        UserInputError: No tag or backend can be told, or the name contradicts the flags.
        BackendUnavailableError: The name says it is built for another platform.
    """
    name = request.archive.name
    tag = request.tag or (info.tag if info else None)
    if tag is None:
        raise UserInputError(f"Cannot tell the release of {name} from its name; pass --tag (e.g. --tag b7000).")
    if request.tag and info and info.tag and info.tag != request.tag:
        raise UserInputError(f"{name} is release {info.tag} by its name, not {request.tag}; fix --tag.")
    if info is not None and info.platform != host_platform:
        raise BackendUnavailableError(f"{name} is a {info.platform} build; this machine is {host_platform}.")
    requested = request.backend if request.backend not in (None, "auto") else None
    if requested and info and info.backend != requested:
        raise UserInputError(f"{name} is a {info.backend} build by its name, not {requested}; fix --backend.")
    backend = requested or (info.backend if info else None)
    if backend is None:
        raise UserInputError(f"Cannot tell the backend of {name} from its name; pass --backend (e.g. --backend cpu).")
    return InstallFacts(
        repo=request.repo or request.default_repo,
        tag=tag,
        backend=backend,
        backend_request=requested or "auto",
        asset=name,
        source="file",
        reason=f"installed from the file {request.archive}",
        explicit_backend=requested is not None,
        allow_no_device=request.allow_no_device,
    )


def bundle_facts(request: InstallFileRequest, marker: InstallMarker) -> InstallFacts:
    """Marker fields for a bundle: its own marker's, checked against any flags given.

    Raises:
        UserInputError: A flag contradicts what the bundle holds.
    """
    given = {"--tag": (request.tag, marker.tag), "--repo": (request.repo, marker.repo)}
    if request.backend not in (None, "auto"):
        given["--backend"] = (request.backend, marker.backend)
    for flag, (asked, held) in given.items():
        if asked is not None and asked != held:
            raise UserInputError(f"The bundle {request.archive.name} holds {held}, not {asked}; drop or fix {flag}.")
    return InstallFacts(
        repo=marker.repo,
        tag=marker.tag,
        backend=marker.backend,
        backend_request=marker.backend_request,
        asset=marker.asset,
        size=marker.size,
        sha256=marker.sha256,
        source="bundle",
        extra_assets=marker.extra_assets,
        reason=f"restored from the bundle {request.archive} (first installed from {marker.source})",
        explicit_backend=request.backend not in (None, "auto"),
        allow_no_device=request.allow_no_device,
    )


def is_same_install(active: InstalledRuntime | None, facts: InstallFacts) -> bool:
    """Whether ``active`` already is this repo/tag/backend built from the same bytes."""
    if active is None:
        return False
    m = active.marker
    return (m.repo, m.tag, m.backend, m.sha256) == (facts.repo, facts.tag, facts.backend, facts.sha256)


#: The reason of an export that carries its runtime's files but not the archive they came from.
REPACKED: Final = (
    "repacked: the export carries the runtime's files but not the release archive they were extracted "
    "from, and its marker, which ties them to that archive, is unsigned"
)


@dataclass(frozen=True)
class Carried:
    """A release archive about to be extracted: its name (as the marker records it), path and sha256."""

    name: str
    path: Path
    sha256: str


def file_provenance(
    check: ProvenanceCheck,
    request: InstallFileRequest,
    facts: InstallFacts,
    bundled: InstallMarker | None,
    archives: Sequence[Carried],
    *,
    carried: bool = False,
) -> InstallFacts:
    """``facts`` with the provenance of a file install, checked offline before anything is extracted.

    Every archive that will be extracted (``archives``, main first) is judged
    against its own attestation and the sha256 of its bytes: ``--bundle`` or the
    export's recorded bundle for the main archive, the bundle recorded beside
    each companion for the others. The runtime is ``verified`` only if every one
    is; an archive nothing attests makes it ``unverified``, which
    ``--require-provenance`` refuses here, before any byte is extracted or run.
    An export that does not carry its release archives (``carried`` false) is
    ``repacked`` and never verified, whatever its (unsigned) marker claims.

    Raises:
        ProvenanceError: A given or recorded attestation does not verify.
        ProvenanceMissingError: Provenance is required and an archive has none verified.
    """
    asset, repo = facts.asset, facts.repo
    if bundled is not None and not carried:
        return replace(record_each_provenance(facts, []), provenance=check.not_checked(asset, REPACKED).to_marker())
    main = _main_provenance(check, request, repo, bundled, archives[0])
    recorded = {str(e.get("name", "")): e.get("provenance") for e in (bundled.extra_assets if bundled else ())}
    extras = [(a.name, _companion_provenance(check, repo, a, recorded.get(a.name))) for a in archives[1:]]
    result = combine([(asset, main), *extras])
    return replace(record_each_provenance(facts, extras), provenance=result.to_marker())


def _main_provenance(
    check: ProvenanceCheck, request: InstallFileRequest, repo: str, bundled: InstallMarker | None, main: Carried
) -> Provenance:
    """The main archive's: ``--bundle`` first, else what the export recorded of it."""
    if request.attestation is not None:
        return check.evaluate(main.name, main.sha256, repo, read_attestation_file(request.attestation))
    if bundled is None:
        return check.not_checked(main.name, "installed from a file without --bundle")
    recorded = bundled.provenance
    if isinstance(recorded.get("bundle"), dict):
        result = check.evaluate(main.name, main.sha256, repo, [recorded["bundle"]])
        return replace(result, reason=f"{result.reason}; re-verified from the release archive the export carries")
    if recorded.get("status") == "absent":
        return check.evaluate(main.name, main.sha256, repo, [])
    return check.not_checked(main.name, "restored from an export whose provenance was not checked")


def _companion_provenance(check: ProvenanceCheck, repo: str, archive: Carried, recorded: object) -> Provenance:
    """A companion archive's, from the bundle recorded beside it: nothing else vouches for its bytes."""
    bundle = recorded.get("bundle") if isinstance(recorded, dict) else None
    if not isinstance(bundle, dict):
        return check.not_checked(archive.name, "no attestation travels with this archive")
    return check.evaluate(archive.name, archive.sha256, repo, [bundle])


# -- install-file ------------------------------------------------------------------------


def install_file(installer: Installer, request: InstallFileRequest) -> UpdateOutcome:
    """Install a release archive or a bundle from disk, as a download would be installed.

    Raises:
        UserInputError: The file is missing or unreadable, or tag/backend are unclear.
        DigestMismatchError: ``--sha256`` was given and does not match.
        IntegrityError: Not an archive, unsafe, a bundle with an invalid marker, or one whose files
            differ from its marker.
        VerificationError: The runtime was rejected; the active one is unchanged.
        BusyError: Another update holds the lock.
    """
    if is_stream(request.archive):
        # A pipe or standard input can be read once: spool it, then install the copy.
        with _spooled(request.archive, installer.home) as spooled:
            return install_file(installer, replace(request, archive=spooled))
    archive = request.archive
    _check_readable(archive)
    expected_sha = normalize_sha256(request.sha256)
    bundled = read_bundle_marker(archive)
    if bundled is not None:
        facts = bundle_facts(request, bundled)
    else:
        facts = archive_facts(request, parse_asset_name(archive.name), installer.host.platform)
    home = installer.home
    home.ensure()
    with installer.lock.hold("install-file"):
        installer.finish_trial(silent)  # an abandoned switch is reverted first (runtime.trial)
        snapshot = installer.read_state()  # the one look at the home, less a killed install-file's work
        active = _active(installer, snapshot)
        work = home.downloads_dir / f"install-file-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            size = archive.stat().st_size
            check_free_space(home.root, size * (2 + EXTRACTED_SIZE_FACTOR), what=archive.name)
            copy = _copy_hashing(archive, work / archive.name)
            if expected_sha is not None and copy.sha256 != expected_sha:
                raise DigestMismatchError(
                    f"{archive} does not match --sha256 (expected {expected_sha}, got {copy.sha256}); "
                    "nothing was installed."
                )
            facts = replace(facts, digest_verified=expected_sha is not None)
            facts, carried_archives, carried = _archives(copy, bundled, facts, work)
            facts = file_provenance(installer.provenance, request, facts, bundled, carried_archives, carried=carried)
            archives = [a.path for a in carried_archives]
            if active is not None and damage(active, hash_binary=True, snapshot=snapshot):
                active = None  # reinstalled from these bytes; a damaged runtime is no rollback target
            if is_same_install(active, facts):
                assert active is not None
                if not verify_files(active, snapshot.sha256):  # "these very bytes": every file, by hash
                    return UpdateOutcome("up_to_date", active, snapshot.previous())
                active = None
            there = _installed_copy(snapshot, facts, active)
            if there is not None and installer.reverify(there, silent, snapshot):
                return installer.activate_installed(there, active, silent, [], verified=True, snapshot=snapshot)
            outcome = installer.pipeline.install_archives(
                archives, facts, active=active, emit=silent, cancel=lambda: False, warnings=[], snapshot=snapshot
            )
            if facts.provenance.get("status") == "verified":
                _keep_attested(installer, archives, facts)
            return outcome
        finally:
            remove_tree_quietly(work)  # best effort: never hides the install's own outcome


def reinstall_from_cache(installer: Installer, damaged: InstalledRuntime) -> UpdateOutcome | None:
    """``damaged``'s build again, from the release archives the home's cache still holds: no network.

    Each archive is found by the sha256 the marker records and hashed again; its
    provenance is judged as an export's is (each against the bundle recorded for
    it, or unverified). ``None`` when any archive is gone or differs: the
    caller falls back to downloading.

    Raises:
        LlamaRuntimeError: The install was refused; the active runtime is unchanged.
    """
    m = damaged.marker
    wanted = [(m.asset, m.sha256), *((str(e.get("name", "")), str(e.get("sha256", ""))) for e in m.extra_assets)]
    home = installer.home
    with installer.lock.hold("doctor --repair"):
        installer.finish_trial(silent)
        snapshot = HomeSnapshot.read(home)
        cached = _cached(installer, wanted)
        if cached is None:
            return None
        request = InstallFileRequest(cached[0].path, default_repo=m.repo)
        facts = replace(
            bundle_facts(request, m),
            source=m.source,
            reason="reinstalled from the cached release archives",
            digest_verified=bool(m.digest_verified),
        )
        facts = file_provenance(installer.provenance, request, facts, m, cached, carried=True)
        active = _active(installer, snapshot)
        if active is not None and (damage(active, hash_binary=True, snapshot=snapshot) or active.name == damaged.name):
            active = None  # a damaged runtime is no rollback target
        for c in cached:
            log.info("taken from the download cache (its sha256 checked)", asset=c.name, sha256=c.sha256)
        warnings: list[str] = []
        outcome = installer.pipeline.install_archives(
            [c.path for c in cached],
            facts,
            active=active,
            emit=silent,
            cancel=lambda: False,
            warnings=warnings,
            snapshot=snapshot,
        )
        installer.pipeline.retain(warnings)  # as after any install: the damaged copy is no longer kept
        for warning in warnings:
            log.warning("repair", warning=warning)
        return outcome


def _cached(installer: Installer, wanted: list[tuple[str, str]]) -> list[Carried] | None:
    """The cached archives named by ``wanted`` (name, sha256), each hashed again; ``None`` if any is missing."""
    found: list[Carried] = []
    for name, sha256 in wanted:
        try:
            path = installer.cache.path_for(sha256)
            if not name or sha256_file(path) != sha256.lower():
                return None
        except (ValueError, OSError):
            return None
        found.append(Carried(name, path, sha256.lower()))
    return found


def _archives(
    copy: _Copy, bundled: InstallMarker | None, facts: InstallFacts, work: Path
) -> tuple[InstallFacts, list[Carried], bool]:
    """``facts`` so far, what to extract (main first), and whether these are the release archives themselves.

    A plain archive is itself (its size and sha256 join ``facts``; a bundle that carries its
    release archives keeps its marker's, which those archives proved; a repacked one is named by
    its own bytes). An export is taken apart (its files checked against its marker): when
    it carries the release archives its marker names, those are extracted, as the first
    install did; otherwise its files are (repacked).
    """
    if bundled is None:
        hashed = replace(facts, size=copy.size, sha256=copy.sha256)
        return hashed, [Carried(copy.path.name, copy.path, copy.sha256)], True
    repacked = repack_bundle(copy.path, bundled, work / "bundle-files" / copy.path.name)
    originals = repacked.attested_archives(bundled)
    if originals is None:
        # Repacked: the marker's archive sha256 is an unsigned claim no carried archive proves, so the
        # runtime is named by the bundle's own bytes; it never passes for the genuine archive's install.
        proven = replace(facts, size=copy.size, sha256=copy.sha256)
        return proven, [Carried(bundled.asset, repacked.files, "")], False
    return facts, [Carried(name, path, sha256) for name, (path, sha256) in originals], True


def _keep_attested(installer: Installer, archives: list[Path], facts: InstallFacts) -> None:
    """Keep the verified archives in the asset cache (named by their sha256), so an ``export`` can carry them."""
    digests = [str(facts.sha256), *(str(e.get("sha256", "")) for e in facts.extra_assets)]
    for path, sha256 in zip(archives, digests, strict=False):
        try:
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
            installer.cache.store(path, sha256)
        except (OSError, ValueError) as exc:  # the install succeeded; only a later export is repacked
            log.warning("could not keep the verified archive in the cache", path=str(path), reason=str(exc))


def _installed_copy(
    snapshot: HomeSnapshot, facts: InstallFacts, active: InstalledRuntime | None
) -> InstalledRuntime | None:
    """An installed runtime built from these very bytes (switched to instead of a second copy)."""
    key = (facts.repo.lower(), facts.tag, facts.backend, facts.asset)
    there = find_build(snapshot.runtimes, key, exclude=active.name if active else None, snapshot=snapshot)
    return there if there is not None and there.marker.sha256 == facts.sha256 else None


#: ``install-file -`` reads the archive from standard input.
STDIN_NAME: Final = "-"


def is_stream(path: Path) -> bool:
    """Whether ``path`` is standard input (``-``) or a pipe/device that can be read only once."""
    if str(path) == STDIN_NAME:
        return True
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # missing: _check_readable says so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def _spooled(source: Path, home: Home) -> Iterator[Path]:
    """``source`` read once into a private file in the home, removed afterwards."""
    home.ensure()
    spool = Path(tempfile.mkdtemp(prefix=".spool-", dir=home.downloads_dir))
    try:
        target = spool / ("stdin" if str(source) == STDIN_NAME else source.name)
        try:
            with contextlib.ExitStack() as stack:
                src = sys.stdin.buffer if str(source) == STDIN_NAME else stack.enter_context(source.open("rb"))
                with target.open("wb") as dst:
                    _copy_capped(src, dst, source)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(home.root, 0, "the archive from standard input") from exc
            raise UserInputError(f"Cannot read the archive {source}: {exc.strerror or exc}.") from None
        yield target
    finally:
        remove_tree_quietly(spool)


def _copy_capped(src: BinaryIO, dst: BinaryIO, source: Path) -> None:
    """Copy a pipe into the spool, refusing more than any release asset can be (``/dev/zero`` ends here)."""
    copied = 0
    while chunk := src.read(_CHUNK_BYTES):
        copied += len(chunk)
        if copied > MAX_ASSET_BYTES:
            raise UserInputError(
                f"{source} gave more than {MAX_ASSET_BYTES // 1024**3} GiB, more than any llama.cpp release archive; "
                "it is not an archive."
            )
        dst.write(chunk)


def _check_readable(archive: Path) -> None:
    try:
        with archive.open("rb") as fh:
            fh.read(1)
    except IsADirectoryError:
        raise UserInputError(f"{archive} is a directory; give the path of a .zip or .tar.gz archive.") from None
    except OSError as exc:
        raise UserInputError(f"Cannot read the archive {archive}: {exc.strerror or exc}.") from None


def _active(installer: Installer, snapshot: HomeSnapshot) -> InstalledRuntime | None:
    try:
        return installer.active(snapshot)
    except ForeignMarkerError:
        raise
    except CorruptStateError:
        return None  # a damaged active runtime must not block its repair


def _copy_hashing(source: Path, target: Path) -> _Copy:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as src, target.open("wb") as dst:
        while chunk := src.read(_CHUNK_BYTES):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    return _Copy(target, size, digest.hexdigest())
