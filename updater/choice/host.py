"""What this machine can run: OS, arch, GPUs, drivers, CPU features.

:func:`detect_host` asks the machine through two seams, the process runner
(:mod:`llama_runtime.runtime.runner`) and a file system view, so tests feed recorded profiles and never need a GPU.
Every probe is time-boxed and swallows its own failure: a missing or hanging
``nvidia-smi`` means "no NVIDIA facts", never an exception. Each fact records
where it came from (``sources``) so ``doctor`` and ``plan --explain`` can say
why a backend was or was not picked.
"""

from __future__ import annotations

import ctypes.util
import os as _os
import platform as _platform
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.runner import ProcessResult, ProcessRunner, run_process

#: Seconds one probe command may take. nvidia-smi can stall for many seconds on
#: a wedged driver; a slow probe must not hold up an update.
PROBE_TIMEOUT_S: Final[float] = 5.0

#: ``--platform`` values accepted for planning another machine.
PLATFORMS: Final[tuple[str, ...]] = (
    "linux-x64", "linux-arm64", "windows-x64", "windows-arm64", "macos-arm64", "macos-x64",
)  # fmt: skip

#: NVIDIA's minimum Linux driver per CUDA toolkit (CUDA release notes, table 3).
#: Only a fallback when the ``nvidia-smi`` banner has no "CUDA Version".
_DRIVER_FLOOR: Final[tuple[tuple[int, str], ...]] = (
    (580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"), (555, "12.5"),
    (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"),
)  # fmt: skip

_VULKAN_ICD_DIRS: Final[tuple[str, ...]] = (
    "/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
)  # fmt: skip
_VULKAN_LOADERS: Final[tuple[str, ...]] = (
    "/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib/aarch64-linux-gnu/libvulkan.so.1",
    "/usr/lib64/libvulkan.so.1", "/usr/lib/libvulkan.so.1", r"C:\Windows\System32\vulkan-1.dll",
)  # fmt: skip
# Device nodes of GPUs that are not under /dev/dri (NVIDIA proprietary, WSL).
_GPU_NODES: Final[tuple[str, ...]] = ("/dev/nvidia0", "/dev/dxg")
# Software rasterisers expose Vulkan on the CPU; they would be slower than the CPU build.
_SOFTWARE_ICD: Final = re.compile(r"lvp|lavapipe|swiftshader", re.IGNORECASE)
_CUDA_BANNER: Final = re.compile(r"CUDA(?: UMD)? Version:\s*(\d+)\.(\d+)")
_GFX: Final = re.compile(r"\bgfx[1-9][0-9a-f]{2,3}\b")
_VK_DEVICE_TYPE: Final = re.compile(r"deviceType\s*=\s*PHYSICAL_DEVICE_TYPE_(\w+)")
_VK_DEVICE_NAME: Final = re.compile(r"deviceName\s*=\s*(.+)")


class FileView(Protocol):
    """The read-only file-system questions the probes ask."""

    def read_text(self, path: str) -> str | None:
        """File content, or ``None`` when unreadable."""

    def list_dir(self, path: str) -> tuple[str, ...]:
        """Entry names of a directory, empty when it is missing."""

    def exists(self, path: str) -> bool:
        """Whether the path exists."""

    def find_library(self, name: str) -> str | None:
        """``ctypes.util.find_library`` or a test double."""


class RealFiles:
    """:class:`FileView` over the real machine."""

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path: str) -> tuple[str, ...]:
        try:
            return tuple(sorted(p.name for p in Path(path).iterdir()))
        except OSError:
            return ()

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def find_library(self, name: str) -> str | None:
        try:
            return ctypes.util.find_library(name)
        except (OSError, subprocess.SubprocessError):
            return None


def run_probe(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> ProcessResult:
    """The default probe runner: :func:`run_process` reading stdout alone (probes parse it)."""
    return run_process(argv, timeout, env, keep_stderr=False)


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


def cuda_from_driver(driver: str) -> str | None:
    """Highest CUDA a driver supports, from NVIDIA's minimum-driver table."""
    match = re.match(r"^(\d+)", driver.strip())
    if match is None:
        return None
    major = int(match[1])
    return next((cuda for floor, cuda in _DRIVER_FLOOR if major >= floor), None)


#: ``IsProcessorFeaturePresent`` feature ids (processthreadsapi.h, Microsoft docs):
#: PF_SSE4_1 37, PF_SSE4_2 38, PF_AVX 39, PF_AVX2 40, PF_AVX512F 41, named as
#: /proc/cpuinfo names the same flags so the choice reads one vocabulary.
_WINDOWS_CPU_FEATURES: Final[tuple[tuple[int, str], ...]] = (
    (37, "sse4_1"), (38, "sse4_2"), (39, "avx"), (40, "avx2"), (41, "avx512f"),
)  # fmt: skip
#: What ``plan --platform`` assumes for an x64 machine it knows nothing about:
#: AVX2, the build llama.cpp recommends for most users (its README's Windows
#: x64 CPU build is the AVX2 one), so no fixed-ISA build above it is chosen.
ASSUMED_X64_FEATURES: Final[frozenset[str]] = frozenset({"sse4_1", "sse4_2", "avx", "avx2", "fma"})

ProcessorFeature = Callable[[int], bool]


def windows_processor_feature(feature: int) -> bool:
    """``IsProcessorFeaturePresent(feature)`` of kernel32 (Windows only)."""
    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return False
    return bool(windll.kernel32.IsProcessorFeaturePresent(feature))


class _Probe:
    """One detection pass; collects facts and where each came from."""

    def __init__(
        self, run: ProcessRunner, env: Mapping[str, str], files: FileView, feature: ProcessorFeature | None = None
    ) -> None:
        self.run, self.env, self.files = run, env, files
        self.feature = feature
        self.sources: list[tuple[str, str]] = []
        self.compute_capabilities: tuple[str, ...] = ()
        self._answers: dict[tuple[str, ...], str | None] = {}

    def call(self, *argv: str) -> str | None:
        if argv in self._answers:  # one pass asks each command once (vulkaninfo is slow)
            return self._answers[argv]
        try:
            result = self.run(argv, PROBE_TIMEOUT_S, None)
        except Exception:  # a runner must never break detection
            result = None
        # Missing, not executable, failed or timed out: no answer, an absent fact.
        answer = result.output if result is not None and result.succeeded else None
        self._answers[argv] = answer
        return answer

    def nvidia(self) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip() in {"", "-1"}:
            self.sources.append(("cuda", "hidden by CUDA_VISIBLE_DEVICES"))
            return None, None, None, ()
        fmt = "--format=csv,noheader"
        rows_out = self.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,compute_cap,name", fmt)
        with_cc = rows_out is not None
        if rows_out is None:  # drivers before ~510 reject the compute_cap field
            rows_out = self.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,name", fmt)
        if not rows_out:
            return None, None, None, ()
        wanted = {v.strip() for v in visible.split(",")} if visible else None
        drivers, caps, names = [], [], []
        for line in rows_out.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < (5 if with_cc else 4):
                continue
            if wanted is not None and cells[0] not in wanted and cells[1] not in wanted:
                continue
            drivers.append(cells[2])
            if with_cc:
                caps.append(cells[3])
            names.append(", ".join(cells[4 if with_cc else 3 :]))
        if not drivers:
            self.sources.append(("cuda", "no visible NVIDIA GPU (nvidia-smi, CUDA_VISIBLE_DEVICES)"))
            return None, None, None, ()
        banner = self.call("nvidia-smi") or ""
        match = _CUDA_BANNER.search(banner)
        cuda: str | None = None
        if match:
            cuda = f"{match[1]}.{match[2]}"
            self.sources.append(("cuda_driver_version", "nvidia-smi banner"))
        else:
            cuda = cuda_from_driver(drivers[0])
            self.sources.append(("cuda_driver_version", "driver version table"))
        self.sources.append(("nvidia_driver", "nvidia-smi --query-gpu"))
        valid_caps = [c for c in caps if re.match(r"^\d+\.\d+$", c)]
        self.compute_capabilities = tuple(dict.fromkeys(valid_caps))
        low_cap = min(valid_caps, key=lambda c: tuple(map(int, c.split(".")))) if valid_caps else None
        return cuda, drivers[0], low_cap, tuple(names)

    def vulkan(self, os_name: str) -> tuple[bool, tuple[str, ...]]:
        summary = self.call("vulkaninfo", "--summary")
        if summary is not None:
            types = _VK_DEVICE_TYPE.findall(summary)
            names = tuple(n.strip() for n in _VK_DEVICE_NAME.findall(summary))
            hardware = [t for t in types if t in {"DISCRETE_GPU", "INTEGRATED_GPU", "VIRTUAL_GPU"}]
            kept = tuple(n for n, t in zip(names, types, strict=False) if t in hardware)
            if not hardware and "CPU" in types and self._software_vulkan_shown():
                self.sources.append(("vulkan", "vulkaninfo --summary (CPU device shown by GGML_VK_VISIBLE_DEVICES)"))
                return True, ()
            self.sources.append(("vulkan", "vulkaninfo --summary"))
            return bool(hardware), kept
        loader = self.files.find_library("vulkan") or self.files.find_library("vulkan-1")
        if loader is None:
            loader = next((p for p in _VULKAN_LOADERS if self.files.exists(p)), None)
        if loader is None:
            return False, ()
        if os_name == "windows":  # ICDs are registered in the registry, not in files
            self.sources.append(("vulkan", f"loader {loader}"))
            return True, ()
        icds = self._icd_files()
        hardware_icds = [p for p in icds if not _SOFTWARE_ICD.search(Path(p).name)]
        # Mesa installs every driver's ICD file; only a GPU device node proves hardware.
        node = next((n for n in _GPU_NODES if self.files.exists(n)), None)
        if node is None:
            node = next((f"/dev/dri/{n}" for n in self.files.list_dir("/dev/dri") if n.startswith("renderD")), None)
        if hardware_icds and node is not None:
            self.sources.append(("vulkan", f"loader {loader} + ICD {hardware_icds[0]} + {node}"))
            return True, ()
        software_icds = [p for p in icds if _SOFTWARE_ICD.search(Path(p).name)]
        if software_icds and self._software_vulkan_shown():
            self.sources.append(("vulkan", f"software ICD {software_icds[0]} shown by GGML_VK_VISIBLE_DEVICES"))
            return True, ()
        if hardware_icds:
            self.sources.append(("vulkan", "ICD files but no GPU device node"))
        return False, ()

    def _software_vulkan_shown(self) -> bool:
        # llama.cpp hides CPU-type Vulkan devices (Mesa's llvmpipe) unless
        # GGML_VK_VISIBLE_DEVICES names them; then it really runs on one, so a
        # Vulkan build must list it.
        return bool(self.env.get("GGML_VK_VISIBLE_DEVICES", "").strip())

    def _icd_files(self) -> list[str]:
        listed = self.env.get("VK_DRIVER_FILES") or self.env.get("VK_ICD_FILENAMES")
        if listed:
            entries = [p for p in listed.split(_os.pathsep) if p]
            found: list[str] = []
            for entry in entries:
                children = self.files.list_dir(entry)
                found += [f"{entry}/{c}" for c in children if c.endswith(".json")]
                if not children and entry.endswith(".json") and self.files.exists(entry):
                    found.append(entry)
            return found
        return [f"{d}/{c}" for d in _VULKAN_ICD_DIRS for c in self.files.list_dir(d) if c.endswith(".json")]

    def rocm(self) -> tuple[bool, tuple[str, ...]]:
        for hidden in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
            if self.env.get(hidden, None) is not None and self.env[hidden].strip() in {"", "-1"}:
                self.sources.append(("rocm", f"hidden by {hidden}"))
                return False, ()
        for argv in (("rocminfo",), ("/opt/rocm/bin/rocminfo",), ("hipinfo",)):
            out = self.call(*argv)
            gfx = tuple(dict.fromkeys(_GFX.findall(out or "")))
            if gfx:
                self.sources.append(("rocm", argv[0]))
                return True, gfx
        out = self.call("amd-smi", "list")
        if out and re.search(r"^\s*GPU:\s*\d+", out, re.MULTILINE):
            self.sources.append(("rocm", "amd-smi list"))
            return True, ()
        return False, ()

    def cpu_features(self, os_name: str) -> frozenset[str]:
        if os_name == "windows":
            return self._windows_cpu_features()
        if os_name not in {"linux", "android"}:
            return frozenset()
        text = self.files.read_text("/proc/cpuinfo") or ""
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() in {"flags", "features"}:
                self.sources.append(("cpu_features", "/proc/cpuinfo"))
                return frozenset(value.split())
        return frozenset()

    def _windows_cpu_features(self) -> frozenset[str]:
        probe = self.feature or windows_processor_feature
        try:
            found = frozenset(name for feature, name in _WINDOWS_CPU_FEATURES if probe(feature))
        except Exception:  # a failed probe is an absent fact, never a crash
            return frozenset()
        self.sources.append(("cpu_features", "IsProcessorFeaturePresent"))
        return found

    def translated_arch(self, os_name: str, arch: str) -> str:
        """The native arch when Python runs under emulation (Rosetta, Windows x64-on-ARM)."""
        if os_name == "windows":
            native = self.env.get("PROCESSOR_ARCHITEW6432") or self.env.get("PROCESSOR_ARCHITECTURE")
            if native and normalize_arch(native) == "arm64":
                self.sources.append(("arch", "PROCESSOR_ARCHITECTURE"))
                return "arm64"
        if os_name == "macos" and arch == "x64":
            out = self.call("sysctl", "-n", "sysctl.proc_translated")
            if out is not None and out.strip() == "1":
                self.sources.append(("arch", "sysctl.proc_translated (Rosetta)"))
                return "arm64"
        return arch


def detect_host(
    runner: ProcessRunner | None = None,
    env: Mapping[str, str] | None = None,
    *,
    system: str | None = None,
    machine: str | None = None,
    files: FileView | None = None,
    processor_feature: ProcessorFeature | None = None,
) -> HostFacts:
    """Probe this machine. Never raises; a failed probe is an absent fact.

    Args:
        runner: Runs probe commands (default :func:`run_probe`).
        env: Environment to read (default ``os.environ``).
        system: ``platform.system()`` override, for tests.
        machine: ``platform.machine()`` override, for tests.
        files: File-system view (default the real one).
        processor_feature: Windows' ``IsProcessorFeaturePresent`` (tests replace it).
    """
    environ = _os.environ if env is None else env
    probe = _Probe(runner or run_probe, environ, files or RealFiles(), processor_feature)
    os_name = normalize_os(system if system is not None else _platform.system(), environ)
    arch = probe.translated_arch(os_name, normalize_arch(machine if machine is not None else _platform.machine()))
    probe.sources.insert(0, ("platform", "platform.system/machine"))
    cuda = driver = cap = None
    nv_names: tuple[str, ...] = ()
    vk_names: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    vulkan = rocm = False
    if os_name in {"linux", "windows"}:
        cuda, driver, cap, nv_names = probe.nvidia()
        rocm, gfx = probe.rocm()
    if os_name in {"linux", "windows", "android"}:
        vulkan, vk_names = probe.vulkan(os_name)
    metal = os_name == "macos" and arch == "arm64"
    if metal:
        probe.sources.append(("metal", "Apple silicon"))
    from llama_runtime.updater.choice.platform_facts import detect_platform_facts

    extra = detect_platform_facts(probe.call, probe.files, os_name, vulkan, rocm, probe.sources)
    return HostFacts(
        os=os_name,
        arch=arch,
        cuda_driver_version=cuda,
        nvidia_driver=driver,
        compute_capability=cap,
        gpu_names=tuple(dict.fromkeys((*nv_names, *vk_names))),
        vulkan=vulkan,
        rocm=rocm,
        metal=metal,
        cpu_features=probe.cpu_features(os_name),
        sources=tuple(probe.sources),
        rocm_gfx=gfx,
        compute_capabilities=probe.compute_capabilities,
        vulkan_api_version=extra.vulkan_api_version,
        rocm_runtime_version=extra.rocm_runtime_version,
        sycl=extra.sycl,
        macos_version=extra.macos_version,
        glibc_version=extra.glibc_version,
    )


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
        cuda = cuda_version.strip()
        if not re.match(r"^\d+(?:\.\d+)?$", cuda):
            raise UserInputError(f"CUDA version {cuda_version!r} is malformed; use a line such as '12.4' or '13'.")
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
