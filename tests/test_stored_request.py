"""The stored backend request survives updates; an automatic update never trades a GPU runtime for CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime import BackendUnavailableError
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.sources.github import GitHubClient
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, HomeGuard, assert_runs, run_json, stand_in_server, stand_in_tarball

LINUX_VULKAN_HOST = HostFacts(os="linux", arch="x64", sources=(("os", "test"),))
CUDA_HOST = HostFacts(os="linux", arch="x64", cuda_driver_version="12.4", sources=(("cuda", "test"),))


def _installer(home: Path, github: FakeGitHub, host: HostFacts) -> Installer:
    return Installer(Home(home), source=GitHubClient(github.api_url, REPO), host=lambda: host)


def _publish(github: FakeGitHub, tmp_path: Path, tag: str, names: dict[str, tuple[str, ...]]) -> None:
    assets: dict[str, bytes | Path] = {}
    for name, libs in names.items():
        # A GPU build asked for by name must list a device of its backend (verify.check_requested_device).
        devices = "  Vulkan0: stand-in GPU\\n" if "ggml-vulkan" in libs else ""
        script = stand_in_server(f"version: {tag[1:]} (stand-in)", devices=devices)
        assets[name] = stand_in_tarball(tmp_path / f"{tag}-{len(assets)}.tar.gz", tag=tag, libs=libs, script=script)
    github.add_release(REPO, tag, assets)


def test_update_without_backend_reuses_the_stored_request_and_records_host_and_reason(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b7000", {"llama-b7000-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",)})
    _publish(
        github,
        tmp_path,
        "b7001",
        {"llama-b7001-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",), "llama-b7001-bin-ubuntu-x64.tar.gz": ()},
    )
    installer = _installer(home, github, LINUX_VULKAN_HOST)
    installer.update(UpdateRequest(repo=REPO, tag="b7000", backend="vulkan"))
    outcome = installer.update(UpdateRequest(repo=REPO, tag="b7001"))
    assert outcome.active.marker.backend == "vulkan"
    assert outcome.active.marker.backend_request == "vulkan"
    marker = json.loads((outcome.active.path / "llama-runtime.json").read_text())
    assert marker["host"]["platform"] == "linux-x64"
    assert "vulkan" in marker["reason"]


def test_automatic_update_refuses_to_replace_a_gpu_runtime_with_cpu_and_keeps_it(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b7000", {"llama-b7000-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",)})
    _publish(github, tmp_path, "b7001", {"llama-b7001-bin-ubuntu-x64.tar.gz": ()})  # no vulkan build any more
    installer = _installer(home, github, LINUX_VULKAN_HOST)
    first = installer.update(UpdateRequest(repo=REPO, tag="b7000", backend="vulkan"))
    guard = HomeGuard(None, home)
    with pytest.raises(BackendUnavailableError) as caught:
        installer.update(UpdateRequest(repo=REPO, tag="b7001"))
    assert caught.value.exit_code == 5
    assert "Refusing to replace the working vulkan runtime (b7000) with a cpu build of b7001" in caught.value.message
    guard.assert_intact("b7000")
    assert_runs(first.active.binary)


def test_explicit_cpu_request_overrides_the_stored_gpu_request(github: FakeGitHub, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b7000", {"llama-b7000-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",)})
    _publish(github, tmp_path, "b7001", {"llama-b7001-bin-ubuntu-x64.tar.gz": ()})
    installer = _installer(home, github, LINUX_VULKAN_HOST)
    installer.update(UpdateRequest(repo=REPO, tag="b7000", backend="vulkan"))
    outcome = installer.update(UpdateRequest(repo=REPO, tag="b7001", backend="cpu"))
    assert (outcome.active.marker.backend, outcome.active.marker.backend_request) == ("cpu", "cpu")
    assert outcome.previous is not None and outcome.previous.marker.backend == "vulkan"


def test_stored_request_that_cannot_be_served_falls_back_to_auto_with_a_warning(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    # b7000 has a Linux CUDA build (as upstream does from ~b10900); b7001 does not, but has Vulkan.
    _publish(github, tmp_path, "b7000", {"llama-b7000-bin-ubuntu-cuda-12.4-x64.tar.gz": ("ggml-cuda",)})
    _publish(github, tmp_path, "b7001", {"llama-b7001-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",)})
    cuda_and_vulkan = HostFacts(os="linux", arch="x64", cuda_driver_version="12.4", vulkan=True)
    installer = Installer(
        Home(home),
        source=GitHubClient(github.api_url, REPO),
        host=lambda: cuda_and_vulkan,
        runner=_no_device_check_runner,
    )
    installer.update(UpdateRequest(repo=REPO, tag="b7000", backend="cuda"))
    outcome = installer.update(UpdateRequest(repo=REPO, tag="b7001"))
    assert outcome.active.marker.backend == "vulkan"
    assert outcome.active.marker.backend_request == "auto"
    assert any("stored backend request 'cuda' can no longer be served" in w for w in outcome.warnings)


def _no_device_check_runner(argv, timeout, env):  # type: ignore[no-untyped-def]
    """The stand-in lists the device its library promises, as a real build on that host would."""
    from llama_runtime.runtime.binary import ProcessResult, run_process

    if argv[-1] == "--list-devices":
        from pathlib import Path

        cuda = any(Path(argv[0]).parent.glob("libggml-cuda.so*"))
        name = "CUDA0: stand-in" if cuda else "Vulkan0: stand-in"
        return ProcessResult(0, f"Available devices:\n  {name}\n")
    return run_process(argv, timeout, env)


def test_plan_for_another_machine_lists_the_cuda_runtime_companion(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.add_release(
        REPO,
        "b10015",
        {
            "cudart-llama-bin-win-cuda-12.4-x64.zip": b"dlls",
            "llama-b10015-bin-win-cuda-12.4-x64.zip": b"cuda build",
            "llama-b10015-bin-win-cpu-x64.zip": b"cpu build",
            "llama-b10015-bin-win-vulkan-x64.zip": b"vulkan build",
            "llama-b10015-bin-ubuntu-x64.tar.gz": b"linux",
        },
    )
    args = ["plan", "--tag", "b10015", "--platform", "windows-x64", "--cuda-version", "12.8", "--explain"]
    code = main([*args, "--home", str(tmp_path / "h"), "--api-url", github.api_url, "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0, payload
    assert payload["asset"] == "llama-b10015-bin-win-cuda-12.4-x64.zip"
    assert payload["extra_assets"] == ["cudart-llama-bin-win-cuda-12.4-x64.zip"]
    assert payload["backend"] == "cuda" and payload["reason"]
    assert {c["asset"] for c in payload["candidates"]} >= {"llama-b10015-bin-win-vulkan-x64.zip"}
    assert not (tmp_path / "h" / "runtimes").exists() or not any((tmp_path / "h" / "runtimes").iterdir())


def test_plan_with_an_explicit_backend_missing_for_the_platform_exits_5_naming_what_exists(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.add_release(REPO, "b7000", {"llama-b7000-bin-ubuntu-x64.zip": b"cpu"})
    args = ["plan", "--tag", "b7000", "--platform", "linux-x64", "--backend", "vulkan"]
    code = main([*args, "--home", str(tmp_path / "h"), "--api-url", github.api_url, "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 5
    assert payload["error"]["message"].startswith("No vulkan build of llama.cpp b7000 for linux-x64")
    assert "Available here: cpu" in payload["error"]["message"]


def test_plan_without_backend_follows_the_stored_request_like_update(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    # b7000 was installed with --backend cpu: plan, like update, keeps asking for cpu.
    _publish(
        github,
        tmp_path,
        "b7001",
        {"llama-b7001-bin-ubuntu-vulkan-x64.tar.gz": ("ggml-vulkan",), "llama-b7001-bin-ubuntu-x64.tar.gz": ()},
    )
    code, plan = run_json(capsys, b7000_home, github.api_url, "plan", "--tag", "b7001")
    assert code == 0, plan
    assert (plan["backend_request"], plan["asset"]) == ("cpu", "llama-b7001-bin-ubuntu-x64.tar.gz")
    code, explicit = run_json(capsys, b7000_home, github.api_url, "plan", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, explicit
    assert (explicit["backend_request"], explicit["asset"]) == ("vulkan", "llama-b7001-bin-ubuntu-vulkan-x64.tar.gz")


@pytest.mark.parametrize("bad", ["nan", "-12", "12.x", "99999999999999999999999.1", "0", "١٢.٤", "00000000012.4"])
def test_malformed_cuda_version_is_exit_2_for_plan_and_update_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, b7000_home: Path, bad: str
) -> None:
    guard = HomeGuard(tmp_path, b7000_home)
    for command in (("plan",), ("plan", "--platform", "linux-x64"), ("update",)):
        code, payload = run_json(capsys, b7000_home, github.api_url, *command, "--tag", "b7000", "--cuda-version", bad)
        assert code == 2, (command, payload)
        assert "use a line such as '12' or '12.4'" in payload["error"]["message"]
    guard.assert_intact("b7000")


def test_without_repo_update_and_check_stay_on_the_fork_the_active_runtime_came_from(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    fork, home = "someone/llama.cpp", tmp_path / "home"
    for repo, tag in ((fork, "b7000"), (fork, "b7001"), (REPO, "b7005")):
        archive = stand_in_tarball(tmp_path / f"{repo.split('/')[0]}-{tag}.tar.gz", tag=tag)
        github.add_release(repo, tag, {f"llama-{tag}-bin-ubuntu-x64.tar.gz": archive})
    code, done = run_json(capsys, home, github.api_url, "update", "--repo", fork, "--tag", "b7000", "--backend", "cpu")
    assert code == 0, done
    assert run_json(capsys, home, None, "unpin")[0] == 0  # `update --tag` pinned b7000
    code, checked = run_json(capsys, home, github.api_url, "check")
    assert code == 0, checked
    assert (checked["latest"], checked["update_available"]) == ("b7001", True)  # the fork's newest, not b7005
    code, updated = run_json(capsys, home, github.api_url, "update")
    assert code == 0, updated
    assert (updated["active"]["repo"], updated["active"]["tag"]) == (fork, "b7001")
    # A mirror is the fleet's: without --repo it mirrors ggml-org, whatever this machine runs.
    code, mirrored = run_json(capsys, home, github.api_url, "mirror", "sync", "--dest", str(tmp_path / "m"),
                              "--tag", "b7005")  # fmt: skip
    assert code == 0 and mirrored["releases"] == ["b7005"], mirrored
    # So does a file's origin: install-file without --repo records ggml-org, as the contract's default.
    archive = tmp_path / "ggml-org-b7005.tar.gz"
    code, filed = run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7005", "--backend", "cpu")
    assert code == 0 and filed["active"]["repo"] == REPO, filed
    code, moved = run_json(capsys, home, github.api_url, "update", "--repo", REPO, "--tag", "b7005")
    assert code == 0, moved
    assert (moved["active"]["repo"], moved["active"]["tag"]) == (REPO, "b7005")  # --repo still moves it
