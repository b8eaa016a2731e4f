"""Pick the one asset of a release to install on a host (pure, no IO).

Rules, in order:

* Only complete assets (``state == "uploaded"``) built for the host's OS and
  arch are candidates, and a backend whose build is still uploading stops the
  choice (:class:`~runtime.errors.ReleaseIncompleteError`) instead of letting
  ``auto`` fall to a lower backend; a name that embeds another tag than the release's is
  refused (no mixing releases).
* An explicit backend is mandatory: if the release has no such build for the
  platform, :class:`~runtime.errors.BackendUnavailableError` lists what it
  does have. Nothing falls back silently.
* ``auto`` tries the backends the host can run, best first: CUDA > ROCm >
  SYCL > Vulkan > CPU on Linux/Windows, Metal on Apple silicon.
* Within a backend the best-ranked usable asset wins (:class:`Ranker`: CUDA
  line, the fork manifest's GPU coverage, CPU ISA, archive format).
* A CUDA build takes along its ``cudart-…`` runtime companion of the same
  CUDA version and arch, when the release has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import BackendUnavailableError, ReleaseIncompleteError
from llama_runtime.runtime.marker import AUTO, CONCRETE_BACKENDS, parse_backend
from llama_runtime.updater.choice.facts import (
    Build,
    cuda_coverage,
    fact_note,
    fact_refusal,
    gfx_family_members,
    host_sms,
    minor_compat_refusal,
    rocm_targets,
)
from llama_runtime.updater.choice.host import HostFacts, parse_cuda_version
from llama_runtime.updater.release.assetnames import AssetInfo, parse_asset_name
from llama_runtime.updater.release.release import UPSTREAM_REPOS, Asset, Release
from llama_runtime.updater.release.tags import parse_tag

if TYPE_CHECKING:
    from llama_runtime.updater.release.manifest import ArtifactFacts

__all__ = ["Ranker", "same_version"]


# -- ranking: How good each asset of one backend is for a host (pure, no IO). ------------------------------------

#: Fixed-ISA CPU builds, widest first, with the cpuinfo flag each one needs.
_ISA: Final[tuple[tuple[str, str | None], ...]] = (
    ("avx512", "avx512f"), ("avx2", "avx2"), ("avx", "avx"), ("noavx", None),
)  # fmt: skip
#: CUDA 13.0 removed code generation for Maxwell, Pascal and Volta (compute
#: capability < 7.5), yet driver 580, which supports those GPUs, reports CUDA
#: 13.0: the driver line alone would hand them a 13.x build that finds no device.
_CUDA13_MIN_CAPABILITY: Final[tuple[int, ...]] = (7, 5)


def _version_key(version: str | None) -> tuple[int, ...]:
    text = version.strip() if version is not None else ""
    if not re.match(r"^\d{1,9}(?:\.\d{1,9})*$", text):  # a 5,000-digit "version" is unknown, not exit 1
        return ()
    return tuple(int(p) for p in text.split("."))


def _rank_key(version: str | None) -> tuple[int, ...]:
    """Negated, zero-padded version for "highest first": ``13`` sorts as 13.0.0, below 13.3."""
    key = _version_key(version)
    return tuple(-p for p in (*key, 0, 0, 0)[: max(3, len(key))]) if key else ()


def _line(version: str | None) -> tuple[int, int]:
    """``(major, minor)`` of a CUDA version; ``12`` reads as ``12.0``."""
    key = (*_version_key(version), 0, 0)
    return key[0], key[1]


def same_version(a: str | None, b: str | None) -> bool:
    ka, kb = _version_key(a), _version_key(b)
    width = max(len(ka), len(kb))
    return bool(ka) and ka + (0,) * (width - len(ka)) == kb + (0,) * (width - len(kb))


def _pin_matches(pin: str, version: str | None) -> bool:
    """``"12"`` matches every 12.x; ``"12.4"`` matches 12.4 and 12.4.0.

    A build named by its major line only (a fork's ``cuda12`` bundle) matches
    every pin of that line: its name cannot say which minor it was built with.
    """
    want, have = _version_key(pin), _version_key(version)
    if not want or not have:
        return False
    if len(want) == 1 or len(have) == 1:
        return have[0] == want[0]
    return same_version(pin, version)


#: Variants that run on every CPU of the platform (runtime ISA dispatch, or a
#: bundle built for all GPUs); preferred over specialised ones.
_GENERIC_VARIANTS: Final[frozenset[str | None]] = frozenset({None, "common_cpus", "llvm", "portable", "fp32"})


def _variant_rank(info: AssetInfo, host: HostFacts) -> tuple[int, int] | None:
    """Lower is better; ``None`` when the host CPU lacks the build's fixed ISA."""
    if info.backend == "sycl" and info.variant == "fp16" and host.sycl:
        return (0, 0)  # a Level Zero GPU has fp16: the faster build
    for width, (isa, flag) in enumerate(_ISA):
        if info.variant == isa or (info.variant or "").startswith(f"{isa}-"):
            if flag is not None and flag not in host.cpu_features:
                return None
            return (1, width)
    # Specialised builds (openblas, rpc, msvc, fp16, bundle profiles) need intent.
    return (0, 0) if info.variant in _GENERIC_VARIANTS else (2, 0)


class Ranker:
    """Scores the platform's assets for one host and request."""

    def __init__(self, host: HostFacts, cuda_pin: str | None, auto: bool, release: Release | None = None) -> None:
        self.host, self.cuda_pin, self.auto = host, cuda_pin, auto
        self.release = release

    def verdict(self, info: AssetInfo) -> tuple[tuple[object, ...] | None, str]:
        """``(sort key, why)``; a ``None`` key means the host cannot use it."""
        if not self.auto and (missing := _surely_missing(info.backend, self.host)) is not None:
            return None, missing  # refused before a download whose device check could only fail
        variant: tuple[object, ...] | None = _variant_rank(info, self.host)
        if variant is None:
            return None, f"needs the {info.variant} instruction set, which this CPU lacks"
        build = None
        if self.release is not None:
            build = Build(self.release.repo, parse_tag(self.release.tag).build, self.release.published_at, info)
            if (refusal := fact_refusal(build, self.host)) is not None:
                return None, refusal
        primary: tuple[object, ...] | None = ()
        why = "usable"
        if info.backend == "cuda":
            primary, why = self._cuda(info, build)
        elif info.backend == "rocm":
            primary, why = self._rocm(info)
        if primary is None:
            return None, why
        if why == "usable" and build is not None and (note := fact_note(build)) is not None:
            why = f"usable: {note}"
        artifact = self._artifact(info)
        if info.backend == "cuda" and artifact is not None:
            # The fork's manifest knows the bundle's SM coverage; it replaces the name's profile rank.
            variant, covers = cuda_coverage(artifact, self.host)
            if variant is None:
                return None, covers
            why = covers if why == "usable" else why
        elif info.backend == "cuda" and self.release is not None and self.release.manifest is not None:
            # A bundle the release's own manifest leaves out has no known coverage: after every one it covers.
            variant = (2, 0, 0, 0)
            why = "usable: the release manifest does not describe it, so it ranks after the bundles it does"
        return (primary, variant, 0 if info.archive == "tar.gz" else 1), why

    def _artifact(self, info: AssetInfo) -> ArtifactFacts | None:
        manifest = self.release.manifest if self.release is not None else None
        return manifest.artifact(info.name) if manifest is not None else None

    def _cuda(self, info: AssetInfo, build: Build | None) -> tuple[tuple[object, ...] | None, str]:
        if self.cuda_pin is not None and not _pin_matches(self.cuda_pin, info.backend_version):
            return (
                None,
                f"CUDA {info.backend_version or '(unnamed)'} is not the pinned {self.cuda_pin}",
            )
        driver = self.host.cuda_driver_version
        minor_compat = False
        if driver is not None and info.backend_version is not None:
            build_line, driver_line = _line(info.backend_version), _line(driver)
            if build_line[0] > driver_line[0]:
                return (
                    None,
                    f"CUDA {info.backend_version} is newer than the driver supports ({driver})",
                )
            # NVIDIA's minor-version compatibility: within one major line a build
            # for a newer minor runs on the older driver, but only its native code
            # (no PTX JIT); only taken when nothing the driver fully supports exists.
            minor_compat = build_line > driver_line
        elif driver is None and self.auto:
            return None, "no NVIDIA driver detected"
        elif driver is None and self.host.no_nvidia_driver is not None:
            # Detection is sure: refuse before a download whose device check could only fail.
            return None, f"no NVIDIA driver detected ({self.host.no_nvidia_driver})"
        sms = host_sms(self.host)  # every GPU, whichever of the two host facts gave them
        capability = divmod(sms[0], 10) if sms else ()
        if capability and capability < _CUDA13_MIN_CAPABILITY and _line(info.backend_version)[0] >= 13:
            return (
                None,
                f"CUDA {info.backend_version} builds cannot run on compute capability "
                f"{capability[0]}.{capability[1]} (13.x needs 7.5 or newer)",
            )
        # Unknown lines ("ubuntu-cuda-x64") rank below every named one; a
        # minor-compatible line below every fully supported one, closest first.
        known = 0 if info.backend_version is not None else 1
        if minor_compat and build is not None and (refusal := minor_compat_refusal(build, self.host, sms)):
            return None, refusal
        if minor_compat:
            return (known, 1, _version_key(info.backend_version)), (
                f"usable through NVIDIA minor-version compatibility: CUDA {info.backend_version} "
                f"on a {driver} driver (the same major line, native code for every GPU); the device check "
                "after install decides"
            )
        return (known, 0, _rank_key(info.backend_version)), "usable"

    def _rocm(self, info: AssetInfo) -> tuple[tuple[object, ...] | None, str]:
        version = info.backend_version or ""
        artifact = self._artifact(info)
        members = rocm_targets(artifact) if artifact is not None else ()
        if not members and version.lower().startswith("gfx"):
            members = gfx_family_members(version) or (version.lower(),)
        if not members:
            return (0, _rank_key(info.backend_version)), "usable"
        if any(g.lower() in members for g in self.host.rocm_gfx):
            return (1, ()), "usable"
        if self.auto:
            return None, f"built for {', '.join(members)} only, not for this GPU"
        return (2, ()), "built for one GPU target only"


# -- choose ------------------------------------------------------------------------------------------------------

#: What ``auto`` tries, best first. SYCL only where ``sycl-ls`` shows a Level Zero GPU
#: (upstream's llama-install.sh picks the SYCL fp16 build there). Other backends
#: (OpenVINO, OpenCL, CANN) need explicit intent: their presence is not reliably detectable.
_AUTO_ORDER: Final[tuple[str, ...]] = ("cuda", "rocm", "sycl", "vulkan", "metal", "cpu")


@dataclass(frozen=True)
class Candidate:
    """One asset considered for the host, for ``plan --explain``."""

    asset_name: str
    backend: str
    taken: bool
    why: str


@dataclass(frozen=True)
class Choice:
    """The asset to install and why.

    Attributes:
        asset: The runtime archive.
        info: What its name says.
        extra_assets: Archives to extract next to it (the CUDA runtime).
        backend: The concrete backend installed.
        reason: One sentence for people.
        candidates: Every runtime asset of the platform with its verdict.
    """

    asset: Asset
    info: AssetInfo
    extra_assets: tuple[Asset, ...]
    backend: str
    reason: str
    candidates: tuple[Candidate, ...]


def _repo_label(release: Release) -> str:
    return "llama.cpp" if release.repo.lower() in UPSTREAM_REPOS else release.repo


def _describe(info: AssetInfo) -> str:
    return f"{info.backend} {info.backend_version}" if info.backend_version else info.backend


def _available(infos: list[AssetInfo]) -> str:
    names = {i.backend for i in infos}
    listed = [b for b in CONCRETE_BACKENDS if b in names]
    return ", ".join(listed) if listed else "nothing"


def _no_cuda_reason(host: HostFacts) -> str:
    """Why ``auto`` does not try CUDA; an unsure detection says how to let the device check decide."""
    if host.nvidia_unsure is None:
        return "no usable NVIDIA driver"
    return f"no NVIDIA driver confirmed ({host.nvidia_unsure}; --backend cuda lets its device check decide)"


def _host_can_run(backend: str, host: HostFacts) -> str | None:
    """Why ``auto`` skips ``backend`` on this host, or ``None`` if it may try it."""
    checks = {
        "cuda": (host.cuda_driver_version is not None, _no_cuda_reason(host)),
        "rocm": (host.rocm, "no ROCm GPU"),
        "vulkan": (host.vulkan, "no Vulkan driver"),
        "sycl": (host.sycl, "no Level Zero GPU (sycl-ls)"),
        "metal": (host.metal, "not Apple silicon"),
        "cpu": (not host.metal, "Apple silicon uses the Metal build"),
    }
    ok, why = checks.get(backend, (False, "only installed on request"))
    return None if ok else why


#: What a GPU backend's build needs of the host, in people's words (CUDA names its driver in ``_cuda``).
_NEEDS: Final[dict[str, str]] = {"rocm": "ROCm GPU", "vulkan": "Vulkan driver", "sycl": "Level Zero GPU"}


def _surely_missing(backend: str, host: HostFacts) -> str | None:
    """Why an explicitly requested ``backend`` cannot run here when detection is sure, else ``None``."""
    need = _NEEDS.get(backend)
    why = host.sure_absent(backend) if need is not None else None
    return f"no {need} detected ({why})" if why is not None else None


def choose_asset(release: Release, host: HostFacts, request: str, cuda_version: str | None = None) -> Choice:
    """Choose the runtime archive (and companions) of ``release`` for ``host``.

    Args:
        release: The release, with its assets (and its build manifest, when it publishes one).
        host: What the target machine can run.
        request: ``auto`` or a backend name (aliases accepted).
        cuda_version: Optional CUDA line pin: ``"12"`` matches 12.x, ``"12.4"`` exactly.

    Raises:
        UnknownBackendError: ``request`` is not a backend name.
        UserInputError: ``cuda_version`` is malformed.
        BackendUnavailableError: The release has no usable build for this
            host and request; the message lists what the platform does have.
    """
    backend_request = parse_backend(request)
    pin = parse_cuda_version(cuda_version) if cuda_version is not None else None
    field = _Field.of(release, host.platform)
    ranker = Ranker(host, pin, backend_request == AUTO, release)
    chosen, skipped = _pick(field, ranker, backend_request, f"{_repo_label(release)} {release.tag}")
    return _explain(release, field, chosen, skipped, backend_request)


@dataclass
class _Field:
    """The release's runtime assets for one platform, and the verdict on each so far."""

    platform: str
    on_platform: dict[str, AssetInfo]
    usable: list[tuple[Asset, AssetInfo]]
    verdicts: dict[str, str]

    @classmethod
    def of(cls, release: Release, platform: str) -> _Field:
        """Complete, same-release runtime assets of ``platform``; the others get their reason."""
        field = cls(platform, {}, [], {})
        for asset in release.assets:
            info = parse_asset_name(asset.name)
            if info is None or info.is_companion or info.platform != platform:
                continue
            field.on_platform[asset.name] = info
            if not asset.is_complete:
                field.verdicts[asset.name] = f"still uploading (state {asset.state})"
            elif info.tag is not None and info.tag != release.tag:
                field.verdicts[asset.name] = f"names tag {info.tag}, not {release.tag}"
            else:
                field.usable.append((asset, info))
        return field

    @property
    def infos(self) -> list[AssetInfo]:
        return [info for _, info in self.usable]


def _best_of(field: _Field, ranker: Ranker, backend: str) -> tuple[Asset, AssetInfo] | None:
    """The best usable asset of ``backend``, recording every verdict on the way."""
    scored = []
    for asset, info in field.usable:
        if info.backend != backend:
            continue
        key, why = ranker.verdict(info)
        field.verdicts[asset.name] = why
        if key is not None:
            scored.append((key, asset.name, asset, info))
    if not scored:
        return None
    scored.sort(key=lambda s: (s[0], s[1]))
    return scored[0][2], scored[0][3]


def _pick(field: _Field, ranker: Ranker, request: str, label: str) -> tuple[tuple[Asset, AssetInfo], list[str]]:
    """Walk the backends ``request`` allows, best first; the first usable asset wins.

    Raises:
        ReleaseIncompleteError: The backend's build is still uploading.
        BackendUnavailableError: Nothing usable (the message says why each build cannot run).
    """
    auto, skipped = ranker.auto, []
    for backend in _AUTO_ORDER if auto else (request,):
        if auto and (cannot := _host_can_run(backend, ranker.host)) is not None:
            field.verdicts.update({a.name: f"skipped: {cannot}" for a, i in field.usable if i.backend == backend})
            skipped.append(f"{backend}: {cannot}")
            continue
        if (chosen := _best_of(field, ranker, backend)) is not None:
            return chosen, skipped
        reasons = {field.verdicts[n] for n, i in field.on_platform.items() if i.backend == backend}
        rejected = "; ".join(sorted(reasons))
        if any(r.startswith("still uploading") for r in reasons) and (
            auto or all(r.startswith("still uploading") for r in reasons)
        ):
            # Never let an unfinished upload make auto settle for a lower backend
            # (GitHub asset state "open"): the release is skipped, not degraded.
            raise ReleaseIncompleteError(
                f"The {backend} build of {label} for {field.platform} is still being uploaded; "
                "try again in a few minutes.",
                hint="`llama-runtime check` retries on its next run; nothing was changed.",
            )
        if rejected and not auto:
            raise BackendUnavailableError(
                f"No {backend} build of {label} for {field.platform} can run here: {rejected}."
            )
        skipped.append(f"{backend}: {rejected or 'no build'}")
    # The builds this platform has and why each cannot run here (a fact, a driver, a CPU flag).
    present = {i.backend for i in field.infos}
    refused = [s for s in skipped if not s.endswith(": no build") and s.split(":")[0] in present]
    why_not = f" Why not: {'; '.join(refused)}." if refused else ""
    raise BackendUnavailableError(
        f"No {'usable' if auto else request} build of {label} for {field.platform}. "
        f"Available here: {_available(field.infos)}.{why_not}"
    )


def _explain(
    release: Release, field: _Field, chosen: tuple[Asset, AssetInfo], skipped: list[str], request: str
) -> Choice:
    """The :class:`Choice` for ``chosen``: its companions, the sentence and every candidate's verdict."""
    asset, info = chosen
    extras = _companions(release, info)
    how = f"{request} requested"
    if request == AUTO:
        how = f"auto picked {info.backend}" + (f" (skipped {'; '.join(skipped)})" if skipped else "")
    reason = f"{how}; {asset.name} is the {_describe(info)} build for {field.platform}"
    note = field.verdicts[asset.name]
    if note.startswith(("usable through", "usable: ")):
        reason += f" ({note.removeprefix('usable through ').removeprefix('usable: ')})"
    if extras:
        reason += f", with the CUDA runtime {extras[0].name}"

    def why(name: str) -> str:
        verdict = field.verdicts.get(name) or _unconsidered(field.on_platform[name], request)
        if name == asset.name:
            return "chosen" + (f", {verdict}" if verdict.startswith(("usable through", "usable: ")) else "")
        return f"ranked below {asset.name}" if verdict.startswith("usable") else verdict

    candidates = tuple(
        Candidate(name, field.on_platform[name].backend, name == asset.name, why(name))
        for name in sorted(field.on_platform)
    )
    return Choice(asset, info, extras, info.backend, reason + ".", candidates)


def _unconsidered(info: AssetInfo, request: str) -> str:
    """Why an asset of the platform was not weighed at all (``plan --explain``)."""
    what = " (Snapdragon: CPU, Adreno GPU through OpenCL, Hexagon NPU)" if info.variant == "snapdragon" else ""
    if request == AUTO and info.backend not in _AUTO_ORDER:
        return f"not considered: {info.backend} is installed only on request (--backend {info.backend}){what}"
    return f"not considered: another backend{what}"


def _companions(release: Release, info: AssetInfo) -> tuple[Asset, ...]:
    """The ``cudart-…`` archive matching a CUDA build's version and arch."""
    if info.backend != "cuda" or info.backend_version is None:
        return ()
    found: list[tuple[int, str, Asset]] = []
    for asset in release.assets:
        comp = parse_asset_name(asset.name)
        if comp is None or not comp.is_companion or not asset.is_complete:
            continue
        if comp.platform != info.platform or not same_version(comp.backend_version, info.backend_version):
            continue
        if comp.tag is not None and comp.tag != release.tag:
            continue
        found.append((0 if comp.archive == info.archive else 1, asset.name, asset))
    found.sort(key=lambda f: (f[0], f[1]))
    return (found[0][2],) if found else ()
