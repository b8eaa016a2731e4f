"""A slow drip never holds the update forever, and the API has one overall deadline.

One byte every few seconds used to keep an update (and its lock) alive with no
end: httpx's read timeout only bounds the wait for the next byte. A download
now has a minimum rate and an overall deadline (``fetch/partial.py``); below
either it ends with exit 7, keeps its bytes for a resume, releases the lock,
and leaves the previous runtime active and running.

(The pace module is imported inside the unit tests so the end-to-end ones
also run against code from before the fix.)

The API's requests (``check``, ``update``'s questions) share one deadline
(``LLAMA_RUNTIME_API_DEADLINE``): a server on 127.0.0.1 that stalls, drips or
accepts and never answers ends the command within it, with exit 7 and a
sentence saying which it was.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llama_runtime import UserInputError
from llama_runtime.runtime.lock import UpdateLock
from tests.fakeclock import FakeClock
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, HomeGuard, publish_stand_in, run_json


def test_a_drip_below_the_minimum_rate_ends_the_update_with_exit_7_and_frees_the_lock(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    b7000_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 16 bytes every half second: the ~270-byte asset would take ~8 s per attempt.
    publish_stand_in(github, tmp_path, "b7001")
    github.inject(CPU_TAR.format(tag="b7001"), Fault(drip_seconds=0.5, drip_chunk=16, times=None))
    monkeypatch.setenv("LLAMA_RUNTIME_MIN_RATE", "1000")
    monkeypatch.setenv("LLAMA_RUNTIME_MIN_RATE_WINDOW", "1")
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7, payload
    assert "below the minimum of 1000 bytes/s" in payload["error"]["message"]
    assert "kept for resuming" in payload["error"]["message"]
    assert not UpdateLock(b7000_home / "locks" / "update.lock").is_held()
    guard.assert_intact("b7000")
    code, payload = run_json(capsys, b7000_home, github.api_url, "gc")  # another verb gets the lock at once
    assert code == 0, payload


def test_the_overall_deadline_ends_a_download_that_keeps_just_above_the_rate(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    b7000_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish_stand_in(github, tmp_path, "b7001")
    github.inject(CPU_TAR.format(tag="b7001"), Fault(drip_seconds=0.3, drip_chunk=16, times=None))
    monkeypatch.setenv("LLAMA_RUNTIME_MIN_RATE", "0")
    monkeypatch.setenv("LLAMA_RUNTIME_DOWNLOAD_DEADLINE", "1")
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7, payload
    assert "deadline" in payload["error"]["message"]
    guard.assert_intact("b7000")


def test_pace_watch_averages_over_its_window_and_tolerates_a_short_stall() -> None:
    from llama_runtime.updater.fetch.partial import DownloadPace, PaceWatch

    clock = FakeClock()
    watch = PaceWatch(DownloadPace(min_rate=100, window=10, deadline=1000), clock)
    clock.now = 5
    assert watch.too_slow(10) is None  # 10 bytes in 5 s: the window is not over yet
    clock.now = 10
    assert watch.too_slow(2000) is None  # 2010 bytes in 10 s: fine
    clock.now = 21
    reason = watch.too_slow(5)
    assert reason is not None and "below the minimum of 100 bytes/s" in reason
    watch.new_attempt()
    clock.now = 1001
    deadline = watch.too_slow(10**9)
    assert deadline is not None and "1000 s deadline" in deadline


@pytest.mark.parametrize("value", ["fast", "-1", "nan", "inf", "0"])
def test_a_deadline_setting_that_is_not_a_positive_number_is_exit_2(value: str) -> None:
    from llama_runtime.types import DownloadPace

    with pytest.raises(UserInputError) as err:
        DownloadPace.from_env({"LLAMA_RUNTIME_DOWNLOAD_DEADLINE": value})
    assert "LLAMA_RUNTIME_DOWNLOAD_DEADLINE" in err.value.message


def test_defaults_and_overrides() -> None:
    from llama_runtime.types import DownloadPace

    assert DownloadPace.from_env({}) == DownloadPace()
    assert DownloadPace.from_env({"LLAMA_RUNTIME_MIN_RATE": "0"}).min_rate == 0


# -- the API's one deadline --------------------------------------------------------------------------------------

#: The deadline the end-to-end tests set (seconds): short, so each test stays quick.
_TEST_API_DEADLINE = 2.0
#: What a command may take past the deadline (seconds): process start-up and the slowest single read.
_SLACK_SECONDS = 3.0


@contextlib.contextmanager
def _raw_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that hands each connection to ``answer``; yields its ``http://`` URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            threading.Thread(target=answer, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def _never_answer(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait()


def _drip_a_byte_at_a_time(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(65536)
    with contextlib.suppress(OSError):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[")
        while not stop.wait(0.1):
            conn.sendall(b" ")


def _timed_check(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    verb: tuple[str, ...] = ("check",),
) -> tuple[int, dict[str, object], float]:
    monkeypatch.setenv("LLAMA_RUNTIME_API_DEADLINE", str(_TEST_API_DEADLINE))
    started = time.monotonic()
    code, payload = run_json(capsys, home, api_url, *verb)
    return code, payload, time.monotonic() - started


@pytest.mark.e2e
@pytest.mark.parametrize("verb", [("check",), ("update",), ("update", "--tag", "b7001")], ids=" ".join)
def test_an_api_that_accepts_and_never_answers_ends_the_command_within_the_deadline_saying_so(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    verb: tuple[str, ...],
) -> None:
    guard = HomeGuard(tmp_path, b7000_home)
    with _raw_server(_never_answer) as api_url:
        code, payload, took = _timed_check(capsys, b7000_home, api_url, monkeypatch, verb)
    assert code == 7, payload
    message = payload["error"]["message"]  # type: ignore[index]
    assert "accepted the connection but sent no answer within 2 s" in message, message
    assert "could not connect" not in message.lower()
    assert took < _TEST_API_DEADLINE + _SLACK_SECONDS, took
    guard.assert_intact("b7000")


@pytest.mark.e2e
def test_an_api_that_drips_its_answer_ends_check_within_the_deadline_as_too_slow(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = HomeGuard(tmp_path, b7000_home)
    with _raw_server(_drip_a_byte_at_a_time) as api_url:
        code, payload, took = _timed_check(capsys, b7000_home, api_url, monkeypatch)
    assert code == 7, payload
    message = payload["error"]["message"]  # type: ignore[index]
    assert "answered too slowly" in message and "LLAMA_RUNTIME_API_DEADLINE" in message, message
    assert took < _TEST_API_DEADLINE + _SLACK_SECONDS, took
    guard.assert_intact("b7000")


@pytest.mark.e2e
def test_an_api_nobody_listens_on_is_could_not_connect_within_the_deadline(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    api_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # the port is free: every connection is refused
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload, took = _timed_check(capsys, b7000_home, api_url, monkeypatch)
    assert code == 7, payload
    assert "Could not connect to the API at" in payload["error"]["message"], payload  # type: ignore[index]
    assert took < _TEST_API_DEADLINE + _SLACK_SECONDS, took
    guard.assert_intact("b7000")


def test_the_api_deadline_defaults_to_30_s_and_is_documented_with_its_variable() -> None:
    from llama_runtime.updater.config import API_DEADLINE_SECONDS, Settings, resolve_settings

    assert API_DEADLINE_SECONDS <= 30
    assert Settings.__dataclass_fields__["api_deadline"].default == API_DEADLINE_SECONDS
    assert resolve_settings(home="/nonexistent-home", env={}).api_deadline == API_DEADLINE_SECONDS
    assert resolve_settings(home="/nonexistent-home", env={"LLAMA_RUNTIME_API_DEADLINE": "5"}).api_deadline == 5
    with pytest.raises(UserInputError):
        resolve_settings(home="/nonexistent-home", env={"LLAMA_RUNTIME_API_DEADLINE": "0"})
    docs = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert "`LLAMA_RUNTIME_API_DEADLINE` (seconds, default 30)" in docs


def test_retries_stop_when_the_budget_cannot_hold_another_try() -> None:
    from llama_runtime.runtime.clock import TimeBudget

    clock = FakeClock()
    budget = TimeBudget(30.0, clock)
    with budget.spending():
        clock.now = 20.0
        assert budget.allows_retry(1)  # 10 s left: 1 s backoff and a try fit
        with budget.spending():  # nested: counted once
            clock.now = 28.0
    assert budget.left() == pytest.approx(2.0)
    clock.now = 100.0  # time between requests (a download) is not the API's
    assert budget.left() == pytest.approx(2.0)
    assert not budget.allows_retry(2)  # a 2 s backoff leaves nothing for the try


@pytest.mark.parametrize(
    ("failure", "said"),
    [("stall", "accepted the connection but sent no answer"), ("no_route", "Could not connect to the API")],
)
def test_at_the_default_settings_a_stalled_or_unroutable_api_costs_at_most_the_30_s_deadline(
    failure: str, said: str
) -> None:
    """The reported 94 s: three tries of a 30 s read timeout with backoff. Time is the fake clock's."""
    import httpx

    from llama_runtime.errors import NetworkError
    from llama_runtime.updater.config import API_DEADLINE_SECONDS, READ_TIMEOUT_SECONDS
    from llama_runtime.updater.engine import CONNECT_TIMEOUT_SECONDS
    from llama_runtime.updater.sources.github import GitHubClient

    clock = FakeClock()
    tried: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        waits = request.extensions["timeout"]
        wait = waits["read"] if failure == "stall" else waits["connect"]
        tried.append(wait)
        clock.now += wait
        raise (httpx.ReadTimeout if failure == "stall" else httpx.ConnectTimeout)("timed out", request=request)

    api = GitHubClient(
        "https://api.example.test",
        "ggml-org/llama.cpp",
        transport=httpx.MockTransport(handler),
        timeout=httpx.Timeout(READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
        clock=clock,
        sleep=clock.sleep,
        api_deadline=API_DEADLINE_SECONDS,
    )
    with pytest.raises(NetworkError) as err:
        api.latest_published()
    assert said in err.value.message
    assert clock.now <= API_DEADLINE_SECONDS  # tries, waits and backoff together
    assert len(tried) == (1 if failure == "stall" else 3)  # a 10 s connect leaves room to retry; a 30 s stall none


def _late_headers_then_stall(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(65536)
    if stop.wait(1.5):
        return
    with contextlib.suppress(OSError):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[")
    stop.wait()


def test_a_stall_after_late_headers_waits_only_what_is_left_of_the_deadline() -> None:
    """Headers at 1.5 s of a 2 s deadline, then silence: 0.5 s more, not another whole read timeout."""
    from llama_runtime.errors import NetworkError
    from llama_runtime.updater.sources.github import GitHubClient

    with _raw_server(_late_headers_then_stall) as api_url:
        api = GitHubClient(api_url, "ggml-org/llama.cpp", api_deadline=_TEST_API_DEADLINE, sleep=lambda _: None)
        started = time.monotonic()
        with pytest.raises(NetworkError) as err:
            api.latest_published()
        took = time.monotonic() - started
        api.close()
    assert "answered too slowly" in err.value.message, err.value.message
    assert took < _TEST_API_DEADLINE + 1.0, took  # the read timeout taken at the start would end it at 3.5 s
