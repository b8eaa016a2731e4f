"""Deep trees and hostile homes.

A 294-byte archive of a directory chain 1,500 deep used to pass extraction and
then wedge every later ``update``, ``gc`` and ``doctor --repair`` (exit 1,
``RecursionError`` in ``fsync_tree``/``rmtree``). A ``staging/`` symlinked to
a bigger disk made the leftover clean-up delete the user's own files. Each
refusal leaves everything outside the home unchanged and the previously
active runtime intact and running (:class:`tests.helpers.HomeGuard`).
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in, run_json


@pytest.fixture
def installed(b7000_home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    publish_stand_in(github, tmp_path, "b7001")
    return b7000_home


@pytest.fixture(autouse=True)
def no_deep_tree_left(tmp_path: Path) -> Iterator[None]:
    """Remove any deep tree a failing test left: pytest's own clean-up of old
    temp dirs recurses (shutil.rmtree) and would fail every later session."""
    yield
    from llama_runtime.runtime.fsutil import remove_tree_quietly

    for entry in tmp_path.iterdir():
        remove_tree_quietly(entry)


def deep_chain_tar(path: Path, depth: int, *, explicit_dirs: bool) -> Path:
    """A tar.gz whose one file (or whose directory entries) nest ``depth`` levels deep."""
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        if explicit_dirs:
            for level in range(1, depth + 1):
                info = tarfile.TarInfo("/".join(["d"] * level))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
        else:
            info = tarfile.TarInfo("/".join(["d"] * depth) + "/f")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    return path


def make_deep_dir(root: Path, depth: int) -> None:
    """``root/d/d/…`` ``depth`` levels deep, made through descriptors (the path exceeds PATH_MAX)."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


# -- depth cap, iterative walks, best-effort clean-ups -------------------------------


@pytest.mark.parametrize("explicit_dirs", [False, True], ids=["one-deep-file", "1500-dir-entries"])
def test_directory_chain_1500_deep_is_refused_exit_8_and_nothing_is_left(
    explicit_dirs: bool, capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    archive = deep_chain_tar(tmp_path / "deep.tar.gz", 1500, explicit_dirs=explicit_dirs)
    github.add_release(REPO, "b7002", {CPU_TAR.format(tag="b7002"): archive})
    guard = HomeGuard(tmp_path, installed)
    code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")
    assert code == 8, payload
    assert "deep" in payload["error"]["message"]
    assert list((installed / "staging").iterdir()) == []
    guard.assert_intact("b7000")


def test_archive_at_the_depth_cap_still_installs(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    from llama_runtime.updater.stage.archive import extract_archive
    from llama_runtime.updater.stage.archive_rules import DEFAULT_LIMITS

    archive = deep_chain_tar(tmp_path / "ok.tar.gz", DEFAULT_LIMITS.max_depth - 1, explicit_dirs=False)
    result = extract_archive(archive, tmp_path / "out")
    assert len(result.files) == 1


@pytest.mark.parametrize("verb", [("update", "--tag", "b7001", "--backend", "cpu"), ("gc",), ("doctor", "--repair")])
def test_a_3000_deep_leftover_in_staging_never_wedges_a_later_verb(
    verb: tuple[str, ...], capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    make_deep_dir(installed / "staging" / "4242-deadbeef", 3000)
    guard = HomeGuard(tmp_path, installed)
    code, payload = run_json(capsys, installed, github.api_url, *verb)
    assert code == 0, payload
    assert not (installed / "staging" / "4242-deadbeef").exists()
    if verb[0] != "update":
        guard.assert_intact("b7000")


def test_remove_tree_and_fsync_tree_walk_deep_trees_without_recursion(tmp_path: Path) -> None:
    from llama_runtime.runtime.fsutil import fsync_tree, remove_tree, tree_size

    make_deep_dir(tmp_path / "deep", 2500)
    fsync_tree(tmp_path / "deep") if len(str(tmp_path)) + 2 * 2500 < 4000 else None
    assert tree_size(tmp_path / "deep") == 0
    remove_tree(tmp_path / "deep")
    assert not (tmp_path / "deep").exists()


def test_remove_tree_removes_links_and_never_what_they_point_to(tmp_path: Path) -> None:
    from llama_runtime.runtime.fsutil import remove_tree

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "dirlink").symlink_to(precious)
    (tree / "filelink").symlink_to(precious / "keep.txt")
    remove_tree(tree)
    assert not tree.exists()
    assert (precious / "keep.txt").read_text() == "mine"


# -- the home is the tool's ----------------------------------------------------------


@pytest.mark.parametrize("subdir", ["staging", "runtimes", "downloads"])
def test_a_symlinked_home_subdirectory_is_refused_and_the_users_files_stay(
    subdir: str, capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    bigdisk = tmp_path / "bigdisk" / subdir
    bigdisk.mkdir(parents=True)
    (bigdisk / "thesis.tex").write_text("years of work")
    (bigdisk / "4242-deadbeef").mkdir()  # even a name like our own staging
    (bigdisk / "4242-deadbeef" / "data").write_text("also mine")
    moved = installed / subdir
    os.rename(moved, tmp_path / "moved-away")
    if subdir == "runtimes":  # keep the active runtime reachable through the link
        os.rename(tmp_path / "moved-away", bigdisk / "real")
        bigdisk = bigdisk / "real"
    moved.symlink_to(bigdisk)
    guard = HomeGuard(tmp_path, installed)
    for verb in (("update", "--tag", "b7001", "--backend", "cpu"), ("gc",), ("doctor", "--repair")):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code == 2, (verb, payload)
        assert payload["error"]["code"] == "unsafe_home"
        assert "symbolic link" in payload["error"]["message"]
    assert snapshot_outside_is(guard)


@pytest.mark.parametrize("kind", ["a file", "under a file", "a dangling link", "a loop of links"])
def test_a_home_that_cannot_be_a_directory_is_exit_2_for_every_verb_and_not_ready_at_start_up(
    kind: str, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    home = {"a file": afile, "under a file": afile / "llama"}.get(kind, tmp_path / "home-link")
    if kind == "a dangling link":  # a data disk that is not mounted
        home.symlink_to(tmp_path / "unmounted" / "llama")
    elif kind == "a loop of links":
        home.symlink_to(tmp_path / "other-link")
        (tmp_path / "other-link").symlink_to(home)
    for verb in (("status",), ("list",), ("update", "--tag", "b7000", "--backend", "cpu"), ("gc",), ("doctor",)):
        code, payload = run_json(capsys, home, github.api_url, *verb)
        assert code == 2, (verb, payload)
        assert payload["error"]["code"] == "unsafe_home" and str(home) in payload["error"]["message"]
    from llama_runtime import RuntimeUpdater

    ready = RuntimeUpdater(home).ensure()  # an app's start-up gets an answer, not a traceback
    assert not ready.ready and str(home) in ready.problem
    assert afile.read_text() == "mine"


def snapshot_outside_is(guard: HomeGuard) -> bool:
    from tests.helpers import snapshot_outside

    assert guard.root is not None
    return snapshot_outside(guard.root, guard.home) == guard.outside


def test_a_world_writable_home_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    guard = HomeGuard(tmp_path, installed)
    installed.chmod(0o777)
    try:
        code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
        assert code == 2, payload
        assert "writable by every user" in payload["error"]["message"]
        assert f"chmod o-w {installed}" in payload["error"]["hint"]
        code, payload = run_json(capsys, installed, github.api_url, "status")
        assert code == 2, payload
    finally:
        installed.chmod(0o755)
    guard.assert_intact("b7000")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_a_home_subdirectory_owned_by_another_user_is_refused(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    guard = HomeGuard(tmp_path, installed)
    os.chown(installed / "staging", 4242, 4242)
    try:
        code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
        assert code == 2, payload
        assert "belongs to user id 4242" in payload["error"]["message"]
    finally:
        os.chown(installed / "staging", 0, 0)
    guard.assert_intact("b7000")


def test_only_names_of_our_own_patterns_are_ever_deleted(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    strays = [
        installed / "staging" / "notes.txt",
        installed / "staging" / "my-build",
        installed / "downloads" / "model.gguf",
        installed / "runtimes" / "hand-made",
    ]
    for stray in strays:
        if stray.name in ("my-build", "hand-made"):
            stray.mkdir()
            (stray / "inside").write_text("mine")
        else:
            stray.write_text("mine")
        old = 1_000_000_000  # older than any age limit
        os.utime(stray, (old, old))
    ours = installed / "staging" / "4242-deadbeef"
    ours.mkdir()
    for verb in (("update", "--tag", "b7001", "--backend", "cpu"), ("gc", "--keep", "2"), ("doctor", "--repair")):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code in (0, 6), (verb, payload)
    assert all(s.exists() for s in strays)
    assert not ours.exists()
