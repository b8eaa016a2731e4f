"""The digest-addressed asset cache: the same bytes are never fetched twice, damage is a download."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.updater.fetch.cache import AssetCache
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, assert_runs, run_json, stand_in_server, stand_in_tarball


def update(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tag: str) -> dict[str, Any]:
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))
    return dict(payload)


#: A stand-in that names no build number: one archive published under several tags
#: (what a byte-identical asset across releases is) must pass the build check of each.
NO_BUILD = stand_in_server("llama-server stand-in (no build number)")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return stand_in_tarball(tmp_path / "same.tar.gz", tag="b7000", script=NO_BUILD)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_second_release_with_the_same_digest_fetches_0_bytes(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, archive: Path
) -> None:
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})
    update(capsys, home, github, "b7000")
    fetched_once = github.download_bytes_sent
    assert fetched_once == archive.stat().st_size

    payload = update(capsys, home, github, "b7001")

    assert github.download_bytes_sent == fetched_once  # 0 bytes for b7001
    assert payload["active"]["tag"] == "b7001"
    assert [e.sha256 for e in AssetCache.of(Home(home)).entries()] == [sha(archive)]
    assert list((home / "downloads").iterdir()) == []


def test_reinstall_after_remove_fetches_0_bytes(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, archive: Path, tmp_path: Path
) -> None:
    other = stand_in_tarball(tmp_path / "other.tar.gz", tag="b7001", script=NO_BUILD)
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): archive})
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): other})
    github.add_release(REPO, "b7002", {CPU_TAR.format(tag="b7002"): other})
    for tag in ("b7000", "b7001", "b7002"):
        update(capsys, home, github, tag)
    code, payload = run_json(capsys, home, github.api_url, "remove", "b7000")
    assert code == 0, payload
    assert sorted(r.marker.tag for r in Home(home).installed()) == ["b7001", "b7002"]
    sent = github.download_bytes_sent

    update(capsys, home, github, "b7000")

    assert github.download_bytes_sent == sent


def test_damaged_cache_entry_is_downloaded_again_never_installed(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, archive: Path
) -> None:
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})
    update(capsys, home, github, "b7000")
    entry = AssetCache.of(Home(home)).path_for(sha(archive))
    damaged = bytearray(entry.read_bytes())
    damaged[100] ^= 0xFF  # same size: only the re-hash can tell
    entry.write_bytes(bytes(damaged))
    sent = github.download_bytes_sent

    update(capsys, home, github, "b7001")

    assert github.download_bytes_sent - sent == archive.stat().st_size
    assert sha(entry) == sha(archive)  # the fresh download replaced the damaged entry


def test_lookup_rehashes_and_drops_a_damaged_entry(tmp_path: Path) -> None:
    cache = AssetCache(tmp_path / "assets")
    download = tmp_path / "x.part"
    download.write_bytes(b"payload")
    digest = hashlib.sha256(b"payload").hexdigest()
    stored = cache.store(download, digest)
    assert cache.lookup(digest.upper(), size=7) == stored
    assert cache.lookup(digest, size=8) is None  # a size mismatch is damage too
    assert not stored.exists()
    assert cache.lookup("not-a-digest") is None
    assert cache.lookup("0" * 64) is None


def test_gc_trims_the_cache_with_the_runtimes_that_used_it(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    tarballs = {tag: stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag) for tag in ("b7000", "b7001", "b7002")}
    for tag, path in tarballs.items():
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): path})
        update(capsys, home, github, tag)
    cache = AssetCache.of(Home(home))
    assert len(cache.entries()) == 3

    code, payload = run_json(capsys, home, github.api_url, "gc", "--keep", "2")

    assert code == 0, payload
    removed = {(item["kind"], Path(item["path"]).name) for item in payload["removed"]}
    assert ("cache", sha(tarballs["b7000"])) in removed
    assert {e.sha256 for e in cache.entries()} == {sha(tarballs["b7001"]), sha(tarballs["b7002"])}


def test_gc_cache_alone_trims_only_unused_entries_and_keeps_every_runtime(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, archive: Path, tmp_path: Path
) -> None:
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): archive})
    update(capsys, home, github, "b7000")
    cache = AssetCache.of(Home(home))
    orphan = tmp_path / "orphan"
    orphan.write_bytes(b"from a runtime removed long ago")
    cache.store(orphan, sha(orphan))
    runtimes = sorted(p.name for p in (home / "runtimes").iterdir())

    code, dry = run_json(capsys, home, github.api_url, "gc", "--cache", "--dry-run")
    assert code == 0 and [i["kind"] for i in dry["removed"]] == ["cache"]
    assert len(cache.entries()) == 2
    code, payload = run_json(capsys, home, github.api_url, "gc", "--cache")

    assert code == 0, payload
    assert [e.sha256 for e in cache.entries()] == [sha(archive)]
    assert sorted(p.name for p in (home / "runtimes").iterdir()) == runtimes
