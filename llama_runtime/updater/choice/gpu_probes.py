"""Which GPUs this machine has, from ``nvidia-smi``, ``vulkaninfo``, ROCm tools and files.

Each probe asks through one :class:`~llama_runtime.updater.choice.probing.ProbePass`
(so recorded profiles stand in for real machines in tests), never raises, and
appends ``(fact, where)`` to the pass's sources. The parsing of each tool's
output is a pure function beside its probe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llama_runtime.updater.choice.probing import ProbePass

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
_VK_HARDWARE_TYPES: Final = frozenset({"DISCRETE_GPU", "INTEGRATED_GPU", "VIRTUAL_GPU"})


@dataclass(frozen=True)
class NvidiaFacts:
    """What ``nvidia-smi`` says about the visible NVIDIA GPUs (empty: none usable)."""

    cuda_driver_version: str | None = None
    driver: str | None = None
    compute_capability: str | None = None  # the lowest of the visible GPUs
    names: tuple[str, ...] = ()
    compute_capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class NvidiaRows:
    """The visible GPUs' cells of one ``nvidia-smi --query-gpu`` answer."""

    drivers: list[str]
    caps: list[str]
    names: list[str]


def cuda_from_driver(driver: str) -> str | None:
    """Highest CUDA a driver supports, from NVIDIA's minimum-driver table."""
    match = re.match(r"^(\d+)", driver.strip())
    if match is None:
        return None
    major = int(match[1])
    return next((cuda for floor, cuda in _DRIVER_FLOOR if major >= floor), None)


def probe_nvidia(probe: ProbePass) -> NvidiaFacts:
    """The NVIDIA driver, its CUDA line and the visible GPUs (``CUDA_VISIBLE_DEVICES`` honoured)."""
    visible = probe.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1"}:
        probe.sources.append(("cuda", "hidden by CUDA_VISIBLE_DEVICES"))
        return NvidiaFacts()
    fmt = "--format=csv,noheader"
    rows_out = probe.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,compute_cap,name", fmt)
    with_cc = rows_out is not None
    if rows_out is None:  # drivers before ~510 reject the compute_cap field
        rows_out = probe.call("nvidia-smi", "--query-gpu=index,uuid,driver_version,name", fmt)
    if not rows_out:
        return NvidiaFacts()
    wanted = {v.strip() for v in visible.split(",")} if visible else None
    rows = parse_nvidia_rows(rows_out, with_cc=with_cc, wanted=wanted)
    if not rows.drivers:
        probe.sources.append(("cuda", "no visible NVIDIA GPU (nvidia-smi, CUDA_VISIBLE_DEVICES)"))
        return NvidiaFacts()
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
