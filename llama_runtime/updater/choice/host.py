"""What a machine can run: :class:`HostFacts` (OS, arch, GPUs, drivers, CPU features) and its vocabulary.

This machine's facts come from
:func:`~llama_runtime.updater.choice.host_detect.detect_host` (probes through
seams, :mod:`probing`); another machine's from :func:`host_for_platform`
(``plan --platform``) or a host file (:mod:`host_file`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from llama_runtime.runtime.errors import UserInputError

#: ``--platform`` and host-file platforms: every one upstream publishes a build for (release-publish.yml
#: @5641289a: Ubuntu x64/arm64/s390x, macOS arm64/x64, Windows x64/arm64, Android arm64).
PLATFORMS: Final[tuple[str, ...]] = (
    "linux-x64", "linux-arm64", "linux-s390x", "windows-x64", "windows-arm64", "macos-arm64", "macos-x64",
    "android-arm64",
)  # fmt: skip


@dataclass(frozen=True)
class HostFacts:
    """Everything the asset choice needs to know about a machine.

    Attributes:
        os: ``linux``, ``windows``, ``macos`` or ``android``.
        arch: ``x64``, ``arm64`` or ``s390x`` (or the raw machine name).
        cuda_driver_version: Highest CUDA the NVIDIA driver supports ("12.4"),
            ``None`` without a usable NVIDIA GPU.
        nvidia_driver: NVIDIA driver version ("550.54.14").
        compute_capability: Lowest compute capability of the visible GPUs ("8.6").
        gpu_names: Names of visible GPUs (NVIDIA, Vulkan devices).
        vulkan: A Vulkan loader and a hardware driver are present.
        rocm: An AMD GPU usable through ROCm/HIP was found.
        metal: Apple silicon, where the macOS build uses Metal.
        cpu_features: CPU flags (``avx2``, ``avx512f``, ``asimd`` …); empty when unknown.
        sources: ``(fact, where it came from)`` pairs for explanations.
        rocm_gfx: AMD gfx targets found ("gfx1100").
        compute_capabilities: Compute capability of every visible NVIDIA GPU.
        vulkan_api_version: Highest Vulkan API version a device reports ("1.3.280").
        rocm_runtime_version: Installed ROCm runtime ("6.4.1").
        sycl: An Intel Level Zero GPU (with fp16) for the SYCL build.
        macos_version: macOS product version ("15.4").
        glibc_version: The C library's version on Linux ("2.35").

    ``None`` (or empty) means unknown, and unknown never means "can run it".
    """

    os: str
    arch: str
    cuda_driver_version: str | None = None
    nvidia_driver: str | None = None
    compute_capability: str | None = None
    gpu_names: tuple[str, ...] = ()
    vulkan: bool = False
    rocm: bool = False
    metal: bool = False
    cpu_features: frozenset[str] = field(default_factory=frozenset)
    sources: tuple[tuple[str, str], ...] = ()
    rocm_gfx: tuple[str, ...] = ()
    compute_capabilities: tuple[str, ...] = ()
    vulkan_api_version: str | None = None
    rocm_runtime_version: str | None = None
    sycl: bool = False
    macos_version: str | None = None
    glibc_version: str | None = None

    @property
    def platform(self) -> str:
        """``os-arch``, e.g. ``linux-x64``."""
        return f"{self.os}-{self.arch}"

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict for ``doctor`` and ``plan --explain``."""
        return {
            "platform": self.platform,
            "os": self.os,
            "arch": self.arch,
            "cuda_driver_version": self.cuda_driver_version,
            "nvidia_driver": self.nvidia_driver,
            "compute_capability": self.compute_capability,
            "gpu_names": list(self.gpu_names),
            "vulkan": self.vulkan,
            "rocm": self.rocm,
            "rocm_gfx": list(self.rocm_gfx),
            "metal": self.metal,
            # Only the instruction sets that decide a build, not /proc/cpuinfo's ~100 flags.
            "cpu_features": sorted(self.cpu_features & ISA_FLAGS),
            "compute_capabilities": list(self.compute_capabilities),
            "vulkan_api_version": self.vulkan_api_version,
            "rocm_runtime_version": self.rocm_runtime_version,
            "sycl": self.sycl,
            "macos_version": self.macos_version,
            "glibc_version": self.glibc_version,
            "sources": {fact: where for fact, where in self.sources},
        }


#: CPU flags that decide which llama.cpp CPU build (or ggml CPU variant) runs: the x86
#: levels (SSE4.2 up to AVX-512 and AMX) and the Arm extensions. Everything else in
#: /proc/cpuinfo (``pae``, ``mce``, ``vmx`` …) says nothing about which asset fits.
ISA_FLAGS: Final[frozenset[str]] = frozenset(
    {
        "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni",
        "avx512f", "avx512bw", "avx512vl", "avx512cd", "avx512dq", "avx512_vnni", "avx512vnni",
        "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
        "asimd", "neon", "asimddp", "dotprod", "i8mm", "bf16", "sve", "sve2", "sme",
    }
)  # fmt: skip


def normalize_os(system: str, env: Mapping[str, str]) -> str:
    """Map ``platform.system()`` to the asset vocabulary."""
    name = system.strip().lower()
    if name == "linux" and "ANDROID_ROOT" in env and "ANDROID_DATA" in env:
        return "android"
    return {"darwin": "macos", "win32": "windows", "cygwin": "windows"}.get(name, name)


def normalize_arch(machine: str) -> str:
    """Map ``platform.machine()`` to the asset vocabulary (``x64``, ``arm64``, ``s390x``)."""
    name = machine.strip().lower()
    if name in {"x86_64", "amd64", "x64"}:
        return "x64"
    if name in {"aarch64", "arm64", "armv8l", "arm64e"}:
        return "arm64"
    return name


#: What ``plan --platform`` assumes for an x64 machine it knows nothing about:
#: AVX2, the build llama.cpp recommends for most users (its README's Windows
#: x64 CPU build is the AVX2 one), so no fixed-ISA build above it is chosen.
ASSUMED_X64_FEATURES: Final[frozenset[str]] = frozenset({"sse4_1", "sse4_2", "avx", "avx2", "fma"})


#: A CUDA version as people write it: a major line, ``major.minor`` or ``major.minor.patch``,
#: each part at most three digits (CUDA is at 13; a 20-digit "version" is a typo or an attack).
_CUDA_VERSION: Final = re.compile(r"^[0-9]{1,3}(?:\.[0-9]{1,3}){0,2}$")


def parse_cuda_version(text: str) -> str:
    """``text`` as a CUDA version (``"12"``, ``"12.4"``, ``"12.4.1"``), trimmed.

    Raises:
        UserInputError: It is not one (``nan``, ``-12``, ``12.x``), saying what is valid.
    """
    version = text.strip()
    if not _CUDA_VERSION.match(version) or int(version.split(".")[0]) == 0:
        raise UserInputError(f"CUDA version {text[:40]!r} is malformed; use a line such as '12' or '12.4'.")
    return version


def host_for_platform(platform: str, cuda_version: str | None = None) -> HostFacts:
    """Facts for planning another machine (``plan --platform``).

    Only what the caller states is assumed: the platform, and a driver that
    supports ``cuda_version`` when given. No GPU is guessed; an x64 CPU is
    assumed to have AVX2 (:data:`ASSUMED_X64_FEATURES`), and ``sources`` says so.

    Raises:
        UserInputError: Unknown platform, malformed CUDA version, or CUDA on macOS.
    """
    name = platform.strip().lower() if isinstance(platform, str) else ""
    if name not in PLATFORMS:
        raise UserInputError(f"Unknown platform {platform!r}; choose one of: {', '.join(PLATFORMS)}.")
    os_name, arch = name.split("-")
    sources: list[tuple[str, str]] = [("platform", "--platform")]
    cuda: str | None = None
    if cuda_version is not None:
        cuda = parse_cuda_version(cuda_version)
        if os_name == "macos":
            raise UserInputError(f"CUDA is not available on {name}; omit --cuda-version.")
        sources.append(("cuda_driver_version", "--cuda-version"))
    metal = name == "macos-arm64"
    if metal:
        sources.append(("metal", "Apple silicon"))
    features: frozenset[str] = frozenset()
    if arch == "x64":
        features = ASSUMED_X64_FEATURES
        sources.append(("cpu_features", "assumed AVX2 (what llama.cpp recommends for most x64 users); no facts given"))
    return HostFacts(
        os=os_name, arch=arch, cuda_driver_version=cuda, metal=metal, cpu_features=features, sources=tuple(sources)
    )
