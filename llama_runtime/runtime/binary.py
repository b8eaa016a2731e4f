"""Asking ``llama-server`` about itself (reading its answers), and locating it.

The binary is run through the one process-runner seam,
:mod:`llama_runtime.runtime.binary`; this module holds the timeouts and
what the answers mean.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.spans import span

if TYPE_CHECKING:
    import subprocess

# -- macho: The minimum macOS a Mach-O binary declares, read from its load commands. -----------------------------

_MH_MAGIC_64: Final = 0xFEEDFACF
_MH_MAGIC: Final = 0xFEEDFACE
_FAT_MAGIC: Final = 0xCAFEBABE
_FAT_MAGIC_64: Final = 0xCAFEBABF
_LC_BUILD_VERSION: Final = 0x32
_LC_VERSION_MIN_MACOSX: Final = 0x24
_PLATFORM_MACOS: Final = 1
#: Load commands sit right after the header; 1 MiB covers every real binary's (a few KiB).
_HEADER_BYTES: Final = 1024 * 1024


def _version(encoded: int) -> str:
    """``xxxx.yy.zz`` nibble-encoded (``0x001A0000`` -> ``"26.0"``), patch only when set."""
    major, minor, patch = encoded >> 16, (encoded >> 8) & 0xFF, encoded & 0xFF
    return f"{major}.{minor}.{patch}" if patch else f"{major}.{minor}"


def _thin_minimum(data: bytes, offset: int) -> str | None:
    if len(data) < offset + 28:
        return None
    magic = struct.unpack_from("<I", data, offset)[0]
    if magic not in (_MH_MAGIC_64, _MH_MAGIC):
        return None
    ncmds, sizeofcmds = struct.unpack_from("<II", data, offset + 16)
    cursor = offset + (32 if magic == _MH_MAGIC_64 else 28)
    end = min(cursor + sizeofcmds, len(data))
    for _ in range(min(ncmds, 4096)):
        if cursor + 8 > end:
            return None
        cmd, size = struct.unpack_from("<II", data, cursor)
        if cmd == _LC_BUILD_VERSION and cursor + 16 <= end:
            platform, minos = struct.unpack_from("<II", data, cursor + 8)
            if platform == _PLATFORM_MACOS:
                return _version(minos)
        elif cmd == _LC_VERSION_MIN_MACOSX and cursor + 12 <= end:
            return _version(struct.unpack_from("<I", data, cursor + 8)[0])
        if size < 8:
            return None  # a malformed command would loop forever
        cursor += size
    return None


def _highest(versions: list[str]) -> str | None:
    return max(versions, key=lambda v: tuple(int(p) for p in v.split("."))) if versions else None


def _fat_slices(head: bytes) -> list[int] | None:
    """Offsets of a universal binary's slices; ``None`` when ``head`` is no fat header."""
    magic = struct.unpack_from(">I", head, 0)[0]
    if magic not in (_FAT_MAGIC, _FAT_MAGIC_64):
        return None
    count = min(struct.unpack_from(">I", head, 4)[0], 16)
    entry = 32 if magic == _FAT_MAGIC_64 else 20
    offsets = []
    for i in range(count):
        base = 8 + i * entry
        if base + entry > len(head):
            break
        offsets.append(struct.unpack_from(">Q" if magic == _FAT_MAGIC_64 else ">I", head, base + 8)[0])
    return offsets


def minimum_macos(data: bytes) -> str | None:
    """The minimum macOS a binary held whole in ``data`` declares; ``None`` if no Mach-O or none said.

    A universal (fat) binary's slices are all read; the highest minimum wins, since the
    slice dyld picks is not known here.
    """
    if len(data) < 8:
        return None
    slices = _fat_slices(data)
    if slices is None:
        return _thin_minimum(data, 0)
    return _highest([v for v in (_thin_minimum(data, at) for at in slices) if v is not None])


def binary_minimum_macos(path: Path) -> str | None:
    """:func:`minimum_macos` of the file at ``path``, reading only the headers; ``None`` when unreadable."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEADER_BYTES)
            slices = _fat_slices(head) if len(head) >= 8 else None
            if slices is None:
                return _thin_minimum(head, 0)
            found = []
            for offset in slices:
                handle.seek(offset)
                if (version := _thin_minimum(handle.read(_HEADER_BYTES), 0)) is not None:
                    found.append(version)
            return _highest(found)
    except OSError:
        return None


# -- runner: The one process-runner seam: run a short-lived command to completion, time-boxed. -------------------

#: The return code of a command that could not be started at all (missing,
#: not executable): the shell's "found but cannot execute" code, 126.
CANNOT_EXECUTE: Final = 126


@dataclass(frozen=True)
class ProcessResult:
    """What a finished (or timed-out) child process did."""

    returncode: int | None  # None: killed after the timeout
    output: str  # stdout and stderr together (stdout alone when run with keep_stderr=False)

    @property
    def succeeded(self) -> bool:
        """Whether the command ran to the end and exited 0."""
        return self.returncode == 0


#: Runs ``argv`` with a timeout in seconds and an environment (``None``: ours).
ProcessRunner = Callable[[Sequence[str], float, Mapping[str, str] | None], ProcessResult]


def run_process(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    keep_stderr: bool = True,
    cwd: Path | None = None,
) -> ProcessResult:
    """Run ``argv`` to completion, killed after ``timeout`` seconds; never raises for the child.

    Args:
        argv: The command, run without a shell, stdin closed.
        timeout: Seconds before the child is killed (the result's ``returncode`` is then ``None``).
        env: The child's environment; ``None`` inherits ours.
        keep_stderr: ``True`` merges stderr into ``output`` in the order printed (what a person
            reading a failure needs); ``False`` discards it, so parsers read stdout alone.
        cwd: The child's working directory (``None``: ours). It inherits no descriptor but its output.

    Returns:
        The exit code and output; :data:`CANNOT_EXECUTE` with a sentence when it could not start.
    """
    import subprocess  # deferred: status and ensure() read this module's names, and run nothing

    with span("binary run"):  # the verification runs' share of an update, for the benchmark's breakdown
        try:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if keep_stderr else subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                close_fds=True,
            )
        except OSError as exc:
            return ProcessResult(CANNOT_EXECUTE, f"cannot execute {argv[0]}: {exc.strerror or exc}")
        from llama_runtime.runtime.capture import wait_and_capture

        out, timed_out = wait_and_capture(child, timeout, _kill)
        return ProcessResult(None if timed_out else child.returncode, out)


def _kill(child: subprocess.Popen[bytes]) -> None:
    """End a child past its timeout (an unconfined run: the sandbox's runs are stopped by their launcher)."""
    child.kill()
    child.wait()


# -- binary ------------------------------------------------------------------------------------------------------

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
