"""A slow drip never holds the update forever.

One byte every few seconds used to keep an update (and its lock) alive with no
end: httpx's read timeout only bounds the wait for the next byte. A download
now has a minimum rate and an overall deadline (``fetch/partial.py``); below
either it ends with exit 7, keeps its bytes for a resume, releases the lock,
and leaves the previous runtime active and running.

(The pace module is imported inside the unit tests so the end-to-end ones
also run against code from before the fix.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_runtime.runtime.errors import UserInputError
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
    from llama_runtime.updater.fetch.partial import DownloadPace

    with pytest.raises(UserInputError) as err:
        DownloadPace.from_env({"LLAMA_RUNTIME_DOWNLOAD_DEADLINE": value})
    assert "LLAMA_RUNTIME_DOWNLOAD_DEADLINE" in err.value.message


def test_defaults_and_overrides() -> None:
    from llama_runtime.updater.fetch.partial import DownloadPace

    assert DownloadPace.from_env({}) == DownloadPace()
    assert DownloadPace.from_env({"LLAMA_RUNTIME_MIN_RATE": "0"}).min_rate == 0
