"""fetch_asset: one pass (extract while downloading), parallel ranges, and their fallbacks.

Against the GitHub-like server on 127.0.0.1 with real archives; no timing is asserted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from llama_runtime import CancelledError, UserInputError
from llama_runtime.errors import DigestMismatchError, UnsafeArchiveError
from llama_runtime.updater.config import download_parallelism
from llama_runtime.updater.fetch.download import GrowingFile, StreamRestarted
from llama_runtime.updater.fetch.ranges import contiguous, data_path, plan_spans, state_path
from llama_runtime.updater.release.release import Asset, parse_asset
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.stage.archive import extract_archive
from llama_runtime.updater.stage.streaming import Fetched, FetchOptions, fetch_asset
from tests.archives import TAR_HOSTILE_KINDS, build_hostile_tar, build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import REPO, Sleeps, stand_in_server

NAME = "llama-b7000-bin-ubuntu-x64.tar.gz"
MiB = 1024 * 1024
#: Small enough for fast tests: ranges are forced with a low threshold instead of big assets.
RANGES = FetchOptions(parallel=4, min_parallel_bytes=1)
ONE_STREAM = FetchOptions(parallel=1)


def big_tarball(path: Path, size: int = 3 * MiB) -> Path:
    """A release-layout tarball with a stand-in server and ``size`` incompressible bytes."""
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(), "libggml.so": os.urandom(size)}
    return build_release_archive(path, "tar-tagdir", files, symlinks={"libggml.so.0": "libggml.so"})


def publish(github: FakeGitHub, archive: Path, name: str = NAME) -> Asset:
    release = github.add_release(REPO, "b7000", {name: archive})
    return parse_asset(release["assets"][0])


def api(github: FakeGitHub) -> GitHubClient:
    return GitHubClient(github.api_url, REPO, sleep=Sleeps())


def run(
    github: FakeGitHub, asset: Asset, tmp_path: Path, options: FetchOptions, **kwargs: object
) -> tuple[Fetched, Path]:
    partial, unpack = tmp_path / "dl" / "a.part", tmp_path / "dl" / "a.part.unpacking"
    partial.parent.mkdir(exist_ok=True)
    fetched = fetch_asset(
        api(github),
        asset,
        partial,
        cache=None,
        staging=unpack,
        max_bytes=asset.size,
        options=options,
        **kwargs,  # type: ignore[arg-type]
    )
    return fetched, unpack


def same_as_two_pass(archive: Path, fetched: Fetched, unpack: Path, tmp_path: Path) -> None:
    reference = extract_archive(archive, tmp_path / "reference")
    assert fetched.extracted is not None
    assert fetched.extracted.files == reference.files
    assert fetched.extracted.symlinks == reference.symlinks
    assert (unpack / "llama-b7000" / "llama-server").read_bytes() == stand_in_server()


# -- one pass -----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [ONE_STREAM, RANGES], ids=["one-stream", "ranges"])
def test_tarball_is_extracted_while_it_downloads_to_the_same_tree_as_two_passes(
    github: FakeGitHub, tmp_path: Path, options: FetchOptions
) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)

    fetched, unpack = run(github, asset, tmp_path, options)

    assert fetched.download.digest_verified
    assert fetched.download.path.read_bytes() == archive.read_bytes()
    same_as_two_pass(archive, fetched, unpack, tmp_path)
    assert github.download_bytes_sent == asset.size  # each byte crossed the network once


def test_extraction_overlaps_the_transfer(github: FakeGitHub, tmp_path: Path) -> None:
    # Bigger than the reader's 1 MiB buffers, so half of it is more than they hold back.
    archive = big_tarball(tmp_path / "a.tar.gz", size=4 * MiB)
    asset = publish(github, archive)
    server = tmp_path / "dl" / "a.part.unpacking" / "llama-b7000" / "llama-server"
    written_mid_download: list[bool] = []

    def progress(done: int, total: int | None) -> None:
        # The download waits here, half-way: only an extraction running alongside it can
        # write the first member now (the bound is generous; nothing is timed).
        if not written_mid_download and total is not None and total // 2 <= done < total:
            deadline = time.monotonic() + 30
            while not server.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            written_mid_download.append(server.exists())

    fetched, _ = run(github, asset, tmp_path, ONE_STREAM, progress=progress)

    assert fetched.extracted is not None
    assert written_mid_download == [True], "no member was written before the download finished"


@pytest.mark.parametrize("kind", [k for k in TAR_HOSTILE_KINDS if k != "too_many_members"])
def test_hostile_member_stops_the_streamed_extraction_and_nothing_is_kept(
    github: FakeGitHub, tmp_path: Path, kind: str
) -> None:
    asset = publish(github, build_hostile_tar(tmp_path / "x.tar.gz", kind))
    before = set(os.listdir(tmp_path))

    with pytest.raises(UnsafeArchiveError):
        run(github, asset, tmp_path, ONE_STREAM)

    assert list((tmp_path / "dl").iterdir()) == []  # no staging, no download kept
    assert set(os.listdir(tmp_path)) - before == {"dl"}
    assert not any("escaped" in str(p) for p in tmp_path.rglob("*"))


def test_corrupted_bytes_are_a_digest_mismatch_not_an_unsafe_archive(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))
    github.inject(NAME, Fault(wrong_bytes=True, times=None))

    with pytest.raises(DigestMismatchError):
        run(github, asset, tmp_path, ONE_STREAM)

    assert list((tmp_path / "dl").iterdir()) == []


def test_resume_after_a_cut_still_extracts_in_one_pass(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    github.inject(NAME, Fault(reset_after_bytes=asset.size // 2))

    fetched, unpack = run(github, asset, tmp_path, ONE_STREAM)

    blobs = github.requests_to("blob")
    assert str([r.headers.get("range") for r in blobs][1]).startswith("bytes=")  # the retry resumed
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_resume_of_an_earlier_runs_partial_extracts_from_disk_and_network(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    github.inject(NAME, Fault(reset_after_bytes=asset.size // 3, times=3))  # every attempt of run 1 breaks
    with pytest.raises(Exception, match="kept for resuming"):
        run(github, asset, tmp_path, ONE_STREAM)
    assert not (tmp_path / "dl" / "a.part.unpacking").exists()

    fetched, unpack = run(github, asset, tmp_path, ONE_STREAM)

    assert fetched.download.resumed_from > 0
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_server_restarting_the_body_falls_back_to_extract_after_download(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))
    github.inject(NAME, Fault(reset_after_bytes=asset.size // 2))
    github.inject(NAME, Fault(ignore_range=True))  # the retry gets 200 from byte 0

    fetched, unpack = run(github, asset, tmp_path, ONE_STREAM)

    assert fetched.download.digest_verified
    assert fetched.extracted is None  # the caller extracts the finished file
    assert not unpack.exists()


def test_zip_named_like_a_tarball_is_left_to_extract_after_download(github: FakeGitHub, tmp_path: Path) -> None:
    archive = build_release_archive(tmp_path / "a.zip", "zip-root", {"llama-server.exe": b"MZ"})
    asset = publish(github, archive)

    fetched, unpack = run(github, asset, tmp_path, ONE_STREAM)

    assert fetched.extracted is None and not unpack.exists()
    assert fetched.download.path.read_bytes() == archive.read_bytes()


def test_cancel_during_a_streamed_extraction_keeps_the_partial_and_no_staging(
    github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))
    polls = iter(range(10_000))

    with pytest.raises(CancelledError):
        run(github, asset, tmp_path, ONE_STREAM, cancel=lambda: next(polls) > 20)

    assert [p.name for p in (tmp_path / "dl").iterdir() if p.name.endswith(".unpacking")] == []
    assert (tmp_path / "dl" / "a.part").exists()


# -- parallel ranges -----------------------------------------------------------------------


def test_large_asset_comes_in_bounded_ranges_that_cover_it_once(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)

    fetched, _ = run(github, asset, tmp_path, RANGES)

    ranges = sorted(r.headers["range"] for r in github.requests_to("blob"))
    spans = [(int(a), int(b)) for a, b in (r.removeprefix("bytes=").split("-") for r in ranges)]
    spans.sort()
    assert len(spans) == RANGES.parallel
    assert spans[0][0] == 0 and spans[-1][1] == asset.size - 1
    assert all(b + 1 == c for (_, b), (c, _) in itertools.pairwise(spans))
    assert fetched.download.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert not data_path(fetched.download.path).exists() and not state_path(fetched.download.path).exists()


def test_parallel_1_fetches_one_stream_without_range(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))

    run(github, asset, tmp_path, FetchOptions(parallel=1, min_parallel_bytes=1))

    assert [r.headers.get("range") for r in github.requests_to("blob")] == [None]


def test_small_asset_comes_in_one_stream(github: FakeGitHub, tmp_path: Path) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz", size=1000))

    run(github, asset, tmp_path, FetchOptions(parallel=4))  # the default 16 MB threshold

    assert [r.headers.get("range") for r in github.requests_to("blob")] == [None]


def test_host_without_range_support_falls_back_to_one_stream(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    github.inject(NAME, Fault(ignore_range=True, times=None))

    fetched, unpack = run(github, asset, tmp_path, RANGES)

    assert fetched.download.path.read_bytes() == archive.read_bytes()
    assert github.requests_to("blob")[-1].headers.get("range") is None
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_host_answering_another_range_than_asked_falls_back_to_one_stream(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    github.inject(NAME, Fault(range_to_end=True, times=None))  # every range answered to the end of the file

    fetched, unpack = run(github, asset, tmp_path, RANGES)

    assert fetched.download.path.read_bytes() == archive.read_bytes()
    assert github.requests_to("blob")[-1].headers.get("range") is None
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_ranged_download_with_wrong_bytes_is_a_digest_mismatch_and_kept_nowhere(
    github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))
    github.inject(NAME, Fault(wrong_bytes=True, times=None))

    with pytest.raises(DigestMismatchError):
        run(github, asset, tmp_path, RANGES)

    assert list((tmp_path / "dl").iterdir()) == []


def test_ranges_resume_from_their_own_progress_after_a_cancel(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    polls = iter(range(10_000))
    with pytest.raises(CancelledError):
        run(github, asset, tmp_path, RANGES, cancel=lambda: next(polls) > 12)
    partial = tmp_path / "dl" / "a.part"
    record = json.loads(state_path(partial).read_text())
    done_before = sum(done for _s, _e, done in record["spans"])
    assert 0 < done_before < asset.size
    first_run = len(github.requests_to("blob"))

    fetched, unpack = run(github, asset, tmp_path, RANGES)

    resumed = github.requests_to("blob")[first_run:]
    starts = {int(r.headers["range"].removeprefix("bytes=").split("-")[0]) for r in resumed}
    recorded = {start + done for start, end, done in record["spans"] if start + done < end}
    assert starts <= recorded  # each range asked only for the rest (or more was saved meanwhile)
    assert fetched.download.resumed_from >= done_before
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_a_range_cut_off_mid_body_is_retried_from_where_it_stopped(github: FakeGitHub, tmp_path: Path) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    github.inject(NAME, Fault(reset_after_bytes=100_000))

    fetched, _ = run(github, asset, tmp_path, RANGES)

    assert fetched.download.path.read_bytes() == archive.read_bytes()
    assert github.download_bytes_sent == asset.size  # nothing was fetched twice
    assert len(github.requests_to("blob")) == RANGES.parallel + 1


def test_rate_capped_host_paces_each_connection(tmp_path: Path) -> None:
    with FakeGitHub(rate_cap=50 * MiB) as github:
        archive = big_tarball(tmp_path / "a.tar.gz", size=MiB)
        asset = publish(github, archive)
        fetched, _ = run(github, asset, tmp_path, RANGES)
    assert fetched.download.path.read_bytes() == archive.read_bytes()


# -- pure parts -----------------------------------------------------------------------------


def test_spans_cover_the_asset_in_order_without_gaps() -> None:
    spans = plan_spans(10, 3)
    assert [(s.start, s.end) for s in spans] == [(0, 3), (3, 6), (6, 10)]
    assert [(s.start, s.end) for s in plan_spans(2, 4)] == [(0, 1), (1, 2)]


def test_contiguous_prefix_stops_at_the_first_incomplete_span() -> None:
    spans = plan_spans(10, 3)
    spans[0].done, spans[1].done, spans[2].done = 3, 1, 4
    assert contiguous(spans) == 4
    spans[1].done = 3
    assert contiguous(spans) == 10


def test_reader_of_a_rewritten_front_raises_instead_of_mixing_bodies(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    growing = GrowingFile(path)
    growing.advance(6)
    reader = growing.reader()
    assert reader.read(3) == b"abc"
    path.write_bytes(b"XYZ")
    growing.advance(0)
    with pytest.raises(StreamRestarted):
        reader.read(3)
    reader.close()
    growing.close()


def test_reader_gets_eof_only_when_the_file_is_finished(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    growing = GrowingFile(path)
    growing.advance(3)
    reader = growing.reader()
    assert reader.read(10) == b"abc"
    growing.finish(3)
    assert reader.read(10) == b""
    reader.close()
    growing.close()


def test_streamed_tar_is_read_by_tarfile_in_stream_mode(tmp_path: Path) -> None:
    # The one-pass path relies on "r|gz" reading strictly forward from a non-seekable stream.
    archive = big_tarball(tmp_path / "a.tar.gz", size=10)
    growing = GrowingFile(archive)
    growing.finish(archive.stat().st_size)
    reader = growing.reader()
    with tarfile.open(fileobj=reader, mode="r|gz") as tf:  # type: ignore[call-overload]
        names = [m.name for m in tf]
    reader.close()
    growing.close()
    assert "llama-b7000/llama-server" in names


@pytest.mark.parametrize(("raw", "expected"), [("", 4), ("1", 1), (" 8 ", 8), ("16", 16)])
def test_parallel_downloads_setting_is_read_from_the_environment(raw: str, expected: int) -> None:
    assert download_parallelism({"LLAMA_RUNTIME_PARALLEL_DOWNLOADS": raw}) == expected


@pytest.mark.parametrize("raw", ["0", "17", "four", "-2", "2.5"])
def test_bad_parallel_downloads_setting_says_what_is_valid(raw: str) -> None:
    with pytest.raises(UserInputError, match="whole number from 1"):
        download_parallelism({"LLAMA_RUNTIME_PARALLEL_DOWNLOADS": raw})
