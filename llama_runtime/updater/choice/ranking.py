"""How good each asset of one backend is for a host (pure, no IO).

The ranking :func:`~updater.choice.choose.choose_asset` sorts by, best first:

* CUDA: the highest line the driver fully supports; failing that, the closest
  newer minor of the driver's major line (NVIDIA's minor-version compatibility),
  only where the build holds native code for every GPU (:func:`.facts.minor_compat_refusal`:
  an older driver cannot JIT the newer toolkit's PTX); never a 13.x line below
  compute capability 7.5. A fork's release manifest,
  when read, decides which profile covers the GPUs (:mod:`.coverage`).
* ROCm: a bundle holding the host's gfx target; one named for a single target
  only on explicit request.
* CPU: generic runtime-dispatch builds before fixed-ISA ones, and a fixed ISA
  only when the CPU has it.
* ``.tar.gz`` before ``.zip``.

A known fact that the host falls short of (:mod:`.facts`) refuses a build outright.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from llama_runtime.updater.choice.coverage import cuda_coverage, host_sms, rocm_targets
from llama_runtime.updater.choice.facts import Build, fact_note, fact_refusal, gfx_family_members, minor_compat_refusal
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.assetnames import AssetInfo
from llama_runtime.updater.release.release import Release
from llama_runtime.updater.release.tags import parse_tag

if TYPE_CHECKING:
    from llama_runtime.updater.sources.build_manifest import ArtifactFacts

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
    if not re.match(r"^\d+(?:\.\d+)*$", text):
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


__all__ = ["Ranker", "same_version"]
