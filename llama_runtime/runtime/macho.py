"""The minimum macOS a Mach-O binary declares, read from its load commands (no IO beyond one read).

dyld refuses a binary whose ``LC_BUILD_VERSION`` (or older ``LC_VERSION_MIN_MACOSX``) minimum
is above the running macOS, with an error that names neither; reading it first lets the
installer refuse with the version needed (llama.cpp #26375, unslothai/unsloth #5883).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Final

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
