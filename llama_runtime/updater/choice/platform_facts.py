"""Host facts beyond GPUs and CPU flags: OS and runtime versions a build may need.

Each probe asks one command or file through the same seams as :mod:`gpu_probes` (so
recorded profiles stand in for real machines in tests), never raises, and says
where its answer came from. A fact that cannot be read stays ``None``: unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from llama_runtime.updater.choice.probing import FileView

#: Runs a probe command; its standard output, or ``None`` when it failed or is missing.
Call = Callable[..., str | None]

# vulkaninfo prints "apiVersion = 1.3.280" (newer) or "apiVersion = 4206847 (1.3.255)" (older).
_VK_API: Final = re.compile(r"apiVersion\s*=\s*(?:\d+\s*\()?(\d+\.\d+\.\d+)")
_VERSION: Final = re.compile(r"(\d+(?:\.\d+)+)")
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
