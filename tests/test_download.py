"""download_asset and check_free_space against a real local GitHub-like server."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import httpx
import pytest

from runtime.errors import (
    CancelledError,
    DigestMismatchError,
    DiskSpaceError,
    NetworkError,
    RemoteError,
    SizeMismatchError,
)
from tests.conftest import Sleeps
from tests.fakegithub import FakeGitHub, Fault
from updater.download import DownloadResult, check_free_space, download_asset, human_size
from updater.github import GitHubClient
from updater.release import Asset, parse_asset

REPO = "ggml-org/llama.cpp"
NAME = "llama-b7000-bin-ubuntu-x64.tar.gz"
MiB = 1024 * 1024
PAYLOAD = os.urandom(3 * MiB + 12345)  # not a multiple of any chunk size


def publish(github: FakeGitHub, data: bytes = PAYLOAD, *, digests: bool = True) -> Asset:
    release = github.add_release(REPO, "b7000", {NAME: data}, digests=digests)
    return parse_asset(release["assets"][0])


def fetch(
    source: GitHubClient | httpx.Client,
    asset: Asset,
    dest: Path,
    *,
    max_bytes: int = 100 * MiB,
    sleeps: Sleeps | None = None,
    **kwargs: object,
) -> DownloadResult:
    return download_asset(
        source,
        asset,
        dest,
        max_bytes=max_bytes,
        expected_size=asset.size,
        expected_sha256=asset.sha256,
        sleep=sleeps or Sleeps(),
        **kwargs,  # type: ignore[arg-type]
    )


def api(github: FakeGitHub, **kwargs: object) -> GitHubClient:
    return GitHubClient(github.api_url, REPO, sleep=Sleeps(), **kwargs)  # type: ignore[arg-type]


def test_download_follows_redirect_and_verifies_digest(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    dest = tmp_path / "asset.partial"
    seen: list[tuple[int, int | None]] = []
    result = fetch(api(github), asset, dest, progress=lambda done, total: seen.append((done, total)))
    assert dest.read_bytes() == PAYLOAD
    assert result.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert (result.size, result.resumed_from, result.digest_verified) == (len(PAYLOAD), 0, True)
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert github.download_bytes_sent == len(PAYLOAD)


def test_token_reaches_download_url_on_api_origin_but_never_the_blob_host(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    fetch(api(github, token="s3cret"), asset, tmp_path / "a.partial")
    (redirect,) = github.requests_to("api", "/dl/")
    (blob,) = github.requests_to("blob")
    assert redirect.status == 302
    assert redirect.headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in blob.headers
    assert "localhost" in blob.headers["host"]


def test_plain_httpx_client_downloads_without_any_authorization(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"small file")
    with httpx.Client() as http:
        result = fetch(http, asset, tmp_path / "a.partial")
    assert result.size == len(b"small file")
    assert all("authorization" not in r.headers for r in github.requests)


def test_asset_without_published_digest_is_size_checked_only(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"old asset", digests=False)
    result = fetch(api(github), asset, tmp_path / "a.partial")
    assert (result.digest_verified, result.size) == (False, len(b"old asset"))


def test_digest_mismatch_deletes_the_partial_file(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(wrong_bytes=True))
    dest = tmp_path / "a.partial"
    with pytest.raises(DigestMismatchError) as err:
        fetch(api(github), asset, dest)
    assert err.value.exit_code == 8
    assert not dest.exists()
    assert len(github.requests_to("blob")) == 1  # an integrity failure is not retried


def test_asset_larger_than_cap_stops_reading_and_deletes(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    dest = tmp_path / "a.partial"
    with pytest.raises(SizeMismatchError, match=r"exceeds the download cap of 1\.0 MB"):
        fetch(api(github), asset, dest, max_bytes=1_000_000)
    assert not dest.exists()


def test_body_longer_than_published_size_is_refused(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"x" * 5000)
    github.inject(NAME, Fault(extra_bytes=MiB))
    dest = tmp_path / "a.partial"
    with pytest.raises(SizeMismatchError, match="larger than its published size of 5000 bytes"):
        fetch(api(github), asset, dest)
    assert not dest.exists()


def test_truncated_body_resumes_with_range_from_the_bytes_on_disk(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    cut = 2 * MiB + 777
    github.inject(NAME, Fault(truncate_after_bytes=cut))
    sleeps = Sleeps()
    result = fetch(api(github), asset, tmp_path / "a.partial", sleeps=sleeps)
    first, second = github.requests_to("blob")
    assert "range" not in first.headers
    assert second.headers["range"] == f"bytes={cut}-"
    assert second.status == 206
    assert result.resumed_from == cut
    assert result.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert github.download_bytes_sent == len(PAYLOAD)  # nothing fetched twice
    assert sleeps.calls == [1.0]


def test_connection_reset_mid_body_resumes_and_completes(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(reset_after_bytes=2 * MiB))
    result = fetch(api(github), asset, tmp_path / "a.partial")
    _first, second = github.requests_to("blob")
    resumed = result.resumed_from
    assert 0 < resumed <= 2 * MiB
    assert second.headers["range"] == f"bytes={resumed}-"
    assert result.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert github.download_bytes_sent <= len(PAYLOAD) + 2 * MiB


def test_truncated_body_without_retries_keeps_partial_for_the_next_run(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(truncate_after_bytes=MiB))
    dest = tmp_path / "a.partial"
    with pytest.raises(NetworkError) as err:
        fetch(api(github), asset, dest, attempts=1)
    assert err.value.exit_code == 7
    assert dest.read_bytes() == PAYLOAD[:MiB]
    result = fetch(api(github), asset, dest)
    assert result.resumed_from == MiB
    assert dest.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_from_zero(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    dest = tmp_path / "a.partial"
    dest.write_bytes(b"garbage that is not the asset prefix")
    github.inject(NAME, Fault(ignore_range=True))
    result = fetch(api(github), asset, dest)
    (blob,) = github.requests_to("blob")
    assert blob.headers["range"] == "bytes=36-"
    assert blob.status == 200
    assert result.resumed_from == 0
    assert dest.read_bytes() == PAYLOAD


def test_partial_larger_than_the_asset_is_discarded(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"tiny")
    dest = tmp_path / "a.partial"
    dest.write_bytes(b"much longer than the asset")
    result = fetch(api(github), asset, dest)
    assert "range" not in github.requests_to("blob")[0].headers
    assert result.size == 4


def test_complete_partial_is_verified_without_downloading(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"done already")
    dest = tmp_path / "a.partial"
    dest.write_bytes(b"done already")
    result = fetch(api(github), asset, dest)
    assert result.resumed_from == len(b"done already")
    assert github.requests == []


def test_blob_server_errors_are_retried_with_backoff(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(status=500, times=2))
    sleeps = Sleeps()
    result = fetch(api(github), asset, tmp_path / "a.partial", sleeps=sleeps)
    assert result.size == len(PAYLOAD)
    assert sleeps.calls == [1.0, 2.0]


def test_missing_asset_is_a_remote_error_without_retry(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(status=404))
    with pytest.raises(RemoteError, match="HTTP 404") as err:
        fetch(api(github), asset, tmp_path / "a.partial")
    assert not isinstance(err.value, NetworkError)
    assert len(github.requests) == 1


def test_slow_drip_past_read_timeout_is_a_network_error(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(drip_seconds=1.0, drip_chunk=4096, times=None))
    slow = api(github, timeout=httpx.Timeout(5.0, read=0.1))
    dest = tmp_path / "a.partial"
    with pytest.raises(NetworkError, match="ReadTimeout"):
        fetch(slow, asset, dest)
    assert len(github.requests_to("blob")) == 3
    assert dest.exists()  # kept for a later resume


def test_redirect_loop_is_a_remote_error(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(redirect_loop=True, times=None))
    with pytest.raises(RemoteError, match="redirect loop") as err:
        fetch(api(github), asset, tmp_path / "a.partial")
    assert not isinstance(err.value, NetworkError)
    assert github.requests_to("blob") == []


def test_cancel_stops_the_download_and_keeps_the_partial(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    dest = tmp_path / "a.partial"
    progressed: list[int] = []
    with pytest.raises(CancelledError) as err:
        fetch(
            api(github),
            asset,
            dest,
            progress=lambda done, total: progressed.append(done),
            cancel=lambda: bool(progressed),
        )
    assert err.value.exit_code == 130
    assert dest.stat().st_size == progressed[-1] < len(PAYLOAD)


def test_free_space_shortfall_names_need_have_and_directory(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    target = tmp_path / "staging" / "not-yet-created"
    with pytest.raises(DiskSpaceError) as err:
        check_free_space(target, free + 10**15, what="llama.cpp b7000")
    assert err.value.exit_code == 4
    assert err.value.message.startswith("Not enough disk space to install llama.cpp b7000: need ")
    assert f"in {target}." in err.value.message


def test_free_space_check_passes_when_enough(tmp_path: Path) -> None:
    check_free_space(tmp_path, 1)


@pytest.mark.parametrize(
    ("size", "text"),
    [(999, "999 B"), (312_000_000, "312 MB"), (1_500_000_000, "1.5 GB"), (15_876_053, "16 MB")],
)
def test_human_size_uses_decimal_units(size: int, text: str) -> None:
    assert human_size(size) == text
