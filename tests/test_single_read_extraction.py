"""Each byte read once: the ranged download's digest comes from the streamed extraction's own pass,
and the inflater is ISA-L's where it is installed, zlib's where it is not.

Against the GitHub-like server on 127.0.0.1 with real archives; no timing is asserted.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
from pathlib import Path

import pytest

from llama_runtime.errors import DigestMismatchError, UnsafeArchiveError
from llama_runtime.updater.fetch.download import FollowReader, GrowingFile
from llama_runtime.updater.stage import archive_rules
from llama_runtime.updater.stage.archive import extract_archive
from tests.archives import build_hostile_tar, build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import stand_in_server
from tests.test_fetch import NAME, RANGES, big_tarball, publish, run, same_as_two_pass


def count_readers(monkeypatch: pytest.MonkeyPatch) -> list[FollowReader]:
    """Every reader opened on a growing download, from now on."""
    opened: list[FollowReader] = []
    original = GrowingFile.reader

    def reader(self: GrowingFile) -> FollowReader:
        opened.append(original(self))
        return opened[-1]

    monkeypatch.setattr(GrowingFile, "reader", reader)
    return opened


def test_ranged_download_extracted_as_it_arrives_is_read_once_for_digest_and_files(
    github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    readers = count_readers(monkeypatch)

    fetched, unpack = run(github, asset, tmp_path, RANGES)

    assert len(readers) == 1  # the extractor's: no second pass for the digest
    assert fetched.download.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert fetched.download.digest_verified
    same_as_two_pass(archive, fetched, unpack, tmp_path)


def test_ranged_download_without_an_extractor_reads_the_file_once_for_its_digest(
    github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.updater.stage.streaming import fetch_asset
    from tests.test_fetch import api

    archive = big_tarball(tmp_path / "a.tar.gz")
    asset = publish(github, archive)
    readers = count_readers(monkeypatch)
    partial = tmp_path / "a.part"

    fetched = fetch_asset(api(github), asset, partial, cache=None, staging=None, max_bytes=asset.size, options=RANGES)

    assert len(readers) == 1
    assert fetched.extracted is None
    assert fetched.download.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert partial.read_bytes() == archive.read_bytes()


def test_ranged_bytes_that_differ_are_a_digest_mismatch_though_the_extractor_hashed_them(
    github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, big_tarball(tmp_path / "a.tar.gz"))
    github.inject(NAME, Fault(wrong_bytes=True, times=None))

    with pytest.raises(DigestMismatchError):
        run(github, asset, tmp_path, RANGES)

    assert list((tmp_path / "dl").iterdir()) == []


def test_refused_member_in_ranges_still_has_the_whole_file_hashed_and_is_unsafe(
    github: FakeGitHub, tmp_path: Path
) -> None:
    # The extractor stops at the member; it reads the rest for the digest, which matches.
    asset = publish(github, build_hostile_tar(tmp_path / "x.tar.gz", "absolute"))

    with pytest.raises(UnsafeArchiveError):
        run(github, asset, tmp_path, RANGES)

    assert list((tmp_path / "dl").iterdir()) == []
    assert not any("escaped" in str(p) for p in tmp_path.rglob("*"))


def test_archive_is_extracted_with_zlib_where_isal_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(), "libggml.so": os.urandom(64 * 1024)}
    archive = build_release_archive(tmp_path / "a.tar.gz", "tar-tagdir", files)
    with_isal = extract_archive(archive, tmp_path / "with")
    monkeypatch.setitem(sys.modules, "isal", None)  # `import isal` now raises ImportError

    assert archive_rules._gzip_class() is gzip.GzipFile
    assert extract_archive(archive, tmp_path / "without").files == with_isal.files


def test_corrupt_deflate_data_is_refused_as_corrupt_by_isal_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("isal")
    monkeypatch.setattr(archive_rules, "_inflater_errors", ())  # as in a fresh process: not loaded yet
    # Compressible, so the damage lands in Huffman-coded blocks (ISA-L's own error), not only the CRC.
    text = b"".join(b"ggml_backend_%d " % i for i in range(20000))
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(), "libggml.so": text}
    data = bytearray(build_release_archive(tmp_path / "a.tar.gz", "tar-tagdir", files).read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    corrupt = tmp_path / "corrupt.tar.gz"
    corrupt.write_bytes(bytes(data))

    with pytest.raises(UnsafeArchiveError, match="corrupt or truncated"):
        extract_archive(corrupt, tmp_path / "out")
    assert archive_rules._gzip_class() is not gzip.GzipFile


def test_tar_reader_moves_only_forward_and_refuses_a_seek_back(tmp_path: Path) -> None:
    import tarfile

    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(bytes(range(256)) * 64))
    with gzip.open(path, "rb") as raw:
        stream = archive_rules._ForwardOnly(raw)
        assert stream.read(10) == bytes(range(10))
        assert stream.seek(300) == 300 and stream.read(2) == bytes([300 % 256, 301 % 256])
        with pytest.raises(tarfile.ReadError, match="backwards"):
            stream.seek(0)


def test_large_member_hashed_and_written_on_its_own_thread_matches_its_bytes(tmp_path: Path) -> None:
    from llama_runtime.updater.stage.archive import _PIPELINE_MIN_BYTES

    big = os.urandom(_PIPELINE_MIN_BYTES + 3 * 1024 * 1024 + 17)
    archive = build_release_archive(
        tmp_path / "a.tar.gz", "tar-tagdir", {"llama-server": stand_in_server(), "big": big}
    )

    result = extract_archive(archive, tmp_path / "out")

    assert result.files["llama-b7000/big"] == (len(big), hashlib.sha256(big).hexdigest())
    assert (tmp_path / "out" / "llama-b7000" / "big").read_bytes() == big


def test_writer_thread_failure_is_raised_in_the_extracting_thread() -> None:
    import errno

    from llama_runtime.updater.stage.archive import _Sink

    class FullDisk:
        writes = 0

        def write(self, data: bytes) -> int:
            self.writes += 1
            if self.writes == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return len(data)

    sink = _Sink(FullDisk(), threaded=True)  # type: ignore[arg-type]
    with pytest.raises(OSError) as failed:
        for _ in range(50):  # put() raises once the writer has failed, or close() does
            sink.put(b"x" * 4096)
        sink.close()
    assert failed.value.errno == errno.ENOSPC
