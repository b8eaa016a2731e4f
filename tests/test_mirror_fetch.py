"""``mirror sync`` fetches as ``update`` does: parallel ranges, one pass, progress.

Against the GitHub-like server on 127.0.0.1; no timing is asserted.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llama_runtime import Progress
from llama_runtime.errors import DigestMismatchError
from llama_runtime.updater.offline.mirror import MirrorFetch, sync_mirror
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.stage.streaming import FetchOptions
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, Sleeps, stand_in_server
from tests.test_mirror import mirrored_file

#: Ranges forced with a low threshold instead of a big asset.
RANGES = FetchOptions(parallel=4, min_parallel_bytes=1)
NAME = CPU_TAR.format(tag="b7000")


def publish(github: FakeGitHub, tmp_path: Path) -> Path:
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(), "libggml.so": os.urandom(2 * 1024 * 1024)}
    archive = build_release_archive(tmp_path / NAME, "tar-tagdir", files)
    github.add_release(REPO, "b7000", {NAME: archive})
    return archive


def mirror(github: FakeGitHub, dest: Path, fetch: MirrorFetch) -> None:
    client = GitHubClient(github.api_url, REPO, sleep=Sleeps())
    sync_mirror(client, dest, tag="b7000", platforms=["linux-x64"], backends=["cpu"], fetch=fetch)


def test_mirror_sync_fetches_a_large_asset_as_ranges_with_download_progress(github: FakeGitHub, tmp_path: Path) -> None:
    archive = publish(github, tmp_path)
    events: list[Progress] = []

    mirror(github, tmp_path / "mirror", MirrorFetch(RANGES, events.append))

    ranges = [r.headers.get("range") for r in github.requests_to("blob", NAME)]
    assert len(ranges) == 4 and all(r is not None and r.startswith("bytes=") for r in ranges), ranges
    assert mirrored_file(tmp_path / "mirror", "b7000", NAME).read_bytes() == archive.read_bytes()
    downloads = [e for e in events if e.phase == "download"]
    assert downloads and {e.message for e in downloads} == {NAME}
    assert (downloads[-1].done_bytes, downloads[-1].total_bytes) == (archive.stat().st_size, archive.stat().st_size)
    assert not list((tmp_path / "mirror" / ".partial").iterdir())


def test_mirror_sync_of_ranges_with_wrong_bytes_publishes_nothing(github: FakeGitHub, tmp_path: Path) -> None:
    publish(github, tmp_path)
    github.inject(NAME, Fault(wrong_bytes=True, times=None))

    with pytest.raises(DigestMismatchError):
        mirror(github, tmp_path / "mirror", MirrorFetch(RANGES))

    assert not (tmp_path / "mirror" / "repos" / REPO / "releases" / "tags" / "b7000").exists()
    assert not list((tmp_path / "mirror").rglob(NAME))


def test_mirror_sync_of_a_small_asset_still_comes_in_one_stream(github: FakeGitHub, tmp_path: Path) -> None:
    archive = publish(github, tmp_path)

    mirror(github, tmp_path / "mirror", MirrorFetch())  # the default: ranges only from 16 MiB

    assert [r.headers.get("range") for r in github.requests_to("blob", NAME)] == [None]
    published = mirrored_file(tmp_path / "mirror", "b7000", NAME)
    assert hashlib.sha256(published.read_bytes()).hexdigest() == hashlib.sha256(archive.read_bytes()).hexdigest()
