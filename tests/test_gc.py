"""``gc``: frees old runtimes, stale staging and old partial downloads; never what is in use."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.fsutil import tree_size
from runtime.layout import Home, InstalledRuntime, Pointer
from runtime.lock import UpdateLock
from runtime.process import ManagedServer
from tests.conftest import REPO, assert_runs, snapshot_tree, stand_in_tarball
from updater.cli import main
from updater.gc import runtimes_to_remove, stale_staging
from updater.host import detect_host
from updater.install import Installer
from updater.offline import InstallFileRequest, install_file

CPU = "llama-{tag}-bin-ubuntu-x64.tar.gz"
TAGS = ("b7000", "b7001", "b7002", "b7003", "b7004")
# Answers the verification probe, then stays up like a server would.
LONG_RUNNING = b"""#!/bin/sh
case "$1" in
  --version) echo 'version: 7000 (stand-in)' >&2; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
exec sleep 60
"""


def run_cli(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = main([*args, "--home", str(home), "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """Five runtimes installed one after another (b7004 active, b7003 previous)."""
    home = Home(tmp_path / "home")
    ticks = itertools.count()
    installer = Installer(home, host=detect_host, clock=lambda: f"2026-01-01T00:00:{next(ticks):02d}Z")
    for tag in TAGS:
        archive = stand_in_tarball(tmp_path / CPU.format(tag=tag), tag=tag, script=LONG_RUNNING)
        install_file(installer, InstallFileRequest(archive=archive, default_repo=REPO, tag=tag))
    return home


def names_by_tag(home: Home) -> dict[str, str]:
    return {r.marker.tag: r.name for r in home.installed()}


@pytest.fixture
def server(home: Home) -> Iterator[ManagedServer]:
    managed = ManagedServer(home.server_dir)
    yield managed
    managed.stop(timeout=5)


def test_gc_keeps_active_previous_and_the_newest_n_and_frees_the_rest(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    runtimes = {r.marker.tag: r for r in home.installed()}
    expected_bytes = tree_size(runtimes["b7000"].path) + tree_size(runtimes["b7001"].path)
    pointer = home.pointer_path.read_bytes()
    code, report = run_cli(capsys, home.root, "gc", "--keep", "1")
    assert code == 0, report
    assert sorted(item["tag"] for item in report["removed"]) == ["b7000", "b7001"]
    assert report["freed_bytes"] == expected_bytes
    assert set(names_by_tag(home)) == {"b7002", "b7003", "b7004"}
    assert home.pointer_path.read_bytes() == pointer
    assert "active" in report["kept"][runtimes["b7004"].name]
    assert "previous" in report["kept"][runtimes["b7003"].name]
    assert_runs(runtimes["b7004"].binary)
    code, listed = run_cli(capsys, home.root, "list")
    assert all(entry["size_bytes"] > 0 for entry in listed["runtimes"])
    assert list(home.staging_dir.iterdir()) == []


def test_gc_never_removes_the_runtime_a_running_server_uses(
    home: Home, server: ManagedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    old = next(r for r in home.installed() if r.marker.tag == "b7000")
    server.start(old.binary, [])
    assert server.is_running()
    code, report = run_cli(capsys, home.root, "gc", "--keep", "0")
    assert code == 0, report
    assert set(names_by_tag(home)) == {"b7000", "b7003", "b7004"}
    assert "running" in report["kept"][old.name]
    assert server.is_running()


def test_dry_run_reports_the_same_removals_and_deletes_nothing(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot_tree(home.runtimes_dir)
    code, dry = run_cli(capsys, home.root, "gc", "--keep", "0", "--dry-run")
    assert code == 0, dry
    assert dry["dry_run"] is True and dry["freed_bytes"] > 0
    assert snapshot_tree(home.runtimes_dir) == before
    code, real = run_cli(capsys, home.root, "gc", "--keep", "0")
    assert code == 0, real
    assert [i["path"] for i in real["removed"]] == [i["path"] for i in dry["removed"]]
    assert real["freed_bytes"] == dry["freed_bytes"]


def test_gc_removes_stale_staging_and_old_partial_downloads_only(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    stale = home.staging_dir / f"{child.pid}-deadbeef"
    (stale / "llama-b7005").mkdir(parents=True)
    (stale / "llama-b7005" / "llama-server").write_bytes(b"x" * 100)
    live = home.staging_dir / f"{os.getpid()}-cafebabe"
    live.mkdir()
    old_part = home.downloads_dir / "0123-llama-b7005-bin-ubuntu-x64.tar.gz.part"
    old_part.write_bytes(b"y" * 50)
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old_part, (two_days_ago, two_days_ago))
    fresh_part = home.downloads_dir / "4567-llama-b7006-bin-ubuntu-x64.tar.gz.part"
    fresh_part.write_bytes(b"z" * 10)
    code, report = run_cli(capsys, home.root, "gc", "--keep", "5")
    assert code == 0, report
    assert {(i["kind"], i["path"]) for i in report["removed"]} == {("staging", str(stale)), ("download", str(old_part))}
    assert report["freed_bytes"] == 150
    assert live.exists() and fresh_part.exists() and not stale.exists() and not old_part.exists()


def test_gc_while_an_update_holds_the_lock_exits_3_and_removes_nothing(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot_tree(home.runtimes_dir)
    with UpdateLock(home.lock_path).hold("update"):
        code, report = run_cli(capsys, home.root, "gc", "--keep", "0")
    assert code == 3, report
    assert snapshot_tree(home.runtimes_dir) == before


def test_negative_keep_exits_2(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_cli(capsys, home.root, "gc", "--keep", "-1")
    assert code == 2, report


# -- the decisions alone -----------------------------------------------------------------


def _runtime(name: str, stamp: str) -> InstalledRuntime:
    from runtime.marker import InstallMarker

    marker = InstallMarker(REPO, name, "cpu", "auto", "a.tar.gz", 1, "0" * 64, False, stamp, "llama-server")
    return InstalledRuntime(name, Path("/nowhere") / name, marker)


def test_keep_counts_only_unprotected_runtimes_newest_first() -> None:
    runtimes = [_runtime(n, f"2026-01-0{i}T00:00:00Z") for i, n in enumerate("abcdef", start=1)]
    doomed, kept = runtimes_to_remove(runtimes, Pointer(active="a", previous="b"), {"c"}, keep=1)
    assert [r.name for r in doomed] == ["d", "e"]
    assert set(kept) == {"a", "b", "c", "f"}


def test_staging_without_a_live_owner_is_stale() -> None:
    names = ["123-aa", "456-bb", "456-bb.extra", "gc-old-runtime-cc"]
    assert stale_staging(names, alive=lambda pid: pid == 456) == ["123-aa", "gc-old-runtime-cc"]
