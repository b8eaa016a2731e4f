"""Hostile archive headers and planted files, each with the state it must not change.

A huge tar header read before the limits, a file named like the install
marker, a CUDA companion's link that escapes once merged, a planted server
pidfile, and the temp file of a killed ``.meta`` write.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from llama_runtime.errors import UnsafeArchiveError
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.sources.github import GitHubClient
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in, run_json, stand_in_server, stand_in_tarball
from tests.test_cuda_companion import CUDA_12_8_HOST, _lists_a_cuda_device


@pytest.fixture
def installed(b7000_home: Path) -> Path:
    return b7000_home


def huge_pax_header_tar(path: Path, declared: int) -> Path:
    """A tar.gz whose first header is a PAX header declaring ``declared`` bytes (zeros: tiny once gzipped)."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, declared
    with gzip.open(path, "wb", compresslevel=1) as gz:
        gz.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        zeros = b"\0" * (1024 * 1024)
        for _ in range(declared // len(zeros)):
            gz.write(zeros)
    return path


def test_install_file_refuses_a_huge_tar_header_before_reading_it(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    import tracemalloc

    declared = 128 * 1024 * 1024
    archive = huge_pax_header_tar(tmp_path / "llama-b7001-bin-ubuntu-x64.tar.gz", declared)
    guard = HomeGuard(tmp_path, installed)
    tracemalloc.start()
    try:
        code, payload = run_json(
            capsys, installed, github.api_url, "install-file", str(archive), "--tag", "b7001", "--backend", "cpu"
        )
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 8, payload
    assert "extended (PAX/GNU) header" in payload["error"]["message"]
    assert peak < declared // 4  # the header was never read into memory
    guard.assert_intact("b7000")


def test_an_archive_shipping_the_marker_name_is_refused_instead_of_looking_damaged(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    files: dict[str, bytes | Path] = {
        "llama-server": stand_in_server("version: 7001 (stand-in)"),
        "llama-runtime.json": b'{"not": "our marker"}',
    }
    archive = build_release_archive(tmp_path / "b7001.tar.gz", "tar-root", files, modes={"llama-server": 0o755})
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): archive})
    guard = HomeGuard(tmp_path, installed)
    code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 8, payload
    assert "llama-runtime.json" in payload["error"]["message"]
    guard.assert_intact("b7000")


def test_a_companion_link_that_leaves_the_runtime_once_merged_is_refused(github: FakeGitHub, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    tag = "b11026"
    old = stand_in_tarball(tmp_path / "b7000.tar.gz", tag="b7000")
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): old})
    # The build has llama-server at its root; the companion's one top directory is dropped
    # when it is merged, so its link climbs one level higher than it did in its own tree.
    build = build_release_archive(
        tmp_path / "cuda.tar.gz", "tar-root", {"llama-server": stand_in_server()}, modes={"llama-server": 0o755}
    )
    cudart = build_release_archive(
        tmp_path / "cudart.tar.gz",
        "tar-tagdir",
        {"lib/libcudart.so.12.8.57": b"\x7fELF cudart"},
        symlinks={"lib/libcudart.so.12": "../../llama-cudart/lib/libcudart.so.12.8.57"},
        tag="cudart",
    )
    github.add_release(
        REPO,
        tag,
        {
            f"llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": build,
            f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": cudart,
        },
    )
    installer = Installer(
        home, source=GitHubClient(github.api_url, REPO), host=lambda: CUDA_12_8_HOST, runner=_lists_a_cuda_device
    )
    installer.update(UpdateRequest(repo=REPO, tag="b7000", backend="cpu"))
    guard = HomeGuard(tmp_path, home.root)
    with pytest.raises(UnsafeArchiveError) as err:
        installer.update(UpdateRequest(repo=REPO, tag=tag, backend="cuda"))
    assert "libcudart.so.12" in err.value.message
    assert list(home.staging_dir.iterdir()) == []
    guard.assert_intact("b7000")


def test_server_stop_never_signals_a_process_a_planted_pidfile_names(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = installed / "server" / "server.json"
        state.parent.mkdir(exist_ok=True)
        # No start time: a record llama-runtime never writes on Linux.
        state.write_text(json.dumps({"pid": bystander.pid, "binary": "/usr/bin/llama-server", "args": []}))
        guard = HomeGuard(tmp_path, installed)
        code, payload = run_json(capsys, installed, github.api_url, "server", "stop")
        assert code == 0, payload
        assert bystander.poll() is None, "an unrelated process was signalled"
        guard.assert_intact("b7000")
    finally:
        bystander.kill()
        bystander.wait()


def test_the_temp_file_of_a_killed_meta_write_is_cleaned_by_the_next_update(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    leftover = installed / "downloads" / ".0123456789abcdef-llama-b7001.part.meta.x1y2z3.tmp"
    leftover.write_text('{"url": "http://')
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert not leftover.exists()
    assert os.listdir(installed / "downloads") == []
