"""A mirror publishes only what it verified on disk.

Two ``mirror sync`` processes on one destination, a sync killed midway, ``--latest 1`` with
``--prune``, and a full disk. After each, every file a published JSON names has the bytes its
digest says, and a client installs from the mirror (the real ``update`` path).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.cli.main import main
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, assert_runs, publish_stand_in, run_json, stand_in_server, stand_in_tarball
from tests.test_disk_full import SmallFs, inject_enospc, small_fs  # noqa: F401  (fixture)

RELEASES = Path("repos") / REPO / "releases"
MiB = 1024 * 1024


def padded(path: Path, tag: str, pad_bytes: int) -> Path:
    files: dict[str, bytes | Path] = {
        "llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)"),
        "pad.bin": random.Random(pad_bytes).randbytes(pad_bytes),
    }
    return build_release_archive(path, "tar-tagdir", files, modes={"pad.bin": 0o644}, tag=tag)


def sync_argv(github: FakeGitHub, dest: Path, *extra: str) -> list[str]:
    return [
        "mirror", "sync", "--dest", str(dest), "--api-url", github.api_url,
        "--platform", "linux-x64", "--backend", "cpu", "--json", *extra,
    ]  # fmt: skip


def sync(capsys: pytest.CaptureFixture[str], github: FakeGitHub, dest: Path, *extra: str) -> tuple[int, Any]:
    code = main(sync_argv(github, dest, *extra))
    return code, json.loads(capsys.readouterr().out)


def assert_published_bytes_are_right(dest: Path) -> None:
    """Every asset a tags/ JSON names exists with the size and sha256 the JSON states."""
    tags = dest / RELEASES / "tags"
    for doc_path in tags.iterdir():
        for asset in json.loads(doc_path.read_text())["assets"]:
            file = dest / RELEASES / asset["browser_download_url"].removeprefix("../")
            data = file.read_bytes()
            assert len(data) == asset["size"], file
            assert hashlib.sha256(data).hexdigest() == asset["llama_runtime_sha256"], file


def assert_client_installs(capsys: pytest.CaptureFixture[str], dest: Path, home: Path, tag: str) -> None:
    code, payload = run_json(capsys, home, dest.as_uri(), "update", "--tag", tag, "--backend", "cpu")
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))


def test_two_syncs_on_one_destination_never_publish_bad_bytes(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    name = CPU_TAR.format(tag="b7000")
    github.add_release(REPO, "b7000", {name: padded(tmp_path / name, "b7000", 4 * MiB)})
    github.inject(name, Fault(drip_seconds=0.05, drip_chunk=256 * 1024))  # the first sync is slow
    dest = tmp_path / "mirror"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(
        [sys.executable, "-m", "llama_runtime", *sync_argv(github, dest)], stdout=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 60
    while not any((dest / ".partial").glob("*.part")):  # the first one is downloading
        assert time.monotonic() < deadline and first.poll() is None, "the first sync never started downloading"
        time.sleep(0.02)
    second = subprocess.run(
        [sys.executable, "-m", "llama_runtime", *sync_argv(github, dest)], capture_output=True, env=env, timeout=120
    )
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out
    assert second.returncode == 3, second.stdout
    assert "Another `mirror sync` is writing" in json.loads(second.stdout)["error"]["message"]
    assert_published_bytes_are_right(dest)
    assert_client_installs(capsys, dest, tmp_path / "client", "b7000")


def test_a_killed_syncs_leftovers_are_removed_by_the_next_sync(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    name = CPU_TAR.format(tag="b7000")
    github.add_release(REPO, "b7000", {name: stand_in_tarball(tmp_path / name, tag="b7000")})
    dest = tmp_path / "mirror"
    partial = dest / ".partial" / "b6999-0123456789abcdef-llama-b6999-bin-ubuntu-x64.tar.gz.part"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"half a download")
    temp = dest / RELEASES / "tags" / ".b7000.k2j3h4.tmp"
    temp.parent.mkdir(parents=True)
    temp.write_text('{"tag_name": "b70')
    code, payload = sync(capsys, github, dest)
    assert code == 0, payload
    assert not partial.exists() and not temp.exists()
    assert_published_bytes_are_right(dest)
    assert_client_installs(capsys, dest, tmp_path / "client", "b7000")


def test_latest_1_with_prune_keeps_only_the_newest_release(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    dest = tmp_path / "mirror"
    code, payload = sync(capsys, github, dest, "--latest", "2")
    assert code == 0 and sorted(payload["releases"]) == ["b7000", "b7001"], payload
    publish_stand_in(github, tmp_path, "b7002")
    code, payload = sync(capsys, github, dest, "--latest", "1")
    assert code == 0, payload
    # Each build with the semver release that names it (upstream cuts v0.N.0 at each build here).
    tags = ["b7000", "b7001", "b7002", "v0.1.0", "v0.2.0", "v0.3.0"]
    assert sorted(p.name for p in (dest / RELEASES / "tags").iterdir()) == tags
    code, payload = sync(capsys, github, dest, "--latest", "1", "--prune")
    assert code == 0, payload
    assert payload["pruned"] == ["b7000", "b7001", "v0.1.0", "v0.2.0"]
    assert sorted(p.name for p in (dest / RELEASES / "tags").iterdir()) == ["b7002", "v0.3.0"]
    assert sorted(p.name for p in (dest / RELEASES / "download").iterdir()) == ["b7002", "v0.3.0"]
    assert json.loads((dest / RELEASES / "latest").read_text())["tag_name"] == "v0.3.0"
    assert_published_bytes_are_right(dest)
    assert_client_installs(capsys, dest, tmp_path / "client", "b7002")


def test_prune_with_an_exact_tag_is_refused_with_exit_2(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    code, payload = sync(capsys, github, tmp_path / "mirror", "--tag", "b7000", "--prune")
    assert code == 2, payload
    assert "--latest" in payload["error"]["message"]


def test_a_full_disk_during_sync_exits_4_and_publishes_nothing(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    tmp_path: Path,
    small_fs: SmallFs,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = CPU_TAR.format(tag="b7000")
    github.add_release(REPO, "b7000", {name: padded(tmp_path / name, "b7000", 24 * MiB)})  # > the 20 MiB disk
    if not small_fs.real:
        inject_enospc(monkeypatch, "llama_runtime.updater.fetch.download._Job", "_stream")
    dest = small_fs.root / "mirror"
    code, payload = sync(capsys, github, dest)
    assert code == 4, payload
    assert payload["error"]["code"] == "disk_full"
    assert not (dest / RELEASES / "tags" / "b7000").exists()
    assert list((dest / ".partial").glob("*")) == []  # the space is given back
