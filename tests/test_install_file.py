"""``install-file``: an archive on disk goes through the same install path as a download.

Every failure asserts that the active runtime is unchanged (files and pointer)
and still runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CPU_TAR,
    REPO,
    VULKAN_TAR,
    HomeGuard,
    assert_runs,
    run_json,
    snapshot_tree,
    stand_in_server,
    stand_in_tarball,
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def active_b7000(capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path) -> dict[str, Any]:
    """A stand-in b7000 cpu build installed from a file and active."""
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000", libs=("ggml", "llama"))
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7000")
    assert code == 0, payload
    return payload


# -- good archives ---------------------------------------------------------------------


def test_archive_installs_with_backend_from_its_name_and_records_source_file(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    digest = sha256(archive)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001", "--sha256", digest)
    assert code == 0, payload
    assert payload["result"] == "installed"
    active = payload["active"]
    assert (active["repo"], active["tag"], active["backend"]) == (REPO, "b7001", "cpu")
    marker = json.loads(Path(active["marker_path"]).read_text())
    assert marker["source"] == "file"
    assert marker["digest_verified"] is True
    assert marker["sha256"] == digest
    assert marker["asset"] == archive.name
    assert "7001" in assert_runs(Path(active["binary"]))
    assert sha256(archive) == digest  # the caller's file is never modified
    assert list((home / "downloads").iterdir()) == []


def test_archive_without_sha256_is_recorded_as_not_digest_verified(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001")
    assert code == 0, payload
    assert json.loads(Path(payload["active"]["marker_path"]).read_text())["digest_verified"] is False


def test_same_archive_again_is_up_to_date(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    before = snapshot_tree(home / "runtimes")
    archive = tmp_path / CPU_TAR.format(tag="b7000")
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7000")
    assert code == 0, payload
    assert payload["result"] == "up_to_date"
    assert payload["active"]["runtime_dir"] == active_b7000["active"]["runtime_dir"]
    assert snapshot_tree(home / "runtimes") == before


def test_same_archive_again_over_a_library_damaged_at_the_same_size_reinstalls_it(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    marker = json.loads(Path(active_b7000["active"]["marker_path"]).read_text())
    runtime = Path(active_b7000["active"]["marker_path"]).parent
    library = next(rel for rel in marker["files"] if "libllama" in rel)
    damaged = runtime / library
    damaged.write_bytes(b"\0" * damaged.stat().st_size)  # same size: only a hash tells
    archive = tmp_path / CPU_TAR.format(tag="b7000")
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7000")
    assert code == 0, payload
    assert payload["result"] != "up_to_date", payload
    installed = Path(payload["active"]["marker_path"]).parent / library
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == marker["files"][library]["sha256"]
    code, status = run_json(capsys, home, None, "status")
    assert code == 0 and status["active"]["tag"] == "b7000", status
    assert_runs(Path(status["active"]["binary"]))


def test_second_archive_keeps_the_first_as_rollback_target(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001")
    assert code == 0, payload
    assert payload["previous"]["tag"] == "b7000"
    code, payload = run_json(capsys, home, None, "rollback")
    assert code == 0 and payload["active"]["tag"] == "b7000"


def test_real_vulkan_build_installs_from_file_and_lists_its_device(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, real_vulkan_tarball: Path, vk_env: dict[str, str]
) -> None:
    archive = tmp_path / VULKAN_TAR.format(tag="b7000")
    archive.symlink_to(real_vulkan_tarball)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert (marker["source"], marker["backend"], marker["backend_request"]) == ("file", "vulkan", "vulkan")
    assert marker["sha256"] == sha256(real_vulkan_tarball)
    assert any(d.startswith("Vulkan0:") for d in marker["devices"]), marker["devices"]
    assert "version:" in assert_runs(Path(payload["active"]["binary"]))


# -- bad archives: rejected, nothing changes ---------------------------------------------


def test_archive_whose_binary_fails_is_rolled_back_with_exit_6(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    broken = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001", script=stand_in_server(exit_code=1))
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(broken), "--tag", "b7001")
    assert code == 6, payload
    assert "--version exited 1" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


def test_sha256_mismatch_exits_8_and_installs_nothing(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001", "--sha256", "0" * 64)
    assert code == 8, payload
    assert "does not match --sha256" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    assert list((home / "downloads").iterdir()) == []


def test_file_that_is_not_an_archive_exits_8(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    junk = tmp_path / CPU_TAR.format(tag="b7001")
    junk.write_bytes(b"this is not an archive\n" * 10)
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(junk), "--tag", "b7001")
    assert code == 8, payload
    assert "not a zip or tar.gz" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


def test_missing_archive_exits_2_naming_the_path(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / CPU_TAR.format(tag="b7001")
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(missing), "--tag", "b7001")
    assert code == 2, payload
    assert str(missing) in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


def test_archive_name_without_a_backend_needs_the_flag(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / "runtime.tar.gz", tag="b7001")
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001")
    assert code == 2, payload
    assert "--backend" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["backend"] == "cpu"


def test_tag_contradicting_the_archive_name_exits_2(
    active_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7002")
    assert code == 2, payload
    assert "b7001" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
