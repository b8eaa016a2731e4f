"""GitHubClient against a real local HTTP server that answers like GitHub."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime import RemoteError
from llama_runtime.errors import NetworkError, RateLimitError, ReleaseNotFoundError
from llama_runtime.updater.choice.decide import build_number
from llama_runtime.updater.sources.github import GitHubClient, JsonFileEtagCache
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import REPO, Sleeps

TAGS_PATH = f"/api/repos/{REPO}/releases/tags"
LIST_PATH = f"/api/repos/{REPO}/releases"


def client(github: FakeGitHub, **kwargs: object) -> GitHubClient:
    return GitHubClient(github.api_url, REPO, sleep=Sleeps(), **kwargs)  # type: ignore[arg-type]


def test_release_by_tag_returns_assets_with_size_and_digest(github: FakeGitHub) -> None:
    published = github.add_release(REPO, "b7000", {"llama-b7000-bin-ubuntu-x64.tar.gz": b"x" * 1234})
    release = client(github).get_release("b7000")
    assert release.tag == "b7000"
    (asset,) = release.assets
    assert asset.size == 1234
    assert asset.digest == published["assets"][0]["digest"]
    assert asset.sha256 is not None and len(asset.sha256) == 64
    assert asset.download_url.startswith(github.base_url + "/dl/")


def test_requests_carry_github_headers_and_user_agent(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    client(github).get_release("b7000")
    (req,) = github.requests_to("api", TAGS_PATH)
    assert req.headers["user-agent"].startswith("llama-runtime/")
    assert req.headers["accept"] == "application/vnd.github+json"
    assert req.headers["x-github-api-version"] == "2022-11-28"
    assert "authorization" not in req.headers


def test_missing_tag_raises_release_not_found_without_retry(github: FakeGitHub) -> None:
    github.add_release(REPO, "b6999", {})
    with pytest.raises(ReleaseNotFoundError) as err:
        client(github).get_release("b7000")
    assert err.value.message == "Release b7000 not found in ggml-org/llama.cpp."
    assert err.value.exit_code == 7
    assert len(github.requests_to("api", "/releases/")) == 1  # and one GET /repos/… telling it exists
    # A GitHub-shaped answer (rate-limit headers) is not a mirror: the hint points at what exists.
    assert err.value.hint is not None and "mirror" not in err.value.hint
    assert "list --available" in err.value.hint


def test_nightly_picks_b10000_over_later_created_b9999(github: FakeGitHub) -> None:
    github.add_release(REPO, "b10000", {}, stable=False)
    github.add_release(REPO, "b9999", {}, stable=False)  # created later: GitHub's /latest would say b9999
    assert client(github).resolve("nightly").release.tag == "b10000"
    (only,) = github.requests_to("api")
    assert only.path == LIST_PATH and "per_page=10" in only.query


def test_stable_skips_drafts_and_prereleases(github: FakeGitHub) -> None:
    github.add_release(REPO, "b100", {})
    github.add_release(REPO, "b102", {}, draft=True)
    github.add_release(REPO, "b101", {}, prerelease=True)
    assert client(github).resolve().release.tag == "b100"


def test_stable_of_a_fork_is_releases_latest_in_one_request(github: FakeGitHub) -> None:
    fork = "unslothai/llama.cpp"
    github.add_release(fork, "b9000", {"llama-b9000-bin-ubuntu-x64.tar.gz": b"x"})
    github.add_release(fork, "b9596-mix-e6f2453", {"llama-b9596-mix-e6f2453-bin-ubuntu-x64.tar.gz": b"x"})
    api = GitHubClient(github.api_url, fork, sleep=Sleeps())
    assert api.resolve().release.tag == "b9596-mix-e6f2453"
    assert [r.path for r in github.requests_to("api")] == [f"/api/repos/{fork}/releases/latest"]


def test_latest_of_empty_repository_is_release_not_found(github: FakeGitHub) -> None:
    github.add_release("someone/else", "b1", {})
    github.set_default_branch(REPO, "master")  # the repository exists, without a release
    with pytest.raises(ReleaseNotFoundError, match=r"No releases found in ggml-org/llama\.cpp"):
        client(github).resolve()


def test_second_call_with_etag_cache_is_a_304_returning_the_same_release(github: FakeGitHub, tmp_path: Path) -> None:
    github.add_release(REPO, "b7000", {"a.zip": b"abc"})
    cache_file = tmp_path / "etags.json"
    first = client(github, etag_cache=JsonFileEtagCache(cache_file)).get_release("b7000")
    # A fresh client and cache object: the ETag must have survived on disk.
    second = client(github, etag_cache=JsonFileEtagCache(cache_file)).get_release("b7000")
    assert second == first
    statuses = [r.status for r in github.requests_to("api", TAGS_PATH)]
    assert statuses == [200, 304]
    assert github.requests_to("api")[1].headers["if-none-match"].startswith('W/"')


def test_changed_release_is_refetched_despite_etag_cache(github: FakeGitHub, tmp_path: Path) -> None:
    cache = JsonFileEtagCache(tmp_path / "etags.json")
    github.add_release(REPO, "b1", {})
    assert client(github, etag_cache=cache).resolve().release.tag == "b1"
    github.add_release(REPO, "b2", {})
    assert client(github, etag_cache=cache).resolve().release.tag == "b2"
    assert [r.status for r in github.requests_to("api", "/releases/latest")] == [200, 200]


def test_corrupt_etag_cache_file_is_treated_as_empty(github: FakeGitHub, tmp_path: Path) -> None:
    cache_file = tmp_path / "etags.json"
    cache_file.write_text("{not json")
    github.add_release(REPO, "b7000", {})
    assert client(github, etag_cache=JsonFileEtagCache(cache_file)).get_release("b7000").tag == "b7000"
    assert "if-none-match" not in github.requests_to("api")[0].headers


def test_rate_limit_403_names_reset_time_and_token_hint_without_retry(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=403, rate_limited=True))
    api = client(github)
    with pytest.raises(RateLimitError) as err:
        api.get_release("b7000")
    assert err.value.reset_at is not None
    local = time.strftime("%H:%M:%S on %Y-%m-%d", time.localtime(err.value.reset_at))
    assert local in err.value.message
    # The fake is not api.github.com: only LLAMA_RUNTIME_GITHUB_TOKEN would be sent to it.
    assert err.value.hint is not None and err.value.hint.startswith("Set LLAMA_RUNTIME_GITHUB_TOKEN to send")
    assert "60 to 5,000" not in err.value.hint  # api.github.com's figures, not this origin's
    assert len(github.requests_to("api")) == 1
    assert api.last_rate_limit is not None and api.last_rate_limit.remaining == 0


def test_rate_limit_429_with_retry_after_reports_the_wait(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=429, retry_after=37))
    with pytest.raises(RateLimitError, match="retry after 37 seconds") as err:
        client(github).get_release("b7000")
    assert err.value.retry_after == 37


@pytest.mark.parametrize("status", [403, 429])
def test_secondary_rate_limit_with_quota_left_waits_a_minute_without_a_second_request(
    github: FakeGitHub, status: int
) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=status, secondary=True, times=None))
    sleeps = Sleeps()
    with pytest.raises(RateLimitError, match=r"secondary rate limit.*at least 60 seconds") as err:
        GitHubClient(github.api_url, REPO, sleep=sleeps).get_release("b7000")
    assert err.value.retry_after == 60 and err.value.exit_code == 7
    (only,) = github.requests_to("api")
    assert only.status == status and sleeps.calls == []


def test_plain_403_is_a_remote_error_not_a_rate_limit(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=403))
    with pytest.raises(RemoteError) as err:
        client(github).get_release("b7000")
    assert not isinstance(err.value, RateLimitError)


def test_bad_token_401_is_reported_and_not_retried(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=401))
    with pytest.raises(RemoteError, match="rejected the token"):
        client(github, token="bad").get_release("b7000")
    assert len(github.requests_to("api")) == 1


def test_token_is_sent_as_bearer_to_the_api_origin_only(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    api = client(github, token="s3cret")
    api.get_release("b7000")
    assert github.requests_to("api")[0].headers["authorization"] == "Bearer s3cret"
    assert api.auth_headers_for(github.blob_url + "/blob/1/x") == {}
    assert api.auth_headers_for("https://api.github.com/repos") == {}


def test_server_errors_are_retried_with_backoff_then_succeed(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=500, times=2))
    sleeps = Sleeps()
    release = GitHubClient(github.api_url, REPO, sleep=sleeps).get_release("b7000")
    assert release.tag == "b7000"
    assert [r.status for r in github.requests_to("api")] == [500, 500, 200]
    assert sleeps.calls == [1.0, 2.0]


def test_persistent_server_errors_become_network_error_after_three_attempts(
    github: FakeGitHub,
) -> None:
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=502, times=None))
    with pytest.raises(NetworkError, match="HTTP 502"):
        client(github).get_release("b7000")
    assert len(github.requests_to("api")) == 3


def test_html_instead_of_json_is_a_remote_error_naming_the_type(github: FakeGitHub) -> None:
    github.inject(f"{TAGS_PATH}/b7000", Fault(status=200, html=True))
    with pytest.raises(RemoteError) as err:
        client(github).get_release("b7000")
    assert err.value.message == ("GitHub answered with something that is not release data (text/html).")


def test_unreachable_api_is_a_network_error_not_an_httpx_exception() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps = Sleeps()
    api = GitHubClient(f"http://127.0.0.1:{port}/api", REPO, sleep=sleeps)
    with pytest.raises(NetworkError, match="Could not connect to the API at"):
        api.get_release("b1")
    assert len(sleeps.calls) == 2


def test_api_redirect_loop_is_a_remote_error(github: FakeGitHub) -> None:
    github.add_release(REPO, "b7000", {})
    github.inject(f"{TAGS_PATH}/b7000", Fault(redirect_loop=True, times=None))
    with pytest.raises(RemoteError, match="redirected in a loop"):
        client(github).get_release("b7000")


@pytest.mark.parametrize(("tag", "number"), [("b9999", 9999), ("b10000", 10000), ("v1", None)])
def test_build_number_is_numeric_not_lexical(tag: str, number: int | None) -> None:
    assert build_number(tag) == number


def test_the_etag_cache_drops_its_oldest_entries_past_its_size_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.updater.sources import github as etag_cache

    monkeypatch.setattr(etag_cache, "MAX_CACHE_BYTES", 2000)
    cache = JsonFileEtagCache(tmp_path / "etags.json")
    for n in range(10):
        cache.put(f"https://x/{n}", f"e{n}", "y" * 300)
    assert cache.get("https://x/9") == ("e9", "y" * 300) and cache.get("https://x/0") is None
    assert (tmp_path / "etags.json").stat().st_size < 2000 * 2  # bounded (pretty-printed on disk)


def test_an_api_answer_dripped_past_its_deadline_is_a_network_error_not_a_held_lock() -> None:
    import httpx

    from llama_runtime.errors import NetworkError
    from llama_runtime.updater.net.body import read_capped

    sent: list[bytes] = []

    def drip() -> Iterator[bytes]:
        for _ in range(50):
            time.sleep(0.05)
            sent.append(b" ")
            yield b" "

    with pytest.raises(NetworkError, match=r"longer than 0\.3 s to send an answer"):
        read_capped(httpx.Response(200, content=drip()), what="an answer", deadline_s=0.3)
    assert len(sent) < 50  # it gave up at the deadline instead of reading the whole drip
