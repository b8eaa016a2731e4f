"""Asking ``llama-server`` about itself (reading its answers), and locating it.

The binary is run through the one process-runner seam,
:mod:`llama_runtime.runtime.runner`; this module holds the timeouts and
what the answers mean.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

#: ``--version`` only prints and exits; a healthy build answers in well under
#: a second. 20 s leaves room for a cold disk and an antivirus scan.
VERSION_TIMEOUT_SECONDS: Final = 20.0
#: ``--list-devices`` initialises every backend (a software Vulkan device
#: compiles nothing, but CUDA/ROCm driver start-up can take seconds).
LIST_DEVICES_TIMEOUT_SECONDS: Final = 60.0

#: The shared library a build of each GPU backend carries (``libggml-X.so``,
#: ``ggml-X.dll``, ``libggml-X.dylib``).
BACKEND_LIBRARY: Final[dict[str, str]] = {
    "cuda": "ggml-cuda",
    "vulkan": "ggml-vulkan",
    "rocm": "ggml-hip",
    "metal": "ggml-metal",
    "sycl": "ggml-sycl",
    "openvino": "ggml-openvino",
    "opencl": "ggml-opencl",
    "cann": "ggml-cann",
}

#: How ``--list-devices`` names devices of each backend ("Vulkan0: …").
DEVICE_PREFIX: Final[dict[str, tuple[str, ...]]] = {
    "cuda": ("CUDA",),
    "vulkan": ("Vulkan",),
    "rocm": ("ROCm", "HIP"),
    "metal": ("Metal", "MTL"),
    "sycl": ("SYCL",),
    "openvino": ("OPENVINO", "OpenVINO"),
    "opencl": ("GPUOpenCL", "OpenCL"),
    "cann": ("CANN",),
}

_DEVICE_LINE = re.compile(r"^\s+(?P<id>[A-Za-z_]+\d+):\s*(?P<desc>.+)$")


def version_line(output: str) -> str:
    """The one line of ``--version`` output a person needs: ``version: 7000 (abc123)``.

    llama-server prints device probes and ``built with …`` around it; without a
    ``version:`` line the last non-empty line is taken (at most 200 characters).
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    chosen = next((line for line in lines if line.lower().startswith("version:")), lines[-1] if lines else "")
    return chosen[:200]


def parse_devices(output: str) -> tuple[str, ...]:
    """Device lines of ``llama-server --list-devices``, e.g. ``"Vulkan0: llvmpipe (…)"``."""
    devices = []
    for line in output.splitlines():
        match = _DEVICE_LINE.match(line)
        if match:
            devices.append(f"{match['id']}: {match['desc'].strip()}")
    return tuple(devices)


def devices_of(backend: str, devices: Sequence[str]) -> list[str]:
    """The devices in ``devices`` that belong to ``backend``."""
    prefixes = DEVICE_PREFIX.get(backend, ())
    return [d for d in devices if d.split(":", 1)[0].rstrip("0123456789") in prefixes]


def has_backend_library(files: Sequence[str], backend: str) -> bool:
    """Whether a runtime's file list carries the shared library of ``backend``."""
    stem = BACKEND_LIBRARY.get(backend)
    if stem is None:
        return True
    return any(Path(f).name.removeprefix("lib").startswith(stem + ".") for f in files)


def has_any_ggml_library(files: Sequence[str]) -> bool:
    """Whether the build is split into ggml libraries at all (static builds are not)."""
    return any(Path(f).name.removeprefix("lib").startswith("ggml") for f in files)


def server_override(env: Mapping[str, str] | None = None) -> Path | None:
    """``LLAMA_SERVER_PATH``, an externally managed binary, when set."""
    value = (env if env is not None else os.environ).get("LLAMA_SERVER_PATH", "").strip()
    return Path(value).expanduser() if value else None
