"""Builders of real archives in llama.cpp's release layouts, good and hostile.

Other tests import these (``from tests.archives import build_release_archive``)
to get byte-for-byte real ``.tar.gz``/``.zip`` files written by ``tarfile`` and
``zipfile``, laid out the way llama.cpp's ``release.yml`` packs them
(asset_naming.md §4).

Hostile archives aim every escape at the directory holding the archive, never
at ``/``, so a test can prove nothing landed outside its destination by
comparing that directory before and after.
"""

from __future__ import annotations

import io
import shutil
import stat
import tarfile
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from llama_runtime.updater.stage.archive_rules import ExtractLimits

LAYOUTS: Final = ("tar-root", "tar-tagdir", "zip-buildbin", "zip-root")

TAR_HOSTILE_KINDS: Final = (
    "dotdot",
    "absolute",
    "backslash",
    "nul_name",
    "symlink_escape",
    "symlink_then_write_through",
    "hardlink_outside",
    "device",
    "fifo",
    "too_many_members",
    "dangling_symlink",
    "duplicate_members",
    "absolute_symlink",
)
ZIP_HOSTILE_KINDS: Final = (
    "dotdot",
    "absolute",
    "drive_letter",
    "backslash",
    "nul_name",
    "zip_dotdot_name",
    "symlink_escape",
    "symlink_then_write_through",
    "device",
    "fifo",
    "zip_bomb",
    "too_many_members",
    "dangling_symlink",
    "duplicate_members",
    "absolute_symlink",
)

#: One member more than HOSTILE_LIMITS admits: the member-count refusal is the same code at any
#: limit, so the tests inject a small one instead of writing 20,001 members (41 s on CI's machine).
TOO_MANY_MEMBERS: Final = 201
HOSTILE_LIMITS: Final = ExtractLimits(max_members=TOO_MANY_MEMBERS - 1)
# 8 MiB of zeros deflates to ~8 KiB: about 1000:1, far above the 200:1 cap.
ZIP_BOMB_BYTES: Final = 8 * 1024 * 1024
# cmake's build/bin holds executables and shared libraries, all mode 755.
DEFAULT_MODE: Final = 0o755
# Unix "made by" in the zip central directory; zip(1) on Linux/macOS writes it.
_UNIX: Final = 3


def build_release_archive(
    path: Path,
    layout: str,
    files: Mapping[str, bytes | Path],
    symlinks: Mapping[str, str] | None = None,
    modes: Mapping[str, int] | None = None,
    tag: str = "b7000",
) -> Path:
    """Write a release archive the way llama.cpp's CI packs one.

    Args:
        path: Where to write; the name is used as given (``.tar.gz``/``.zip``).
        layout: ``"tar-root"`` (``./llama-server``, b7224–b7277),
            ``"tar-tagdir"`` (``llama-<tag>/llama-server``, b7278+),
            ``"zip-buildbin"`` (``build/bin/llama-server``, Unix zips up to
            b7485, symlinks stored as ``zip -y`` does) or ``"zip-root"``
            (Windows: everything at the root).
        files: Name inside the layout's directory → content, or a ``Path`` to
            stream from (for large real binaries).
        symlinks: Name → relative target, both inside the layout's directory.
        modes: Name → permission bits; files default to 0o755.
        tag: The release tag, used by ``"tar-tagdir"``.

    Returns:
        ``path``.
    """
    symlinks = symlinks or {}
    modes = modes or {}
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; valid: {', '.join(LAYOUTS)}")
    if layout.startswith("tar-"):
        top = "." if layout == "tar-root" else f"llama-{tag}"
        with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=6) as tf:
            tf.addfile(_tar_info(top + "/" if top == "." else top, tarfile.DIRTYPE, 0o755))
            for name, content in files.items():
                _tar_add_file(tf, f"{top}/{name}", content, modes.get(name, DEFAULT_MODE))
            for name, target in symlinks.items():
                tf.addfile(_tar_info(f"{top}/{name}", tarfile.SYMTYPE, 0o777, linkname=target))
        return path
    prefix = "build/bin/" if layout == "zip-buildbin" else ""
    windows = layout == "zip-root"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            mode = None if windows else modes.get(name, DEFAULT_MODE)
            _zip_add_file(zf, prefix + name, content, mode)
        for name, target in symlinks.items():
            _zip_add_symlink(zf, prefix + name, target)
    return path


def build_hostile_tar(path: Path, kind: str, *, members: int = TOO_MANY_MEMBERS) -> Path:
    """Write a ``.tar.gz`` that a safe extractor must refuse.

    Args:
        path: Where to write. Escapes aim at ``path.parent``.
        kind: One of :data:`TAR_HOSTILE_KINDS`.
        members: How many files ``too_many_members`` writes (one more than the limit a test injects).

    Returns:
        ``path``.
    """
    top = "llama-b7000"
    outside = str(path.parent / "escaped")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(_tar_info(top, tarfile.DIRTYPE, 0o755))
        _tar_add_file(tf, f"{top}/llama-server", b"#!/bin/sh\n", 0o755)
        if kind == "dotdot":
            _tar_add_file(tf, f"{top}/../../escaped", b"evil", 0o644)
        elif kind == "absolute":
            _tar_add_file(tf, outside, b"evil", 0o644)
        elif kind == "backslash":
            _tar_add_file(tf, f"{top}\\..\\..\\escaped", b"evil", 0o644)
        elif kind == "nul_name":
            # A ustar name field would end at the NUL; a pax "path" record keeps it.
            name = f"{top}/ok\x00/../../escaped"
            info = _tar_info(name, tarfile.REGTYPE, 0o644)
            info.pax_headers = {"path": name}
            info.size = 4
            tf.addfile(info, io.BytesIO(b"evil"))
        elif kind == "symlink_escape":
            tf.addfile(_tar_info(f"{top}/libggml.so", tarfile.SYMTYPE, 0o777, linkname="../.."))
        elif kind == "symlink_then_write_through":
            # pip's nested traversal: redir -> . is harmless on its own.
            tf.addfile(_tar_info(f"{top}/redir", tarfile.SYMTYPE, 0o777, linkname="."))
            tf.addfile(_tar_info(f"{top}/redir/up", tarfile.SYMTYPE, 0o777, linkname="../.."))
            _tar_add_file(tf, f"{top}/redir/up/escaped", b"evil", 0o644)
        elif kind == "hardlink_outside":
            tf.addfile(_tar_info(f"{top}/libllama.so", tarfile.LNKTYPE, 0o644, linkname=outside))
        elif kind == "device":
            info = _tar_info(f"{top}/null", tarfile.CHRTYPE, 0o666)
            info.devmajor, info.devminor = 1, 3
            tf.addfile(info)
        elif kind == "fifo":
            tf.addfile(_tar_info(f"{top}/pipe", tarfile.FIFOTYPE, 0o644))
        elif kind == "too_many_members":
            for index in range(members):
                _tar_add_file(tf, f"{top}/f{index}", b"", 0o644)
        elif kind == "dangling_symlink":
            # The shape of llama.cpp #23115 (b9165 ubuntu-vulkan).
            mangled = "llama-b9165ibggml.so.0"
            tf.addfile(_tar_info(f"{top}/libggml.so", tarfile.SYMTYPE, 0o777, linkname=mangled))
        elif kind == "duplicate_members":
            _tar_add_file(tf, f"{top}/llama-server", b"#!/bin/sh\necho other\n", 0o755)
        elif kind == "absolute_symlink":
            tf.addfile(_tar_info(f"{top}/libc.so", tarfile.SYMTYPE, 0o777, linkname=outside))
        else:
            raise ValueError(f"unknown hostile tar kind {kind!r}; valid: {TAR_HOSTILE_KINDS}")
    return path


def build_hostile_zip(path: Path, kind: str, *, members: int = TOO_MANY_MEMBERS) -> Path:
    """Write a ``.zip`` that a safe extractor must refuse.

    Args:
        path: Where to write. Escapes aim at ``path.parent``.
        kind: One of :data:`ZIP_HOSTILE_KINDS`.
        members: How many files ``too_many_members`` writes (one more than the limit a test injects).

    Returns:
        ``path``.
    """
    top = "build/bin/"
    outside = str(path.parent / "escaped")
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate on purpose
        _zip_add_file(zf, top + "llama-server", b"#!/bin/sh\n", 0o755)
        if kind == "dotdot":
            _zip_add_file(zf, "../escaped", b"evil", 0o644)
        elif kind == "absolute":
            _zip_add_file(zf, outside, b"evil", 0o644)
        elif kind == "drive_letter":
            _zip_add_file(zf, "C:/escaped", b"evil", 0o644)
        elif kind == "backslash":
            _zip_add_file(zf, "..\\escaped", b"evil", 0o644)
        elif kind == "nul_name":
            _zip_add_file(zf, "ok\x00/../../escaped", b"evil", 0o644)
        elif kind == "zip_dotdot_name":
            # ZipFile.extract would silently rewrite this to build/bin/escaped.
            _zip_add_file(zf, top + "../../../escaped", b"evil", 0o644)
        elif kind == "symlink_escape":
            _zip_add_symlink(zf, top + "libggml.so", "../../..")
        elif kind == "symlink_then_write_through":
            _zip_add_symlink(zf, top + "redir", ".")
            _zip_add_symlink(zf, top + "redir/up", "../../../..")
            _zip_add_file(zf, top + "redir/up/escaped", b"evil", 0o644)
        elif kind == "device":
            _zip_add_raw(zf, top + "null", b"", stat.S_IFCHR | 0o666)
        elif kind == "fifo":
            _zip_add_raw(zf, top + "pipe", b"", stat.S_IFIFO | 0o644)
        elif kind == "zip_bomb":
            _zip_add_file(zf, top + "libggml-cuda.so", bytes(ZIP_BOMB_BYTES), 0o755)
        elif kind == "too_many_members":
            for index in range(members):
                _zip_add_file(zf, f"{top}f{index}", b"", 0o644)
        elif kind == "dangling_symlink":
            _zip_add_symlink(zf, top + "libggml.so", "llama-b9165ibggml.so.0")
        elif kind == "duplicate_members":
            _zip_add_file(zf, top + "llama-server", b"#!/bin/sh\necho other\n", 0o755)
        elif kind == "absolute_symlink":
            _zip_add_symlink(zf, top + "libc.so", outside)
        else:
            raise ValueError(f"unknown hostile zip kind {kind!r}; valid: {ZIP_HOSTILE_KINDS}")
    return path


def _tar_info(name: str, kind: bytes, mode: int, *, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.linkname = linkname
    info.mtime = 1_700_000_000  # fixed, so archives are reproducible
    return info


def _tar_add_file(tf: tarfile.TarFile, name: str, content: bytes | Path, mode: int) -> None:
    info = _tar_info(name, tarfile.REGTYPE, mode)
    if isinstance(content, Path):
        info.size = content.stat().st_size
        with content.open("rb") as src:
            tf.addfile(info, src)
    else:
        info.size = len(content)
        tf.addfile(info, io.BytesIO(content))


def _zip_info(name: str, unix_mode: int | None) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    if unix_mode is None:  # made on Windows: DOS "archive" attribute, no st_mode
        info.create_system = 0
        info.external_attr = 0x20
    else:
        info.create_system = _UNIX
        info.external_attr = unix_mode << 16
    # ZipInfo cuts a name at NUL; keep the raw one, as a hostile writer would.
    info.filename = name
    info.orig_filename = name
    return info


def _zip_add_file(zf: zipfile.ZipFile, name: str, content: bytes | Path, mode: int | None) -> None:
    info = _zip_info(name, None if mode is None else stat.S_IFREG | mode)
    if isinstance(content, Path):
        size = content.stat().st_size
        with content.open("rb") as src, zf.open(info, "w", force_zip64=size > 2**31) as dst:
            shutil.copyfileobj(src, dst, 1024 * 1024)
    else:
        zf.writestr(info, content)


def _zip_add_symlink(zf: zipfile.ZipFile, name: str, target: str) -> None:
    # `zip -y`: st_mode says S_IFLNK and the body is the target path.
    _zip_add_raw(zf, name, target.encode(), stat.S_IFLNK | 0o777)


def _zip_add_raw(zf: zipfile.ZipFile, name: str, body: bytes, unix_mode: int) -> None:
    info = _zip_info(name, unix_mode)
    info.compress_type = zipfile.ZIP_STORED
    zf.writestr(info, body)
