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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.binary import ProcessRunner
from llama_runtime.runtime.errors import UserInputError, VerificationError
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.marker import (
    InstallMarker,
    file_problems,
    install_order,
)
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.runtime.trust import trust_problems
from llama_runtime.updater.stage.staged import Staged
from llama_runtime.updater.verify.install_facts import InstallFacts
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
    "Verified",
    "active_state",
    "build_key",
    "damage",
    "describe",
    "find_build",
    "marker_from_facts",
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
    return [*trust_problems(runtime.path), *file_problems(runtime.path, runtime.marker, "sha256", digest=digest)]


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
        return [*trust_problems(runtime.path), *snapshot.problems(runtime, "size", hash_binary=hash_binary)]
    return [
        *trust_problems(runtime.path),
        *file_problems(runtime.path, runtime.marker, "size", hash_binary=hash_binary),
    ]


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


@dataclass(frozen=True)
class Verified:
    """What verifying the staged tree found, for its marker."""

    report: BinaryReport
    identity: BinaryIdentity
    build_check: BuildCheck
    speeds: dict[str, dict[str, object]]
    #: What the compute check did (``updater.verify.compute``), for the marker.
    compute_check: dict[str, object] = field(default_factory=dict)


def marker_from_facts(
    facts: InstallFacts,
    staged: Staged,
    verified: Verified,
    *,
    installed_at: str,
    sequence: int,
    host: dict[str, object],
) -> InstallMarker:
    """The install marker of ``staged``: ``facts`` say where it came from, ``verified`` what it is."""
    if facts.size is None or facts.sha256 is None:
        raise AssertionError(f"unreachable: {facts.asset} is verified before its bytes were hashed")
    return InstallMarker(
        repo=facts.repo,
        tag=facts.tag,
        backend=facts.backend,
        backend_request=facts.backend_request,
        asset=facts.asset,
        size=facts.size,
        sha256=facts.sha256,
        digest_verified=facts.digest_verified,
        installed_at=installed_at,
        sequence=sequence,
        binary=staged.binary_rel,
        version=verified.report.version,
        devices=verified.report.devices,
        files=staged.files,
        source=facts.source,
        extra_assets=tuple(dict(e) for e in facts.extra_assets),
        host=host,
        reason=facts.reason,
        speeds=verified.speeds,
        provenance=dict(facts.provenance),
        release_version=facts.release_version,
        channel=facts.channel,
        reported_build=verified.identity.build,
        build_check=verified.build_check,
        attempts=tuple(dict(a) for a in facts.attempts),
        companion_from=facts.companion_from,
        compute_check=dict(verified.compute_check),
    )
