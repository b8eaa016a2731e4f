"""Updating while llama-server runs: stop, swap, restart — and never lose the active engine.

End to end with the real binary in router mode (``--models-dir`` starts without a model).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.errors import SwitchError
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.procinfo import pid_alive
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.sources.github import GitHubClient
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    CPU_TAR,
    REPO,
    VULKAN_TAR,
    HomeGuard,
    assert_runs,
    kill_leftover_server,
    publish_stand_in,
    run_json,
    serves_the_compute_check,
    stand_in_server,
    stand_in_tarball,
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    yield path
    kill_leftover_server(path)


@pytest.fixture
def running_b7000(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    tmp_path: Path,
    vk_env: dict[str, str],
) -> dict[str, Any]:
    """b7000 (the real build) installed and served in router mode."""
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    models = tmp_path / "models"
    models.mkdir()
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "60", "--", "--models-dir", str(models)
    )
    assert code == 0, started
    assert started["healthy"] is True
    return started


def test_update_while_running_restarts_the_server_on_the_new_binary(
    running_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
) -> None:
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["server_restarted"] is True
    assert payload["reload_required"] is True  # router mode: models the app loaded are gone
    code, status = run_json(capsys, home, github.api_url, "server", "status")
    assert status["running"] is True and status["healthy"] is True
    assert status["pid"] != running_b7000["pid"]
    assert not pid_alive(running_b7000["pid"])
    assert status["runtime"]["tag"] == "b7001"
    assert Path(status["binary"]) == Path(payload["active"]["binary"])
    assert status["args"] == running_b7000["args"]  # same arguments, same port


def test_new_runtime_that_never_becomes_healthy_is_rolled_back_and_old_server_restarted(
    running_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
) -> None:
    # --version works, but serving exits at once: the health check must catch it.
    never_healthy = stand_in_tarball(
        tmp_path / "bad.tar.gz", tag="b7001", script=stand_in_server("version: 7001 (never-healthy)")
    )
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): never_healthy})
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 6, payload
    assert payload["error"]["message"].startswith("rolled back: the new runtime failed its health check")
    assert "exited right after it started" in payload["error"]["message"]  # not "did not answer within 120 s"
    guard.assert_intact("b7000")
    code, status = run_json(capsys, home, github.api_url, "server", "status")
    assert status["running"] is True and status["healthy"] is True
    assert status["runtime"]["tag"] == "b7000"
    assert_runs(Path(status["binary"]))


class _StopFails:
    """An app's own server control whose stop fails (a wedged process)."""

    def __init__(self, inner: ManagedServer) -> None:
        self.inner = inner

    def is_running(self) -> bool:
        return self.inner.is_running()

    def stop(self, timeout: float) -> None:
        raise PermissionError("Operation not permitted")

    def start(self, binary: Path, args: Sequence[str]) -> None:
        self.inner.start(binary, args)

    def wait_healthy(self, timeout: float) -> bool:
        return self.inner.wait_healthy(timeout)

    def current_args(self) -> list[str]:
        return self.inner.current_args()

    def current_binary(self) -> Path | None:
        return self.inner.current_binary()


def test_stop_that_fails_keeps_pointer_and_old_server_then_retry_after_manual_stop_succeeds(
    running_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
) -> None:
    publish_stand_in(github, tmp_path, "b7001")
    runtime_home = Home(home)
    managed = ManagedServer(runtime_home.server_dir)
    source = GitHubClient(github.api_url, REPO)
    guard = HomeGuard(None, home)
    installer = Installer(runtime_home, source=source, host=detect_host, server=_StopFails(managed))  # type: ignore[arg-type]  # a control without endpoint(), as older apps' are
    with pytest.raises(SwitchError) as caught:
        installer.update(UpdateRequest(repo=REPO, tag="b7001", backend="cpu"))
    assert caught.value.message == (
        "Could not switch llama.cpp to b7001 (cpu): stopping the current b7000 (vulkan) server failed "
        "(Operation not permitted). The current runtime is still active; stop it and try again."
    )
    assert caught.value.exit_code == 6
    guard.assert_intact("b7000")
    assert managed.status().pid == running_b7000["pid"] and managed.status().healthy

    managed.stop(10)  # the manual stop the message asks for
    outcome = Installer(runtime_home, source=source, host=detect_host, server=managed).update(
        UpdateRequest(repo=REPO, tag="b7001", backend="cpu")
    )
    assert outcome.result == "installed" and outcome.active.marker.tag == "b7001"
    assert outcome.server is not None and outcome.server.restarted is False


def test_update_never_writes_to_the_llama_server_path_override(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    override = tmp_path / "external" / "llama-server"
    override.parent.mkdir()
    override.write_bytes(stand_in_server("version: 1234 (external)"))
    override.chmod(0o755)
    digest = hashlib.sha256(override.read_bytes()).hexdigest()
    monkeypatch.setenv("LLAMA_SERVER_PATH", str(override))
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert any("LLAMA_SERVER_PATH" in w for w in payload["warnings"])
    assert hashlib.sha256(override.read_bytes()).hexdigest() == digest
    assert not str(payload["active"]["binary"]).startswith(str(override.parent))
    code, status = run_json(capsys, home, github.api_url, "status")
    assert status["override"] == str(override)
    assert "1234 (external)" in status["override_info"]["version"]
    assert status["active"]["tag"] == "b7001"  # the managed runtime is reported apart
    code, doctor = run_json(capsys, home, github.api_url, "doctor")
    assert any("Unset LLAMA_SERVER_PATH" in a for a in doctor["advice"])


# -- fast stand-ins: a "llama-server" that serves /health from a static file ------------


def _http_server_build(tmp_path: Path, tag: str, *, healthy: bool = True) -> Path:
    script = (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo 'version: {tag[1:]} (stand-in)' >&2; exit 0 ;;\n"
        "  --list-devices) echo 'Available devices:'; exit 0 ;;\n"
        "esac\n"
        f"{serves_the_compute_check()}"
        'port=8080; while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done\n'
        'cd "$(dirname "$0")"\n'
        f'exec {sys.executable} -m http.server "$port" --bind 127.0.0.1\n'
    ).encode()
    files: dict[str, bytes | Path] = {"llama-server": script}
    if healthy:
        files["health"] = b"ok"  # GET /health answers 200 only when this file exists
    return build_release_archive(tmp_path / f"{tag}-{healthy}.tar.gz", "tar-tagdir", files, tag=tag)


@pytest.fixture
def served_b7000(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> dict[str, Any]:
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): _http_server_build(tmp_path, "b7000")})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    code, started = run_json(capsys, home, github.api_url, "server", "start", "--timeout", "30")
    assert code == 0 and started["healthy"], started
    return started


def test_rollback_switches_the_running_server_back_to_the_previous_runtime(
    served_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): _http_server_build(tmp_path, "b7001")})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0 and payload["server_restarted"], payload
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7000" and payload["server_restarted"] is True
    code, status = run_json(capsys, home, github.api_url, "server", "status")
    assert status["healthy"] and status["runtime"]["tag"] == "b7000"
    assert Path(status["binary"]) == Path(payload["active"]["binary"])


class _SecondStopFails(_StopFails):
    """Stops the old server fine, but the new one will not stop."""

    def __init__(self, inner: ManagedServer) -> None:
        super().__init__(inner)
        self.stops = 0

    def stop(self, timeout: float) -> None:
        self.stops += 1
        if self.stops >= 2:
            raise PermissionError("Operation not permitted")
        self.inner.stop(timeout)


def test_unhealthy_new_server_that_cannot_be_stopped_keeps_its_runtime_and_says_so(
    served_b7000: dict[str, Any], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    unhealthy = _http_server_build(tmp_path, "b7001", healthy=False)
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): unhealthy})
    managed = ManagedServer(Home(home).server_dir)
    pointer = (home / "active.json").read_bytes()
    installer = Installer(
        Home(home),
        source=GitHubClient(github.api_url, REPO),
        host=detect_host,
        server=_SecondStopFails(managed),  # type: ignore[arg-type]  # a control without endpoint(), as older apps' are
        health_timeout=2,
    )
    with pytest.raises(SwitchError) as caught:
        installer.update(UpdateRequest(repo=REPO, tag="b7001", backend="cpu"))
    assert "could not be stopped (Operation not permitted); it is still running" in caught.value.message
    assert (home / "active.json").read_bytes() == pointer  # the pointer is back on b7000
    running = managed.current_binary()
    assert running is not None and running.exists()  # its runtime was not deleted under it
    managed.stop(10)


def test_ctrl_c_while_the_new_server_starts_puts_pointer_and_old_server_back(
    served_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): _http_server_build(tmp_path, "b7001")})
    guard = HomeGuard(None, home)
    real_wait = ManagedServer.wait_healthy
    calls = {"n": 0}

    def interrupted_once(self: ManagedServer, timeout: float) -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(ManagedServer, "wait_healthy", interrupted_once)
    code = main(["update", "--tag", "b7001", "--backend", "cpu", "--home", str(home), "--api-url", github.api_url])
    assert code == 130
    assert "b7000 (cpu) is active" in capsys.readouterr().err  # read from the pointer after the Ctrl-C
    guard.assert_intact("b7000")
    status = ManagedServer(Home(home).server_dir).status()
    assert status.running and status.runtime_name == served_b7000["runtime"]["name"]
