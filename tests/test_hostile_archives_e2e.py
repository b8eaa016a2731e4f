"""Hostile release archives through the whole ``update`` path.

Each archive is published as a normal release asset with a correct digest (a
compromised release would have one), so only extraction stands between it
and the disk. Every one must end in exit 8 with nothing written anywhere
outside staging: the whole test directory (home, archives, the places the
escapes aim at) is compared entry by entry before and after.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.stage.archive_rules import DEFAULT_LIMITS
from tests.archives import TAR_HOSTILE_KINDS, ZIP_HOSTILE_KINDS, build_hostile_tar, build_hostile_zip
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, assert_runs, run_json, stand_in_tarball

CPU_ZIP = "llama-{tag}-bin-ubuntu-x64.zip"
#: Written by every update, hostile or not: the lock side file and the ETag cache.
# Bookkeeping a refused update may write: the lock, the ETag cache, and the job record
# (a CLI update is the home's update job, so `job status` reports the refusal).
EXPECTED_CHANGES = ("home/locks/", "home/cache/", "home/jobs/")


def everything(root: Path) -> dict[str, str]:
    """Every entry under ``root``: directories, links with targets, files with sha256 and mode."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = "link -> " + os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                seen[rel] = f"{oct(st.st_mode & 0o777)} {hashlib.sha256(full.read_bytes()).hexdigest()}"
            else:
                seen[rel] = f"special {oct(st.st_mode)}"
    return seen


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    paths = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return {p for p in paths if not p.startswith(EXPECTED_CHANGES)}


@pytest.fixture
def home(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    good = stand_in_tarball(tmp_path / "ok.tar.gz", tag="b7000")
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): good})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return home


def refuse_and_change_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path, asset: str, archive: Path
) -> dict[str, Any]:
    github.add_release(REPO, "b7001", {asset: archive})
    before = everything(tmp_path)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 8, payload
    assert changed(before, everything(tmp_path)) == set()
    assert not any("escaped" in p for p in everything(tmp_path))
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and status["active"]["tag"] == "b7000"
    assert_runs(Path(status["active"]["binary"]))
    return dict(payload["error"])


#: End to end the update runs with the real member cap, so the member-count case writes one more.
REAL_CAP_PLUS_ONE = DEFAULT_LIMITS.max_members + 1


@pytest.mark.parametrize("kind", TAR_HOSTILE_KINDS)
def test_hostile_tarball_release_exits_8_and_writes_nothing_outside_staging(
    kind: str, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    (tmp_path / "hostile").mkdir()
    archive = build_hostile_tar(tmp_path / "hostile" / "evil.tar.gz", kind, members=REAL_CAP_PLUS_ONE)
    error = refuse_and_change_nothing(capsys, home, github, tmp_path, CPU_TAR.format(tag="b7001"), archive)
    assert error["code"] == "unsafe_archive"
    assert error["message"].startswith("Refusing ")


@pytest.mark.parametrize("kind", ZIP_HOSTILE_KINDS)
def test_hostile_zip_release_exits_8_and_writes_nothing_outside_staging(
    kind: str, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    (tmp_path / "hostile").mkdir()
    archive = build_hostile_zip(tmp_path / "hostile" / "evil.zip", kind, members=REAL_CAP_PLUS_ONE)
    error = refuse_and_change_nothing(capsys, home, github, tmp_path, CPU_ZIP.format(tag="b7001"), archive)
    assert error["code"] == "unsafe_archive"


def test_refused_archive_leaves_no_download_behind(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    (tmp_path / "hostile").mkdir()
    archive = build_hostile_tar(tmp_path / "hostile" / "evil.tar.gz", "dotdot")
    refuse_and_change_nothing(capsys, home, github, tmp_path, CPU_TAR.format(tag="b7001"), archive)
    assert list((home / "downloads").iterdir()) == []
    assert list((home / "staging").iterdir()) == []
