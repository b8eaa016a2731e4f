"""What an asset name cannot say: known facts about build lines, each with its source (pure, no IO).

An asset name tells the OS, arch, backend and a version; it does not tell which glibc the
build was linked against, which macOS it was stamped for, which gfx targets a ROCm build
holds, or which CUDA toolkit compiled a fork's ``cuda12`` bundle. Those facts come from the
workflows that build the releases; each :class:`BuildFact` row says where it was read.

A fact refuses a build only when the host's own fact is known and falls short: a missing
host fact is never read as "can run it" here, but neither as "cannot" — on the machine
itself the binary then proves it (``--version``, ``--list-devices``, the Mach-O minimum OS
check), and a build that failed that proof is not tried again (``failed_builds``). A fact no
source gives (the glibc of the Linux CUDA builds, ROCm 10.0's gfx targets) is recorded as
:data:`UNKNOWN` and never refuses. One check is stricter, because the run cannot catch it: a
CUDA build newer than the driver is taken only with native code for every GPU
(:func:`minor_compat_refusal`), since PTX fails only when the first kernel loads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.host_detect import version_tuple
from llama_runtime.updater.release.assetnames import AssetInfo
from llama_runtime.updater.release.release import UPSTREAM_REPOS

if TYPE_CHECKING:
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.release.manifest import ArtifactFacts

__all__ = ["CoverageKey", "cuda_coverage", "host_sms", "rocm_targets"]


# -- facts -------------------------------------------------------------------------------------------------------

UNSLOTH_FORK: Final = "unslothai/llama.cpp"

#: ggml-org/llama.cpp .github/workflows/release.yml (read at commit 002efcd4): where each job runs.
_RELEASE_YML: Final = "ggml-org/llama.cpp .github/workflows/release.yml @002efcd4"
#: ggml-org/llama.cpp .github/workflows/release-publish.yml (read at commit 5641289a, Oct 2026): the
#: asset list of today's builds and what each holds (its release body names them).
_PUBLISH_YML: Final = "ggml-org/llama.cpp .github/workflows/release-publish.yml @5641289a"
#: ggml's CMAKE_CUDA_ARCHITECTURES defaults (ggml/src/ggml-cuda/CMakeLists.txt, used when a build sets
#: none and GGML_NATIVE=OFF). Read at 516af33c (86-real, 89-real + PTX); the 90-virtual, 120a-real and
#: 121a-real lines are in the same file as quoted by a patch against b7676 and printed by a 2026-08-19
#: configure log ("Using CMAKE_CUDA_ARCHITECTURES=75-virtual;80-virtual;86-real;89-real;90-virtual;
#: 120a-real;121a-real"). release.yml @002efcd4's windows-cuda job sets no list; the Linux CUDA jobs
#: (since about 2026-09-14, PRs #28186, #29202) were in no stored source, so the defaults are taken for
#: them too and the binary's run decides otherwise.
_GGML_CUDA_ARCHS: Final = "ggml/src/ggml-cuda/CMakeLists.txt defaults (@516af33c and later, see facts.py)"
#: What no stored source says; the binary's own run (--version, --list-devices) decides it.
UNKNOWN: Final = "unknown: decided by running"

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
#: GPU_TARGETS of the ROCm 7.14 jobs (release.yml at b10665, Aug 2026: the ubuntu-24-rocm and
#: windows-rocm matrices with ROCM_VERSION "7.14.0", as a third-party test fixture quotes them; the same
#: lists are in shared/reference/upstream-2026-10.md). The jobs that build today's ``rocm-10.0`` archives
#: (ROCM_VERSION "10.0.0") were in no stored source with their lists: unknown.
UPSTREAM_LINUX_ROCM_714_GFX: Final[tuple[str, ...]] = (
    "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032",
    "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151", "gfx1152",
    "gfx1200", "gfx1201",
)  # fmt: skip
UPSTREAM_WINDOWS_ROCM_714_GFX: Final[tuple[str, ...]] = (
    "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201",
)  # fmt: skip

#: NVIDIA's minor-version compatibility floors (docs.nvidia.com/deploy/cuda-compatibility): a 12.x build
#: runs on any driver >= r525, a 13.x build on any >= r580, "with limited feature-set" — but PTX cannot
#: be JIT-compiled by a driver older than the toolkit that emitted it (cudaErrorUnsupportedPtxVersion).
MINOR_COMPAT_DRIVER_FLOOR: Final[dict[int, int]] = {12: 525, 13: 580}

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


#: Upstream Linux builds whose runner release.yml @002efcd4 names: (backend, arch) -> (runner, its glibc).
_LINUX_RUNNERS: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("cpu", "x64"): ("ubuntu-22.04", "2.35"),
    ("vulkan", "x64"): ("ubuntu-22.04", "2.35"),
    ("cpu", "arm64"): ("ubuntu-24.04-arm", "2.39"),
    ("vulkan", "arm64"): ("ubuntu-24.04-arm", "2.39"),
    ("cpu", "s390x"): ("ubuntu-24.04-s390x", "2.39"),
    ("openvino", "x64"): ("ubuntu-24.04", "2.39"),
    ("sycl", "x64"): ("ubuntu-24.04", "2.39"),
}


def _glibc_floor(build: Build) -> tuple[str, str] | None:
    """``(runner, glibc)`` an upstream Linux build was linked on, where a source names its runner.

    CUDA (built in nvidia/cuda images no stored source names), ROCm 7.14/10.0 (pip-wheel jobs whose
    runner was not read) and Snapdragon builds have no known floor: their ``--version`` run decides.
    """
    info = build.info
    if not build.upstream or info.os != "linux" or info.variant == "snapdragon":
        return None
    if info.backend == "rocm":
        return ("ubuntu-22.04", "2.35") if info.backend_version == "7.2" else None  # ubuntu-22-rocm @002efcd4
    return _LINUX_RUNNERS.get((info.backend, info.arch))


def _glibc(build: Build, host: HostFacts) -> str | None:
    floor = _glibc_floor(build)
    if floor is not None and _below(host.glibc_version, floor[1]):
        return f"built on {floor[0]}, it needs glibc {floor[1]} and this host has {host.glibc_version}"
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


def _rocm_targets(build: Build) -> tuple[tuple[str, ...], str | None] | None:
    """``(gfx targets, runtime major it links)`` of an upstream ROCm build; ``None`` when unknown."""
    info = build.info
    if info.backend != "rocm" or not build.upstream:
        return None
    if info.os == "linux" and info.backend_version == "7.2":
        return UPSTREAM_LINUX_ROCM_GFX, "7"
    if info.os == "windows" and info.variant == "radeon":
        return UPSTREAM_WINDOWS_HIP_GFX, None  # the Windows driver carries the runtime
    if info.backend_version == "7.14":
        # Whether the 7.14 archives carry the ROCm runtime was not found: no runtime check.
        return (UPSTREAM_LINUX_ROCM_714_GFX if info.os == "linux" else UPSTREAM_WINDOWS_ROCM_714_GFX), None
    return None  # rocm-10.0 and later: target list and bundled runtime unknown


def _rocm(build: Build, host: HostFacts) -> str | None:
    known = _rocm_targets(build)
    if known is None:
        return None
    targets, runtime = known
    if host.rocm_gfx and not set(g.lower() for g in host.rocm_gfx) & set(targets):
        return f"it holds code for {', '.join(targets)} only, not for {', '.join(host.rocm_gfx)}"
    if runtime is not None and host.rocm_runtime_version and version_tuple(host.rocm_runtime_version)[:1] != (7,):
        return f"it links the ROCm {runtime} runtime and this host has ROCm {host.rocm_runtime_version}"
    return None


def fact_note(build: Build) -> str | None:
    """What the facts cannot say about a build the host may take (the run decides), for explanations."""
    info = build.info
    if build.upstream and info.backend == "rocm" and _rocm_targets(build) is None:
        return (
            f"the gfx targets of ROCm {info.backend_version or '(unnamed)'} builds are in no source read "
            f"({UNKNOWN}: the device check after install decides)"
        )
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


def ggml_cuda_architectures(toolkit: str) -> tuple[str, ...]:
    """ggml's default ``CMAKE_CUDA_ARCHITECTURES`` for a non-native build with CUDA ``toolkit``.

    ``NN-virtual`` is PTX only (JIT-compiled by the driver), ``NN-real`` native code (SASS).
    """
    version = version_tuple(toolkit)
    archs = ["50-virtual", "61-virtual", "70-virtual"] if version < (13,) else []
    archs += ["75-virtual", "80-virtual", "86-real"]
    if version >= (11, 8):
        archs += ["89-real", "90-virtual"]
    if version >= (12, 8):
        archs.append("120a-real")
    if version >= (12, 9):
        archs.append("121a-real")
    return tuple(archs)


_ARCH: Final = re.compile(r"^(?P<sm>\d{2,3})(?P<kind>[af]?)(?:-(?P<code>real|virtual))?$")


def _native_for(arch: str, sm: int) -> bool:
    """Whether ``arch`` holds SASS that runs on compute capability ``sm`` (86 = 8.6).

    SASS for X.y runs on X.z with z >= y (CUDA binary compatibility); an ``a`` (arch-specific)
    target only on exactly X.y. PTX (``-virtual``) is not native.
    """
    m = _ARCH.match(arch)
    if m is None or m["code"] == "virtual":
        return False
    built = int(m["sm"])
    if m["kind"] == "a":
        return built == sm
    return built // 10 == sm // 10 and built % 10 <= sm % 10


#: The oldest build the defaults above are known for (the patch quoting them is against b7676); older
#: builds had other defaults, which were not read: their architectures are unknown.
_GGML_CUDA_DEFAULTS_SINCE: Final = 7676


def cuda_native_code(build: Build) -> tuple[tuple[str, ...], str] | None:
    """``(architectures, source)`` of an upstream CUDA build; ``None`` when no source gives them."""
    toolkit = _cuda_toolkit(build)
    if not build.upstream or toolkit is None or build.info.os not in {"linux", "windows"}:
        return None
    if build.build is None or build.build < _GGML_CUDA_DEFAULTS_SINCE:
        return None
    return ggml_cuda_architectures(toolkit), _GGML_CUDA_ARCHS


def minor_compat_refusal(build: Build, host: HostFacts, sms: tuple[int, ...]) -> str | None:
    """Why ``build`` may not be taken through minor-version compatibility on ``host``; ``None`` if it may.

    Only native code survives a driver older than the build's toolkit: PTX from the newer toolkit
    cannot be JIT-compiled by it, and ``--list-devices`` shows the GPU before the first kernel fails.
    """
    version, driver = build.info.backend_version or "", host.cuda_driver_version
    head = f"CUDA {version} is newer than this {driver} driver"
    line, installed = version_tuple(version), version_tuple(host.nvidia_driver)
    floor = MINOR_COMPAT_DRIVER_FLOOR.get(line[0]) if line else None
    if floor is not None and installed and installed[0] < floor:
        return f"{head}, and minor-version compatibility needs driver r{floor} or newer, not {host.nvidia_driver}"
    known = cuda_native_code(build)
    if known is None:
        return (
            f"{head}, and no source read says which GPUs it holds native code for: not taken on minor-version grounds"
        )
    if not sms:
        return f"{head}, and this GPU's compute capability is unknown, so native code for it cannot be confirmed"
    archs, _source = known
    ptx_only = [sm for sm in sms if not any(_native_for(a, sm) for a in archs)]
    if ptx_only:
        gpus = ", ".join(f"{sm // 10}.{sm % 10}" for sm in ptx_only)
        return (
            f"{head}, and it holds only PTX for compute capability {gpus} ({';'.join(archs)}), which an "
            f"older driver cannot JIT-compile (cudaErrorUnsupportedPtxVersion); the next candidate is taken"
        )
    return None


def _vulkan(build: Build, host: HostFacts) -> str | None:
    # ggml-vulkan creates its instance with VK_API_VERSION_1_2 (llama-install.sh checks the same).
    if build.info.backend == "vulkan" and _below(host.vulkan_api_version, "1.2"):
        return f"ggml-vulkan needs Vulkan 1.2 and this device reports {host.vulkan_api_version}"
    return None


#: The facts table: every row the chooser applies (or leaves to the run), with its source.
FACTS: Final[tuple[BuildFact, ...]] = (
    BuildFact(
        "upstream Linux x64 cpu/vulkan, ubuntu-rocm-7.2-x64",
        "glibc 2.35 (ubuntu-22.04)",
        f"{_RELEASE_YML}: ubuntu-cpu, ubuntu-vulkan, ubuntu-22-rocm",
        _glibc,
    ),
    BuildFact(
        "upstream Linux arm64/s390x cpu, arm64 vulkan, openvino, sycl",
        "glibc 2.39 (ubuntu-24.04)",
        f"{_RELEASE_YML}: *-24.04 runners",
        _glibc,
    ),
    BuildFact(
        "upstream ubuntu-cuda-12.8/13.4 (x64, arm64), ubuntu-rocm-7.14/10.0, linux-arm64-snapdragon",
        "glibc: no floor known",
        f"{UNKNOWN} (the nvidia/cuda image and ROCm runner were in no stored source)",
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
        "upstream ubuntu-rocm-7.14-x64 / win-rocm-7.14-x64",
        "gfx in the 7.14 GPU_TARGETS (Linux 22, Windows 20 targets); runtime not checked",
        "release.yml @b10665 (Aug 2026) ubuntu-24-rocm/windows-rocm gpu_targets, upstream-2026-10.md",
        _rocm,
    ),
    BuildFact(
        "upstream ubuntu-rocm-10.0-x64 / win-rocm-10.0-x64",
        "gfx targets and bundled ROCm runtime: not known",
        f"{UNKNOWN} ({_PUBLISH_YML} names the archives; the ROCm 10.0 jobs were in no stored source)",
        _rocm,
    ),
    BuildFact(
        "CUDA builds compiled with toolkit >= 12.8 (incl. unslothai/llama.cpp cuda12 = 12.8)",
        "driver CUDA >= 12.4 (r550)",
        "unslothai/unsloth #12842 (-compress-mode=size)",
        _cuda,
    ),
    BuildFact(
        "upstream CUDA builds taken on an older driver of the same major (minor-version compatibility)",
        "driver >= r525 (12.x) / r580 (13.x), and native code (-real) for every GPU: 8.6+, 8.9, 12.0 (12.8+), "
        "12.1 (12.9+); PTX-only GPUs (7.5, 8.0, 9.0, 10.0 …) need a driver as new as the build",
        f"{_GGML_CUDA_ARCHS}; docs.nvidia.com/deploy/cuda-compatibility",
        lambda _build, _host: None,  # applied by the ranking, which knows when a build is minor-compatible
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


# -- coverage: Which GPUs a fork's bundle was compiled for, from its manifest (pure). ----------------------------

_CAPABILITY: Final = re.compile(r"^\s*(\d{1,2})\.(\d)\s*$")
#: Sort key of a bundle that covers the host: (portable last, SM span, rank, max SM).
CoverageKey = tuple[int, int, int, int]


def host_sms(host: HostFacts) -> tuple[int, ...]:
    """The SM number of every visible NVIDIA GPU (compute capability 8.6 -> 86), sorted; ``()`` if unknown."""
    caps = host.compute_capabilities or ((host.compute_capability,) if host.compute_capability else ())
    found = {int(m[1]) * 10 + int(m[2]) for c in caps if (m := _CAPABILITY.match(c))}
    return tuple(sorted(found))


def _span(artifact: ArtifactFacts) -> str:
    if artifact.min_sm is not None and artifact.max_sm is not None:
        return f"sm_{artifact.min_sm}–sm_{artifact.max_sm}"
    return "an unstated SM range"


def _label(artifact: ArtifactFacts) -> str:
    return artifact.bundle_profile or artifact.coverage_class or "this"


def cuda_coverage(artifact: ArtifactFacts, host: HostFacts) -> tuple[CoverageKey | None, str]:
    """Whether the CUDA bundle ``artifact`` covers every GPU of ``host``.

    Returns:
        ``(sort key, why)``; a ``None`` key means the bundle cannot run here.
    """
    sms, label = host_sms(host), _label(artifact)
    if not sms:
        if artifact.portable:
            return (1, 0, artifact.rank, 0), f"usable: {label} is the portable bundle (compute capability unknown)"
        return None, (
            f"the {label} bundle covers only {_span(artifact)} and this GPU's compute capability "
            "is unknown; only the portable bundle is taken then"
        )
    low, high = artifact.min_sm, artifact.max_sm
    if not artifact.supported_sms or low is None or high is None:
        return None, f"the release manifest gives the {label} bundle no SM coverage"
    missing = [sm for sm in sms if sm not in artifact.supported_sms or not low <= sm <= high]
    if missing:
        compiled = ", ".join(f"sm_{s}" for s in artifact.supported_sms)
        return None, (
            f"the {label} bundle is compiled for {compiled} only, not for "
            f"{', '.join(f'sm_{s}' for s in missing)} (release manifest)"
        )
    key = (1 if artifact.portable else 0, high - low, artifact.rank, high)
    gpus = ", ".join(f"sm_{s}" for s in sms)
    return key, f"usable: the release manifest says {label} ({_span(artifact)}) covers {gpus}"


def rocm_targets(artifact: ArtifactFacts) -> tuple[str, ...]:
    """The gfx targets a ROCm bundle holds: its ``mapped_targets``, else its family's members."""
    if artifact.mapped_targets:
        return artifact.mapped_targets
    label = (artifact.gfx_target or "").lower()
    return gfx_family_members(label) or ((label,) if label else ())
