"""``server start`` gives llama-server the time it needs to load its model.

While llama-server loads, every route answers HTTP 503 with
``{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}``.
A stand-in server (a Python script installed as the runtime's ``llama-server``)
answers exactly that for as long as it is told, then 200; or dies while
loading, with an error in its log. ``server start`` waits while it loads, says
so, and exits 0 once healthy; it fails only when the process died or the wait
ran out, with the log's last lines. The real llama-server is healthy with the
default wait. Every failure leaves the active runtime as it was, and it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, HomeGuard, publish_stand_in, run_json

#: A llama-server stand-in (BUILD: its build number): --version and --list-devices as the verifier
#: asks them, then an HTTP server whose /health says "Loading model" (503) for --stand-in-load
#: seconds, then 200; with --stand-in-die N it writes an error to its log and exits 1 after N seconds.
LOADING_SERVER = f"""#!{sys.executable}
import http.server, json, os, sys, threading, time
args = sys.argv[1:]
if "--version" in args:
    print("version: BUILD (stand-in)", file=sys.stderr)
    sys.exit(0)
if "--list-devices" in args:
    print("Available devices:")
    sys.exit(0)
def value(flag, default):
    return args[args.index(flag) + 1] if flag in args else default
load = float(value("--stand-in-load", "0"))
die = value("--stand-in-die", None)
began = time.monotonic()
print("llama_model_load: loading model from stand-in.gguf", flush=True)
if die is not None:
    def end():
        time.sleep(float(die))
        print("error: failed to allocate the KV cache: out of device memory", flush=True)
        os._exit(1)
    threading.Thread(target=end, daemon=True).start()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if time.monotonic() - began < load:
            code, body = 503, {{"error": {{"code": 503, "message": "Loading model", "type": "unavailable_error"}}}}
        else:
            code, body = 200, {{"status": "ok"}}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_POST(self):  # the compute check's completion, answered as the check model is built to
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for letter in "abcdefghijklmnop":
            self.wfile.write(b"data: " + json.dumps({{"content": letter, "stop": False}}).encode() + b"\\n\\n")
        final = {{"content": "", "stop": True, "tokens_predicted": 16}}
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\\n\\n")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((value("--host", "127.0.0.1"), int(value("--port", "8080"))), Health).serve_forever()
""".encode()


@pytest.fixture
def installed(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Home:
    monkeypatch.setenv("LLAMA_RUNTIME_SERVER_PORT", "0")
    monkeypatch.delenv("LLAMA_RUNTIME_SERVER_WAIT", raising=False)
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag, script=LOADING_SERVER.replace(b"BUILD", tag[1:].encode()))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return Home(home)


def run_text(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, str, str]:
    """``llama-runtime ARGS --home HOME`` for people: the exit code, stdout and stderr."""
    cut = args.index("--") if "--" in args else len(args)
    code = main([*args[:cut], "--home", str(home), *args[cut:]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_server_start_waits_while_llama_server_loads_its_model_and_exits_0_once_healthy(
    capsys: pytest.CaptureFixture[str], home: Path, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    # Longer than the 10 s the start used to wait: a Vulkan server with a cold shader cache took 47 s.
    code, out, err = run_text(capsys, home, "server", "start", "--", "--stand-in-load", "12")
    assert code == 0, (out, err)
    assert "Started llama-server b7000 (cpu)" in out
    assert "llama-server is loading its model" in err
    status = ManagedServer(installed.server_dir).status()
    assert status.running and status.healthy, status
    frozen.assert_intact("b7000")


def test_server_start_whose_wait_runs_out_while_loading_exits_6_with_the_last_answer_and_the_log(
    capsys: pytest.CaptureFixture[str], home: Path, installed: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = HomeGuard(None, installed.root)
    monkeypatch.setenv("LLAMA_RUNTIME_SERVER_WAIT", "2")
    code, payload = run_json(capsys, home, None, "server", "start", "--", "--stand-in-load", "600")
    assert code == 6, payload
    assert payload["healthy"] is False and payload["waited_seconds"] == 2
    assert payload["health_detail"] == "HTTP 503: Loading model"
    assert any("loading model from stand-in.gguf" in line for line in payload["log_tail"])
    assert payload["running"] is True  # still loading: left running, `server status` says when it is healthy
    code, stopped = run_json(capsys, home, None, "server", "stop")
    assert code == 0 and stopped["stopped"] is True
    frozen.assert_intact("b7000", capsys=capsys)


def test_server_start_whose_llama_server_dies_while_loading_fails_with_its_last_log_lines(
    capsys: pytest.CaptureFixture[str], home: Path, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    code, payload = run_json(
        capsys, home, None, "server", "start", "--", "--stand-in-load", "600", "--stand-in-die", "1"
    )
    assert code not in (0, 1), payload
    assert "out of device memory" in payload["error"]["message"]
    assert not ManagedServer(installed.server_dir).is_running()
    frozen.assert_intact("b7000", capsys=capsys)


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--wait", "0"], None), (["--wait", "-5"], None), (["--wait", "nan"], None), ([], "soon"), ([], "-1")],
    ids=["wait_0", "wait_negative", "wait_nan", "env_word", "env_negative"],
)
def test_a_server_wait_that_is_no_positive_number_of_seconds_is_a_usage_error_and_starts_nothing(
    flags: list[str],
    env: str | None,
    capsys: pytest.CaptureFixture[str],
    home: Path,
    installed: Home,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen = HomeGuard(None, installed.root)
    if env is not None:
        monkeypatch.setenv("LLAMA_RUNTIME_SERVER_WAIT", env)
    code, payload = run_json(capsys, home, None, "server", "start", *flags, "--", "--stand-in-load", "0")
    assert code == 2, payload
    assert "LLAMA_RUNTIME_SERVER_WAIT" in payload["error"]["message"] or "--wait" in payload["error"]["message"]
    assert not ManagedServer(installed.server_dir).is_running()
    monkeypatch.delenv("LLAMA_RUNTIME_SERVER_WAIT", raising=False)  # a setting: every command refuses it
    frozen.assert_intact("b7000", capsys=capsys)


def test_a_switch_waits_while_the_new_server_loads_its_model(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home
) -> None:
    code, started = run_json(capsys, home, None, "server", "start", "--", "--stand-in-load", "3")
    assert code == 0 and started["healthy"] is True, started
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0 and payload["result"] == "installed" and payload["server_restarted"], payload
    status = ManagedServer(installed.server_dir).status()
    assert status.running and status.healthy and status.runtime_name and "b7001" in status.runtime_name


@pytest.mark.real_binary
def test_the_real_llama_server_started_with_the_default_wait_is_healthy_and_exits_0(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    tmp_path: Path,
    vk_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.tinymodel import write_tiny_llama

    monkeypatch.setenv("LLAMA_RUNTIME_SERVER_PORT", "0")
    monkeypatch.delenv("LLAMA_RUNTIME_SERVER_WAIT", raising=False)
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    code, started = run_json(capsys, home, None, "server", "start", "--", "-m", str(model), "--device", "none")
    assert code == 0 and started["healthy"] is True, started
    assert started["waited_seconds"] == 300
    assert "b7000" in started["runtime"]["name"]


def test_a_start_whose_server_another_command_stops_says_so_and_does_not_blame_llama_server(
    capsys: pytest.CaptureFixture[str], home: Path, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    argv = [sys.executable, "-m", "llama_runtime", "server", "start", "--home", str(home), "--json"]
    child = subprocess.Popen([*argv, "--", "--stand-in-load", "600"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ManagedServer(installed.server_dir).is_running():
            assert time.monotonic() < deadline and child.poll() is None, "the start never recorded its server"
            time.sleep(0.05)
        code, stopped = run_json(capsys, home, None, "server", "stop")
        assert code == 0 and stopped["stopped"] is True, stopped
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    payload = json.loads(out)
    assert child.returncode == 3, payload
    assert "was stopped by another llama-runtime command" in payload["error"]["message"]
    assert "exited" not in payload["error"]["message"]
    frozen.assert_intact("b7000", capsys=capsys)


def test_an_app_drives_the_managed_server_through_runtime_updater_server_as_the_cli_does(
    home: Path, installed: Home
) -> None:
    from llama_runtime import RuntimeUpdater, ServerReport, ServerStopped, UserInputError

    frozen = HomeGuard(None, installed.root)
    server = RuntimeUpdater(home).server
    assert server.status().running is False
    loading: list[None] = []
    started = server.start(["--stand-in-load", "1"], wait=60, on_loading=lambda: loading.append(None))
    try:
        assert isinstance(started, ServerReport) and started.healthy is True and started.running, started
        assert started.runtime is not None and started.runtime.marker.tag == "b7000"
        assert loading, "the app heard that the model was loading"
        assert started.url is not None and started.url.startswith("http://127.0.0.1:")
        now = server.status()
        assert (now.running, now.healthy, now.pid) == (True, True, started.pid)
        assert server.wait(5) is True
        again = server.restart(wait=60)  # no arguments: the ones it runs with
        assert again.healthy and again.pid != started.pid and list(again.args) == list(started.args)
        with pytest.raises(UserInputError, match="finite number of seconds"):
            server.start(wait=float("nan"))
    finally:
        stopped = server.stop(timeout=5)
    assert isinstance(stopped, ServerStopped) and stopped.stopped is True
    assert server.status().running is False and server.stop().stopped is False
    frozen.assert_intact("b7000")
