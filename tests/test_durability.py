"""The order of the durable flush of an install: every file and directory of the new runtime is
flushed before the pointer's rename makes it active.

A killed process leaves the page cache intact, so the kill tests (test_crash.py) cannot show what a
power loss would lose; this test records the flushes and renames themselves, through ``os.fsync``
and ``os.replace``, the seams every flush and rename of the install goes through. The argument that
this order is enough is in the docstring of :func:`llama_runtime.runtime.fsutil.fsync_tree`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, assert_runs, run_json, stand_in_tarball

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads flushed paths from /proc/self/fd")


class Recorder:
    """The install's flushes and renames, in order: ("fsync", path) and ("replace", source, target)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, ...]] = []
        fsync, replace = os.fsync, os.replace

        def recording_fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            fsync(fd)

        def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], **kw: object) -> None:
            replace(src, dst, **kw)  # type: ignore[arg-type]
            self.events.append(("replace", os.path.realpath(src), os.path.realpath(dst)))

        monkeypatch.setattr(os, "fsync", recording_fsync)
        monkeypatch.setattr(os, "replace", recording_replace)

    def flushed_before(self, target: Path) -> set[str]:
        """Paths flushed (under their names after later renames) before ``target`` was replaced last."""
        flushed: set[str] = set()
        last_flip = max(i for i, e in enumerate(self.events) if e[0] == "replace" and e[2] == str(target))
        for event in self.events[:last_flip]:
            if event[0] == "fsync":
                flushed.add(event[1])
            else:  # a rename carries what was flushed under the old name (a file or a whole tree)
                src, dst = event[1], event[2]
                flushed = {dst + p[len(src) :] if p == src or p.startswith(src + "/") else p for p in flushed}
        return flushed


def test_every_file_and_directory_of_a_new_runtime_is_flushed_before_the_pointer_flips(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = stand_in_tarball(tmp_path / "b7001.tar.gz", tag="b7001", libs=("ggml", "llama"))
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): archive})
    home = tmp_path / "home"
    recorder = Recorder(monkeypatch)

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")

    assert code == 0, payload
    layout = Home(home)
    runtime = layout.runtime_path(layout.read_pointer().active or "")
    flushed = recorder.flushed_before(layout.pointer_path.resolve())
    expected = {os.path.realpath(layout.runtimes_dir)}  # the new runtime's own entry
    for dirpath, _dirs, files in os.walk(runtime):
        expected.add(os.path.realpath(dirpath))
        expected.update(
            os.path.realpath(os.path.join(dirpath, f))
            for f in files
            if not os.path.islink(os.path.join(dirpath, f))  # a link lives in its directory's entries
        )
    assert len(expected) > 6  # the tree has files, links and a subdirectory: not a vacuous check
    assert expected - flushed == set()
    assert_runs(runtime / "llama-b7001" / "llama-server")
