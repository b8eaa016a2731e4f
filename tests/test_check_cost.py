"""What one scheduled check costs against a server shaped like today's upstream.

Measured, not assumed: :attr:`FakeGitHub.quota_used` counts requests the way
GitHub does (a 304 is free only with an Authorization header; download counts
are in the JSON, so a downloaded asset changes its release's ETag). The
numbers asserted here are the ones README and docs/benchmarks.md state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, publish_stand_in, run_json


def check(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *args: str) -> dict[str, object]:
    code, payload = run_json(capsys, home, github.api_url, "check", *args)
    assert code == 0, payload
    return dict(payload)


def update(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *args: str) -> None:
    code, payload = run_json(capsys, home, github.api_url, "update", *args)
    assert code == 0, payload


class Cost:
    """API quota used and HTTP requests sent since the last reading."""

    def __init__(self, github: FakeGitHub) -> None:
        self.github = github
        self.mark()

    def mark(self) -> None:
        self.quota, self.requests = self.github.quota_used, len(self.github.requests)

    def take(self) -> tuple[int, int]:
        spent = (self.github.quota_used - self.quota, len(self.github.requests) - self.requests)
        self.mark()
        return spent


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_runtime.updater.choice import host_detect as host_module
    from llama_runtime.updater.choice.host import HostFacts

    monkeypatch.setattr(host_module, "detect_host", lambda: HostFacts(os="linux", arch="x64"))


def test_stable_check_costs_one_request_when_nothing_is_new_and_two_when_something_is(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")
    update(capsys, home, github)
    cost = Cost(github)
    assert check(capsys, home, github)["update_available"] is False
    # /releases/latest (200: the nightly-tag.txt download changed its download_count,
    # so its ETag); the pointer is cached; the build is the installed one: no more.
    assert cost.take() == (1, 1)
    assert check(capsys, home, github)["update_available"] is False
    assert cost.take() == (1, 1)  # a 304, but unauthenticated: GitHub still counts it
    publish_stand_in(github, tmp_path, "b7001")  # v0.2.0
    result = check(capsys, home, github)
    assert (result["latest"], result["latest_version"], result["update_available"]) == ("b7001", "v0.2.0", True)
    # /releases/latest + tags/b7001 on the quota; nightly-tag.txt is a web download
    # (302 + blob: two HTTP requests, no quota).
    assert cost.take() == (2, 4)


def test_with_a_token_an_unchanged_stable_check_is_free(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeGitHub(token="s3cret") as github:
        monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "s3cret")
        monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
        publish_stand_in(github, tmp_path, "b7000")
        update(capsys, home, github)
        check(capsys, home, github)  # takes the ETag after the install's downloads
        cost = Cost(github)
        assert check(capsys, home, github)["update_available"] is False
        assert cost.take() == (0, 1)  # an authorised 304


def test_nightly_check_costs_one_small_page_either_way(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000", stable=False)
    update(capsys, home, github, "--channel", "nightly")
    cost = Cost(github)
    assert check(capsys, home, github)["update_available"] is False
    assert cost.take() == (1, 1)
    publish_stand_in(github, tmp_path, "b7001", stable=False)
    assert check(capsys, home, github)["update_available"] is True
    assert cost.take() == (1, 1)
    (last,) = github.requests[-1:]
    assert "per_page=10" in last.query


def test_stable_check_mid_release_costs_three_requests_and_four_when_its_fallback_is_new(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7000")  # v0.1.0
    update(capsys, home, github)
    publish_stand_in(github, tmp_path, "b7001", stable=False)
    github.cut_version(REPO, "v0.1.1", "b7001")  # a patch release
    publish_stand_in(github, tmp_path, "b7002", stable=False)
    github.cut_version(REPO, "v0.2.0", "b7002", pointer=False)  # make-release.yml: the release before its file
    warning = "v0.2.0 has no nightly-tag.txt yet (a release in progress?); using v0.1.1 → b7001"
    cost = Cost(github)
    result = check(capsys, home, github)
    assert (result["latest"], result["latest_version"], result["update_available"]) == ("b7001", "v0.1.1", True)
    assert result["warnings"] == [warning]
    # /releases/latest, git/matching-refs/tags/v, /releases/tags/v0.1.1, /releases/tags/b7001 on
    # the quota; v0.1.1's nightly-tag.txt is a web download (302 + blob, no quota).
    assert cost.take() == (4, 6)
    update(capsys, home, github)
    cost.mark()
    for _ in range(2):
        result = check(capsys, home, github)
        assert (result["latest"], result["update_available"], result["warnings"]) == ("b7001", False, [warning])
        assert cost.take() == (3, 3)  # the same three; the pointer is cached and b7001 is the installed build


def test_with_a_token_an_unchanged_mid_release_check_is_free(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeGitHub(token="s3cret") as github:
        monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "s3cret")
        monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
        publish_stand_in(github, tmp_path, "b7000")
        update(capsys, home, github)
        github.cut_version(REPO, "v0.2.0", "b7000", pointer=False)
        check(capsys, home, github)  # takes the ETags
        cost = Cost(github)
        assert check(capsys, home, github)["warnings"] != []
        assert cost.take() == (0, 3)  # three authorised 304s: the tags change only when a release is cut
