"""The scheduled check: conditional requests, rate-limit backoff, never a downgrade, --apply, jitter."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RuntimeUpdater, UserInputError
from llama_runtime.errors import RateLimitError
from llama_runtime.runtime.clock import SystemClock
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.types import InstallMarker
from llama_runtime.updater.api.check import (
    DEFAULT_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    Backoff,
    not_before_after_error,
    not_before_after_success,
    parse_duration,
)
from llama_runtime.updater.choice.decide import upgrade_verdict
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.cli import jobs as cli_jobs
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.net.limits import RateLimit
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import REPO, HomeGuard, assert_runs
from tests.test_service import make_updater, publish

LIST_PATH = f"/api/repos/{REPO}/releases"
LATEST_PATH = f"{LIST_PATH}/latest"


@pytest.fixture
def installed_b7000(home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    publish(github, tmp_path, "b7000")
    state = make_updater(home, github).start_update(tag="b7000").wait(30)
    assert state.phase == "done", state.error
    return home


def check_text(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *args: str) -> tuple[int, str]:
    code = main(["check", *args, "--home", str(home), "--api-url", github.api_url, "--backend", "cpu"])
    return code, capsys.readouterr().out


def check(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *args: str) -> tuple[int, dict[str, Any]]:
    code, out = check_text(capsys, home, github, *args, "--json")
    payload: dict[str, Any] = json.loads(out)
    return code, payload


def marker(repo: str = REPO, tag: str = "b7000", backend: str = "cpu") -> InstallMarker:
    return InstallMarker(
        repo=repo,
        tag=tag,
        backend=backend,
        backend_request=backend,
        asset="a.tar.gz",
        size=1,
        sha256="0" * 64,
        digest_verified=True,
        installed_at="2025-01-01T00:00:00Z",
        binary="llama-server",
    )


# -- pure decisions -------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("30s", 30.0), ("10m", 600.0), ("1.5h", 5400.0)])
def test_duration_with_unit_is_parsed_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "-5m", "m", "25h", "ten minutes"])
def test_malformed_or_too_long_duration_is_refused(text: str) -> None:
    with pytest.raises(UserInputError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("active", "latest", "has_build", "expected"),
    [
        (marker(tag="b7000"), "b7001", True, True),
        (marker(tag="b7001"), "b7001", True, False),
        (marker(tag="b7002"), "b7001", True, False),  # "latest" went backwards: never a downgrade
        (marker(tag="b7000"), "b7001", False, False),  # no build for the active backend
        (marker(repo="someone/fork", tag="b7000"), "b7001", True, False),  # another repository
        (None, "b7001", True, True),
    ],
)
def test_update_is_available_only_for_a_strictly_newer_build_of_same_repo_and_backend(
    active: InstallMarker | None, latest: str, has_build: bool, expected: bool
) -> None:
    available, reason = upgrade_verdict(active, REPO, latest, has_build)
    assert available is expected and reason


def test_backoff_after_refusal_honours_retry_after_then_reset_then_a_minute() -> None:
    now = 1_000.0
    assert not_before_after_error(RateLimitError("x", retry_after=120.0, reset_at=2_999.0), now) == now + 120
    assert not_before_after_error(RateLimitError("x", reset_at=3_000.0), now) == 3_000.0
    assert not_before_after_error(RateLimitError("x"), now) == now + DEFAULT_BACKOFF_SECONDS


def test_backoff_after_success_only_when_the_last_request_was_spent() -> None:
    assert not_before_after_success(RateLimit(60, 5, 3_000), 1_000.0) is None
    assert not_before_after_success(RateLimit(60, 0, 3_000), 1_000.0) == 3_000.0
    assert not_before_after_success(None, 1_000.0) is None


def test_backoff_longer_than_githubs_hourly_window_is_capped_at_an_hour() -> None:
    now = 1_000.0
    cap = now + MAX_BACKOFF_SECONDS
    assert not_before_after_error(RateLimitError("x", retry_after=10.0**9), now) == cap
    assert not_before_after_error(RateLimitError("x", reset_at=now + 86_400), now) == cap
    assert not_before_after_success(RateLimit(60, 0, int(now) + 86_400), now) == cap


def test_stored_backoff_is_read_as_at_most_an_hour_ahead(tmp_path: Path) -> None:
    backoff = Backoff(tmp_path)
    now = 1_000_000.0
    backoff.path.write_text(json.dumps({"not_before": now + 10 * 86_400}))  # by hand, or an older version
    assert backoff.not_before(now) == now + MAX_BACKOFF_SECONDS
    backoff.set(now + 10 * 86_400, "x", now=now)
    assert json.loads(backoff.path.read_text())["not_before"] == now + MAX_BACKOFF_SECONDS


def test_stored_backoff_is_ignored_once_the_clock_went_back_before_it_was_stored(tmp_path: Path) -> None:
    backoff = Backoff(tmp_path)
    backoff.set(1_000_000.0 + 600, "x", now=1_000_000.0)
    assert backoff.not_before(1_000_000.0 + 1) == 1_000_000.0 + 600
    assert backoff.not_before(1_000_000.0 - 86_400) is None  # NTP set the clock back a day


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -1.0])
def test_check_wait_that_is_not_a_finite_non_negative_number_is_bad_input(
    installed_b7000: Path, github: FakeGitHub, seconds: float
) -> None:
    frozen = HomeGuard(None, installed_b7000)
    before = len(github.requests)
    with pytest.raises(UserInputError):
        make_updater(installed_b7000, github).check(apply=True, wait=seconds)
    assert github.requests[before:] == []
    frozen.assert_intact("b7000", staging_empty=True)


# -- against the local GitHub ---------------------------------------------------------


def test_unchanged_check_repeats_as_conditional_requests_only(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7001")
    code, first = check(capsys, installed_b7000, github)
    assert code == 0, first
    assert first["installed"] == "b7000" and first["latest"] == "b7001" and first["update_available"] is True
    check(capsys, installed_b7000, github)  # the pointer download above changed v0.2.0's download_count (ETag)
    before = len(github.requests)
    code, third = check(capsys, installed_b7000, github)
    assert code == 0 and third == first
    new = github.requests[before:]
    assert [(r.path, r.status) for r in new] == [(LATEST_PATH, 304), (f"{LIST_PATH}/tags/b7001", 304)]
    assert all(r.headers.get("if-none-match") for r in new)
    assert not [r for r in new if r.host == "blob"]  # nightly-tag.txt is cached while unchanged


def test_check_still_answers_when_its_etag_cache_cannot_be_written(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A read-only or full cache directory (here: a directory where the cache file belongs)
    # costs the next check a full request; it is no reason to fail this one.
    etags = Home(installed_b7000).cache_dir / "etags.json"
    etags.unlink(missing_ok=True)
    etags.mkdir(parents=True)
    frozen = HomeGuard(None, installed_b7000)
    publish(github, tmp_path, "b7001")
    code, result = check(capsys, installed_b7000, github)
    assert code == 0, result
    assert (result["latest"], result["update_available"]) == ("b7001", True)
    frozen.assert_intact("b7000", staging_empty=True)


def test_check_when_latest_goes_backwards_offers_no_downgrade(
    home: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7000")
    publish(github, tmp_path, "b7001", prerelease=True)  # installable by tag, never "latest"
    assert make_updater(home, github).start_update(tag="b7001").wait(30).phase == "done"
    code, payload = check(capsys, home, github)
    assert code == 0
    assert payload["installed"] == "b7001" and payload["latest"] == "b7000"
    assert payload["update_available"] is False and "downgrad" in payload["reason"]


def test_rate_limited_check_exits_7_and_the_next_run_skips_without_a_request(
    installed_b7000: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    github.inject(LATEST_PATH, Fault(status=403, rate_limited=True))
    code, payload = check(capsys, installed_b7000, github)
    assert code == 7 and payload["error"]["code"] == "rate_limited"
    stored = json.loads((installed_b7000 / "cache" / "ratelimit.json").read_text())
    assert stored["not_before"] > time.time() + 1000  # the server's reset is 30 minutes ahead
    before = len(github.requests)
    code, skipped = check(capsys, installed_b7000, github)
    assert code == 0
    assert skipped["skipped"] == "rate_limited" and skipped["update_available"] is False
    assert skipped["installed"] == "b7000" and skipped["not_before"] == stored["not_before"]
    assert len(github.requests) == before


@pytest.mark.parametrize("status", [403, 429])
def test_secondary_rate_limit_stores_a_minute_of_backoff_and_asks_nothing_until_then(
    installed_b7000: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    github.inject(LATEST_PATH, Fault(status=status, secondary=True, times=None))
    started = time.time()
    code, payload = check(capsys, installed_b7000, github)
    assert code == 7 and payload["error"]["code"] == "rate_limited"
    assert "secondary rate limit" in payload["error"]["message"] and "60 seconds" in payload["error"]["message"]
    assert len(github.requests_to("api", LATEST_PATH)) == 1  # no second request
    stored = json.loads((installed_b7000 / "cache" / "ratelimit.json").read_text())
    assert started + 60 <= stored["not_before"] <= time.time() + 60
    before = len(github.requests)
    code, skipped = check(capsys, installed_b7000, github)
    assert code == 0 and skipped["skipped"] == "rate_limited" and len(github.requests) == before


def test_retry_after_sets_the_stored_backoff(
    installed_b7000: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    github.inject(LATEST_PATH, Fault(status=429, retry_after=120))
    started = time.time()
    code, _payload = check(capsys, installed_b7000, github)
    assert code == 7
    stored = json.loads((installed_b7000 / "cache" / "ratelimit.json").read_text())
    assert started + 120 <= stored["not_before"] <= time.time() + 120


def test_check_apply_installs_the_newer_build(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7001")
    code, payload = check(capsys, installed_b7000, github, "--apply")
    assert code == 0, payload
    assert payload["applied"] is True and payload["outcome"]["active"]["tag"] == "b7001"
    assert_runs(Path(payload["outcome"]["active"]["binary"]))
    job = make_updater(installed_b7000, github).jobs.current()
    assert job is not None and job.operation == "schedule" and job.phase == "done"


def test_check_apply_while_an_update_holds_the_lock_exits_3_quietly(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7001")
    frozen = HomeGuard(None, installed_b7000)
    before = len(github.requests)
    with UpdateLock(Home(installed_b7000).lock_path).hold("update"):
        code, out = check_text(capsys, installed_b7000, github, "--apply")
        assert code == 3 and out == ""
        code, payload = check(capsys, installed_b7000, github, "--apply")
        assert code == 3 and payload["skipped"] == "busy" and payload["error"]["code"] == "busy"
    assert github.requests[before:] == []  # skipped before asking GitHub anything
    frozen.assert_intact("b7000", staging_empty=True)


def test_check_apply_with_wait_installs_once_the_lock_is_free(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7001")
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with UpdateLock(Home(installed_b7000).lock_path).hold("rollback"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(30)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        code, payload = check(capsys, installed_b7000, github, "--apply", "--wait", "30")
    finally:
        release.set()
        thread.join()
    assert code == 0, payload
    assert payload["applied"] is True and payload["outcome"]["active"]["tag"] == "b7001"


def test_jitter_sleeps_a_random_time_within_the_duration(
    installed_b7000: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(cli_jobs, "sleep", slept.append)
    code, _payload = check(capsys, installed_b7000, github, "--jitter", "10m")
    assert code == 0
    assert len(slept) == 1 and 0.0 <= slept[0] <= 600.0


@pytest.mark.parametrize(
    "args",
    [("check", "--apply", "--wait", "nan"), ("check", "--apply", "--wait=-5"), ("job", "wait", "--timeout", "inf")],
)
def test_cli_wait_or_timeout_that_is_not_a_finite_non_negative_number_exits_2(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    publish(github, tmp_path, "b7001")
    frozen = HomeGuard(None, installed_b7000)
    before = len(github.requests)
    code = main([*args, "--home", str(installed_b7000), "--api-url", github.api_url, "--backend", "cpu", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 2 and payload["error"]["code"] == "bad_input"
    assert github.requests[before:] == []
    frozen.assert_intact("b7000", staging_empty=True)


def test_rate_limit_reset_a_day_ahead_of_a_skewed_clock_skips_at_most_an_hour(
    installed_b7000: Path, github: FakeGitHub
) -> None:
    class Behind(SystemClock):  # an air-gapped box whose clock is a day behind
        def time(self) -> float:
            return time.time() - 86_400

    behind = Behind()

    updater = RuntimeUpdater(
        installed_b7000,
        repo=REPO,
        backend="cpu",
        api_url=github.api_url,
        host=lambda: host_for_platform("linux-x64"),
        clock=behind,
    )
    github.inject(LATEST_PATH, Fault(status=403, rate_limited=True))
    with pytest.raises(RateLimitError):
        updater.check()
    skipped = updater.check()
    assert skipped.skipped == "rate_limited" and skipped.not_before is not None
    assert skipped.not_before - behind.time() <= MAX_BACKOFF_SECONDS


def test_check_with_damaged_active_binary_offers_no_downgrade_and_reports_the_damage(
    home: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7003")
    publish(github, tmp_path, "b7005", prerelease=True)  # installable by tag; "latest" stays b7003
    assert make_updater(home, github).start_update(tag="b7005").wait(30).phase == "done"
    binary = make_updater(home, github).ensure().binary
    assert binary is not None
    binary.write_bytes(binary.read_bytes() + b"\n# one byte of damage\n")
    frozen = HomeGuard(None, home)
    code, payload = check(capsys, home, github, "--apply")
    assert code == 0, payload
    assert payload["installed"] == "b7005" and payload["latest"] == "b7003"
    assert payload["update_available"] is False and payload["applied"] is False
    assert payload["problem"] and "differs" in payload["problem"] and "downgrad" in payload["reason"]
    frozen.assert_intact("b7005", staging_empty=True)


def test_check_with_explicit_backend_decides_and_installs_for_that_backend(
    installed_b7000: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(github, tmp_path, "b7001")  # a CPU build only; the active b7000 is CPU too
    frozen = HomeGuard(None, installed_b7000)
    code = main(
        [
            "check",
            "--apply",
            "--home",
            str(installed_b7000),
            "--api-url",
            github.api_url,
            "--backend",
            "vulkan",
            "--json",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0, payload
    assert payload["update_available"] is False and payload["applied"] is False
    assert "vulkan" in payload["reason"]
    assert github.requests_to("blob", "llama-b7001-bin-ubuntu-x64.tar.gz") == []
    frozen.assert_intact("b7000", staging_empty=True)


def test_malformed_jitter_is_bad_input(
    installed_b7000: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, payload = check(capsys, installed_b7000, github, "--jitter", "soon")
    assert code == 2 and payload["error"]["code"] == "bad_input"
