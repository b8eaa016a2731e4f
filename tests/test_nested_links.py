"""The home is the tool's at every depth.

A link the tool did not make, anywhere it writes or deletes (``cache/assets``
pointed at a Hugging Face-style blob store, a link among the partial downloads,
a runtime directory that is a link), is refused with exit 2 naming it: nothing
is written or deleted through it, and the active runtime stays as it was and runs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, HomeGuard, publish_stand_in, run_json, snapshot_tree, stand_in_tarball


@pytest.fixture
def installed(capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path) -> Path:
    """b7000 (a stand-in CPU build) installed and active, its archive kept in the cache."""
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000")
    code, payload = run_json(capsys, home, None, "install-file", str(archive))
    assert code == 0, payload
    return home


def blob_store(root: Path) -> Path:
    """A directory of sha256-named files, as Hugging Face's cache keeps blobs."""
    root.mkdir()
    for n in range(3):
        data = f"someone else's blob {n}".encode()
        (root / hashlib.sha256(data).hexdigest()).write_bytes(data)
    return root


def plant(home: Path, where: str, outside: Path) -> Path:
    """Replace ``home/where`` with a link to ``outside`` (a file or a directory)."""
    link = home / where
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        for child in link.iterdir():
            child.unlink()
        link.rmdir()
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    return link


_PLACES = [
    "cache/assets",
    "downloads/0123abcd-llama-b7001-bin-ubuntu-x64.tar.gz.part",
    "jobs/current.json",
    "runtimes/elsewhere",
    "server/server.log",
]


@pytest.mark.parametrize("where", _PLACES)
@pytest.mark.parametrize("verb", [["update"], ["gc", "--keep", "3"], ["remove", "b7001"], ["status"]])
def test_a_link_inside_the_home_is_exit_2_naming_it_and_nothing_outside_changes(
    capsys: pytest.CaptureFixture[str],
    installed: Path,
    github: FakeGitHub,
    tmp_path: Path,
    where: str,
    verb: list[str],
) -> None:
    outside = blob_store(tmp_path / "hf-blobs")
    target = outside if where in ("cache/assets", "runtimes/elsewhere") else next(outside.iterdir())
    publish_stand_in(github, tmp_path, "b7001")
    guard = HomeGuard(None, installed)
    link = plant(installed, where, target)
    before = snapshot_tree(outside)
    code, payload = run_json(capsys, installed, github.api_url, *verb)
    assert code == 2, payload
    assert payload["error"]["code"] == "unsafe_home"
    assert str(link) in payload["error"]["message"]
    assert snapshot_tree(outside) == before, "something behind the link changed"
    assert link.is_symlink()
    link.unlink()  # what the hint says to do; then the home is as it was, b7000 active and running
    guard.assert_intact("b7000")


def test_gc_never_deletes_through_a_linked_asset_cache_even_when_the_link_appears_mid_way(
    installed: Path, tmp_path: Path
) -> None:
    # The cache's own guard, beneath the home check: a linked directory is no cache to trim.
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.fetch.cache import AssetCache

    outside = blob_store(tmp_path / "hf-blobs")
    before = snapshot_tree(outside)
    plant(installed, "cache/assets", outside)
    cache = AssetCache.of(Home(installed))
    assert cache.entries() == []
    assert cache.unused(set()) == []
    assert cache.lookup(next(iter(before))) is None
    assert snapshot_tree(outside) == before
    assert os.path.islink(installed / "cache" / "assets")


def _runtime_dir(home: Path, tag: str) -> Path:
    (found,) = [p for p in (home / "runtimes").iterdir() if f"-{tag}-" in p.name]
    return found


@pytest.mark.parametrize("swap", ["binary", "folder"])
def test_a_recorded_file_reached_through_a_link_is_damage_and_use_refuses_it(
    capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path, swap: str
) -> None:
    newer = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    code, payload = run_json(capsys, installed, None, "install-file", str(newer))
    assert code == 0, payload
    old = _runtime_dir(installed, "b7000") / "llama-b7000"
    outside = tmp_path / "outside-copy"
    # The same bytes, outside the home, reached through a link: not the files the install wrote.
    if swap == "folder":
        old.rename(outside)
        old.symlink_to(outside)
    else:
        outside.mkdir()
        (old / "llama-server").rename(outside / "llama-server")
        (old / "llama-server").symlink_to(outside / "llama-server")
    guard = HomeGuard(None, installed)
    code, payload = run_json(capsys, installed, None, "use", "b7000")
    assert code == 6, payload
    assert "symbolic link" in payload["error"]["message"], payload
    guard.assert_intact("b7001")


def _outside_state(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Each file under ``root``: (mode, inode, link count, content)."""
    out: dict[str, tuple[int, int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_mode, st.st_ino, st.st_nlink, path.read_bytes())
    return out


@pytest.mark.parametrize("outside_bytes", ["identical", "different"])
def test_sharing_never_touches_files_behind_a_folder_linked_out_of_a_kept_runtime(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, outside_bytes: str
) -> None:
    libs = ("ggml-base", "ggml-cpu")
    older = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000", libs=libs)
    code, payload = run_json(capsys, home, None, "install-file", str(older))
    assert code == 0, payload
    old = _runtime_dir(home, "b7000") / "llama-b7000"
    outside = tmp_path / "outside-copy"
    old.rename(outside)  # the owner moved the folder out of the home and left a link behind
    old.symlink_to(outside)
    for path in outside.iterdir():
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)  # the owner's own files, writable again
    if outside_bytes == "different":  # what sharing would take for damage and "repair" by rename
        (outside / "libggml-base.so.0.0.1").write_bytes(b"\x7fELF someone's own library")
    before = _outside_state(outside)
    newer = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001", libs=libs)
    code, payload = run_json(capsys, home, None, "install-file", str(newer))
    assert code == 0, payload
    assert _outside_state(outside) == before, "sharing changed a file behind the linked folder"
    assert old.is_symlink()
    HomeGuard(None, home).assert_intact("b7001")
