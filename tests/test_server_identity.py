"""The server is ours before we call it healthy, and it never runs
inside a runtime.

With the real llama-server (router mode: ``--models-dir`` starts without a
model). A squatter is another process answering ``GET /health`` with 200 on
the same port, as someone else's server on a shared host would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import VerificationError
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.listen import Endpoint, free_port, listen_endpoints
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.sources.github import GitHubClient
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, HomeGuard, assert_runs, kill_leftover_server, run_json

#: A server that answers every GET with 200 "ok" (what a foreign llama-server's /health says).
SQUATTER = """
import http.server, socket, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
class S(http.server.HTTPServer):
    address_family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""


@pytest.fixture
def squat() -> Iterator[Callable[[str, int], subprocess.Popen[bytes]]]:
    """Starts squatters on (host, port); kills them afterwards."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(host: str, port: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", SQUATTER, host, str(port)])
        procs.append(proc)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for _ in range(500):
            with socket.socket(family) as sock:
                if sock.connect_ex((host, port)) == 0:
                    return proc
            assert proc.poll() is None, "the squatter could not bind"
            subprocess.run(["sleep", "0.02"], check=True)
        raise AssertionError("the squatter never listened")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    yield path
    kill_leftover_server(path)


@pytest.fixture
def installed(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, real_vulkan_tarball: Path, vk_env: Any
) -> Home:
    """b7000 (the real build) installed and active; nothing running."""
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    return Home(home)


# -- a squatted port ---------------------------------------------------------------


def test_server_start_on_a_squatted_port_exits_3_naming_the_holder_and_starts_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home, squat: Any, tmp_path: Path
) -> None:
    intact = HomeGuard(None, installed.root)
    port = free_port()
    squatter = squat("127.0.0.1", port)
    models = tmp_path / "models"
    models.mkdir()
    code, payload = run_json(
        capsys,
        home,
        github.api_url,
        "server",
        "start",
        "--timeout",
        "30",
        "--",
        "--models-dir",
        str(models),
        "--port",
        str(port),
    )
    assert code == 3, payload
    assert payload["error"]["code"] == "port_in_use"
    assert f"pid {squatter.pid}" in payload["error"]["message"] and str(port) in payload["error"]["message"]
    assert not (installed.server_dir / "server.json").exists()  # nothing was started
    intact.assert_intact("b7000")


def test_a_squatter_answering_on_our_port_is_not_our_health(
    home: Path, installed: Home, squat: Any, tmp_path: Path
) -> None:
    intact = HomeGuard(None, installed.root)
    active = installed.load(installed.read_pointer().active or "")
    port = free_port()
    server = ManagedServer(installed.server_dir)
    models = tmp_path / "models"
    models.mkdir()
    # Our llama-server gets a port that another process takes before it binds (the race a
    # pre-check cannot close): it exits with "couldn't bind", the squatter answers 200.
    squatter = squat("127.0.0.1", port)
    server._port_in_use = lambda endpoint: None  # type: ignore[method-assign]  # skip the pre-check
    server.start(active.binary, ["--models-dir", str(models), "--port", str(port)], runtime_name=active.name)
    assert server.wait_healthy(20.0) is False
    status = server.status()
    assert status.healthy is not True
    intact.assert_intact("b7000")
    assert squatter.poll() is None


class _PortTakenAfterStop(ManagedServer):
    """The home's server, with another process taking its port right after the stop."""

    def __init__(self, server_dir: Path, squat: Callable[[str, int], Any]) -> None:
        super().__init__(server_dir)
        self._squat = squat
        self.squatted = False

    def stop(self, timeout: float = 10.0) -> None:
        port = self.status().port
        super().stop(timeout)
        if port is not None and not self.squatted:
            self.squatted = True
            self._squat("127.0.0.1", port)


def test_update_whose_restart_finds_the_port_taken_is_rolled_back_not_reported_restarted(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    squat: Any,
    tmp_path: Path,
    real_vulkan_tarball: Path,
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "60", "--", "--models-dir", str(models)
    )
    assert code == 0 and started["healthy"] is True, started
    intact = HomeGuard(None, installed.root)
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball})
    server = _PortTakenAfterStop(installed.server_dir, squat)
    with GitHubClient(github.api_url, REPO) as source:
        installer = Installer(installed, source=source, host=detect_host, server=server, health_timeout=20.0)
        with pytest.raises(VerificationError) as caught:
            installer.update(UpdateRequest(repo=REPO, tag="b7001", backend="vulkan"))
    assert server.squatted
    assert caught.value.message.startswith("rolled back")
    assert "did not come back" in caught.value.message  # its own port is squatted too: said, not hidden
    intact.assert_intact("b7000")


# -- llama-server's --host forms --------------------------------------------------------------


def test_listen_endpoints_reads_every_host_form_llama_server_accepts() -> None:
    args = ["--host", "127.0.0.1,::1", "--host", "/run/llama/api.sock", "--port", "8080"]
    assert listen_endpoints(args, default_host="127.0.0.1") == [
        Endpoint("tcp", "127.0.0.1", 8080),
        Endpoint("tcp", "::1", 8080),
        Endpoint("unix", "/run/llama/api.sock"),
    ]
    assert listen_endpoints(["--host=[::]", "--port=0"], default_host="x") == [Endpoint("tcp", "::", 0)]
    assert listen_endpoints([], default_host="127.0.0.1") == [Endpoint("tcp", "127.0.0.1", None)]


@pytest.mark.parametrize("form", ["ipv6", "unix_socket"])
def test_server_start_with_an_ipv6_or_unix_socket_host_is_healthy_and_ours(
    form: str, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    host = "::1" if form == "ipv6" else str(tmp_path / "llama.sock")
    code, started = run_json(
        capsys,
        home,
        github.api_url,
        "server",
        "start",
        "--timeout",
        "60",
        "--",
        "--models-dir",
        str(models),
        "--host",
        host,
    )
    assert code == 0, started
    assert started["healthy"] is True
    code, status = run_json(capsys, home, github.api_url, "server", "status")
    assert code == 0 and status["healthy"] is True, status
    code, stopped = run_json(capsys, home, github.api_url, "server", "stop")
    assert code == 0 and stopped["stopped"] is True


# -- the working directory ---------------------------------------------------------


def test_server_runs_outside_the_runtime_and_relative_args_resolve_against_the_caller(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caller = tmp_path / "project"
    (caller / "models").mkdir(parents=True)
    monkeypatch.chdir(caller)
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "60", "--",
        "--models-dir", "models", "--log-file", "llama.log",
    )  # fmt: skip
    assert code == 0 and started["healthy"] is True, started
    runtime = installed.load(installed.read_pointer().active or "")
    cwd = Path(os.readlink(f"/proc/{started['pid']}/cwd"))
    assert not cwd.is_relative_to(runtime.path)
    assert cwd == caller
    code, _ = run_json(capsys, home, github.api_url, "server", "stop")
    assert code == 0
    assert (caller / "llama.log").is_file()
    assert [p for p in runtime.path.rglob("*") if p.name.startswith("llama.log")] == []
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 0 and report["healthy"], report


def test_export_of_a_server_used_runtime_installs_on_another_machine(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caller = tmp_path / "project"
    (caller / "models").mkdir(parents=True)
    monkeypatch.chdir(caller)
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "60", "--",
        "--models-dir", "models", "--log-file", "llama.log",
    )  # fmt: skip
    assert code == 0, started
    bundle = tmp_path / "bundle.tar.gz"
    code, exported = run_json(capsys, home, github.api_url, "export", "--output", str(bundle))
    assert code == 0, exported
    other = tmp_path / "other"
    code, payload = run_json(capsys, other, None, "install-file", str(bundle))
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))
    run_json(capsys, home, github.api_url, "server", "stop")


def test_export_refuses_a_runtime_holding_a_file_its_marker_does_not_record(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home, tmp_path: Path
) -> None:
    runtime = installed.load(installed.read_pointer().active or "")
    stray = runtime.path / "llama-b7000" / "llama.log"
    stray.write_text("a log someone wrote here")
    intact = HomeGuard(None, installed.root)
    code, payload = run_json(capsys, home, github.api_url, "export", "--output", str(tmp_path / "x.tar.gz"))
    assert code == 6, payload
    assert "llama-b7000/llama.log" in payload["error"]["message"]
    assert "is not part of the accepted runtime" in payload["error"]["message"]  # named by its trust record
    assert not (tmp_path / "x.tar.gz").exists()
    intact.assert_intact("b7000")
