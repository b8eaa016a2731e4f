"""The README's main job against a server shaped like today's ggml-org/llama.cpp.

Builds are prereleases, ``/releases/latest`` is a semver release carrying only
``nightly-tag.txt`` (tests/fakegithub.py, scheme "2026"). ``update``,
``check`` and ``plan`` must agree, and ``status`` must show both names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    CPU_TAR,
    REPO,
    HomeGuard,
    assert_runs,
    publish_stand_in,
    run_json,
    stand_in_server,
    stand_in_tarball,
)

HOST_NO_GPU = {"os": "linux", "arch": "x64", "cpu_features": ["avx", "avx2"], "vulkan": False}


@pytest.fixture(autouse=True)
def _cpu_only_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_runtime.updater.choice import host_detect as host_module

    real = host_module.detect_host

    def no_gpu() -> Any:
        import dataclasses

        return dataclasses.replace(real(), vulkan=False, nvidia_driver=None, cuda_driver_version=None, rocm=False)

    monkeypatch.setattr(host_module, "detect_host", no_gpu)


def test_plain_update_installs_the_build_the_stable_release_names(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")  # cut as v0.1.0
    publish_stand_in(github, tmp_path, "b7001", stable=False)  # a newer nightly, not released
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0, payload
    active = payload["active"]
    assert (active["tag"], active["version"], active["channel"]) == ("b7000", "v0.1.0", "stable")
    assert active["build_check"] == "verified" and active["reported_build"] == 7000
    code, status = run_json(capsys, home, github.api_url, "status")
    assert (status["active"]["tag"], status["active"]["version"]) == ("b7000", "v0.1.0")
    assert_runs(Path(status["active"]["binary"]))


def test_check_update_and_plan_agree_on_the_stable_build(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    assert run_json(capsys, home, github.api_url, "update")[0] == 0
    publish_stand_in(github, tmp_path, "b7001", stable=False)
    code, check = run_json(capsys, home, github.api_url, "check")
    assert (code, check["latest"], check["update_available"]) == (0, "b7000", False)
    publish_stand_in(github, tmp_path, "b7002")  # cut as v0.2.0
    code, check = run_json(capsys, home, github.api_url, "check")
    assert (check["latest"], check["latest_version"], check["update_available"]) == ("b7002", "v0.2.0", True)
    code, plan = run_json(capsys, home, github.api_url, "plan")
    assert (code, plan["tag"], plan["version"]) == (0, "b7002", "v0.2.0")
    code, update = run_json(capsys, home, github.api_url, "update")
    assert (code, update["active"]["tag"], update["active"]["version"]) == (0, "b7002", "v0.2.0")
    code, check = run_json(capsys, home, github.api_url, "check")
    assert (check["installed"], check["update_available"]) == ("b7002", False)


def test_update_tag_v0_installs_the_named_build_and_again_is_up_to_date(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "v0.1.0")
    assert (code, payload["active"]["tag"], payload["active"]["version"]) == (0, "b7000", "v0.1.0")
    blobs = len(github.requests_to("blob"))
    code, again = run_json(capsys, home, github.api_url, "update", "--tag", "v0.1.0")
    assert (code, again["result"]) == (0, "up_to_date")
    assert len(github.requests_to("blob")) == blobs
    code, listing = run_json(capsys, home, github.api_url, "list")
    assert [(r["tag"], r["version"]) for r in listing["installed"]] == [("b7000", "v0.1.0")]


def test_nightly_channel_is_stored_and_survives_the_next_update(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    publish_stand_in(github, tmp_path, "b7001", stable=False)
    code, payload = run_json(capsys, home, github.api_url, "update", "--channel", "nightly")
    assert (code, payload["active"]["tag"], payload["active"]["channel"]) == (0, "b7001", "nightly")
    publish_stand_in(github, tmp_path, "b7002", stable=False)
    code, check = run_json(capsys, home, github.api_url, "check")  # no --channel: the stored one
    assert (check["latest"], check["update_available"]) == ("b7002", True)
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert (payload["active"]["tag"], payload["active"]["channel"]) == ("b7002", "nightly")


def test_channel_from_the_environment_and_a_bad_one_is_exit_2(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    publish_stand_in(github, tmp_path, "b7001", stable=False)
    monkeypatch.setenv("LLAMA_RUNTIME_CHANNEL", "nightly")
    code, plan = run_json(capsys, home, github.api_url, "plan")
    assert (code, plan["tag"], plan["channel"]) == (0, "b7001", "nightly")
    monkeypatch.setenv("LLAMA_RUNTIME_CHANNEL", "beta")
    code, payload = run_json(capsys, home, github.api_url, "plan")
    assert (
        code == 2
        and "'stable'" in payload["error"]["message"]
        and "LLAMA_RUNTIME_CHANNEL" in payload["error"]["message"]
    )


def test_binary_reporting_another_build_is_exit_6_and_the_active_runtime_stays(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    assert run_json(capsys, home, github.api_url, "update")[0] == 0
    frozen = HomeGuard(None, home)
    lying = stand_in_server("version: 0.2.0 (build 6990, commit deadbee)")
    publish_stand_in(github, tmp_path, "b7005", script=lying)
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 6
    assert "build 7005" in payload["error"]["message"] and "build 6990" in payload["error"]["message"]
    frozen.assert_intact("b7000", staging_empty=True)


def test_binary_without_a_build_number_is_installed_as_unverifiable(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    local = stand_in_server("version: 0.1.0-dev (build 0, commit unknown)")
    publish_stand_in(github, tmp_path, "b7000", script=local)
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0, payload
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert (marker["build_check"], marker["reported_build"]) == ("unverifiable", 0)
    assert "build 0" in marker["version"]


def test_a_fork_keeps_working_unchanged(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    fork, tag = "unslothai/llama.cpp", "b9596"
    tarball = stand_in_tarball(tmp_path / "fork.tar.gz", tag=tag)
    github.add_release(fork, tag, {CPU_TAR.format(tag=tag): tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--repo", fork)
    assert code == 0, payload
    assert (payload["active"]["tag"], payload["active"]["version"]) == (tag, None)


def test_plan_explains_minor_version_compatibility_and_the_avx2_assumption(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    tag = "b11000"  # a build whose CUDA architectures are known (ggml defaults since b7676)
    names = [
        "llama-{tag}-bin-win-cpu-x64.zip",
        "llama-{tag}-bin-win-cuda-12.8-x64.zip",
        "llama-{tag}-bin-win-cuda-13.3-x64.zip",
    ]
    github.add_release(REPO, tag, {n.format(tag=tag): b"zip" for n in names})
    code, plan = run_json(
        capsys, home, github.api_url, "plan", "--platform", "windows-x64", "--cuda-version", "12.4", "--explain"
    )
    assert code == 0, plan
    # --platform knows no GPU: native code for it cannot be confirmed, so no minor-version compatibility.
    assert plan["asset"] == "llama-b11000-bin-win-cpu-x64.zip"
    why = {c["asset"]: c["why"] for c in plan["candidates"]}
    assert "compute capability is unknown" in why["llama-b11000-bin-win-cuda-12.8-x64.zip"]
    assert "assumed AVX2" in plan["host"]["sources"]["cpu_features"]
    host_file = home.parent / "ampere.json"
    host_file.write_text('{"os": "windows", "arch": "x64", "cuda_driver_version": "12.4", "compute_capability": "8.6"}')
    code, plan = run_json(capsys, home, github.api_url, "plan", "--host", str(host_file), "--explain")
    assert code == 0, plan
    assert plan["asset"] == "llama-b11000-bin-win-cuda-12.8-x64.zip"  # 86-real: native code for an RTX 3000
    assert "minor-version compatibility: CUDA 12.8 on a 12.4 driver" in plan["reason"]
    main(["plan", "--platform", "windows-x64", "--explain", "--home", str(home), "--api-url", github.api_url])
    text = capsys.readouterr().out
    assert "cpu_features from: assumed AVX2" in text


def test_cuda_build_taken_by_minor_compatibility_that_lists_no_device_is_exit_6(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish_stand_in(github, tmp_path, "b11000")
    assert run_json(capsys, home, github.api_url, "update")[0] == 0
    from llama_runtime.updater.choice import host_detect as host_module

    def cuda_host() -> Any:
        from llama_runtime.updater.choice.host import HostFacts

        return HostFacts(  # an 8.6 GPU: 12.8 holds native code for it, so minor-version compatibility applies
            os="linux",
            arch="x64",
            cuda_driver_version="12.4",
            nvidia_driver="550.54",
            cpu_features=frozenset({"avx2"}),
            compute_capabilities=("8.6",),
        )

    monkeypatch.setattr(host_module, "detect_host", cuda_host)
    tarball = stand_in_tarball(tmp_path / "cuda.tar.gz", tag="b11001")  # lists no CUDA device
    github.add_release(REPO, "b11001", {"llama-b11001-bin-ubuntu-cuda-12.8-x64.tar.gz": tarball})
    frozen = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 6, payload
    assert "lists no cuda device" in payload["error"]["message"]
    frozen.assert_intact("b11000", staging_empty=True)


def test_doctor_exit_6_carries_error_message_beside_its_report(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0, payload
    Path(payload["active"]["binary"]).write_bytes(b"#!/bin/sh\nexit 3\n")  # damaged in place
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6
    assert report["healthy"] is False and report["checks"]
    assert report["error"]["code"] == "verification_failed"
    assert report["error"]["message"].startswith("The runtime does not verify")
    code, healthy = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert "error" not in healthy or code != 0


# -- stable while a release is being cut (tests/fakegithub.py: cut_version; upstream-2026-10.md) ---------

MID_RELEASE_WARNING = "v0.7.0 has no nightly-tag.txt yet (a release in progress?); using v0.6.0 → b11429"


def today_upstream(github: FakeGitHub, tmp_path: Path) -> None:
    """v0.6.0 cut at b11429, 112 builds since, and v0.7.0 created at b11541 without its nightly-tag.txt yet."""
    publish_stand_in(github, tmp_path, "b11429")
    github.cut_version(REPO, "v0.6.0", "b11429")
    for number in range(11430, 11542):  # never installed: name-only stand-ins keep the fake cheap
        github.add_release(REPO, f"b{number}", {CPU_TAR.format(tag=f"b{number}"): b"not installed"})
    github.cut_version(REPO, "v0.7.0", "b11541", pointer=False)


def test_stable_mid_release_installs_the_previous_stable_with_its_warning(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    with FakeGitHub(auto_cut=False) as github:
        today_upstream(github, tmp_path)
        assert github.latest_version(REPO) == "v0.7.0"
        code, payload = run_json(capsys, home, github.api_url, "update")
        assert code == 0, payload
        assert (payload["active"]["tag"], payload["active"]["version"]) == ("b11429", "v0.6.0")
        assert payload["warnings"] == [MID_RELEASE_WARNING]
        assert_runs(Path(payload["active"]["binary"]))
        code, plan = run_json(capsys, home, github.api_url, "plan", "--channel", "nightly")
        assert (code, plan["tag"]) == (0, "b11541")  # stable is 112 builds behind, as upstream's is


def test_check_mid_release_reports_its_warning_and_the_new_release_once_its_pointer_is_up(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    with FakeGitHub(auto_cut=False) as github:
        today_upstream(github, tmp_path)
        assert run_json(capsys, home, github.api_url, "update")[0] == 0
        code, check = run_json(capsys, home, github.api_url, "check")
        assert code == 0, check
        assert (check["latest"], check["latest_version"], check["update_available"]) == ("b11429", "v0.6.0", False)
        assert check["warnings"] == [MID_RELEASE_WARNING]
        main(["check", "--home", str(home), "--api-url", github.api_url])
        assert f"warning: {MID_RELEASE_WARNING}" in capsys.readouterr().out
        github.upload_pointer(REPO, "v0.7.0")
        code, check = run_json(capsys, home, github.api_url, "check")
        assert (check["latest"], check["latest_version"], check["update_available"]) == ("b11541", "v0.7.0", True)
        assert check["warnings"] == []


def test_update_tag_of_a_release_without_its_pointer_is_exit_7_and_keeps_the_active_runtime(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    with FakeGitHub(auto_cut=False) as github:
        today_upstream(github, tmp_path)
        assert run_json(capsys, home, github.api_url, "update")[0] == 0
        guard = HomeGuard(None, home)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "v0.7.0")
        assert (code, payload["error"]["code"]) == (7, "release_incomplete")
        message = payload["error"]["message"]
        assert "v0.7.0 has no nightly-tag.txt yet" in message and "probably still being cut" in message
        guard.assert_intact("b11429", staging_empty=True, capsys=capsys)


def test_mirror_sync_mid_release_mirrors_the_previous_stable_and_says_why(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    with FakeGitHub(auto_cut=False) as github:
        today_upstream(github, tmp_path)
        code, report = run_json(capsys, home, github.api_url, "mirror", "sync", "--dest", str(tmp_path / "mirror"))
        assert code == 0, report
        assert (report["releases"], report["warnings"]) == (["b11429"], [MID_RELEASE_WARNING])
        code, payload = run_json(capsys, home, (tmp_path / "mirror").as_uri(), "update")
        assert (code, payload["active"]["tag"]) == (0, "b11429")
