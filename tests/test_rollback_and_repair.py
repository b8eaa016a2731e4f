"""Rollback and repair keep the machine's runtimes intact: damaged targets are refused, an
intact previous runtime is never forgotten, and doctor never overwrites a concurrent update."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.binary import ProcessResult, run_process
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.api.doctor import run_doctor
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, run_json, stand_in_tarball


def publish(github: FakeGitHub, tmp_path: Path, *tags: str) -> None:
    for tag in tags:
        tarball = stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag, libs=("llama",))
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): tarball})


def install(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *tags: str) -> None:
    for tag in tags:
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload


def pointer(home: Path) -> dict[str, Any]:
    return dict(json.loads((home / "active.json").read_text()))


def test_update_over_a_damaged_active_runtime_keeps_the_intact_previous_one_for_rollback(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", "b7001", "b7002")
    install(capsys, home, github, "b7000", "b7001")
    before = pointer(home)
    (home / "runtimes" / before["active"] / "llama-runtime.json").write_text("garbage")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")
    assert code == 0, payload
    assert pointer(home)["previous"] == before["previous"]  # b7000, intact, stays the rollback target
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7000"
    assert_runs(Path(payload["active"]["binary"]))


def test_rollback_to_a_half_deleted_previous_runtime_is_refused_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    previous = home / "runtimes" / pointer(home)["previous"]
    next(previous.rglob("libllama.so.0.0.1")).unlink()
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 6, payload
    assert payload["error"]["code"] == "corrupt_state"
    assert "libllama.so.0.0.1 is missing" in payload["error"]["message"]
    assert "nothing was changed" in payload["error"]["message"]
    guard.assert_intact("b7001", capsys=capsys)


def test_an_update_during_doctor_repair_is_busy_and_the_repair_completes(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", "b7001", "b7002")
    install(capsys, home, github, "b7000", "b7001")
    h = Home(home)
    (home / "runtimes" / pointer(home)["active"] / "llama-runtime.json").write_text("garbage")
    seen: dict[str, Any] = {}

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
        # An update tries to run while doctor verifies its repair candidate.
        if "update" not in seen:
            seen["update"] = main(
                ["update", "--tag", "b7002", "--backend", "cpu", "--home", str(home), "--api-url", github.api_url]
            )
        return run_process(argv, timeout, env)

    report = run_doctor(h, repair=True, runner=runner)
    assert seen["update"] == 3  # busy: the repair decides and writes under the update lock
    assert report.repaired is not None
    active = h.load(h.read_pointer().active or "")
    assert active.marker.tag == "b7000"
    assert_runs(active.binary)


def test_doctor_repair_stands_down_when_the_pointer_changed_since_the_diagnosis(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    from llama_runtime.runtime.layout import Pointer
    from llama_runtime.updater.api.doctor import DoctorReport, _repair

    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    h = Home(home)
    current = (home / "active.json").read_bytes()
    report = DoctorReport()
    _repair(h, report, run_process, Pointer(active="what-doctor-saw-before", previous=None))
    assert report.repaired is None
    assert any("changed while doctor ran" in a for a in report.advice)
    assert (home / "active.json").read_bytes() == current
    assert_runs(h.load(h.read_pointer().active or "").binary)


def test_doctor_repair_rebuilds_a_lost_pointer_from_the_newest_verified_runtime(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    (home / "active.json").unlink()
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6 and not report["healthy"]
    assert any("doctor --repair" in a for a in report["advice"])
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    code, status = run_json(capsys, home, github.api_url, "status")
    assert status["active"]["tag"] == "b7001"
    assert_runs(Path(status["active"]["binary"]))


def _publish_with_library(github: FakeGitHub, tmp_path: Path, tag: str, library: bytes) -> None:
    """A stand-in build of ``tag`` whose one library holds ``library`` (identical bytes are shared by hard link)."""
    from tests.archives import build_release_archive
    from tests.helpers import stand_in_server

    files: dict[str, bytes | Path] = {
        "llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)"),
        "libllama.so.0.0.1": library,
    }
    tarball = build_release_archive(
        tmp_path / f"{tag}.tar.gz", "tar-tagdir", files, modes={"llama-server": 0o755}, tag=tag
    )
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): tarball})


def _overwrite_in_place(path: Path) -> None:
    """Same-size garbage written through ``path``'s inode (every hard link to it sees it)."""
    size = path.stat().st_size
    mode = path.stat().st_mode
    path.chmod(0o700)
    with path.open("r+b") as f:
        f.write(b"\x00" * size)
    path.chmod(mode)


def test_rollback_to_a_previous_runtime_with_a_same_size_garbage_binary_is_refused(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    previous = home / "runtimes" / pointer(home)["previous"]
    _overwrite_in_place(next(previous.rglob("llama-server")))
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 6, payload
    assert "llama-server" in payload["error"]["message"]
    assert "nothing was changed" in payload["error"]["message"]
    assert "update --tag b7000" in payload["error"]["hint"]
    guard.assert_intact("b7001", capsys=capsys)


def test_rollback_to_a_previous_runtime_damaged_through_a_shared_hard_link_is_refused(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    _publish_with_library(github, tmp_path, "b6999", b"\x7fELF library of the old builds")
    _publish_with_library(github, tmp_path, "b7000", b"\x7fELF library of the old builds")
    _publish_with_library(github, tmp_path, "b7001", b"\x7fELF library of the new build!")
    install(capsys, home, github, "b6999", "b7000", "b7001")
    runtimes = home / "runtimes"
    previous_lib = next((runtimes / pointer(home)["previous"]).rglob("libllama.so.0.0.1"))
    inode = previous_lib.stat().st_ino
    oldest_lib = next(p for p in runtimes.rglob("libllama.so.0.0.1") if p.stat().st_ino == inode and p != previous_lib)
    _overwrite_in_place(oldest_lib)  # the previous runtime's library changes with it
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 6, payload
    assert "libllama.so.0.0.1" in payload["error"]["message"]
    assert "nothing was changed" in payload["error"]["message"]
    guard.assert_intact("b7001", capsys=capsys)


def test_rollback_to_a_previous_runtime_without_verified_provenance_is_refused_when_provenance_is_required(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    guard = HomeGuard(None, home)
    monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", "1")
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 8, payload
    assert "provenance" in payload["error"]["message"]
    monkeypatch.delenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE")
    guard.assert_intact("b7001", capsys=capsys)


def test_doctor_repair_never_points_at_a_runtime_without_verified_provenance_when_provenance_is_required(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish(github, tmp_path, "b7000", "b7001")
    install(capsys, home, github, "b7000", "b7001")
    before = pointer(home)
    (home / "runtimes" / before["active"] / "llama-runtime.json").write_text("garbage")
    monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", "1")
    code, payload = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 6, payload
    assert pointer(home) == before  # the unattested b7000 was not made active
    assert any("provenance" in advice for advice in payload["advice"]), payload
