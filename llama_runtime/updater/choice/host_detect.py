"""Detecting this machine's :class:`~llama_runtime.updater.choice.host.HostFacts`: one probe pass.

:func:`detect_host` runs the probes in a fixed order through one
:class:`~llama_runtime.updater.choice.probing.ProbePass`: the platform (and
the native arch under emulation), GPUs (:mod:`gpu_probes`), OS and runtime
versions (:mod:`platform_facts`), CPU features. It never raises; a failed
probe is an absent fact, and unknown never means "can run it".
"""

from __future__ import annotations

import ctypes
import os
import platform as _platform
from collections.abc import Callable, Mapping
from typing import Final

from llama_runtime.runtime.runner import ProcessRunner
from llama_runtime.updater.choice.gpu_probes import NvidiaFacts, probe_nvidia, probe_rocm, probe_vulkan
from llama_runtime.updater.choice.host import HostFacts, normalize_arch, normalize_os
from llama_runtime.updater.choice.platform_facts import detect_platform_facts
from llama_runtime.updater.choice.probing import FileView, ProbePass, RealFiles, run_probe

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
        runner: Runs probe commands (default :func:`~llama_runtime.updater.choice.probing.run_probe`).
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
