"""Verification of a staged runtime before it may become active.

Two halves: :func:`check_marker` is pure (the marker read back from disk
against what was asked, with the exact wording of the checks Unsloth's
updater runs), :func:`probe_binary` runs the binary through a process runner.
Either raises :class:`~runtime.errors.VerificationError`; the caller then
discards the staged runtime and leaves the active one untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from llama_runtime.runtime.binary import (
    DEVICE_PREFIX,
    LIST_DEVICES_TIMEOUT_SECONDS,
    VERSION_TIMEOUT_SECONDS,
    ProcessRunner,
    devices_of,
    has_any_ggml_library,
    has_backend_library,
    parse_devices,
)
from llama_runtime.runtime.errors import CorruptStateError, MacOSTooOldError, UserInputError, VerificationError
from llama_runtime.runtime.exits import describe_run
from llama_runtime.runtime.marker import InstallMarker, is_gpu_backend, read_marker
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.host_detect import version_tuple
from llama_runtime.updater.release.tags import parse_tag

__all__ = [
    "UNKNOWN_BUILDS",
    "BinaryIdentity",
    "BuildCheck",
    "check_build",
    "check_requested_device",
    "parse_version_output",
]


# -- verify ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What the caller asked to install."""

    repo: str
    tag: str
    backend_request: str
    backend: str  # the concrete backend the choice produced


@dataclass(frozen=True)
class BinaryReport:
    """What the binary said about itself."""

    version: str
    devices: tuple[str, ...]


def check_marker(marker: InstallMarker | None, expected: Expected) -> None:
    """Compare a marker read back from disk with the request.

    Raises:
        VerificationError: With the sentence saying which check failed.
    """
    request = expected.backend_request
    if marker is None:
        raise VerificationError(f"requested {request} but the installed backend is unknown")
    if marker.repo != expected.repo or marker.tag != expected.tag:
        produced = marker.tag if marker.repo == expected.repo else f"{marker.repo}@{marker.tag}"
        wanted = expected.tag if marker.repo == expected.repo else f"{expected.repo}@{expected.tag}"
        raise VerificationError(f"pinned release {wanted} but installer produced {produced}")
    if marker.backend_request != request:
        raise VerificationError(
            f"requested {request} but the installer recorded {marker.backend_request or 'an unknown selection'}"
        )
    if request != "auto" and marker.backend != request:
        raise VerificationError(f"requested {request} but the installer produced {marker.backend}")
    if marker.backend != expected.backend:
        raise VerificationError(
            f"requested {request} (resolved to {expected.backend}) but the installer produced {marker.backend}"
        )


def read_back_marker(runtime_dir: Path, expected: Expected) -> InstallMarker:
    """Read the marker from disk (never from memory) and :func:`check_marker` it.

    Raises:
        VerificationError: Unreadable marker or a failed check.
    """
    try:
        marker = read_marker(runtime_dir)
    except CorruptStateError as exc:
        raise VerificationError(
            f"requested {expected.backend_request} but the installed backend is unknown ({exc.message})"
        ) from None
    check_marker(marker, expected)
    return marker


def probe_binary(
    binary: Path,
    *,
    backend: str,
    files: Sequence[str],
    host_has_device: bool,
    runner: ProcessRunner,
    env: Mapping[str, str] | None = None,
) -> BinaryReport:
    """Run the staged ``llama-server`` and check it is the build that was asked for.

    Args:
        binary: The staged binary.
        backend: The concrete backend the runtime must serve.
        files: Relative paths of the runtime's files (for the library check).
        host_has_device: Whether this host has a device of ``backend``; then
            ``--list-devices`` must list one.
        runner: The process seam.
        env: Environment for the child (``None``: inherit).

    Raises:
        VerificationError: The binary does not run, or is not a ``backend`` build.
    """
    result = runner([str(binary), "--version"], VERSION_TIMEOUT_SECONDS, env)
    if result.returncode is None:
        raise VerificationError(f"the new llama-server did not answer --version within {VERSION_TIMEOUT_SECONDS:.0f} s")
    if result.returncode != 0:
        raise VerificationError(
            f"the new llama-server does not run: {describe_run('--version', result.returncode, result.output)}"
        )
    version = result.output.strip()
    gpu = is_gpu_backend(backend)
    if gpu and has_any_ggml_library(files) and not has_backend_library(files, backend):
        raise VerificationError(f"requested {backend} but the installer produced a build without the {backend} library")
    listed = runner([str(binary), "--list-devices"], LIST_DEVICES_TIMEOUT_SECONDS, env)
    devices = parse_devices(listed.output) if listed.returncode == 0 else ()
    if gpu and host_has_device and not devices_of(backend, devices):
        shown = ", ".join(devices) if devices else "none"
        raise VerificationError(
            f"requested {backend} but the new llama-server lists no {backend} device "
            f"(devices: {shown}) although this machine has one"
        )
    return BinaryReport(version=version, devices=devices)


#: How people write the device families whose ``--list-devices`` prefix is spelt otherwise.
_DEVICE_LABEL: Final[dict[str, str]] = {"openvino": "OpenVINO", "opencl": "OpenCL"}


def check_requested_device(request: str, backend: str, devices: Sequence[str], *, allow_no_device: bool) -> str | None:
    """A GPU backend asked for by name must list a device of it: never a silent CPU fallback.

    Args:
        request: The explicit backend request (``auto`` is never checked: it chose by detection).
        backend: The concrete backend the build serves.
        devices: What its ``--list-devices`` printed.
        allow_no_device: Install anyway (a machine image provisioned on another host).

    Returns:
        ``None`` when a device is listed (or nothing was asked by name); with ``allow_no_device``,
        the warning to keep on the runtime's record.

    Raises:
        VerificationError: No device of ``backend`` is listed and ``allow_no_device`` is false.
    """
    if request == "auto" or not is_gpu_backend(backend) or devices_of(backend, devices):
        return None
    label = _DEVICE_LABEL.get(backend) or DEVICE_PREFIX.get(backend, (backend,))[0]
    message = f"requested {request} but the installed build lists no {label} device"
    if not allow_no_device:
        raise VerificationError(
            message,
            hint=f"Check the {label} driver, or pass --allow-no-device to install it for another machine.",
        )
    return f"{message}; installed anyway (--allow-no-device): it runs on the CPU here"


def check_macos_minimum(binary: Path, host: HostFacts) -> None:
    """Refuse, before dyld does, a Mac build that declares a newer macOS than this one runs.

    Raises:
        MacOSTooOldError: The binary's ``LC_BUILD_VERSION`` minimum is above ``host.macos_version``.
    """
    if host.os != "macos" or not host.macos_version:
        return
    from llama_runtime.runtime.binary import binary_minimum_macos

    needed = binary_minimum_macos(binary)
    if needed is not None and version_tuple(needed) > version_tuple(host.macos_version):
        raise MacOSTooOldError(
            f"This build of llama-server needs macOS {needed} or newer and this Mac runs {host.macos_version} "
            "(its LC_BUILD_VERSION says so; dyld would refuse to load it).",
            hint="Update macOS, or install an older build with `llama-runtime update --tag TAG`.",
        )


# -- identity: Which build a ``llama-server`` says it is, checked against the request. ---------------------------

BuildCheck = Literal["verified", "unverifiable"]

_SEMVER_FORM: Final = re.compile(
    r"version:\s*(?P<version>[0-9][0-9A-Za-z.+-]*)\s*\(\s*build\s+(?P<build>\d{1,18})\s*,\s*commit\s+(?P<commit>[^)\s]*)\s*\)"
)
_BUILD_FORM: Final = re.compile(r"version:\s*(?P<build>\d{1,18})\s*\(\s*(?P<commit>[^)\s]*)\s*\)")
#: Build numbers a binary reports when it cannot know its own (no git: 0; a
#: depth-1 clone: 1). No release carries them.
UNKNOWN_BUILDS: Final[frozenset[int]] = frozenset({0, 1})


@dataclass(frozen=True)
class BinaryIdentity:
    """What ``--version`` said.

    Attributes:
        raw: The output, stripped (what the marker records).
        build: The build number, or ``None`` when the output has none.
        version: The semver the binary reports (new format), else ``None``.
        commit: The short commit hash, if printed.
    """

    raw: str
    build: int | None
    version: str | None = None
    commit: str | None = None


def parse_version_output(output: str) -> BinaryIdentity:
    """Read the build number out of ``llama-server --version`` output (either format)."""
    raw = output.strip()
    if m := _SEMVER_FORM.search(raw):
        return BinaryIdentity(raw, int(m["build"]), m["version"], m["commit"] or None)
    if m := _BUILD_FORM.search(raw):
        return BinaryIdentity(raw, int(m["build"]), None, m["commit"] or None)
    return BinaryIdentity(raw, None)


def check_build(tag: str, identity: BinaryIdentity) -> BuildCheck:
    """Whether the binary is the build ``tag`` names.

    Returns:
        ``"verified"`` when the numbers agree; ``"unverifiable"`` when the tag
        or the binary carries no usable build number.

    Raises:
        VerificationError: The binary reports another build (both numbers named).
    """
    try:
        expected = parse_tag(tag).build
    except UserInputError:
        expected = None
    reported = identity.build
    if expected is None or reported is None or reported in UNKNOWN_BUILDS:
        return "unverifiable"
    if reported != expected:
        raise VerificationError(
            f"asked for build {expected} ({tag}) but the new llama-server reports build {reported} "
            f"({identity.raw.splitlines()[0][:120] if identity.raw else 'no output'})"
        )
    return "verified"
