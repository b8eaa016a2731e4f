"""A full disk: refused up front when it can be known, exit 4 when it fills midway.

The home lives on a real 20 MiB tmpfs when this process may mount one (CI
runs as root); elsewhere the same tests inject ENOSPC at the same places
(``shutil.disk_usage`` for the up-front check, the download's and the
extractor's writes for the midway cases). Either way: exit 4 with the
sentence "Not enough disk space to install llama.cpp b7001: need X, have Y
in DIR", no partial file left, and the active runtime untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    CPU_TAR,
    REPO,
    HomeGuard,
    assert_runs,
    publish_stand_in,
    run_json,
    stand_in_server,
    stand_in_tarball,
)

MiB = 1024 * 1024
FS_BYTES = 20 * MiB
DISK_FULL = re.compile(
    r"^Not enough disk space to install llama\.cpp b7001: need [\d.]+ [kMGT]?B, have [\d.]+ [kMGT]?B in \S+\.$"
)


@dataclass(frozen=True)
class SmallFs:
    """Where the home lives, and whether the disk there is really small."""

    root: Path
    real: bool


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[SmallFs]:
    root = tmp_path / "small"
    root.mkdir()
    mounted = (
        shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(root)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    try:
        yield SmallFs(root, mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)


def padded_tarball(path: Path, pad_bytes: int) -> Path:
    """A stand-in b7001 with ``pad_bytes`` of incompressible data (the archive is about as big)."""
    files: dict[str, bytes | Path] = {
        "llama-server": stand_in_server("version: 7001 (stand-in)"),
        "pad.bin": random.Random(pad_bytes).randbytes(pad_bytes),
    }
    return build_release_archive(path, "tar-tagdir", files, modes={"pad.bin": 0o644}, tag="b7001")


@pytest.fixture
def home(capsys: pytest.CaptureFixture[str], small_fs: SmallFs, github: FakeGitHub, tmp_path: Path) -> Path:
    home = small_fs.root / "home"
    good = stand_in_tarball(tmp_path / "b7000.tar.gz", tag="b7000")
    github.add_release(REPO, "b7000", {CPU_TAR.format(tag="b7000"): good})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return home


def fail_update_with_exit_4(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub) -> dict[str, Any]:
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 4, payload
    assert payload["error"]["code"] == "disk_full"
    assert DISK_FULL.match(payload["error"]["message"]), payload["error"]["message"]
    assert str(home) in payload["error"]["message"]
    assert list((home / "downloads").iterdir()) == [], "the partial download must be removed"
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    return dict(payload["error"])


def inject_enospc(monkeypatch: pytest.MonkeyPatch, owner: str, method: str) -> list[int]:
    """Make ``owner.method``'s writes fail with ENOSPC after 1 MiB (used without a real small disk)."""
    module_name, class_name = owner.rsplit(".", 1)
    cls = getattr(__import__(module_name, fromlist=[class_name]), class_name)
    original = getattr(cls, method)
    raised: list[int] = []

    class FillingUp:
        def __init__(self, inner: Any) -> None:
            self.inner, self.written = inner, 0

        def write(self, data: bytes) -> int:
            self.written += len(data)
            if self.written > MiB:
                raised.append(self.written)
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return int(self.inner.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    if method == "_stream":  # download: (self, response, fh, ...)

        def stream(self: Any, response: Any, fh: Any, *rest: Any) -> Any:
            return original(self, response, FillingUp(fh), *rest)

        monkeypatch.setattr(cls, method, stream)
    else:  # extraction: _copy(self, src, name, member) opens its own file

        def copy(self: Any, src: Any, name: str, member: Any) -> Any:
            if member.size > MiB:
                raised.append(member.size)
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return original(self, src, name, member)

        monkeypatch.setattr(cls, method, copy)
    return raised


def test_release_bigger_than_the_free_space_is_refused_before_downloading(
    capsys: pytest.CaptureFixture[str],
    small_fs: SmallFs,
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): padded_tarball(tmp_path / "b.tar.gz", 5 * MiB)})
    if not small_fs.real:
        usage = shutil.disk_usage(home)
        monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage._replace(free=FS_BYTES))
    blob_requests = len(github.requests_to("blob"))
    fail_update_with_exit_4(capsys, home, github)
    assert len(github.requests_to("blob")) == blob_requests, "nothing may be downloaded"


def test_disk_filling_up_during_the_download_exits_4_and_removes_the_partial(
    capsys: pytest.CaptureFixture[str],
    small_fs: SmallFs,
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Space taken by someone else after the up-front check: the write itself fails.
    monkeypatch.setattr("llama_runtime.updater.activate.pipeline.check_free_space", lambda *_a, **_k: None)
    raised = [] if small_fs.real else inject_enospc(monkeypatch, "llama_runtime.updater.fetch.download._Job", "_stream")
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): padded_tarball(tmp_path / "b.tar.gz", 30 * MiB)})
    fail_update_with_exit_4(capsys, home, github)
    assert small_fs.real or raised
    assert github.requests_to("blob", "b7001"), "the download had started"


def test_disk_filling_up_during_extraction_exits_4_and_removes_staging_and_download(
    capsys: pytest.CaptureFixture[str],
    small_fs: SmallFs,
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("llama_runtime.updater.activate.pipeline.check_free_space", lambda *_a, **_k: None)
    raised = [] if small_fs.real else inject_enospc(monkeypatch, "llama_runtime.updater.stage.archive._Writer", "_copy")
    # 12 MiB fits once (the download) but not twice (download + extracted copy).
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): padded_tarball(tmp_path / "b.tar.gz", 12 * MiB)})
    fail_update_with_exit_4(capsys, home, github)
    assert small_fs.real or raised


def test_after_space_is_freed_the_same_update_succeeds(
    capsys: pytest.CaptureFixture[str],
    small_fs: SmallFs,
    home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): padded_tarball(tmp_path / "b.tar.gz", 5 * MiB)})
    with monkeypatch.context() as patch:
        if not small_fs.real:
            usage = shutil.disk_usage(home)
            patch.setattr(shutil, "disk_usage", lambda _p: usage._replace(free=FS_BYTES))
        fail_update_with_exit_4(capsys, home, github)
    if small_fs.real:
        grown = subprocess.run(
            ["mount", "-o", "remount,size=200m", str(small_fs.root)], capture_output=True, check=False
        )
        assert grown.returncode == 0, grown.stderr
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))


def test_enospc_and_edquot_are_both_disk_full() -> None:
    from llama_runtime.runtime.fsutil import is_disk_full

    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    if hasattr(errno, "EDQUOT"):
        assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert not is_disk_full(ValueError("no"))


# -- a full disk: the verbs that free space still work, the others say exit 4 and name the file ----------


def fill_up(root: Path) -> None:
    """Write zeros under ``root`` until its filesystem has not one byte left."""
    fd = os.open(root / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (bytes(MiB), bytes(4096), b"\0"):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, chunk)
    finally:
        os.close(fd)
    assert shutil.disk_usage(root).free == 0


@pytest.fixture
def full_home(
    capsys: pytest.CaptureFixture[str], small_fs: SmallFs, home: Path, github: FakeGitHub, tmp_path: Path
) -> Path:
    """b7000, b7001 and b7002 installed (b7002 active, b7001 previous) on a filesystem with 0 bytes free."""
    if not small_fs.real:
        pytest.skip("needs a real small filesystem (mounting a tmpfs needs root)")
    for tag in ("b7001", "b7002"):
        publish_stand_in(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
    fill_up(small_fs.root)
    return home


@pytest.mark.parametrize("verb", [("use", "b7000"), ("rollback",)])
def test_switching_on_a_full_disk_exits_4_naming_the_pointer(
    verb: tuple[str, ...], capsys: pytest.CaptureFixture[str], full_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, full_home)
    code, payload = run_json(capsys, full_home, github.api_url, *verb)
    assert code == 4, payload
    assert payload["error"]["code"] == "disk_full"
    assert str(full_home / "active.json") in payload["error"]["message"]
    guard.assert_intact("b7002", capsys=capsys)


def test_gc_remove_server_stop_and_doctor_repair_work_at_0_bytes_free(
    capsys: pytest.CaptureFixture[str], small_fs: SmallFs, full_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, full_home)
    for verb in (["gc", "--dry-run"], ["server", "stop"], ["doctor"], ["doctor", "--repair"]):
        code, payload = run_json(capsys, full_home, github.api_url, *verb)
        assert code == 0, (verb, payload)
    guard.assert_intact("b7002", staging_empty=True)
    free = shutil.disk_usage(small_fs.root).free
    code, payload = run_json(capsys, full_home, github.api_url, "remove", "b7000")
    assert code == 0, payload
    assert shutil.disk_usage(small_fs.root).free > free, "remove freed nothing"
    after_remove = HomeGuard(None, full_home)
    code, payload = run_json(capsys, full_home, github.api_url, "gc")
    assert code == 0, payload
    after_remove.assert_intact("b7002", capsys=capsys)


def test_export_to_a_full_disk_exits_4_naming_the_bundle_and_leaves_no_temp_file(
    capsys: pytest.CaptureFixture[str], small_fs: SmallFs, full_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, full_home)
    output = small_fs.root / "runtime.tar.gz"
    code, payload = run_json(capsys, full_home, github.api_url, "export", "--output", str(output))
    assert code == 4, payload
    assert payload["error"]["code"] == "disk_full"
    assert str(output) in payload["error"]["message"]
    assert sorted(p.name for p in small_fs.root.iterdir()) == ["filler", "home"], "the temp bundle must be removed"
    guard.assert_intact("b7002", capsys=capsys)


def test_the_update_lock_holds_when_its_owner_record_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime import BusyError
    from llama_runtime.runtime.lock import UpdateLock

    def no_space(path: Path, *_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))

    monkeypatch.setattr("llama_runtime.runtime.lock.write_record", no_space)
    lock = UpdateLock(tmp_path / "locks" / "update.lock")
    with lock.hold("gc"):
        assert lock.is_held()
        assert lock.owner() is None  # owner unknown, and the empty record is no damage to set aside
        with pytest.raises(BusyError), UpdateLock(lock.lock_path).hold("update"):
            pass
        assert lock.owner_path.exists()
    assert not lock.is_held()
    with UpdateLock(lock.lock_path).hold("update"):
        pass
