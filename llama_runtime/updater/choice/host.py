"""What a machine can run: :class:`HostFacts` (OS, arch, GPUs, drivers, CPU features) and its vocabulary.

This machine's facts come from
:func:`~llama_runtime.updater.choice.host_detect.detect_host` (probes through
seams, :class:`~llama_runtime.updater.choice.host_detect.ProbePass`); another machine's from
:func:`host_for_platform` (``plan --platform``) or a host file (the ``host_file`` section below).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import NotRegularFileError, parse_record, read_regular

# -- host --------------------------------------------------------------------------------------------------------

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
        no_nvidia_driver: Why detection is sure no NVIDIA driver is usable here
            ("nvidia-smi missing, no /dev/nvidia*"); ``None`` when it was not probed or may be.
        nvidia_unsure: Why detection cannot tell (a container with ``/dev/nvidia0`` but no
            ``nvidia-smi``); the device check after install decides.
        absent: ``(backend, why)`` for each other GPU backend (``rocm``, ``vulkan``, ``sycl``)
            that detection is sure cannot run here (no driver or loader at all); not probed or
            unsure backends are not listed. See :meth:`sure_absent`.

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
    no_nvidia_driver: str | None = None
    nvidia_unsure: str | None = None
    absent: tuple[tuple[str, str], ...] = ()

    def sure_absent(self, backend: str) -> str | None:
        """Why detection is sure ``backend`` has no driver or device here, else ``None`` (maybe it has)."""
        if backend == "cuda":
            return self.no_nvidia_driver
        return next((why for name, why in self.absent if name == backend), None)

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


# -- host_file: ``plan --host FILE``: the facts of another machine. ----------------------------------------------

#: A host file is a few KB; anything bigger is not one (and is not read whole).
MAX_HOST_FILE_BYTES: Final = 1024 * 1024


def load_host_file(path: Path) -> HostFacts:
    """The facts ``path`` describes.

    Raises:
        UserInputError: Unreadable, not JSON, not a host object, or a key of the wrong type.
    """
    try:
        raw = read_regular(path, MAX_HOST_FILE_BYTES + 1)  # a FIFO or device would block or never end
    except NotRegularFileError:
        raise UserInputError(
            f"The host file {path} is not a regular file; give the file `doctor --json` wrote."
        ) from None
    except OSError as exc:
        raise UserInputError(f"Cannot read the host file {path}: {exc.strerror or exc}.") from None
    if len(raw) > MAX_HOST_FILE_BYTES:
        raise UserInputError(
            f"The host file {path} is over {MAX_HOST_FILE_BYTES // 1024} KiB; it is not a host object."
        )
    try:
        payload = parse_record(raw, what=str(path), max_bytes=MAX_HOST_FILE_BYTES)
    except ValueError:
        raise UserInputError(
            f"The host file {path} is not JSON. Use the `host` object that `llama-runtime doctor --json` prints."
        ) from None
    if isinstance(payload, dict) and isinstance(payload.get("host"), dict):
        payload = payload["host"]  # the whole doctor --json output
    if not isinstance(payload, dict):
        raise UserInputError(f"The host file {path} holds no host object (a JSON object with `os` and `arch`).")
    return host_from_json(payload, str(path))


def host_from_json(payload: dict[str, Any], label: str = "the host file") -> HostFacts:
    """:class:`HostFacts` from a ``doctor --json`` host object; missing keys stay unknown."""
    fields = _Fields(payload, label)
    os_name = fields.text("os")
    arch = fields.text("arch")
    if (os_name is None or arch is None) and (platform := fields.text("platform")):
        os_name, _, arch = platform.partition("-")
    if os_name is None or arch is None:
        raise UserInputError(
            f"{label} does not say which machine it describes: it needs `os` and `arch` "
            "(or `platform`, e.g. linux-x64), as `llama-runtime doctor --json` prints them."
        )
    platform = f"{os_name}-{arch}"
    if platform not in PLATFORMS:
        raise UserInputError(
            f"{label} describes the platform {platform!r}; a host object needs `os` and `arch` "
            f"making one of: {', '.join(PLATFORMS)}."
        )
    assert os_name is not None and arch is not None
    return HostFacts(
        os=os_name,
        arch=arch,
        cuda_driver_version=fields.text("cuda_driver_version"),
        nvidia_driver=fields.text("nvidia_driver"),
        compute_capability=fields.text("compute_capability"),
        gpu_names=fields.texts("gpu_names"),
        vulkan=fields.flag("vulkan"),
        rocm=fields.flag("rocm"),
        metal=fields.flag("metal"),
        cpu_features=frozenset(fields.texts("cpu_features")),
        sources=(("host", label),),
        rocm_gfx=fields.texts("rocm_gfx"),
        compute_capabilities=fields.texts("compute_capabilities"),
        vulkan_api_version=fields.text("vulkan_api_version"),
        rocm_runtime_version=fields.text("rocm_runtime_version"),
        sycl=fields.flag("sycl"),
        macos_version=fields.text("macos_version"),
        glibc_version=fields.text("glibc_version"),
    )


class _Fields:
    """Typed reads of a host object; a wrong type names the key and what it should be."""

    def __init__(self, payload: dict[str, Any], label: str) -> None:
        self.payload, self.label = payload, label

    def _get(self, key: str, kind: str, ok: Callable[[Any], bool]) -> Any:
        value = self.payload.get(key)
        if value is not None and not ok(value):
            raise UserInputError(f"In {self.label}, `{key}` must be {kind} (or absent when unknown).")
        return value

    def text(self, key: str) -> str | None:
        value = self._get(key, "a string", lambda v: isinstance(v, str))
        return value.strip() or None if isinstance(value, str) else None

    def flag(self, key: str) -> bool:
        return bool(self._get(key, "true or false", lambda v: isinstance(v, bool)))

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._get(
            key, "a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v)
        )
        return tuple(value or ())
