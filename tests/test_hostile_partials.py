"""A partial download is written only when it is the download's own file: a partial (or the data
file of a ranged download) that is a hard link to a file elsewhere, or a symbolic link, is
discarded without being read or written, and the download starts afresh."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llama_runtime.updater.fetch.download import download_name
from llama_runtime.updater.fetch.ranges import Span, data_path, load_record, save_record, state_path
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in, run_json


def _install(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tag: str) -> None:
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
    assert code == 0, payload


def _partial_of(home: Path, tag: str) -> Path:
    """Where an update of ``tag`` keeps its partial download (named by the published sha256)."""
    data = (home.parent / f"{tag}.tar.gz").read_bytes()  # publish_stand_in wrote it beside the home
    name = download_name(hashlib.sha256(data).hexdigest(), CPU_TAR.format(tag=tag), repo=REPO, size=len(data))
    return home / "downloads" / name


def _outside_file(tmp_path: Path, tag: str) -> tuple[Path, bytes, int, int]:
    """A file outside the home holding the first bytes of ``tag``'s archive (a prefix a resume would extend)."""
    outside = tmp_path / "outside" / "notes.bin"
    outside.parent.mkdir()
    content = (tmp_path / f"{tag}.tar.gz").read_bytes()[:100]
    outside.write_bytes(content)
    outside.chmod(0o640)
    st = outside.stat()
    return outside, content, st.st_mode, st.st_ino


@pytest.mark.e2e
def test_a_partial_download_hard_linked_to_a_file_outside_the_home_is_discarded_and_the_update_installs(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    _install(capsys, home, github, "b7000")
    outside, content, mode, inode = _outside_file(tmp_path, "b7001")
    partial = _partial_of(home, "b7001")
    partial.parent.mkdir(parents=True, exist_ok=True)
    os.link(outside, partial)  # (a symbolic link there is refused before anything runs: home safety)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert outside.read_bytes() == content
    st = outside.stat()
    assert (st.st_mode, st.st_ino, st.st_nlink) == (mode, inode, 1)
    HomeGuard(None, home).assert_intact("b7001", capsys=capsys)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_ranged_data_file_linked_elsewhere_is_never_resumed_and_its_link_is_removed(
    link: str, tmp_path: Path
) -> None:
    partial = tmp_path / "downloads" / "a.tar.gz.part"
    partial.parent.mkdir()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 10)
    if link == "hard":
        os.link(outside, data_path(partial))
    else:
        data_path(partial).symlink_to(outside)
    save_record(partial, "https://x/a", 10, '"etag"', [Span(0, 10, 4)])
    assert load_record(partial, "https://x/a", 10) is None
    assert not os.path.lexists(data_path(partial))
    assert outside.read_bytes() == b"\0" * 10 and outside.stat().st_nlink == 1
    assert state_path(partial).exists()  # the caller discards the record with it (RangedDownload._load)
