"""A damaged runtime is never "nothing to do", and it is repaired.

The active real llama-server truncated to 0 bytes (or rewritten at the same
size) is damage for ``status``, ``update``, ``install-file``, ``ensure()`` and
``doctor``; each of them reinstalls it through the full verification. Every
failure asserts the intact previous runtime is unchanged and still runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RuntimeUpdater
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, assert_runs, run_json, snapshot_tree

#: Nothing listens on port 1: the machine is offline as far as the updater can tell.
OFFLINE = "http://127.0.0.1:1"


@pytest.fixture
def two_installed(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, real_vulkan_tarball: Path, vk_env: Any
) -> Home:
    """The real build installed as b7000 (previous) and b7001 (active)."""
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {VULKAN_TAR.format(tag=tag): real_vulkan_tarball})
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "vulkan")
        assert code == 0, payload
    return Home(home)


def active_binary(h: Home) -> Path:
    return h.load(h.read_pointer().active or "").binary


def truncate(binary: Path) -> None:
    binary.write_bytes(b"")


def rewrite_same_size(binary: Path) -> None:
    data = bytearray(binary.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    binary.write_bytes(bytes(data))


class PreviousIntact:
    """The intact previous runtime (b7000): its files must not change and it must run."""

    def __init__(self, h: Home) -> None:
        self.h = h
        self.name = h.read_pointer().previous or ""
        self.files = snapshot_tree(h.runtime_path(self.name))

    def assert_unchanged_and_runs(self) -> None:
        assert snapshot_tree(self.h.runtime_path(self.name)) == self.files
        assert_runs(self.h.load(self.name).binary)


@pytest.mark.parametrize("damage", [truncate, rewrite_same_size], ids=["truncated", "same-size"])
def test_damaged_binary_is_not_up_to_date_and_update_of_the_same_tag_reinstalls_it(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home, damage: Any
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    damage(active_binary(h))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["result"] == "installed"
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    # The damaged runtime is no rollback target; the intact b7000 stays it.
    assert h.read_pointer().previous == previous.name
    previous.assert_unchanged_and_runs()


def test_status_of_a_truncated_binary_exits_6_naming_it(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    previous = PreviousIntact(two_installed)
    truncate(active_binary(two_installed))
    code, payload = run_json(capsys, home, github.api_url, "status")
    assert code == 6
    assert "llama-server has 0 bytes" in payload["error"]["message"]
    previous.assert_unchanged_and_runs()


def test_install_file_of_the_same_archive_repairs_a_truncated_binary(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    two_installed: Home,
    tmp_path: Path,
    real_vulkan_tarball: Path,
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    archive = tmp_path / VULKAN_TAR.format(tag="b7001")
    archive.symlink_to(real_vulkan_tarball)  # the very bytes b7001 was installed from
    truncate(active_binary(h))
    code, payload = run_json(capsys, home, github.api_url, "install-file", str(archive), "--tag", "b7001")
    assert code == 0, payload
    assert payload["result"] == "installed"
    assert_runs(Path(payload["active"]["binary"]))
    previous.assert_unchanged_and_runs()


def test_install_file_of_an_earlier_export_repairs_a_rewritten_binary(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home, tmp_path: Path
) -> None:
    h = two_installed
    bundle = tmp_path / "b7001.tar.gz"
    code, payload = run_json(capsys, home, github.api_url, "export", "--output", str(bundle))
    assert code == 0, payload
    previous = PreviousIntact(h)
    rewrite_same_size(active_binary(h))
    code, payload = run_json(capsys, home, github.api_url, "install-file", str(bundle))
    assert code == 0, payload
    assert payload["result"] == "installed"
    assert_runs(Path(payload["active"]["binary"]))
    previous.assert_unchanged_and_runs()


def test_ensure_install_if_missing_reinstalls_a_truncated_binary_of_the_same_build(
    home: Path, github: FakeGitHub, two_installed: Home, real_vulkan_tarball: Path
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    # A newer release exists: start-up repairs what was installed, it does not upgrade.
    github.add_release(REPO, "b7002", {VULKAN_TAR.format(tag="b7002"): real_vulkan_tarball})
    truncate(active_binary(h))
    updater = RuntimeUpdater(home, repo=REPO, backend="vulkan", api_url=github.api_url)
    assert not updater.ensure().ready
    result = updater.ensure(install_if_missing=True)
    assert result.ready and result.installed, result.problem
    assert result.runtime is not None and result.runtime.marker.tag == "b7001"
    assert_runs(result.runtime.binary)
    previous.assert_unchanged_and_runs()


def test_doctor_repair_reinstalls_a_truncated_binary_in_place(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    truncate(active_binary(h))
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6 and not report["healthy"]
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert report["active"]["tag"] == "b7001"
    assert "reinstalled b7001" in report["repaired"]
    assert_runs(active_binary(h))
    assert h.read_pointer().previous == previous.name
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 0 and report["healthy"], report
    previous.assert_unchanged_and_runs()


def test_doctor_repair_offline_reinstalls_from_the_archive_still_in_the_cache(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    assert any((home / "cache" / "assets").iterdir())
    rewrite_same_size(active_binary(h))
    code = main(["doctor", "--repair", "--home", str(home), "--api-url", OFFLINE])
    said = capsys.readouterr().out
    assert code == 0, said
    assert "reinstalled b7001" in said, said
    active = h.load(h.read_pointer().active or "")
    assert active.marker.tag == "b7001" and active.marker.reason == "reinstalled from the cached release archives"
    assert_runs(active.binary)
    code, report = run_json(capsys, home, OFFLINE, "doctor")
    assert code == 0 and report["healthy"], report
    assert h.read_pointer().previous == previous.name
    previous.assert_unchanged_and_runs()


def test_doctor_repair_offline_moves_back_saying_so_and_keeps_the_newer_as_previous(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    damaged = h.read_pointer().active
    previous = PreviousIntact(h)
    shutil.rmtree(home / "cache" / "assets")  # nothing at hand to reinstall from
    truncate(active_binary(h))
    code = main(["doctor", "--repair", "--home", str(home), "--api-url", OFFLINE])
    said = capsys.readouterr().out
    assert code == 0, said
    assert "[FAIL] reinstall: could not reinstall b7001" in said
    assert "Moved back to the older b7000 because b7001 (vulkan) is damaged" in said
    assert "kept as the previous runtime" in said and "Everything checks out" not in said
    assert h.load(h.read_pointer().active or "").marker.tag == "b7000"
    assert h.read_pointer().previous == damaged  # the newer one is not forgotten
    previous.assert_unchanged_and_runs()


def test_doctor_repair_leaves_a_runtime_of_a_newer_marker_schema_active_and_says_so(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    marker_path = h.runtime_path(h.read_pointer().active or "") / "llama-runtime.json"
    marker = json.loads(marker_path.read_text())
    marker["schema_version"] = 99
    marker_path.write_text(json.dumps(marker))
    pointer = h.pointer_path.read_bytes()
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 6, report
    assert report["repaired"] is None
    assert any("newer llama-runtime" in c["detail"] for c in report["checks"])
    assert any("changes nothing" in a for a in report["advice"])
    assert h.pointer_path.read_bytes() == pointer
    previous.assert_unchanged_and_runs()
