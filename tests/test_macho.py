"""The minimum macOS a Mach-O binary declares, and the refusal before dyld's (exit 5, nothing changed)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from llama_runtime.errors import MacOSTooOldError
from llama_runtime.runtime.binary import binary_minimum_macos, minimum_macos
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.config import resolve_settings
from llama_runtime.updater.engine import Engine, Seams
from llama_runtime.updater.offline.offline import InstallFileRequest, install_file
from tests.archives import build_release_archive
from tests.helpers import stand_in_server

LC_BUILD_VERSION, LC_VERSION_MIN_MACOSX, LC_SEGMENT_64 = 0x32, 0x24, 0x19


def encode(version: str) -> int:
    major, minor, patch = ([int(p) for p in version.split(".")] + [0, 0])[:3]
    return major << 16 | minor << 8 | patch


def thin(*commands: bytes) -> bytes:
    """A 64-bit Mach-O header (arm64) followed by ``commands``."""
    body = b"".join(commands)
    return struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 2, len(commands), len(body), 0, 0) + body


def build_version(minos: str, platform: int = 1) -> bytes:
    return struct.pack("<IIIIII", LC_BUILD_VERSION, 24, platform, encode(minos), encode("26.5"), 0)


def version_min(minos: str) -> bytes:
    return struct.pack("<IIII", LC_VERSION_MIN_MACOSX, 16, encode(minos), encode("14.0"))


def segment() -> bytes:
    return struct.pack("<II", LC_SEGMENT_64, 72) + b"\0" * 64


def fat(*slices: bytes) -> bytes:
    """A universal binary; slices at 16 KiB boundaries as lipo aligns them."""
    header = struct.pack(">II", 0xCAFEBABE, len(slices))
    offsets, at = [], 16384
    for body in slices:
        offsets.append(at)
        at += (len(body) // 16384 + 1) * 16384
    for offset, body in zip(offsets, slices, strict=True):
        header += struct.pack(">IIIII", 0x0100000C, 0, offset, len(body), 14)
    out = bytearray(header.ljust(offsets[0], b"\0"))
    for offset, body in zip(offsets, slices, strict=True):
        out[len(out) :] = b"\0" * (offset - len(out)) + body
    return bytes(out)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (thin(segment(), build_version("26.0")), "26.0"),  # upstream macos-arm64 b9428+ (llama.cpp #26375)
        (thin(build_version("13.3")), "13.3"),
        (thin(build_version("14.2.1")), "14.2.1"),
        (thin(version_min("11.0")), "11.0"),  # before LC_BUILD_VERSION
        (thin(build_version("17.0", platform=2)), None),  # an iOS slice says nothing about macOS
        (thin(segment()), None),
        (b"\x7fELF" + b"\0" * 60, None),
        (b"", None),
        (fat(thin(build_version("13.3")), thin(build_version("26.0"))), "26.0"),  # the highest slice wins
    ],
)
def test_minimum_macos_is_read_from_the_load_commands(data: bytes, expected: str | None) -> None:
    assert minimum_macos(data) == expected


def test_malformed_load_commands_end_the_walk_instead_of_looping() -> None:
    zero_size = struct.pack("<II", 0x99, 0)  # cmdsize 0 would never advance
    assert minimum_macos(thin(zero_size, build_version("26.0"))) is None
    assert minimum_macos(thin(build_version("26.0"))[:40]) is None  # truncated


def test_a_fat_binary_is_read_by_seeking_to_each_slice(tmp_path: Path) -> None:
    big = thin(build_version("26.0")) + b"\0" * (3 * 1024 * 1024)  # second slice beyond the first read
    path = tmp_path / "llama-server"
    path.write_bytes(fat(big, thin(build_version("13.3"))))
    assert binary_minimum_macos(path) == "26.0"
    assert binary_minimum_macos(tmp_path / "missing") is None


def mac_installer(home: Path, macos: str) -> Engine:
    settings = resolve_settings(home=home, api_url="http://127.0.0.1:9", repo="ggml-org/llama.cpp", backend="metal")
    host = HostFacts(os="macos", arch="arm64", metal=True, macos_version=macos)
    return Engine(settings, Seams(host=lambda: host))


def mac_archive(tmp_path: Path, minos: str) -> Path:
    # A Mach-O header with the minimum OS, then the stand-in script's text: the check reads only
    # the header, and on this Linux machine the stand-in never runs as a Mach-O would.
    binary = thin(build_version(minos)) + b"\n" + stand_in_server()
    return build_release_archive(
        tmp_path / "llama-b9500-bin-macos-arm64.tar.gz", "tar-tagdir", {"llama-server": binary}, tag="b9500"
    )


def test_install_file_of_a_build_needing_a_newer_macos_is_exit_5_before_dyld(tmp_path: Path) -> None:
    home = tmp_path / "home"
    engine = mac_installer(home, "15.4")
    request = InstallFileRequest(archive=mac_archive(tmp_path, "26.0"), default_repo="ggml-org/llama.cpp", tag="b9500")
    with pytest.raises(MacOSTooOldError, match=r"needs macOS 26\.0 .* runs 15\.4") as caught:
        install_file(engine.installer(), request)
    assert caught.value.exit_code == 5
    installer = engine.installer()
    assert installer.home.read_pointer().active is None  # nothing was activated
    assert installer.home.installed() == []
    assert list((home / "staging").iterdir()) == []  # the staged build is gone
