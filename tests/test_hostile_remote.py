"""A hostile release server: names that are paths, the wrong release, bombs, deep JSON, token leaks.

Every refusal is exit 8 ("the server sent …")
with nothing kept: nothing outside the home changes, the previously active
runtime is byte-identical and still runs (:class:`tests.helpers.HomeGuard`).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RuntimeUpdater
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.sources.github import GitHubClient
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, run_json, stand_in_tarball

#: updater.sources.source.MAX_API_BODY_BYTES (not imported: this file runs against older code too).
_CAP_BYTES = 16 * 1024 * 1024


@pytest.fixture
def installed(b7000_home: Path) -> Path:
    return b7000_home


# -- names become paths only after validation ------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../../escaped/llama-b7001-bin-ubuntu-x64.tar.gz",
        "..%2F..%2Fllama-b7001-bin-ubuntu-x64.tar.gz/../../../escaped",
        "/tmp/llama-b7001-bin-ubuntu-x64.tar.gz",
        "llama-b7001-bin-ubuntu-x64.tar.gz\x1b[2J",
    ],
)
def test_asset_name_that_is_a_path_exits_8_and_creates_nothing_outside_the_home(
    name: str, capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    good = stand_in_tarball(tmp_path / "b7001.tar.gz", tag="b7001")
    github.add_release(REPO, "b7001", {name: good})
    guard = HomeGuard(tmp_path, installed)
    for _ in range(2):  # the second run once deleted what the first had created outside
        code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
        assert code == 8, payload
        assert payload["error"]["code"] == "remote_data_invalid"
        assert payload["error"]["message"].startswith("The server sent ")
        assert "\x1b" not in payload["error"]["message"]
        guard.assert_intact("b7000")
    assert list((installed / "downloads").iterdir()) == []
    assert github.requests_to("blob", "b7001") == []


def test_release_answered_for_another_tag_exits_8(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    other = stand_in_tarball(tmp_path / "b7002.tar.gz", tag="b7002")
    release = github.add_release(REPO, "b7002", {CPU_TAR.format(tag="b7002"): other})
    release["_served_for"] = "b7001"  # tags/b7001 answers with release b7002
    guard = HomeGuard(tmp_path, installed)
    code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 8, payload
    assert "release 'b7002' when asked for b7001" in payload["error"]["message"]
    guard.assert_intact("b7000")


def test_escape_sequences_in_a_served_tag_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, installed: Path, tmp_path: Path
) -> None:
    hostile = "b7001\x1b]0;owned\x07\x1b[2J"
    archive = stand_in_tarball(tmp_path / "b7001.tar.gz", tag="b7001")
    release = github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): archive})
    release["tag_name"], release["_served_for"] = hostile, "b7001"
    guard = HomeGuard(tmp_path, installed)
    code = main(["update", "--tag", "b7001", "--backend", "cpu", "--home", str(installed), "--api-url", github.api_url])
    captured = capsys.readouterr()
    assert code == 8
    assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out + captured.err
    assert "\\x1b" in captured.err  # shown, not sent
    # --latest over a list holding the hostile tag: it is ignored, never printed raw.
    code = main(["update", "--backend", "cpu", "--home", str(installed), "--api-url", github.api_url])
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
    guard.assert_intact("b7000")


# -- bounded API answers ---------------------------------------------------------


class _RawServer:
    """Answers every GET with one fixed body and headers (a hostile API on 127.0.0.1)."""

    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append(dict(self.headers.items()))
                self.send_response(200)
                for key, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

        self.requests: list[dict[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gzip_bomb() -> Iterator[_RawServer]:
    # Valid JSON (a list and whitespace) that expands 1000:1; 4x the cap once decoded.
    decoded = b"[" + b" " * (4 * _CAP_BYTES) + b"]"
    with _RawServer(gzip.compress(decoded, 9), {"Content-Type": "application/json", "Content-Encoding": "gzip"}) as s:
        yield s


def test_gzip_bomb_api_answer_exits_8_with_bounded_memory(
    gzip_bomb: _RawServer, capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path
) -> None:
    import tracemalloc

    guard = HomeGuard(tmp_path, installed)
    tracemalloc.start()
    try:
        code, payload = run_json(capsys, installed, gzip_bomb.url, "update", "--tag", "b7001", "--backend", "cpu")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 8, payload
    assert "larger than 16 MiB once decoded" in payload["error"]["message"]
    assert peak < 3 * _CAP_BYTES  # reading stopped at the cap, not at 64 MiB
    guard.assert_intact("b7000")


def test_json_nested_100000_deep_exits_8_not_a_bug(
    capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    guard = HomeGuard(tmp_path, installed)
    with _RawServer(deep, {"Content-Type": "application/json"}) as server:
        code, payload = run_json(capsys, installed, server.url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 8, payload
    assert "nested more than 64 levels" in payload["error"]["message"]
    guard.assert_intact("b7000")


# -- the token policy and credentials in URLs ---------------------------------------


def test_github_token_never_goes_to_a_mirror_but_the_own_token_goes_to_loopback(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    installed: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_must_not_leave")
    run_json(capsys, installed, github.api_url, "update", "--tag", "b7999", "--backend", "cpu")
    asked = github.requests_to("api", "b7999")
    assert asked and all("authorization" not in r.headers for r in github.requests)
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "own-token")
    run_json(capsys, installed, github.api_url, "update", "--tag", "b7998", "--backend", "cpu")
    assert github.requests_to("api", "b7998")[-1].headers.get("authorization") == "Bearer own-token"


@pytest.mark.parametrize("variable", ["LLAMA_RUNTIME_GITHUB_TOKEN", "GITHUB_TOKEN"])
def test_a_token_with_a_line_break_is_bad_input_not_a_network_failure(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    installed: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    guard = HomeGuard(tmp_path, installed)
    before = len(github.requests)
    monkeypatch.setenv(variable, "ghp_secret\r\nX-Evil: 1")
    api = github.api_url if variable.startswith("LLAMA") else "https://api.github.com"
    code, payload = run_json(capsys, installed, api, "update", "--tag", "b7999", "--backend", "cpu")
    assert code == 2, payload
    assert variable in payload["error"]["message"] and "ghp_secret" not in json.dumps(payload)
    # Commands that send nothing are not stopped by it (an app's start-up, status, server stop).
    code, status = run_json(capsys, installed, api, "status")
    assert code == 0 and status["active"]["tag"] == "b7000", status
    from llama_runtime import RuntimeUpdater

    assert RuntimeUpdater(installed).ensure().ready
    assert len(github.requests) == before  # refused before anything was sent
    guard.assert_intact("b7000")


def test_an_explicit_token_is_never_sent_in_clear_to_another_host() -> None:
    client = GitHubClient("http://mirror.example/api", REPO, token="secret")
    assert client.auth_headers_for("http://mirror.example/api/repos/x") == {}


def test_credentials_in_the_api_url_are_in_no_message_and_no_job_file(
    capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path
) -> None:
    guard = HomeGuard(tmp_path, installed)
    # A closed port: the error names the URL it could not reach.
    secret_url = "http://user:hunter2@127.0.0.1:9/api"
    code, payload = run_json(capsys, installed, secret_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7, payload
    assert "hunter2" not in json.dumps(payload) and "127.0.0.1:9" in payload["error"]["message"]
    updater = RuntimeUpdater(installed, api_url=secret_url, backend="cpu")
    updater.start_update("b7001", background=False)
    stored = (installed / "jobs" / "current.json").read_text()
    assert "hunter2" not in stored and "127.0.0.1:9" in stored
    guard.assert_intact("b7000")
