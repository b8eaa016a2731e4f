"""download_asset and check_free_space against a real local GitHub-like server."""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llama_runtime import CancelledError, DiskSpaceError, RemoteError
from llama_runtime.errors import DigestMismatchError, NetworkError, SizeMismatchError
from llama_runtime.updater.fetch.cache import check_free_space, human_size
from llama_runtime.updater.fetch.download import DownloadResult, download_asset
from llama_runtime.updater.fetch.partial import PartialOrigin, Resume, plan_resume, sidecar_path
from llama_runtime.updater.release.release import Asset, parse_asset
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.sources.source import AssetHost, PlainHttp
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import REPO, Sleeps

NAME = "llama-b7000-bin-ubuntu-x64.tar.gz"
MiB = 1024 * 1024
PAYLOAD = os.urandom(3 * MiB + 12345)  # not a multiple of any chunk size


def publish(github: FakeGitHub, data: bytes = PAYLOAD, *, digests: bool = True) -> Asset:
    release = github.add_release(REPO, "b7000", {NAME: data}, digests=digests)
    return parse_asset(release["assets"][0])


def fetch(
    source: AssetHost,
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


def test_with_a_token_the_api_asset_url_gets_it_and_the_blob_host_never_does(
    github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github)
    fetch(api(github, token="s3cret"), asset, tmp_path / "a.partial")
    (redirect,) = github.requests_to("api", "/releases/assets/")
    (blob,) = github.requests_to("blob")
    assert redirect.status == 302
    assert redirect.headers["authorization"] == "Bearer s3cret"
    assert redirect.headers["accept"] == "application/octet-stream"
    assert "authorization" not in blob.headers
    assert "localhost" in blob.headers["host"]
    assert not github.requests_to("api", "/dl/")


def test_private_repository_downloads_through_the_api_asset_url_with_the_token(tmp_path: Path) -> None:
    with FakeGitHub(token="s3cret") as github:
        github.set_private(REPO)
        asset = publish(github)
        # Without the token the repository does not exist (GitHub answers 404, not 403).
        with pytest.raises(RemoteError):
            GitHubClient(github.api_url, REPO, sleep=Sleeps()).get_release("b7000")
        # browser_download_url takes no token: the web URL of a private asset is refused.
        with pytest.raises(RemoteError):
            fetch(PlainHttp(httpx.Client()), asset, tmp_path / "web.partial")
        result = fetch(api(github, token="s3cret"), asset, tmp_path / "a.partial")
    assert result.digest_verified and (tmp_path / "a.partial").read_bytes() == PAYLOAD
    (blob,) = [r for r in github.requests_to("blob") if r.status == 200]
    assert "authorization" not in blob.headers


def test_complete_response_shorter_than_published_size_is_integrity_not_network(
    github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(short_by=100, times=None))
    sleeps = Sleeps()
    with pytest.raises(SizeMismatchError, match="arrived complete but") as err:
        fetch(api(github), asset, tmp_path / "a.partial", sleeps=sleeps)
    assert err.value.exit_code == 8
    assert sleeps.calls == []  # no retry: the same server would send the same wrong file
    assert len(github.requests_to("blob")) == 1
    assert not (tmp_path / "a.partial").exists()


def test_complete_response_longer_than_published_size_is_integrity(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    github.inject(NAME, Fault(extra_bytes=10, times=None))
    with pytest.raises(SizeMismatchError) as err:
        fetch(api(github), asset, tmp_path / "a.partial")
    assert err.value.exit_code == 8
    assert not (tmp_path / "a.partial").exists()


def test_plain_httpx_client_downloads_without_any_authorization(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, b"small file")
    with httpx.Client() as http:
        result = fetch(PlainHttp(http), asset, tmp_path / "a.partial")
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
    with pytest.raises(RemoteError, match="redirected in a loop") as err:
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


def test_free_space_check_passes_when_enough_and_names_both_sizes_when_not(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    check_free_space(tmp_path, 1)  # room for a byte: no error
    with pytest.raises(DiskSpaceError) as caught:
        check_free_space(tmp_path, free * 2 + 10**12)
    assert caught.value.exit_code == 4 and human_size(free * 2 + 10**12) in caught.value.message


@pytest.mark.parametrize(
    ("size", "text"),
    [(999, "999 B"), (312_000_000, "312 MB"), (1_500_000_000, "1.5 GB"), (15_876_053, "16 MB")],
)
def test_human_size_uses_decimal_units(size: int, text: str) -> None:
    assert human_size(size) == text


# --- partial files never mix two uploads (sidecar + If-Range) -------------------------------

CDN = "https://cdn.example/asset.tar.gz"  # served by httpx.MockTransport: no socket at all


class Upload(httpx.SyncByteStream):
    """A body sent in 64 KiB pieces that can fail after ``fail_after`` bytes like a reset."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self.data = data
        self.fail_after = fail_after

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), 64 * 1024):
            if self.fail_after is not None and start >= self.fail_after:
                raise httpx.ReadError("connection reset by peer")
            yield self.data[start : start + 64 * 1024]


class Cdn:
    """An asset host with a strong ETag that honours If-Range the way GitHub's CDN does."""

    def __init__(self, data: bytes, etag: str = '"upload-1"', *, honours_if_range: bool = True) -> None:
        self.data = data
        self.etag = etag
        self.last_modified = "Mon, 02 Jun 2025 10:00:00 GMT"
        self.honours_if_range = honours_if_range
        self.fail_after: int | None = None
        self.extra_headers: dict[str, str] = {}
        self.requests: list[httpx.Request] = []

    def client(self) -> PlainHttp:
        return PlainHttp(httpx.Client(transport=httpx.MockTransport(self.handle)))

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        headers = {"ETag": self.etag, "Last-Modified": self.last_modified, **self.extra_headers}
        wanted = request.headers.get("range", "")
        if_range = request.headers.get("if-range")
        same = if_range is None or if_range in (self.etag, self.last_modified) or not self.honours_if_range
        start = int(wanted[6:-1]) if wanted.startswith("bytes=") and same else 0
        body = self.data[start:]
        headers["Content-Length"] = str(len(body))
        fail_after, self.fail_after = self.fail_after, None
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(self.data) - 1}/{len(self.data)}"
            return httpx.Response(206, headers=headers, stream=Upload(body, fail_after))
        return httpx.Response(200, headers=headers, stream=Upload(body, fail_after))


def cdn_asset(data: bytes, sha256: str | None = None) -> Asset:
    digest = f"sha256:{sha256}" if sha256 else None
    return Asset(name=NAME, size=len(data), download_url=CDN, digest=digest)


def started_partial(cdn: Cdn, asset: Asset, dest: Path, cut: int) -> None:
    """Leave ``dest`` as an interrupted download of ``cdn``'s current upload."""
    cdn.fail_after = cut
    with pytest.raises(NetworkError):
        fetch(cdn.client(), asset, dest, attempts=1)
    assert dest.stat().st_size == cut


def test_undigested_partial_without_sidecar_is_discarded_not_resumed(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, digests=False)
    dest = tmp_path / "a.partial"
    dest.write_bytes(os.urandom(MiB))  # left by some earlier, unknown download
    result = fetch(api(github), asset, dest)
    (blob,) = github.requests_to("blob")
    assert "range" not in blob.headers
    assert (result.resumed_from, dest.read_bytes()) == (0, PAYLOAD)


def test_complete_undigested_partial_is_fetched_again_not_trusted(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, digests=False)
    dest = tmp_path / "a.partial"
    dest.write_bytes(os.urandom(len(PAYLOAD)))  # right size, other upload
    result = fetch(api(github), asset, dest)
    assert len(github.requests_to("blob")) == 1
    assert (result.resumed_from, dest.read_bytes()) == (0, PAYLOAD)


def test_undigested_partial_resumes_under_if_range_with_the_first_responses_etag(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD)
    started_partial(cdn, asset, dest, cut=MiB)
    result = fetch(cdn.client(), asset, dest)
    resumed = cdn.requests[-1]
    assert (resumed.headers["range"], resumed.headers["if-range"]) == (f"bytes={MiB}-", cdn.etag)
    assert (result.resumed_from, dest.read_bytes()) == (MiB, PAYLOAD)
    assert not sidecar_path(dest).exists()  # complete: nothing left to resume


def test_server_answering_200_to_if_range_restarts_from_zero(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD)
    started_partial(cdn, asset, dest, cut=MiB)
    cdn.data, cdn.etag = os.urandom(len(PAYLOAD)), '"upload-2"'  # re-uploaded under the same name
    result = fetch(cdn.client(), asset, dest)
    assert cdn.requests[-1].headers["if-range"] == '"upload-1"'
    assert (result.resumed_from, dest.read_bytes()) == (0, cdn.data)


def test_server_ignoring_if_range_cannot_splice_two_uploads(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD, honours_if_range=False), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD)
    started_partial(cdn, asset, dest, cut=MiB)
    cdn.data, cdn.etag = os.urandom(len(PAYLOAD)), '"upload-2"'
    result = fetch(cdn.client(), asset, dest)
    spliced, fresh = cdn.requests[-2:]
    assert spliced.headers["range"] == f"bytes={MiB}-"
    assert "range" not in fresh.headers
    assert (result.resumed_from, dest.read_bytes()) == (0, cdn.data)


def test_complete_undigested_partial_with_sidecar_refetches_its_last_byte(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD)
    started_partial(cdn, asset, dest, cut=MiB)
    with dest.open("ab") as fh:  # as if the rest landed and the process died before finishing
        fh.write(PAYLOAD[MiB:])
    result = fetch(cdn.client(), asset, dest)
    last = cdn.requests[-1]
    assert (last.headers["range"], last.headers["if-range"]) == (f"bytes={len(PAYLOAD) - 1}-", cdn.etag)
    assert (result.resumed_from, dest.read_bytes()) == (len(PAYLOAD) - 1, PAYLOAD)


def test_weak_etag_is_never_sent_and_last_modified_is_used_instead(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD, etag='W/"weak"'), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD)
    started_partial(cdn, asset, dest, cut=MiB)
    result = fetch(cdn.client(), asset, dest)
    assert cdn.requests[-1].headers["if-range"] == cdn.last_modified
    assert result.resumed_from == MiB


def test_sidecar_of_another_size_restarts_even_with_a_digest(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    dest = tmp_path / "a.partial"
    dest.write_bytes(PAYLOAD[:MiB])
    sidecar_path(dest).write_text(json.dumps({"url": asset.download_url, "size": asset.size + 1}))
    result = fetch(api(github), asset, dest)
    (blob,) = github.requests_to("blob")
    assert "range" not in blob.headers
    assert result.resumed_from == 0


def test_undigested_partial_started_from_another_url_restarts(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    started_partial(cdn, cdn_asset(PAYLOAD), dest, cut=MiB)
    elsewhere = Asset(name=NAME, size=len(PAYLOAD), download_url=CDN + "?fork=1")
    result = fetch(cdn.client(), elsewhere, dest)
    assert "range" not in cdn.requests[-1].headers
    assert result.resumed_from == 0


def test_digest_mismatch_deletes_the_sidecar_too(tmp_path: Path) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    asset = cdn_asset(PAYLOAD, sha256=hashlib.sha256(b"another file").hexdigest())
    with pytest.raises(DigestMismatchError):
        fetch(cdn.client(), asset, dest)
    assert not dest.exists() and not sidecar_path(dest).exists()


@pytest.mark.parametrize(
    ("on_disk", "origin", "has_digest", "expected"),
    [
        (MiB, None, True, Resume(MiB)),
        (MiB, None, False, Resume(0)),
        (MiB, PartialOrigin(CDN, 10 * MiB), False, Resume(0)),  # no validator: provenance unknown
        (MiB, PartialOrigin(CDN, 10 * MiB, etag='"e"'), False, Resume(MiB, '"e"')),
        (10 * MiB, PartialOrigin(CDN, 10 * MiB, etag='"e"'), False, Resume(10 * MiB - 1, '"e"')),
        (MiB, PartialOrigin(CDN, 9 * MiB, etag='"e"'), True, Resume(0)),
        (MiB, PartialOrigin("https://other/", 10 * MiB, etag='"e"'), True, Resume(MiB)),
        (11 * MiB, PartialOrigin(CDN, 10 * MiB, etag='"e"'), True, Resume(0)),
    ],
)
def test_plan_resume_keeps_only_bytes_of_a_provable_origin(
    on_disk: int, origin: PartialOrigin | None, has_digest: bool, expected: Resume
) -> None:
    assert plan_resume(on_disk, origin, url=CDN, size=10 * MiB, cap=10 * MiB, has_digest=has_digest) == expected


# --- bytes are stored exactly as sent --------------------------------------------------------


def test_download_asks_for_identity_encoding(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github)
    fetch(api(github), asset, tmp_path / "a.partial")
    assert all(r.headers["accept-encoding"] == "identity" for r in github.requests)


def test_tarball_labelled_content_encoding_gzip_is_stored_byte_for_byte(tmp_path: Path) -> None:
    tarball = gzip.compress(PAYLOAD)  # what a .tar.gz is; the host labels it as an encoding
    cdn, dest = Cdn(tarball), tmp_path / "a.partial"
    cdn.extra_headers = {"Content-Encoding": "gzip"}
    result = fetch(cdn.client(), cdn_asset(tarball, sha256=hashlib.sha256(tarball).hexdigest()), dest)
    assert (result.digest_verified, dest.read_bytes()) == (True, tarball)


def test_gzip_labelled_body_resumes_at_the_raw_byte_offset(tmp_path: Path) -> None:
    tarball = gzip.compress(PAYLOAD)
    cdn, dest = Cdn(tarball), tmp_path / "a.partial"
    cdn.extra_headers = {"Content-Encoding": "gzip"}
    asset = cdn_asset(tarball, sha256=hashlib.sha256(tarball).hexdigest())
    started_partial(cdn, asset, dest, cut=MiB)
    result = fetch(cdn.client(), asset, dest)
    assert (result.resumed_from, dest.read_bytes()) == (MiB, tarball)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_deletes_the_partial_and_its_sidecar_and_stays_an_os_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    cdn, dest = Cdn(PAYLOAD), tmp_path / "a.partial"
    on_disk_when_full: list[bool] = []

    def full(*_args: object) -> int:
        on_disk_when_full.append(dest.exists() and sidecar_path(dest).exists())
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("llama_runtime.updater.fetch.download._Job._stream", full)
    with pytest.raises(OSError) as caught:
        fetch(cdn.client(), cdn_asset(PAYLOAD), dest)
    assert caught.value.errno == code
    assert on_disk_when_full == [True]
    assert not dest.exists() and not sidecar_path(dest).exists()
