"""Detecting this machine's :class:`~llama_runtime.updater.choice.host.HostFacts`: one probe pass.

:func:`detect_host` runs the probes in a fixed order through one
:class:`~llama_runtime.updater.choice.host_detect.ProbePass`: the platform (and
the native arch under emulation), GPUs (the ``gpu_probes`` section), OS and runtime
versions (the ``platform_facts`` section), CPU features. It never raises; a failed
probe is an absent fact, and unknown never means "can run it".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform as _platform
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from llama_runtime.runtime.binary import ProcessResult, ProcessRunner, run_process
from llama_runtime.updater.choice.host import HostFacts, normalize_arch, normalize_os

# -- probing: The seams host detection asks through, and one detection pass over them. ---------------------------

#: Seconds one probe command may take. nvidia-smi can stall for many seconds on
#: a wedged driver; a slow probe must not hold up an update.
PROBE_TIMEOUT_S: Final[float] = 5.0


class FileView(Protocol):
    """The read-only file-system questions the probes ask."""

    def read_text(self, path: str) -> str | None:
        """File content, or ``None`` when unreadable."""
        ...

    def list_dir(self, path: str) -> tuple[str, ...]:
        """Entry names of a directory, empty when it is missing."""
        ...

    def exists(self, path: str) -> bool:
        """Whether the path exists."""
        ...

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


class ProbePass:
    """One detection pass: asks each command once, and collects where each fact came from.

    Args:
        run: Runs probe commands.
        env: The environment to read (``CUDA_VISIBLE_DEVICES`` …).
        files: The file-system view.
    """

    def __init__(self, run: ProcessRunner, env: Mapping[str, str], files: FileView) -> None:
        self.run, self.env, self.files = run, env, files
        #: ``(fact, where it came from)`` in the order found.
        self.sources: list[tuple[str, str]] = []
        self._answers: dict[tuple[str, ...], str | None] = {}

    def call(self, *argv: str) -> str | None:
        """The standard output of ``argv``; ``None`` when it is missing, failed or timed out."""
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


# -- gpu_probes: Which GPUs this machine has, from the vendors' tools and files. ---------------------------------

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
# What an NVIDIA driver leaves without nvidia-smi: the kernel module's proc entry, its device nodes.
_NVIDIA_TRACES: Final[tuple[str, ...]] = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0")
# Software rasterisers expose Vulkan on the CPU; they would be slower than the CPU build.
_SOFTWARE_ICD: Final = re.compile(r"lvp|lavapipe|swiftshader", re.IGNORECASE)
_CUDA_BANNER: Final = re.compile(r"CUDA(?: UMD)? Version:\s*(\d+)\.(\d+)")
_GFX: Final = re.compile(r"\bgfx[1-9][0-9a-f]{2,3}\b")
_VK_DEVICE_TYPE: Final = re.compile(r"deviceType\s*=\s*PHYSICAL_DEVICE_TYPE_(\w+)")
_VK_DEVICE_NAME: Final = re.compile(r"deviceName\s*=\s*(.+)")
_VK_HARDWARE_TYPES: Final = frozenset({"DISCRETE_GPU", "INTEGRATED_GPU", "VIRTUAL_GPU"})


@dataclass(frozen=True)
class NvidiaFacts:
    """What ``nvidia-smi`` says about the visible NVIDIA GPUs (empty: none usable)."""

    cuda_driver_version: str | None = None
    driver: str | None = None
    compute_capability: str | None = None  # the lowest of the visible GPUs
    names: tuple[str, ...] = ()
    compute_capabilities: tuple[str, ...] = ()
    absent: str | None = None  # why no NVIDIA driver is usable, when detection is sure of it
    unsure: str | None = None  # why detection cannot tell (the device check decides)


@dataclass(frozen=True)
class NvidiaRows:
    """The visible GPUs' cells of one ``nvidia-smi --query-gpu`` answer."""

    drivers: list[str]
    caps: list[str]
    names: list[str]


def cuda_from_driver(driver: str) -> str | None:
    """Highest CUDA a driver supports, from NVIDIA's minimum-driver table."""
    match = re.match(r"^(\d{1,9})(?!\d)", driver.strip())
    if match is None:
        return None
    major = int(match[1])
    return next((cuda for floor, cuda in _DRIVER_FLOOR if major >= floor), None)


def probe_nvidia(probe: ProbePass) -> NvidiaFacts:
    """The NVIDIA driver, its CUDA line and the visible GPUs (``CUDA_VISIBLE_DEVICES`` honoured)."""
    visible = probe.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1"}:
        probe.sources.append(("cuda", "hidden by CUDA_VISIBLE_DEVICES"))
        return NvidiaFacts(absent="CUDA_VISIBLE_DEVICES hides every GPU")
    fmt = "--format=csv,noheader"
    rows_out = probe.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,compute_cap,name", fmt)
    with_cc = rows_out is not None
    if rows_out is None:  # drivers before ~510 reject the compute_cap field
        rows_out = probe.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,name", fmt)
    if not rows_out:
        return _nvidia_without_smi(probe)
    wanted = {v.strip() for v in visible.split(",")} if visible else None
    rows = parse_nvidia_rows(rows_out, with_cc=with_cc, wanted=wanted)
    if not rows.drivers:
        probe.sources.append(("cuda", "no visible NVIDIA GPU (nvidia-smi, CUDA_VISIBLE_DEVICES)"))
        return NvidiaFacts(absent="nvidia-smi lists no visible NVIDIA GPU")
    match = _CUDA_BANNER.search(probe.call("nvidia-smi") or "")
    cuda: str | None
    if match:
        cuda = f"{match[1]}.{match[2]}"
        probe.sources.append(("cuda_driver_version", "nvidia-smi banner"))
    else:
        cuda = cuda_from_driver(rows.drivers[0])
        probe.sources.append(("cuda_driver_version", "driver version table"))
    probe.sources.append(("nvidia_driver", "nvidia-smi --query-gpu"))
    valid_caps = [c for c in rows.caps if re.match(r"^\d+\.\d+$", c)]
    low_cap = min(valid_caps, key=lambda c: tuple(map(int, c.split(".")))) if valid_caps else None
    return NvidiaFacts(cuda, rows.drivers[0], low_cap, tuple(rows.names), tuple(dict.fromkeys(valid_caps)))


def _nvidia_without_smi(probe: ProbePass) -> NvidiaFacts:
    """No answer from ``nvidia-smi``: sure there is no driver only when no trace of one is present either.

    A container given the GPU (``--gpus``, ``--device /dev/nvidia0``) may lack ``nvidia-smi``, and a
    driver/library mismatch makes it fail; the kernel module's ``/proc/driver/nvidia`` or a device
    node then says a GPU may be usable, which only the CUDA build's own device check can settle.
    """
    trace = next((p for p in _NVIDIA_TRACES if probe.files.exists(p)), None)
    if trace is None:
        probe.sources.append(("cuda", "no NVIDIA driver (no nvidia-smi, no /dev/nvidia*, no /proc/driver/nvidia)"))
        return NvidiaFacts(absent="no nvidia-smi, no /dev/nvidia* device, no /proc/driver/nvidia")
    why = f"{trace} is present but nvidia-smi did not answer"
    probe.sources.append(("cuda", f"unsure: {why}"))
    return NvidiaFacts(unsure=why)


def parse_nvidia_rows(rows_out: str, *, with_cc: bool, wanted: set[str] | None) -> NvidiaRows:
    """The rows of ``index, uuid, driver, [compute_cap,] name`` whose index or uuid is ``wanted``."""
    rows = NvidiaRows([], [], [])
    for line in rows_out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < (5 if with_cc else 4):
            continue
        if wanted is not None and cells[0] not in wanted and cells[1] not in wanted:
            continue
        rows.drivers.append(cells[2])
        if with_cc:
            rows.caps.append(cells[3])
        rows.names.append(", ".join(cells[4 if with_cc else 3 :]))
    return rows


def probe_vulkan(probe: ProbePass, os_name: str) -> tuple[bool, tuple[str, ...]]:
    """Whether a Vulkan build can run here, and the hardware devices' names when vulkaninfo says."""
    summary = probe.call("vulkaninfo", "--summary")
    if summary is None:
        return _vulkan_from_files(probe, os_name), ()
    types, hardware_names = parse_vulkan_summary(summary)
    hardware = [t for t in types if t in _VK_HARDWARE_TYPES]
    if not hardware and "CPU" in types and _software_vulkan_shown(probe.env):
        probe.sources.append(("vulkan", "vulkaninfo --summary (CPU device shown by GGML_VK_VISIBLE_DEVICES)"))
        return True, ()
    probe.sources.append(("vulkan", "vulkaninfo --summary"))
    return bool(hardware), hardware_names


def parse_vulkan_summary(summary: str) -> tuple[list[str], tuple[str, ...]]:
    """``vulkaninfo --summary``: every device's type (``DISCRETE_GPU``, ``CPU`` …) and the hardware ones' names."""
    types = _VK_DEVICE_TYPE.findall(summary)
    names = tuple(n.strip() for n in _VK_DEVICE_NAME.findall(summary))
    return types, tuple(n for n, t in zip(names, types, strict=False) if t in _VK_HARDWARE_TYPES)


def _vulkan_from_files(probe: ProbePass, os_name: str) -> bool:
    """Without vulkaninfo: a loader, a hardware ICD and a GPU device node (or a shown software ICD)."""
    files = probe.files
    loader = files.find_library("vulkan") or files.find_library("vulkan-1")
    if loader is None:
        loader = next((p for p in _VULKAN_LOADERS if files.exists(p)), None)
    if loader is None:
        return False
    if os_name == "windows":  # ICDs are registered in the registry, not in files
        probe.sources.append(("vulkan", f"loader {loader}"))
        return True
    icds = _icd_files(probe)
    hardware_icds = [p for p in icds if not _SOFTWARE_ICD.search(Path(p).name)]
    # Mesa installs every driver's ICD file; only a GPU device node proves hardware.
    node = next((n for n in _GPU_NODES if files.exists(n)), None)
    if node is None:
        node = next((f"/dev/dri/{n}" for n in files.list_dir("/dev/dri") if n.startswith("renderD")), None)
    if hardware_icds and node is not None:
        probe.sources.append(("vulkan", f"loader {loader} + ICD {hardware_icds[0]} + {node}"))
        return True
    software_icds = [p for p in icds if _SOFTWARE_ICD.search(Path(p).name)]
    if software_icds and _software_vulkan_shown(probe.env):
        probe.sources.append(("vulkan", f"software ICD {software_icds[0]} shown by GGML_VK_VISIBLE_DEVICES"))
        return True
    if hardware_icds:
        probe.sources.append(("vulkan", "ICD files but no GPU device node"))
    return False


def _software_vulkan_shown(env: Mapping[str, str]) -> bool:
    # llama.cpp hides CPU-type Vulkan devices (Mesa's llvmpipe) unless
    # GGML_VK_VISIBLE_DEVICES names them; then it really runs on one, so a
    # Vulkan build must list it.
    return bool(env.get("GGML_VK_VISIBLE_DEVICES", "").strip())


def _icd_files(probe: ProbePass) -> list[str]:
    listed = probe.env.get("VK_DRIVER_FILES") or probe.env.get("VK_ICD_FILENAMES")
    if listed:
        entries = [p for p in listed.split(os.pathsep) if p]
        found: list[str] = []
        for entry in entries:
            children = probe.files.list_dir(entry)
            found += [f"{entry}/{c}" for c in children if c.endswith(".json")]
            if not children and entry.endswith(".json") and probe.files.exists(entry):
                found.append(entry)
        return found
    return [f"{d}/{c}" for d in _VULKAN_ICD_DIRS for c in probe.files.list_dir(d) if c.endswith(".json")]


def probe_rocm(probe: ProbePass) -> tuple[bool, tuple[str, ...]]:
    """Whether an AMD GPU is usable through ROCm/HIP, and its gfx targets when the tools name them."""
    for hidden in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if probe.env.get(hidden, None) is not None and probe.env[hidden].strip() in {"", "-1"}:
            probe.sources.append(("rocm", f"hidden by {hidden}"))
            return False, ()
    for argv in (("rocminfo",), ("/opt/rocm/bin/rocminfo",), ("hipinfo",)):
        out = probe.call(*argv)
        gfx = tuple(dict.fromkeys(_GFX.findall(out or "")))
        if gfx:
            probe.sources.append(("rocm", argv[0]))
            return True, gfx
    out = probe.call("amd-smi", "list")
    if out and re.search(r"^\s*GPU:\s*\d+", out, re.MULTILINE):
        probe.sources.append(("rocm", "amd-smi list"))
        return True, ()
    return False, ()


def sure_absent_backends(probe: ProbePass, vulkan: bool, rocm: bool, sycl: bool) -> tuple[tuple[str, str], ...]:
    """The GPU backends (other than CUDA) that detection is sure have nothing to run on here (Linux).

    Sure means no trace of the stack at all, as for CUDA: a hidden device, or neither the
    tool nor the library or device node the build needs. A trace without a device (an ICD
    file, ``/dev/kfd``) is unsure: the build's own device check after install decides.
    """
    found: list[tuple[str, str]] = []
    if not rocm:
        hidden = next((v for v in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if _hides(probe.env, v)), None)
        if hidden is not None:
            found.append(("rocm", f"{hidden} hides every GPU"))
        elif not probe.files.exists("/dev/kfd"):
            found.append(("rocm", "no rocminfo, hipinfo or amd-smi GPU, no /dev/kfd"))
    files = probe.files
    if not vulkan and not files.find_library("vulkan") and not any(files.exists(p) for p in _VULKAN_LOADERS):
        found.append(("vulkan", "no Vulkan loader (libvulkan)"))
    if not sycl and not files.find_library("ze_loader"):
        found.append(("sycl", "no Level Zero loader (libze_loader)"))
    return tuple(found)


def _hides(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name)
    return value is not None and value.strip() in {"", "-1"}


# -- platform_facts: OS and runtime versions a build may need, beyond GPUs and CPU flags. ------------------------

#: Runs a probe command; its standard output, or ``None`` when it failed or is missing.
Call = Callable[..., str | None]

# vulkaninfo prints "apiVersion = 1.3.280" (newer) or "apiVersion = 4206847 (1.3.255)" (older).
_VK_API: Final = re.compile(r"apiVersion\s*=\s*(?:\d+\s*\()?(\d+\.\d+\.\d+)")
#: Parts of at most 9 digits: a longer "version" (a typo, an attack) is unknown, never an int() error.
_VERSION: Final = re.compile(r"(?<!\d)(\d{1,9}(?:\.\d{1,9})+)(?!\d)")
#: Where ROCm records its own version (ROCm installation guide, "rocm/.info/version").
_ROCM_VERSION_FILES: Final[tuple[str, ...]] = ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev")


@dataclass(frozen=True)
class PlatformFacts:
    """The version facts :func:`detect_platform_facts` found (``None``: unknown)."""

    vulkan_api_version: str | None = None
    rocm_runtime_version: str | None = None
    sycl: bool = False
    macos_version: str | None = None
    glibc_version: str | None = None


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``"2.35"`` -> ``(2, 35)``; empty for ``None`` or text without a version."""
    match = _VERSION.search(version or "")
    return tuple(int(p) for p in match[1].split(".")) if match else ()


def detect_platform_facts(
    call: Call, files: FileView, os_name: str, vulkan: bool, rocm: bool, sources: list[tuple[str, str]]
) -> PlatformFacts:
    """Probe the version facts of this machine; appends ``(fact, where)`` to ``sources``."""
    return PlatformFacts(
        vulkan_api_version=_vulkan_api(call, sources) if vulkan else None,
        rocm_runtime_version=_rocm_runtime(files, sources) if os_name == "linux" else None,
        sycl=_sycl(call, sources) if os_name in {"linux", "windows"} else False,
        macos_version=_first_version(call("sw_vers", "-productVersion"), "macos_version", "sw_vers", sources)
        if os_name == "macos"
        else None,
        glibc_version=_first_version(call("getconf", "GNU_LIBC_VERSION"), "glibc_version", "getconf", sources)
        if os_name == "linux"
        else None,
    )


def _first_version(text: str | None, fact: str, where: str, sources: list[tuple[str, str]]) -> str | None:
    match = _VERSION.search(text or "")
    if match is None:
        return None
    sources.append((fact, where))
    return match[1]


def _vulkan_api(call: Call, sources: list[tuple[str, str]]) -> str | None:
    versions = _VK_API.findall(call("vulkaninfo", "--summary") or "")
    if not versions:
        return None
    sources.append(("vulkan_api_version", "vulkaninfo --summary (highest device)"))
    return str(max(versions, key=version_tuple))


def _rocm_runtime(files: FileView, sources: list[tuple[str, str]]) -> str | None:
    for path in _ROCM_VERSION_FILES:
        match = _VERSION.search(files.read_text(path) or "")
        if match:
            sources.append(("rocm_runtime_version", path))
            return match[1]
    return None


def _sycl(call: Call, sources: list[tuple[str, str]]) -> bool:
    # sycl-ls lists "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) …": the SYCL
    # build's device. Every Level Zero GPU (Arc, Xe, Iris Xe) has fp16, which the fp16 build needs.
    listing = call("sycl-ls") or ""
    if "level_zero:gpu" not in listing:
        return False
    sources.append(("sycl", "sycl-ls (a Level Zero GPU)"))
    return True


# -- host_detect -------------------------------------------------------------------------------------------------

#: ``IsProcessorFeaturePresent`` feature ids (processthreadsapi.h, Microsoft docs):
#: PF_SSE4_1 37, PF_SSE4_2 38, PF_AVX 39, PF_AVX2 40, PF_AVX512F 41, named as
#: /proc/cpuinfo names the same flags so the choice reads one vocabulary.
_WINDOWS_CPU_FEATURES: Final[tuple[tuple[int, str], ...]] = (
    (37, "sse4_1"), (38, "sse4_2"), (39, "avx"), (40, "avx2"), (41, "avx512f"),
)  # fmt: skip

ProcessorFeature = Callable[[int], bool]


def windows_processor_feature(feature: int) -> bool:
    """``IsProcessorFeaturePresent(feature)`` of kernel32 (Windows only)."""
    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return False
    return bool(windll.kernel32.IsProcessorFeaturePresent(feature))


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
        runner: Runs probe commands (default :func:`~llama_runtime.updater.choice.host_detect.run_probe`).
        env: Environment to read (default ``os.environ``).
        system: ``platform.system()`` override, for tests.
        machine: ``platform.machine()`` override, for tests.
        files: File-system view (default the real one).
        processor_feature: Windows' ``IsProcessorFeaturePresent`` (tests replace it).
    """
    environ = os.environ if env is None else env
    probe = ProbePass(runner or run_probe, environ, files or RealFiles())
    os_name = normalize_os(system if system is not None else _platform.system(), environ)
    arch = _translated_arch(probe, os_name, normalize_arch(machine if machine is not None else _platform.machine()))
    probe.sources.insert(0, ("platform", "platform.system/machine"))
    nvidia = NvidiaFacts()
    vk_names: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    vulkan = rocm = False
    if os_name in {"linux", "windows"}:
        nvidia = probe_nvidia(probe)
        rocm, gfx = probe_rocm(probe)
    if os_name in {"linux", "windows", "android"}:
        vulkan, vk_names = probe_vulkan(probe, os_name)
    metal = os_name == "macos" and arch == "arm64"
    if metal:
        probe.sources.append(("metal", "Apple silicon"))
    extra = detect_platform_facts(probe.call, probe.files, os_name, vulkan, rocm, probe.sources)
    cpu_features = _cpu_features(probe, os_name, processor_feature)
    return HostFacts(
        os=os_name,
        arch=arch,
        cuda_driver_version=nvidia.cuda_driver_version,
        nvidia_driver=nvidia.driver,
        compute_capability=nvidia.compute_capability,
        gpu_names=tuple(dict.fromkeys((*nvidia.names, *vk_names))),
        vulkan=vulkan,
        rocm=rocm,
        metal=metal,
        cpu_features=cpu_features,
        sources=tuple(probe.sources),
        rocm_gfx=gfx,
        compute_capabilities=nvidia.compute_capabilities,
        vulkan_api_version=extra.vulkan_api_version,
        rocm_runtime_version=extra.rocm_runtime_version,
        sycl=extra.sycl,
        macos_version=extra.macos_version,
        glibc_version=extra.glibc_version,
        no_nvidia_driver=nvidia.absent if os_name == "linux" else None,
        nvidia_unsure=nvidia.unsure,
        absent=sure_absent_backends(probe, vulkan, rocm, extra.sycl) if os_name == "linux" else (),
    )


def _cpu_features(probe: ProbePass, os_name: str, feature: ProcessorFeature | None) -> frozenset[str]:
    """CPU flags: ``/proc/cpuinfo`` on Linux and Android, ``IsProcessorFeaturePresent`` on Windows."""
    if os_name == "windows":
        return _windows_cpu_features(probe, feature or windows_processor_feature)
    if os_name not in {"linux", "android"}:
        return frozenset()
    text = probe.files.read_text("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in {"flags", "features"}:
            probe.sources.append(("cpu_features", "/proc/cpuinfo"))
            return frozenset(value.split())
    return frozenset()


def _windows_cpu_features(probe: ProbePass, feature: ProcessorFeature) -> frozenset[str]:
    try:
        found = frozenset(name for number, name in _WINDOWS_CPU_FEATURES if feature(number))
    except Exception:  # a failed probe is an absent fact, never a crash
        return frozenset()
    probe.sources.append(("cpu_features", "IsProcessorFeaturePresent"))
    return found


def _translated_arch(probe: ProbePass, os_name: str, arch: str) -> str:
    """The native arch when Python runs under emulation (Rosetta, Windows x64-on-ARM)."""
    if os_name == "windows":
        native = probe.env.get("PROCESSOR_ARCHITEW6432") or probe.env.get("PROCESSOR_ARCHITECTURE")
        if native and normalize_arch(native) == "arm64":
            probe.sources.append(("arch", "PROCESSOR_ARCHITECTURE"))
            return "arm64"
    if os_name == "macos" and arch == "x64":
        out = probe.call("sysctl", "-n", "sysctl.proc_translated")
        if out is not None and out.strip() == "1":
            probe.sources.append(("arch", "sysctl.proc_translated (Rosetta)"))
            return "arm64"
    return arch
