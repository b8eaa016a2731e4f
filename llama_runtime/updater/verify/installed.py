"""Runtimes already installed: one copy per build, found by tag, verified again before use.

A *build* is what a runtime directory holds: a repository's release tag in one
concrete backend. The home keeps at most one runtime per build (``update`` and
``use`` switch to the copy that is there instead of installing a second one,
and ``gc`` removes duplicates an older version left behind).

Invariant: a runtime becomes active again only after the checks a fresh
install passes — every recorded file's size and sha256, the marker read back
from disk, and the binary run with ``--version`` and ``--list-devices``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.binary import ProcessRunner
from llama_runtime.runtime.errors import IntegrityError, UnsafeArchiveError, UserInputError, VerificationError
from llama_runtime.runtime.fsutil import FlushAhead, remove_tree_quietly
from llama_runtime.runtime.layout import Home, HomeSnapshot, InstalledRuntime
from llama_runtime.runtime.marker import (
    MARKER_NAME,
    FileRecord,
    InstallMarker,
    file_problems,
    install_order,
    marker_path,
)
from llama_runtime.updater.progress import CancelCheck
from llama_runtime.updater.stage.archive import ExtractResult, extract_archive, find_server_binary
from llama_runtime.updater.stage.archive_rules import check_links_inside
from llama_runtime.updater.verify.verify import (
    BinaryIdentity,
    BinaryReport,
    BuildCheck,
    Expected,
    probe_binary,
    read_back_marker,
)

if TYPE_CHECKING:
    from llama_runtime.updater.choice.decide import ActiveState

__all__ = [
    "BuildKey",
    "Staged",
    "Verified",
    "active_state",
    "build_key",
    "damage",
    "describe",
    "extract_staged",
    "find_build",
    "marker_from_meta",
    "merge_companion",
    "new_staging_path",
    "select_installed",
    "verify_files",
    "verify_installed",
]


# -- installed ---------------------------------------------------------------------------------------------------

BuildKey = tuple[str, str, str, str]


def build_key(marker: InstallMarker) -> BuildKey:
    """What makes two runtimes copies of one build: repository, tag, concrete backend and asset.

    The asset is part of it because one tag may publish two builds of a backend
    (CUDA 12 and CUDA 13 archives): those are different runtimes, not copies.
    """
    return (marker.repo.lower(), marker.tag, marker.backend, marker.asset)


def describe(runtime: InstalledRuntime) -> str:
    """``b7000 (vulkan, ggml-org/llama.cpp)``: how a runtime is named to people."""
    m = runtime.marker
    return f"{m.tag} ({m.backend}, {m.repo})"


def _newest_first(runtimes: Iterable[InstalledRuntime]) -> list[InstalledRuntime]:
    return sorted(runtimes, key=lambda r: (install_order(r.marker), r.name), reverse=True)


def find_build(
    runtimes: Iterable[InstalledRuntime],
    key: BuildKey,
    *,
    exclude: str | None = None,
    snapshot: HomeSnapshot | None = None,
) -> InstalledRuntime | None:
    """The newest intact runtime of build ``key`` other than ``exclude`` (a runtime name).

    ``snapshot``, the locked operation's look at the home, checks each runtime once.
    """
    for runtime in _newest_first(runtimes):
        if runtime.name != exclude and build_key(runtime.marker) == key and not damage(runtime, snapshot=snapshot):
            return runtime
    return None


def select_installed(
    runtimes: Sequence[InstalledRuntime],
    tag: str,
    *,
    repo: str | None = None,
    backend: str | None = None,
) -> InstalledRuntime:
    """The installed runtime a person means by ``tag`` (and, to disambiguate, repo and backend).

    ``tag`` may also be a runtime directory name, as ``list`` shows it. Among
    copies of one build the newest wins.

    Raises:
        UserInputError: Nothing installed matches (the message lists what is
            installed), or several builds match and ``--backend``/``--repo``
            must choose.
    """
    by_name = [r for r in runtimes if r.name == tag]
    if by_name:
        return by_name[0]
    matches = [
        r
        for r in _newest_first(runtimes)
        if r.marker.tag == tag
        and (repo is None or r.marker.repo.lower() == repo.lower())
        and (backend is None or backend == "auto" or r.marker.backend == backend)
    ]
    if not matches:
        shown = ", ".join(describe(r) for r in _newest_first(runtimes)) or "nothing"
        wanted = tag + (f" for {backend}" if backend and backend != "auto" else "") + (f" from {repo}" if repo else "")
        raise UserInputError(
            f"{wanted} is not installed. Installed: {shown}.",
            hint=f"`llama-runtime update --tag {tag}` installs it; `llama-runtime list` shows what is installed.",
        )
    builds: dict[BuildKey, InstalledRuntime] = {}
    for runtime in matches:
        builds.setdefault(build_key(runtime.marker), runtime)
    if len(builds) > 1:
        shown = ", ".join(f"{describe(r)} as {r.name}" for r in builds.values())
        raise UserInputError(
            f"{tag} is installed more than once: {shown}. Choose one with --backend or --repo, "
            "or give the runtime's name.",
        )
    return next(iter(builds.values()))


def verify_files(runtime: InstalledRuntime, digest: Callable[[Path], str] | None = None) -> list[str]:
    """Recorded files that are missing or differ in size or sha256 (empty when all match).

    ``digest`` computes a file's sha256 (``HomeSnapshot.sha256``: each file hashed once per operation).
    """
    return file_problems(runtime.path, runtime.marker, "sha256", digest=digest)


def verify_installed(
    runtime: InstalledRuntime,
    *,
    host_has_device: bool,
    runner: ProcessRunner,
    env: Mapping[str, str] | None = None,
    digest: Callable[[Path], str] | None = None,
) -> None:
    """Check an installed runtime as strictly as a fresh install before it becomes active.

    ``digest`` computes a file's sha256 (see :func:`verify_files`).

    Raises:
        VerificationError: A file differs from the marker, the marker does not
            read back, or the binary does not run as a build of its backend.
    """
    problems = verify_files(runtime, digest)
    if problems:
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise VerificationError(
            f"The installed runtime {describe(runtime)} in {runtime.path} is damaged: {shown}.",
            # By its name: a copy of a build installed twice is not addressed by its tag.
            hint=f"`llama-runtime remove {runtime.name}` and install it again with "
            f"`llama-runtime update --tag {runtime.marker.tag} --backend {runtime.marker.backend}`.",
        )
    m = runtime.marker
    read_back_marker(runtime.path, Expected(m.repo, m.tag, m.backend_request, m.backend))
    probe_binary(
        runtime.binary,
        backend=m.backend,
        files=list(m.files),
        host_has_device=host_has_device,
        runner=runner,
        env=env,
    )


def damage(runtime: InstalledRuntime, *, hash_binary: bool = False, snapshot: HomeSnapshot | None = None) -> list[str]:
    """Recorded files of ``runtime`` that are gone or changed size, the binary included.

    Cheap enough for ``status`` and for every update (stat only, plus the
    binary's sha256 when ``hash_binary``): a runtime whose directory was half
    deleted, or whose ``llama-server`` was truncated, must not count as installed.
    With the locked operation's ``snapshot``, each runtime is checked (and each file hashed) once.
    """
    if snapshot is not None:
        return snapshot.problems(runtime, "size", hash_binary=hash_binary)
    return file_problems(runtime.path, runtime.marker, "size", hash_binary=hash_binary)


def active_state(runtime: InstalledRuntime, snapshot: HomeSnapshot | None = None) -> ActiveState:
    """``runtime`` as the update decision sees it: its marker, and whether its files are intact.

    Intact means every recorded size and the binary's sha256 (the file that runs,
    a few MB): a rewritten ``llama-server`` of the same size is not "up to date".
    Nor is a library rewritten at the same size: every file whose stat fingerprint
    changed is hashed (``runtime.fingerprint``), as ``ensure()`` sees it.
    """
    from llama_runtime.updater.choice.decide import ActiveState

    intact = not damage(runtime, hash_binary=True, snapshot=snapshot) and not _fingerprint_damage(runtime, snapshot)
    return ActiveState(runtime.marker, intact=intact, name=runtime.name)


def _fingerprint_damage(runtime: InstalledRuntime, snapshot: HomeSnapshot | None) -> tuple[str, ...]:
    """:func:`runtime.fingerprint.check_runtime` of ``runtime``, hashing through the snapshot's cache."""
    from llama_runtime.runtime.fingerprint import Fingerprints

    stamps = Fingerprints.load(snapshot.home.root if snapshot else runtime.path.parent.parent)
    found = stamps.check(runtime.name, runtime.path, runtime.marker, snapshot.sha256 if snapshot else None)
    stamps.save()
    return found.damage


# -- staging: The staged tree: a release's archives extracted into staging/. -------------------------------------


@dataclass
class Staged:
    """An extracted candidate runtime: its directory, its server binary and every file's record."""

    directory: Path
    binary_rel: str
    files: dict[str, FileRecord] = field(default_factory=dict)
    #: Each companion archive's files and links (paths in ``directory``), in the archives' order.
    companions: list[tuple[dict[str, FileRecord], dict[str, str]]] = field(default_factory=list)
    #: The large files' flushes, begun as they were extracted (waited for by ``fsync_tree``).
    ahead: FlushAhead | None = None

    @property
    def binary(self) -> Path:
        """The staged ``llama-server``."""
        return self.directory / self.binary_rel


def new_staging_path(home: Home) -> Path:
    """A fresh staging path (not created yet) that recovery knows by its owner's pid."""
    return home.staging_dir / f"{os.getpid()}-{secrets.token_hex(4)}"


def extract_staged(
    archives: list[Path], staging: Path, asset_name: str, cancel: CancelCheck, main: ExtractResult | None
) -> Staged:
    """Extract ``archives`` (main first) into ``staging``; ``main`` is what a streamed extraction already wrote.

    Raises:
        VerificationError: The main archive holds no ``llama-server``.
        UnsafeArchiveError: A member is refused, or an archive ships a file at the marker's path.
        IntegrityError: A companion would overwrite a file of the main archive.
    """
    result = main if main is not None else extract_archive(archives[0], staging, cancel=cancel)
    records = {p: FileRecord(size=s, sha256=h) for p, (s, h) in result.files.items()}
    binary = find_server_binary(staging)
    if binary is None:
        raise VerificationError(f"{asset_name} contains no llama-server binary.")
    companions = [
        merge_companion(extra, staging, binary.parent, asset_name, cancel, result.ahead) for extra in archives[1:]
    ]
    for placed, _links in companions:
        records.update(placed)
    if os.path.lexists(marker_path(staging)):
        # The marker is written last, at this very path: an archive's file of that
        # name would be replaced by it and the fresh runtime would look damaged.
        raise UnsafeArchiveError(
            f"Refusing {asset_name}: it ships a file named {MARKER_NAME}, the name of the install marker."
        )
    rel = binary.relative_to(staging).as_posix()
    return Staged(directory=staging, binary_rel=rel, files=records, companions=companions, ahead=result.ahead)


def merge_companion(
    extra: Path, staging: Path, bin_dir: Path, asset_name: str, cancel: CancelCheck, ahead: FlushAhead | None = None
) -> tuple[dict[str, FileRecord], dict[str, str]]:
    """Put a companion archive's files (the CUDA runtime) beside ``llama-server``.

    The binaries find their libraries next to themselves ($ORIGIN,
    Windows' DLL search order), so that is where they must land; a single
    top-level directory of the companion is dropped. Links move as links.

    Returns:
        The records of the files moved and the links' targets, by their path in ``staging``.
    """
    side = staging.with_name(staging.name + ".extra")
    records: dict[str, FileRecord] = {}
    moved_links: dict[str, str] = {}
    try:
        found = extract_archive(extra, side, cancel=cancel, ahead=ahead)
        entries = [*found.files, *found.symlinks]
        tops = {e.split("/", 1)[0] for e in entries}
        strip = len(tops) == 1 and all("/" in e for e in entries)
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
    return records, moved_links


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Verified:
    """What verifying the staged tree found, for its marker."""

    report: BinaryReport
    identity: BinaryIdentity
    build_check: BuildCheck
    speeds: dict[str, dict[str, object]]


def marker_from_meta(
    meta: dict[str, object],
    staged: Staged,
    verified: Verified,
    *,
    installed_at: str,
    sequence: int,
    host: dict[str, object],
) -> InstallMarker:
    """The install marker of ``staged``: ``meta`` says where it came from, ``verified`` what it is."""
    return InstallMarker(
        repo=str(meta["repo"]),
        tag=str(meta["tag"]),
        backend=str(meta["backend"]),
        backend_request=str(meta["backend_request"]),
        asset=str(meta["asset"]),
        size=int(str(meta["size"])),
        sha256=str(meta["sha256"]),
        digest_verified=bool(meta["digest_verified"]),
        installed_at=installed_at,
        sequence=sequence,
        binary=staged.binary_rel,
        version=verified.report.version,
        devices=verified.report.devices,
        files=staged.files,
        source=str(meta.get("source", "download")),
        extra_assets=tuple(meta.get("extra_assets", ())),  # type: ignore[arg-type]
        host=host,
        reason=str(meta.get("reason", "")),
        speeds=verified.speeds,
        provenance=dict(meta.get("provenance") or {}),  # type: ignore[call-overload]
        release_version=_text_or_none(meta.get("release_version")),
        channel=str(meta.get("channel") or ""),
        reported_build=verified.identity.build,
        build_check=verified.build_check,
        attempts=tuple(meta.get("attempts", ())),  # type: ignore[arg-type]
        companion_from=str(meta.get("companion_from") or ""),
    )
