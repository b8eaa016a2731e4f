"""Bytes once: identical files stored once, and a home that keeps only what it needs."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, run_json, snapshot_tree, stand_in_tarball

TAGS = ("b7000", "b7001", "b7002", "b7003", "b7004")
LIBS = ("ggml-base", "ggml-cpu")


def publish(github: FakeGitHub, tmp_path: Path, tag: str) -> None:
    """A build whose llama-server differs from every other build's and whose libraries do not."""
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag, libs=LIBS)
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})


def update(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tag: str, *extra: str) -> object:
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu", *extra)
    assert code == 0, payload
    return payload


def install(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path, tags: Sequence[str]
) -> None:
    """Publish and install each of ``tags``, in order."""
    for tag in tags:
        publish(github, tmp_path, tag)
        update(capsys, home, github, tag)


def tags_installed(home: Path) -> set[str]:
    return {r.marker.tag for r in Home(home).installed()}


def test_each_update_keeps_active_previous_and_newest_other_and_trims_the_cache(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    for tag in TAGS:
        publish(github, tmp_path, tag)
        update(capsys, home, github, tag)
    assert tags_installed(home) == {"b7004", "b7003", "b7002"}
    pointer = Home(home).read_pointer()
    assert Home(home).load(pointer.active or "").marker.tag == "b7004"
    assert Home(home).load(pointer.previous or "").marker.tag == "b7003"
    # The kept runtimes' archives (the two newest entries are among them): b7000 and b7001's are gone.
    cached = sorted(p.name for p in (home / "cache" / "assets").iterdir())
    assert len(cached) == 3
    assert_runs(Home(home).load(pointer.previous or "").binary)


def test_keep_0_from_the_environment_keeps_every_runtime(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_KEEP", "0")
    home = tmp_path / "home"
    for tag in TAGS:
        publish(github, tmp_path, tag)
        update(capsys, home, github, tag)
    assert tags_installed(home) == set(TAGS)


def test_keep_2_keeps_only_active_and_previous(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    for tag in TAGS[:4]:
        publish(github, tmp_path, tag)
        update(capsys, home, github, tag, "--keep", "2")
    assert tags_installed(home) == {"b7003", "b7002"}


@pytest.mark.parametrize("bad", ["1", "-1", "three", "2.5", ""])
def test_a_bad_keep_exits_2_naming_what_is_valid_and_the_active_runtime_stays(
    bad: str, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    publish(github, tmp_path, "b7001")
    guard = HomeGuard(tmp_path, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--keep", bad)
    assert code == 2, payload
    assert "0 (keep every runtime) or a whole number of 2 or more" in payload["error"]["message"]
    guard.assert_intact("b7000", capsys=capsys)


def test_a_bad_keep_in_the_environment_exits_2_and_the_active_runtime_stays(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    publish(github, tmp_path, "b7001")
    guard = HomeGuard(tmp_path, home)
    monkeypatch.setenv("LLAMA_RUNTIME_KEEP", "all")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 2, payload
    assert "LLAMA_RUNTIME_KEEP='all' is not valid" in payload["error"]["message"]
    monkeypatch.delenv("LLAMA_RUNTIME_KEEP")
    guard.assert_intact("b7000", capsys=capsys)


def test_retention_never_removes_the_runtime_a_server_runs(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    first = Home(home).load(Home(home).read_pointer().active or "")
    monkeypatch.setenv("LLAMA_SERVER_PATH", str(first.binary))  # an app runs b7000's binary itself
    install(capsys, home, github, tmp_path, TAGS[1:])
    assert tags_installed(home) == {"b7000", "b7004", "b7003", "b7002"}
    assert_runs(first.binary)


def test_identical_libraries_of_kept_builds_are_stored_once_and_read_only(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    install(capsys, home, github, tmp_path, TAGS[:3])
    runtimes = Home(home).installed()
    libs = [r.path / f"llama-{r.marker.tag}" / "libggml-base.so.0.0.1" for r in runtimes]
    inodes = {(p.stat().st_dev, p.stat().st_ino) for p in libs}
    assert len(inodes) == 1
    assert libs[0].stat().st_nlink >= 3
    assert not libs[0].stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    servers = {(r.binary.stat().st_ino) for r in runtimes}
    assert len(servers) == 3  # the binaries differ: each runtime keeps its own
    for runtime in runtimes:
        assert_runs(runtime.binary)


def test_an_update_repairs_a_damaged_shared_file_by_rename_in_every_runtime_that_shares_it(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    install(capsys, home, github, tmp_path, TAGS[:2])
    layout = Home(home)
    active = layout.load(layout.read_pointer().active or "")
    damaged = active.binary.parent / "libggml-cpu.so.0.0.1"
    damaged_inode = damaged.stat().st_ino
    shared = [p for r in layout.installed() for p in r.binary.parent.iterdir() if p.stat().st_ino == damaged_inode]
    assert len(shared) >= 2 and any(active.path not in p.parents for p in shared)  # the previous runtime's too
    os.chmod(damaged, damaged.stat().st_mode | stat.S_IWUSR)
    damaged.write_bytes(b"\x7fELF stand-in librarX")  # same size, other bytes: every sharer sees it
    code, doctor = run_json(capsys, home, None, "doctor")
    assert code != 0, doctor  # the active runtime's damage is detected by its hash check
    publish(github, tmp_path, "b7002")
    update(capsys, home, github, "b7002")
    for path in shared:
        assert path.read_bytes() == b"\x7fELF stand-in library"
        assert path.stat().st_ino != damaged_inode
    code, doctor = run_json(capsys, home, None, "doctor")
    assert code == 0, doctor


def test_list_and_status_show_own_and_shared_bytes_and_the_home_total(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    install(capsys, home, github, tmp_path, TAGS[:3])
    code, listed = run_json(capsys, home, None, "list")
    assert code == 0, listed
    lib = len(b"\x7fELF stand-in library")
    for entry in listed["installed"]:
        assert entry["shared_bytes"] >= lib
        assert entry["own_bytes"] + entry["shared_bytes"] <= entry["size_bytes"]  # one file may have two names
    files = [p for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    by_inode = {(p.stat().st_dev, p.stat().st_ino): p.stat().st_size for p in files}
    assert listed["home_bytes"] == sum(by_inode.values())
    assert listed["home_bytes"] < sum(p.stat().st_size for p in files)  # shared files counted once
    code, status = run_json(capsys, home, None, "status")
    assert code == 0, status
    assert status["home_bytes"] == listed["home_bytes"]
    assert {e["shared_bytes"] for e in status["installed"]} == {e["shared_bytes"] for e in listed["installed"]}
    from llama_runtime.updater.cli.main import main

    assert main(["list", "--home", str(home)]) == 0
    text = capsys.readouterr().out
    assert "MB own +" in text and "MB on disk in all" in text


def test_where_hard_links_fail_files_stay_copies_and_the_update_says_so(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    first = Home(home).installed()[0]
    before = snapshot_tree(first.path)

    def cross_device(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr("llama_runtime.updater.activate.sharing.os.link", cross_device)
    publish(github, tmp_path, "b7001")
    payload = update(capsys, home, github, "b7001")
    assert isinstance(payload, dict)
    assert any("stored as copies" in w for w in payload["warnings"]), payload["warnings"]
    links = {p.stat().st_nlink for r in Home(home).installed() for p in r.binary.parent.iterdir() if p.is_file()}
    assert links == {1}
    assert snapshot_tree(first.path) == before  # b7000, now previous, is untouched and still runs
    assert Home(home).read_pointer().previous == first.name
    assert_runs(first.binary)


def test_check_apply_keeps_only_the_retention_count(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    assert run_json(capsys, home, None, "unpin")[0] == 0  # `update --tag` pinned it; later updates move on
    monkeypatch.setenv("LLAMA_RUNTIME_KEEP", "2")
    for tag in TAGS[1:]:
        publish(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "check", "--apply")
        assert code == 0, payload
    assert tags_installed(home) == {"b7004", "b7003"}


def test_sigkill_while_sharing_files_leaves_the_active_runtime_intact_and_the_rerun_completes(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import sys

    from llama_runtime.updater.checkpoints import KILL_AT_ENV

    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    update(capsys, home, github, "b7000")
    guard = HomeGuard(None, home)
    publish(github, tmp_path, "b7001")
    args = ["update", "--tag", "b7001", "--backend", "cpu", "--home", str(home), "--api-url", github.api_url]
    killed = subprocess.run(
        [sys.executable, "-m", "llama_runtime", *args, "--json"],
        env={**os.environ, KILL_AT_ENV: "during_share"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    guard.assert_intact("b7000", capsys=capsys)  # the runtime's files are whole: a link replaces a file in one rename
    payload = update(capsys, home, github, "b7001")
    assert isinstance(payload, dict) and payload["result"] == "installed"
    assert list((home / "staging").iterdir()) == []
    for runtime in Home(home).installed():
        assert_runs(runtime.binary)


def test_an_export_of_a_runtime_with_shared_files_installs_elsewhere(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    install(capsys, home, github, tmp_path, TAGS[:2])
    active = Home(home).load(Home(home).read_pointer().active or "")
    libs = [active.binary.parent / f"lib{lib}.so.0.0.1" for lib in LIBS]
    assert libs[0].stat().st_ino == libs[1].stat().st_ino  # identical bytes: one file, two names
    bundle = tmp_path / "bundle.tar.gz"
    code, payload = run_json(capsys, home, None, "export", "--output", str(bundle))
    assert code == 0, payload
    elsewhere = tmp_path / "elsewhere"
    code, payload = run_json(capsys, elsewhere, None, "install-file", str(bundle))
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))
