"""Bundles are remote data, a pipe is read once, a read-only
home serves every read-only command, and install order is a sequence, not the wall clock.

Every failure asserts the active runtime is unchanged and runs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.marker import MARKER_NAME
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.offline.offline import InstallFileRequest, install_file
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    CPU_TAR,
    REPO,
    HomeGuard,
    assert_runs,
    publish_stand_in,
    run_json,
    snapshot_tree,
    stand_in_tarball,
)


@pytest.fixture
def installed(capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path) -> Home:
    """b7000 (stand-in CPU_TAR build) installed from a file."""
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000")
    code, payload = run_json(capsys, home, None, "install-file", str(archive))
    assert code == 0, payload
    return Home(home)


# -- bundles are remote data -------------------------------------------------------------------


def repacked(bundle: Path, out: Path, **marker_changes: str) -> Path:
    """``bundle`` with its marker's fields changed, as someone re-packing it by hand would."""
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for info in src:
            data = src.extractfile(info).read() if info.isreg() else None  # type: ignore[union-attr]
            if info.name == MARKER_NAME and data is not None:
                marker = json.loads(data)
                marker.update(marker_changes)
                data = json.dumps(marker).encode()
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


@pytest.mark.parametrize(
    "changes",
    [{"tag": "../../b7000"}, {"repo": "../evil"}, {"asset": "../../etc/x.tar.gz"}, {"tag": "b7000\x1b[2J"}],
    ids=["tag_path", "repo_path", "asset_path", "tag_escape"],
)
def test_a_bundle_whose_marker_breaks_the_remote_rules_is_refused_with_exit_8(
    changes: dict[str, str], capsys: pytest.CaptureFixture[str], home: Path, installed: Home, tmp_path: Path
) -> None:
    bundle = tmp_path / "b.tar.gz"
    code, payload = run_json(capsys, home, None, "export", "--output", str(bundle))
    assert code == 0, payload
    frozen = HomeGuard(None, installed.root)
    bad = repacked(bundle, tmp_path / "bad.tar.gz", **changes)
    code, payload = run_json(capsys, home, None, "install-file", str(bad))
    assert code == 8, payload
    assert "is not a valid bundle" in payload["error"]["message"]
    assert "\x1b" not in payload["error"]["message"]
    frozen.assert_intact("b7000")


# -- a pipe is read once -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["-", "/dev/stdin"])
def test_install_file_from_a_pipe_with_the_right_sha256_installs(
    path: str, home: Path, installed: Home, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    argv = [sys.executable, "-m", "llama_runtime", "install-file", path, "--tag", "b7001", "--backend", "cpu"]
    argv += ["--sha256", digest, "--home", str(home), "--json"]
    # A real pipe (not a file given as stdin): `cat archive | llama-runtime install-file -`.
    cat = subprocess.Popen(["cat", str(archive)], stdout=subprocess.PIPE)
    done = subprocess.run(argv, stdin=cat.stdout, capture_output=True, timeout=120, check=False)
    assert cat.stdout is not None
    cat.stdout.close()
    cat.wait(timeout=10)
    payload = json.loads(done.stdout)
    assert done.returncode == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    assert not [p for p in (home / "downloads").iterdir() if p.name.startswith(".spool-")]


# -- a read-only home ----------------------------------------------------------------------------


@pytest.fixture
def read_only(installed: Home, tmp_path: Path) -> Iterator[Path]:
    """The installed home seen through a read-only mount (root) or without write bits (others)."""
    view = tmp_path / "ro-home"
    view.mkdir()
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(["mount", "--bind", str(installed.root), str(view)], capture_output=True).returncode == 0
    )
    if mounted:
        remount = ["mount", "-o", "remount,ro,bind", str(view)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], capture_output=True, check=False)
            pytest.skip("cannot remount read-only here")
        try:
            yield view
        finally:
            subprocess.run(["umount", "-l", str(view)], capture_output=True, check=False)
        return
    if os.geteuid() == 0:
        pytest.skip("root without mount: write bits do not stop root")
    view.rmdir()
    shutil.copytree(installed.root, view, symlinks=True)
    for dirpath, dirnames, _ in os.walk(view):
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o555)
    os.chmod(view, 0o555)
    try:
        yield view
    finally:
        for dirpath, dirnames, _ in os.walk(view):
            for name in dirnames:
                os.chmod(Path(dirpath) / name, 0o755)
        os.chmod(view, 0o755)


def test_a_read_only_home_serves_status_doctor_gc_dry_run_and_export(
    capsys: pytest.CaptureFixture[str], read_only: Path, tmp_path: Path
) -> None:
    before = snapshot_tree(read_only)
    for args in (["status"], ["doctor"], ["gc", "--dry-run"], ["list"], ["which"]):
        code, payload = run_json(capsys, read_only, None, *args)
        assert code == 0, (args, payload)
    code, payload = run_json(capsys, read_only, None, "export", "--output", str(tmp_path / "out.tar.gz"))
    assert code == 0, payload
    assert snapshot_tree(read_only) == before
    other = tmp_path / "other"
    code, payload = run_json(capsys, other, None, "install-file", str(tmp_path / "out.tar.gz"))
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))


def test_a_read_only_home_answers_check_and_server_stop(
    capsys: pytest.CaptureFixture[str], read_only: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    # check's rate-limit memory (cache/ratelimit.json) only spares quota: a home that cannot take it still answers.
    publish_stand_in(github, tmp_path, "b7001")
    guard = HomeGuard(None, read_only)
    code, payload = run_json(capsys, read_only, github.api_url, "check")
    assert code == 0, payload
    assert (payload["latest"], payload["update_available"]) == ("b7001", True)
    code, payload = run_json(capsys, read_only, None, "server", "stop")
    assert code == 0, payload
    assert payload["stopped"] is False
    guard.assert_intact("b7000", capsys=capsys)


# -- install order -------------------------------------------------------------------------------


def test_gc_keeps_the_newest_install_even_when_the_clock_read_2000_at_install_time(
    capsys: pytest.CaptureFixture[str], home: Path, installed: Home, tmp_path: Path
) -> None:
    # b7000 is installed with a right clock; b7001 on a box whose clock read 2000-01-01; then two more.
    for tag in ("b7001", "b7002", "b7003"):
        archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag)
        if tag == "b7001":
            installer = Installer(installed, host=detect_host, clock=lambda: "2000-01-01T00:00:00.000Z")
        else:
            installer = Installer(installed, host=detect_host)
        install_file(installer, InstallFileRequest(archive=archive, default_repo=REPO))
    code, payload = run_json(capsys, home, None, "gc", "--keep", "3")  # active, previous and the newest other
    assert code == 0, payload
    left = sorted(r.marker.tag for r in installed.installed())
    assert left == ["b7001", "b7002", "b7003"], left  # b7000, installed first, goes; b7001 stays
    assert_runs(installed.load(installed.read_pointer().active or "").binary)
