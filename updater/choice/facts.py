"""What an asset name cannot say: known facts about build lines, each with its source (pure, no IO).

An asset name tells the OS, arch, backend and a version; it does not tell which glibc the
build was linked against, which macOS it was stamped for, which gfx targets a ROCm build
holds, or which CUDA toolkit compiled a fork's ``cuda12`` bundle. Those facts come from the
workflows that build the releases; each :class:`BuildFact` row says where it was read.

A fact refuses a build only when the host's own fact is known and falls short: a missing
host fact is never read as "can run it" here, but neither as "cannot" — on the machine
itself the binary then proves it (``--version``, ``--list-devices``, the Mach-O minimum OS
check), and a build that failed that proof is not tried again (``failed_builds``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from llama_runtime.updater.choice.assetnames import AssetInfo
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.platform_facts import version_tuple

UPSTREAM_REPOS: Final[frozenset[str]] = frozenset({"ggml-org/llama.cpp", "ggerganov/llama.cpp"})
UNSLOTH_FORK: Final = "unslothai/llama.cpp"

#: ggml-org/llama.cpp .github/workflows/release.yml (read at commit 002efcd4): where each job runs.
_RELEASE_YML: Final = "ggml-org/llama.cpp .github/workflows/release.yml @002efcd4"

#: ROCm family bundle labels and the gfx targets each holds (ROCm/TheRock SUPPORTED_GPUS.md and its
#: artifact groups: gfx103X-dgpu = gfx1030/1031/1032/1034, gfx110X-all = gfx1100–gfx1103,
#: gfx120X-all = gfx1200/gfx1201). A prefix is not a family: gfx1035 or gfx1104 are in none.
GFX_FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    "gfx101x": ("gfx1010", "gfx1011", "gfx1012"),
    "gfx103x": ("gfx1030", "gfx1031", "gfx1032", "gfx1034"),
    "gfx110x": ("gfx1100", "gfx1101", "gfx1102", "gfx1103"),
    "gfx115x": ("gfx1150", "gfx1151"),
    "gfx120x": ("gfx1200", "gfx1201"),
    "gfx90x": ("gfx900", "gfx906", "gfx908", "gfx90a"),
    "gfx94x": ("gfx940", "gfx941", "gfx942"),
}

#: gfx targets of upstream's ROCm builds (release.yml: ubuntu-22-rocm GPU_TARGETS, windows-hip "radeon").
UPSTREAM_LINUX_ROCM_GFX: Final[tuple[str, ...]] = (
    "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101",
    "gfx1102", "gfx1151", "gfx1150", "gfx1200", "gfx1201",
)  # fmt: skip
UPSTREAM_WINDOWS_HIP_GFX: Final[tuple[str, ...]] = (
    "gfx1150", "gfx1151", "gfx1200", "gfx1201", "gfx1100", "gfx1101", "gfx1102", "gfx1030", "gfx1031", "gfx1032",
)  # fmt: skip

#: llama.cpp #23878 moved the macos-arm64 release job to a macos-26 runner without a deployment
#: target from b9428; #26375 (merged 2026-07-31) pinned it again. Builds in between are stamped
#: minos 26.0 and dyld refuses them on macOS 14/15 (unslothai/unsloth #5883).
_MACOS26_FIRST_BUILD: Final = 9428
_MACOS26_FIXED_ON: Final = "2026-08-01"


@dataclass(frozen=True)
class Build:
    """One asset as the facts see it."""

    repo: str
    build: int | None  # upstream build number of the release, when the tag has one
    published_at: str | None  # ISO 8601, as the API gives it
    info: AssetInfo

    @property
    def upstream(self) -> bool:
        return self.repo.lower() in UPSTREAM_REPOS


@dataclass(frozen=True)
class BuildFact:
    """One row of the facts table: which builds, what they need, and where that was read."""

    builds: str
    needs: str
    source: str
    refusal: Callable[[Build, HostFacts], str | None]


def _below(have: str | None, need: str) -> bool:
    """Whether a known ``have`` is lower than ``need`` (unknown is not below)."""
    return have is not None and bool(version_tuple(have)) and version_tuple(have) < version_tuple(need)


def _glibc(build: Build, host: HostFacts) -> str | None:
    info = build.info
    if not build.upstream or info.os != "linux":
        return None
    # ubuntu-22.04 (glibc 2.35) builds x64 cpu, vulkan and rocm; ubuntu-24.04 (2.39) the rest.
    jammy = info.arch == "x64" and info.backend in {"cpu", "vulkan", "rocm"}
    need = "2.35" if jammy else "2.39"
    if _below(host.glibc_version, need):
        runner = "ubuntu-22.04" if jammy else "ubuntu-24.04"
        return f"built on {runner}, it needs glibc {need} and this host has {host.glibc_version}"
    return None


def _macos_minimum(build: Build) -> str | None:
    info = build.info
    if not build.upstream or info.os != "macos":
        return None
    if info.arch == "x64":
        return "13.3"  # release.yml: -DCMAKE_OSX_DEPLOYMENT_TARGET=13.3 on macos-15-intel
    in_era = build.build is not None and build.build >= _MACOS26_FIRST_BUILD
    published = build.published_at or ""
    if in_era and published and published[:10] < _MACOS26_FIXED_ON:
        return "26.0"
    return None


def _macos(build: Build, host: HostFacts) -> str | None:
    need = _macos_minimum(build)
    if need is not None and _below(host.macos_version, need):
        return f"it needs macOS {need} and this Mac runs {host.macos_version}"
    return None


def gfx_family_members(label: str) -> tuple[str, ...] | None:
    """The gfx targets of a family label such as ``gfx110X``; ``None`` when it is not one."""
    return GFX_FAMILIES.get(label.lower())


def _rocm(build: Build, host: HostFacts) -> str | None:
    info = build.info
    if info.backend != "rocm" or not build.upstream:
        return None
    if info.os == "linux" and info.backend_version == "7.2":
        targets, runtime = UPSTREAM_LINUX_ROCM_GFX, "7"
    elif info.os == "windows" and info.variant == "radeon":
        targets, runtime = UPSTREAM_WINDOWS_HIP_GFX, None  # the Windows driver carries the runtime
    else:
        return None
    if host.rocm_gfx and not set(g.lower() for g in host.rocm_gfx) & set(targets):
        return f"it holds code for {', '.join(targets)} only, not for {', '.join(host.rocm_gfx)}"
    if runtime is not None and host.rocm_runtime_version and version_tuple(host.rocm_runtime_version)[:1] != (7,):
        return f"it links the ROCm {runtime} runtime and this host has ROCm {host.rocm_runtime_version}"
    return None


def _cuda_toolkit(build: Build) -> str | None:
    """The CUDA toolkit that compiled a build, where its name does not say it exactly."""
    info = build.info
    if info.backend != "cuda" or info.backend_version is None:
        return None
    if build.repo.lower() == UNSLOTH_FORK and info.backend_version == "12":
        return "12.8"  # the fork's cuda12 bundles (unslothai/unsloth #12842)
    return info.backend_version if "." in info.backend_version else None


def _cuda(build: Build, host: HostFacts) -> str | None:
    toolkit = _cuda_toolkit(build)
    # From toolkit 12.8 llama.cpp compiles with -compress-mode=size, which drivers below
    # CUDA 12.4 (r550) cannot load: "device kernel image is invalid" (unslothai/unsloth #12842).
    if toolkit is not None and version_tuple(toolkit) >= (12, 8) and _below(host.cuda_driver_version, "12.4"):
        return (
            f"it was compiled with CUDA {toolkit} (compressed kernels), which a driver below CUDA 12.4 "
            f"cannot load; this driver supports {host.cuda_driver_version}"
        )
    return None


def _vulkan(build: Build, host: HostFacts) -> str | None:
    # ggml-vulkan creates its instance with VK_API_VERSION_1_2 (llama-install.sh checks the same).
    if build.info.backend == "vulkan" and _below(host.vulkan_api_version, "1.2"):
        return f"ggml-vulkan needs Vulkan 1.2 and this device reports {host.vulkan_api_version}"
    return None


#: The facts table: every row the chooser applies, with its source.
FACTS: Final[tuple[BuildFact, ...]] = (
    BuildFact(
        "upstream Linux x64 cpu/vulkan/rocm",
        "glibc 2.35 (ubuntu-22.04)",
        f"{_RELEASE_YML}: ubuntu-cpu, ubuntu-vulkan, ubuntu-22-rocm",
        _glibc,
    ),
    BuildFact(
        "upstream Linux arm64, s390x, openvino, sycl",
        "glibc 2.39 (ubuntu-24.04)",
        f"{_RELEASE_YML}: *-24.04 runners",
        _glibc,
    ),
    BuildFact(
        "upstream macos-arm64 b9428 … published before 2026-08-01",
        "macOS 26.0",
        "llama.cpp #23878 (macos-26 runner), #26375 (deployment target fixed 2026-07-31), unslothai/unsloth #5883",
        _macos,
    ),
    BuildFact("upstream macos-x64", "macOS 13.3", f"{_RELEASE_YML}: CMAKE_OSX_DEPLOYMENT_TARGET=13.3", _macos),
    BuildFact(
        "upstream ubuntu-rocm-7.2-x64",
        f"gfx in {', '.join(UPSTREAM_LINUX_ROCM_GFX)}; ROCm 7 runtime",
        f"{_RELEASE_YML}: ubuntu-22-rocm ROCM_VERSION 7.2.1, GPU_TARGETS",
        _rocm,
    ),
    BuildFact(
        "upstream win-hip-radeon-x64",
        f"gfx in {', '.join(UPSTREAM_WINDOWS_HIP_GFX)}",
        f"{_RELEASE_YML}: windows-hip GPU_TARGETS",
        _rocm,
    ),
    BuildFact(
        "CUDA builds compiled with toolkit >= 12.8 (incl. unslothai/llama.cpp cuda12 = 12.8)",
        "driver CUDA >= 12.4 (r550)",
        "unslothai/unsloth #12842 (-compress-mode=size)",
        _cuda,
    ),
    BuildFact(
        "every Vulkan build", "Vulkan API 1.2", "ggml-vulkan (VK_API_VERSION_1_2), llama-install.sh probe", _vulkan
    ),
)

_RULES: Final[tuple[Callable[[Build, HostFacts], str | None], ...]] = (_glibc, _macos, _rocm, _cuda, _vulkan)


def fact_refusal(build: Build, host: HostFacts) -> str | None:
    """Why the facts table says ``host`` cannot run ``build``; ``None`` when nothing known says so."""
    for rule in _RULES:
        reason = rule(build, host)
        if reason is not None:
            return reason
    return None


def macos_minimum(build: Build) -> str | None:
    """The macOS version a macOS build is known to need (the binary's own stamp decides on the Mac)."""
    return _macos_minimum(build)
