"""``auto`` verifies its way down: a build rejected after install gives way to the next candidate.

The host is an NVIDIA + Vulkan machine (its facts given, not probed), so ``auto`` ranks CUDA first.
The CUDA builds are stand-ins that run but list no CUDA device, or do not run at all; the Vulkan build
is the real llama-server (Mesa's software device). Every failure asserts that the previously active
runtime is unchanged and still runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import CancelledError, Progress, VerificationError
from llama_runtime.runtime.failed_builds import load_failed
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.marker import InstallMarker, parse_marker
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.activate.attempts import (
    MAX_CANDIDATE_TRIES,
    Attempt,
    CandidatesFailedError,
    next_plan,
)
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import ActiveState, UpdateRequest
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.sources.github import GitHubClient
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, HomeGuard, assert_runs, run_json, stand_in_server, stand_in_tarball
from tests.test_docs_contract import validate
from tests.test_inference_gate import assert_old_server_serves, runtimes_snapshot, tiny_model, wrapper_tarball

__all__ = ["tiny_model"]  # the session fixture, shared with the gate's own tests

CUDA_TAR = "llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"
#: An NVIDIA GPU (driver 570, CUDA 12.8) and a Vulkan driver: auto ranks CUDA, then Vulkan, then CPU.
NVIDIA_HOST = HostFacts(
    os="linux",
    arch="x64",
    cuda_driver_version="12.8",
    nvidia_driver="570.86",
    gpu_names=("NVIDIA H200",),
    vulkan=True,
    sources=(("cuda", "test"), ("vulkan", "test")),
)
CUDA_ONLY_HOST = HostFacts(os="linux", arch="x64", cuda_driver_version="12.8", nvidia_driver="570.86")


@pytest.fixture
def nvidia_host(monkeypatch: pytest.MonkeyPatch) -> HostFacts:
    """The CLI's host detection answers NVIDIA_HOST (the engine imports detect_host when it first asks)."""
    monkeypatch.setattr("llama_runtime.updater.choice.host_detect.detect_host", lambda *a, **k: NVIDIA_HOST)
    return NVIDIA_HOST


def no_device_cuda(tmp_path: Path, tag: str) -> Path:
    """A CUDA build whose llama-server answers --version but lists no CUDA device on a machine with one."""
    script = stand_in_server(f"version: {tag[1:]} (stand-in)", devices="")
    return stand_in_tarball(tmp_path / f"{tag}-cuda-no-device.tar.gz", tag=tag, script=script)


def dead_cuda(tmp_path: Path, tag: str) -> Path:
    """A CUDA build whose llama-server exits 1 on --version (a missing driver library, say)."""
    script = stand_in_server(f"version: {tag[1:]} (stand-in)", exit_code=1)
    return stand_in_tarball(tmp_path / f"{tag}-cuda-dead.tar.gz", tag=tag, script=script)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_with_sha(root: Path, sha: str) -> list[Path]:
    """Every file under ``root`` whose bytes hash to ``sha`` (a download or cache entry of them)."""
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if not path.is_symlink() and sha256_of(path) == sha:
                found.append(path)
    return found


def marker_of(runtime: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(Path(runtime["marker_path"]).read_text())
    return loaded


# -- the real build wins after a stand-in fails ------------------------------------------------


def test_auto_whose_first_choice_lists_no_device_installs_the_next_candidate_and_records_both(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    cuda = no_device_cuda(tmp_path, "b7000")
    cuda_name, vulkan_name = CUDA_TAR.format(tag="b7000"), VULKAN_TAR.format(tag="b7000")
    github.add_release(REPO, "b7000", {cuda_name: cuda, vulkan_name: real_vulkan_tarball})

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000")
    assert code == 0, payload
    validate("update", payload)
    assert payload["result"] == "installed"
    active = payload["active"]
    assert (active["tag"], active["backend"], active["backend_request"]) == ("b7000", "vulkan", "auto")
    failed, won = payload["attempts"]
    assert (failed["asset"], failed["backend"], failed["outcome"], failed["stage"]) == (
        cuda_name,
        "cuda",
        "failed",
        "device check",
    )
    assert "lists no cuda device" in failed["reason"]
    assert (won["asset"], won["backend"], won["outcome"], won["stage"]) == (vulkan_name, "vulkan", "installed", None)
    assert "auto picked vulkan" in won["reason"]
    assert marker_of(active)["attempts"] == payload["attempts"]  # the winner's marker says how it got there
    assert any(d.startswith("Vulkan0:") for d in marker_of(active)["devices"])
    assert_runs(Path(active["binary"]))
    # The failed candidate left nothing: no runtime, no staging, and its bytes neither cached nor kept.
    assert [r.marker.asset for r in Home(home).installed()] == [vulkan_name]
    assert list((home / "staging").iterdir()) == []
    assert files_with_sha(home, sha256_of(cuda)) == []
    assert [(b.tag, b.asset) for b in load_failed(home)] == [("b7000", cuda_name)]

    # Not retried forever: the next plain update skips the CUDA build that failed here, without a download.
    assert run_json(capsys, home, None, "unpin")[0] == 0  # `update --tag` pinned b7000: unpinned, update resolves
    code, again = run_json(capsys, home, github.api_url, "update")
    assert code == 0, again
    validate("update", again)
    assert again["attempts"] == []  # nothing was tried
    assert again["result"] == "up_to_date" and again["active"]["backend"] == "vulkan"
    assert any("failed verification on this machine before" in w for w in again["warnings"])
    assert len(github.requests_to("blob", cuda_name)) == 1


def test_text_output_explains_each_try(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    cuda_name = CUDA_TAR.format(tag="b7000")
    github.add_release(
        REPO, "b7000", {cuda_name: dead_cuda(tmp_path, "b7000"), VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball}
    )
    code = main(["update", "--tag", "b7000", "--home", str(home), "--api-url", github.api_url, "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "auto went down its candidates, best first" in out
    assert (
        f"1. {cuda_name} (cuda) failed its device check (the new llama-server does not run: --version exited 1" in out
    )
    assert f"2. {VULKAN_TAR.format(tag='b7000')} (vulkan) was installed" in out
    assert "Installed ggml-org/llama.cpp b7000 (vulkan) and made it active." in out


# -- every candidate fails: exit 6, the running previous runtime untouched ------------------------


def test_auto_where_every_candidate_fails_is_exit_6_naming_each_try_and_keeps_the_running_server(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, first = run_json(capsys, home, github.api_url, "update", "--tag", "b7000")
    assert code == 0 and first["active"]["backend_request"] == "auto", first
    code, started = run_json(capsys, home, github.api_url, "server", "start", "--timeout", "120")
    assert code == 0 and started["healthy"] is True, started
    # b7001: CUDA lists no device; Vulkan does not run at all; CPU would trade the GPU runtime away.
    dead_vulkan = dead_cuda(tmp_path, "b7001")
    names = {
        CUDA_TAR.format(tag="b7001"): no_device_cuda(tmp_path, "b7001"),
        VULKAN_TAR.format(tag="b7001"): dead_vulkan,
        CPU_TAR.format(tag="b7001"): real_vulkan_tarball,
    }
    github.add_release(REPO, "b7001", names)
    guard = HomeGuard(None, home)

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    validate("error", payload)
    error = payload["error"]
    assert error["code"] == "verification_failed" and error["exit_code"] == 6
    assert [(a["asset"], a["outcome"], a["stage"]) for a in error["attempts"]] == [
        (CUDA_TAR.format(tag="b7001"), "failed", "device check"),
        (VULKAN_TAR.format(tag="b7001"), "failed", "device check"),
    ]
    message = error["message"]
    assert message.startswith("auto tried 2 builds of b7001 and none passed its checks on this machine: 1) ")
    assert "lists no cuda device" in message and "--version exited 1" in message
    assert "Refusing to replace the working vulkan runtime (b7000) with a cpu build of b7001" in message
    assert error["hint"] == "Nothing changed: the runtime that was active is still active."
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    assert github.requests_to("blob", CPU_TAR.format(tag="b7001")) == []
    assert files_with_sha(home, sha256_of(dead_vulkan)) == []
    status = ManagedServer(Home(home).server_dir).status()
    assert status.running and status.healthy and status.pid == started["pid"]  # never stopped


def test_explicit_backend_that_fails_is_exit_6_without_a_second_try(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    tmp_path: Path,
    b7000_home: Path,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    home = b7000_home
    cuda_name, vulkan_name = CUDA_TAR.format(tag="b7001"), VULKAN_TAR.format(tag="b7001")
    older_cuda = "llama-b7001-bin-ubuntu-cuda-12.4-x64.tar.gz"  # ranked below 12.8: a next CUDA candidate
    github.add_release(
        REPO,
        "b7001",
        {
            cuda_name: no_device_cuda(tmp_path, "b7001"),
            older_cuda: dead_cuda(tmp_path, "b7001"),
            vulkan_name: real_vulkan_tarball,
        },
    )
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cuda")
    assert code == 6, payload
    assert "lists no cuda device" in payload["error"]["message"] and "attempts" not in payload["error"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    # No next candidate was fetched, not even another build of the asked-for backend.
    assert github.requests_to("blob", older_cuda) == [] and github.requests_to("blob", vulkan_name) == []


# -- the completion check: the smoke model, and the inference gate of a running server ----------


@pytest.mark.real_binary
@pytest.mark.slow
def test_auto_goes_past_a_build_that_fails_the_smoke_model_to_one_that_generates(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    real_vulkan_tarball: Path,
    tiny_model: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    names = {
        CUDA_TAR.format(tag="b7000"): no_device_cuda(tmp_path, "b7000"),
        VULKAN_TAR.format(tag="b7000"): wrapper_tarball(tmp_path, "b7000", "--api-key wrapper-secret"),
        CPU_TAR.format(tag="b7000"): real_vulkan_tarball,
    }
    github.add_release(REPO, "b7000", names)
    args = ("update", "--tag", "b7000", "--smoke-model", str(tiny_model))
    code, payload = run_json(capsys, home, github.api_url, *args)
    assert code == 0, payload
    assert [(a["backend"], a["outcome"], a["stage"]) for a in payload["attempts"]] == [
        ("cuda", "failed", "device check"),
        ("vulkan", "failed", "completion check"),
        ("cpu", "installed", None),
    ]
    assert "failed to generate with the smoke model tiny.gguf: HTTP 401" in payload["attempts"][1]["reason"]
    assert payload["active"]["backend"] == "cpu" and payload["active"]["backend_request"] == "auto"
    assert marker_of(payload["active"])["speeds"]["tiny.gguf"]["predicted_per_second"] > 0
    assert [r.marker.backend for r in Home(home).installed()] == ["cpu"]
    assert_runs(Path(payload["active"]["binary"]))


@pytest.mark.real_binary
@pytest.mark.slow
def test_auto_whose_every_build_fails_and_the_last_fails_the_inference_gate_serves_the_old_model_again(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    real_vulkan_tarball: Path,
    tiny_model: Path,
    vk_env: dict[str, str],
    nvidia_host: HostFacts,
) -> None:
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, first = run_json(capsys, home, github.api_url, "update", "--tag", "b7000")
    assert code == 0 and first["active"]["backend_request"] == "auto", first
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "120", "--", "-m", str(tiny_model)
    )
    assert code == 0 and started["healthy"] is True, started
    names = {
        CUDA_TAR.format(tag="b7001"): no_device_cuda(tmp_path, "b7001"),
        VULKAN_TAR.format(tag="b7001"): wrapper_tarball(tmp_path, "b7001", "--api-key wrapper-secret"),
    }
    github.add_release(REPO, "b7001", names)
    pointer, before = (home / "active.json").read_bytes(), runtimes_snapshot(home)

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    assert [(a["backend"], a["stage"]) for a in payload["error"]["attempts"]] == [
        ("cuda", "device check"),
        ("vulkan", "completion check"),
    ]
    assert "failed its inference check" in payload["error"]["message"]
    assert_old_server_serves(home, started["pid"], pointer, before)


# -- through the installer: events and cancel --------------------------------------------------


def _publish_cuda_then_cpu(github: FakeGitHub, tmp_path: Path, tag: str) -> tuple[str, str]:
    cuda_name, cpu_name = CUDA_TAR.format(tag=tag), CPU_TAR.format(tag=tag)
    cpu = stand_in_tarball(tmp_path / f"{tag}-cpu.tar.gz", tag=tag)
    github.add_release(REPO, tag, {cuda_name: dead_cuda(tmp_path, tag), cpu_name: cpu})
    return cuda_name, cpu_name


def test_a_new_try_starts_again_at_resolve_with_a_message_naming_the_failed_and_the_next_build(
    github: FakeGitHub, tmp_path: Path
) -> None:
    cuda_name, cpu_name = _publish_cuda_then_cpu(github, tmp_path, "b7001")
    events: list[Progress] = []
    installer = Installer(
        Home(tmp_path / "home"), source=GitHubClient(github.api_url, REPO), host=lambda: CUDA_ONLY_HOST
    )
    outcome = installer.update(UpdateRequest(repo=REPO, tag="b7001"), progress=events.append)
    assert outcome.active.marker.asset == cpu_name
    assert [a.outcome for a in outcome.attempts] == ["failed", "installed"]
    phases = [e.phase for e in events if e.phase != "download"]
    assert phases[0] == "resolve" and phases[-1] == "activate"
    retry = [e for e in events if e.phase == "resolve"][1]
    assert retry.message.startswith(f"{cuda_name} (cuda) failed its device check (the new llama-server does not run")
    assert retry.message.endswith(f"; trying {cpu_name}")
    after = events[events.index(retry) :]
    assert [e.phase for e in after if e.phase == "download"] and after[-1].phase == "activate"


def test_cancel_between_tries_stops_before_the_next_download_and_activates_nothing(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _cuda_name, cpu_name = _publish_cuda_then_cpu(github, tmp_path, "b7001")
    installer = Installer(Home(home), source=GitHubClient(github.api_url, REPO), host=lambda: CUDA_ONLY_HOST)
    # The cancel arrives while the first try fails (its failure is recorded just before the next try).
    with pytest.raises(CancelledError) as caught:
        installer.update(UpdateRequest(repo=REPO, tag="b7001"), cancel=lambda: bool(load_failed(home)))
    assert caught.value.exit_code == 130
    assert "before trying " + cpu_name in caught.value.message and "nothing was activated" in caught.value.message
    assert github.requests_to("blob", cpu_name) == []
    assert Home(home).read_pointer().active is None and Home(home).installed() == []


def test_every_candidate_failing_through_the_installer_raises_one_error_with_every_try(
    github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    """A CPU-only runtime is active (stored request cpu); ``--backend auto`` asks auto explicitly."""
    home = b7000_home
    cuda_name, cpu_name = CUDA_TAR.format(tag="b7001"), CPU_TAR.format(tag="b7001")
    github.add_release(
        REPO,
        "b7001",
        {
            cuda_name: dead_cuda(tmp_path, "b7001"),
            cpu_name: stand_in_tarball(
                tmp_path / "dead-cpu.tar.gz", tag="b7001", script=stand_in_server("version: 7001 (cpu)", exit_code=2)
            ),
        },
    )
    guard = HomeGuard(None, home)
    installer = Installer(Home(home), source=GitHubClient(github.api_url, REPO), host=lambda: CUDA_ONLY_HOST)
    with pytest.raises(CandidatesFailedError) as caught:
        installer.update(UpdateRequest(repo=REPO, tag="b7001", backend="auto"))
    assert isinstance(caught.value, VerificationError) and caught.value.exit_code == 6
    assert [(a.asset, a.outcome) for a in caught.value.attempts] == [(cuda_name, "failed"), (cpu_name, "failed")]
    assert "b7001 has no other build that can run on this machine" in caught.value.message
    guard.assert_intact("b7000", staging_empty=True)


# -- the next candidate, decided without IO ----------------------------------------------------


def _release(*names: str, tag: str = "b7001") -> Release:
    return Release(REPO, tag, tuple(Asset(n.format(tag=tag), 10, f"http://x/{n}", "sha256:" + "0" * 64) for n in names))


def _failed(asset: str, backend: str) -> Attempt:
    return Attempt(asset, backend, "failed", "device check", "lists no device")


def test_next_candidate_skips_a_build_that_failed_here_before_without_a_download() -> None:
    release = _release(CUDA_TAR, VULKAN_TAR, CPU_TAR)
    tried = [_failed(CUDA_TAR.format(tag="b7001"), "cuda")]
    failed = {(REPO, "b7001", VULKAN_TAR.format(tag="b7001")): "lists no vulkan device"}
    plan, skipped, _ = next_plan(
        UpdateRequest(repo=REPO), None, release, NVIDIA_HOST, tried=tried, installed=[], failed=failed
    )
    assert plan is not None and plan.choice is not None and plan.choice.backend == "cpu"
    assert [(s.asset, s.outcome, s.stage) for s in skipped] == [
        (VULKAN_TAR.format(tag="b7001"), "skipped", "earlier update")
    ]
    # Asked for by tag, a build that failed before is tried again.
    plan, skipped, _ = next_plan(
        UpdateRequest(repo=REPO, tag="b7001"), None, release, NVIDIA_HOST, tried=tried, installed=[], failed=failed
    )
    assert plan is not None and plan.choice is not None and plan.choice.backend == "vulkan" and skipped == []


def test_next_candidate_stops_after_the_most_tries_and_when_nothing_is_left() -> None:
    release = _release(CUDA_TAR, VULKAN_TAR)
    tried = [_failed(f"x{n}.tar.gz", "cuda") for n in range(MAX_CANDIDATE_TRIES)]
    plan, _, why = next_plan(UpdateRequest(repo=REPO), None, release, NVIDIA_HOST, tried=tried, installed=[], failed={})
    assert plan is None and f"{MAX_CANDIDATE_TRIES} builds were tried" in why
    tried = [_failed(CUDA_TAR.format(tag="b7001"), "cuda"), _failed(VULKAN_TAR.format(tag="b7001"), "vulkan")]
    plan, _, why = next_plan(UpdateRequest(repo=REPO), None, release, NVIDIA_HOST, tried=tried, installed=[], failed={})
    assert plan is None and why == "b7001 has no other build that can run on this machine"


def test_next_candidate_that_is_the_active_runtime_keeps_it() -> None:
    release = _release(CUDA_TAR, VULKAN_TAR)
    vulkan = VULKAN_TAR.format(tag="b7001")
    marker = InstallMarker(REPO, "b7001", "vulkan", "auto", vulkan, 1, "0" * 64, True, "2026-10-01T00:00:00.000Z", "x")
    active = ActiveState(marker, intact=True, name="r")
    tried = [_failed(CUDA_TAR.format(tag="b7001"), "cuda")]
    failed = {(REPO, "b7001", vulkan): "it failed once, but it is what runs now"}
    plan, skipped, _ = next_plan(
        UpdateRequest(repo=REPO), active, release, NVIDIA_HOST, tried=tried, installed=[], failed=failed
    )
    assert plan is not None and plan.action == "up_to_date" and skipped == []


# -- the marker keeps old markers readable ---------------------------------------------------


def test_marker_attempts_round_trip_old_markers_read_as_none_and_damaged_entries_are_dropped(tmp_path: Path) -> None:
    tried = (_failed("a.tar.gz", "cuda").to_json(), Attempt("b.tar.gz", "vulkan", "installed", None, "ok").to_json())
    marker = InstallMarker(REPO, "b7001", "vulkan", "auto", "b.tar.gz", 1, "0" * 64, True, "t", "llama-server")
    written = {**marker.to_json(), "attempts": list(tried)}
    assert parse_marker(written, tmp_path / "m.json").attempts == tried
    old = marker.to_json()
    del old["attempts"]
    assert parse_marker(old, tmp_path / "m.json").attempts == ()
    hostile = {**old, "attempts": [{"asset": 1}, "x", {**tried[0], "stage": 3}, {**tried[1], "reason": "r" * 5000}]}
    [kept] = parse_marker(hostile, tmp_path / "m.json").attempts
    assert kept["asset"] == "b.tar.gz" and len(kept["reason"]) == 1000
    assert parse_marker({**old, "attempts": "nonsense"}, tmp_path / "m.json").attempts == ()
