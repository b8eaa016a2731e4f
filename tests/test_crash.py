"""Crash consistency: SIGKILL at every checkpoint, a failing rename, a failing fsync.

rustup's ``kill_at_checkpoint``: the CLI runs in a subprocess with
``LLAMA_RUNTIME_TEST_KILL_AT=<name>`` and SIGKILLs itself there, so no
``finally`` or ``except`` runs. Afterwards ``status`` must show a runtime that
runs (old before the pointer flip, new after it), the same ``update`` run
again must complete, and nothing of the crashed run may remain in staging.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.checkpoints import CHECKPOINTS
from llama_runtime.updater.fetch.ranges import MIN_PARALLEL_BYTES
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    CPU_TAR,
    REPO,
    VULKAN_TAR,
    HomeGuard,
    assert_runs,
    assert_status_active,
    publish_stand_in,
    run_json,
    snapshot_tree,
    stand_in_server,
)
from tests.helpers import run_killed as shared_run_killed

#: Checkpoints an update passes; ``during_gc`` is reached while cleaning leftovers (``during_share``: see
#: test_retention_and_shared_files.py).
INSTALL_CHECKPOINTS = tuple(c for c in CHECKPOINTS if c not in {"during_gc", "during_share"})
FLIPPED = {"after_pointer_flip"}
#: What a kill at each checkpoint leaves in staging/ and downloads/ (the next update cleans it).
LEFT_BEHIND = {
    "after_download": {"staging": False, "downloads": True},
    "after_extract": {"staging": True, "downloads": True},
    "after_marker": {"staging": True, "downloads": True},
    "before_pointer_flip": {"staging": False, "downloads": True},
    "after_pointer_flip": {"staging": False, "downloads": True},
}


def run_killed(home: Path, github: FakeGitHub, point: str, *args: str) -> subprocess.CompletedProcess[str]:
    return shared_run_killed(home, github.api_url, point, *args, timeout=120)


@pytest.fixture
def b7000_active(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    """Stand-in b7000 (cpu) installed and active; stand-in b7001 published."""
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return home


def assert_no_leftovers(home: Path) -> None:
    assert list((home / "staging").iterdir()) == []
    assert list((home / "downloads").iterdir()) == []
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []
    for runtime in (home / "runtimes").iterdir():
        assert (runtime / "llama-runtime.json").is_file(), f"{runtime} has no marker"


# -- SIGKILL at each checkpoint ---------------------------------------------------------


@pytest.mark.parametrize("point", INSTALL_CHECKPOINTS)
def test_sigkill_at_checkpoint_leaves_a_working_runtime_and_the_rerun_completes(
    point: str, b7000_active: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    home = b7000_active
    done = run_killed(home, github, point, "update", "--tag", "b7001", "--backend", "cpu")
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = {d: bool(list((home / d).iterdir())) for d in ("staging", "downloads")}
    assert left == LEFT_BEHIND[point], "the crash left something else than expected"
    assert_status_active(capsys, home, "b7001" if point in FLIPPED else "b7000")

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    # Killed before the flip, the verified runtime is already in runtimes/: the rerun checks it
    # again and switches to it instead of installing a second copy.
    expected = "up_to_date" if point in FLIPPED else "switched" if point == "before_pointer_flip" else "installed"
    assert payload["result"] == expected
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    assert_no_leftovers(home)


def test_sigkill_while_cleaning_leftovers_is_finished_by_the_next_update(
    b7000_active: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    home = b7000_active
    crashed = run_killed(home, github, "after_extract", "update", "--tag", "b7001", "--backend", "cpu")
    assert crashed.returncode == -signal.SIGKILL
    (home / "staging" / "4242-deadbeef").mkdir()  # a second stale staging directory
    assert len(list((home / "staging").iterdir())) >= 2

    done = run_killed(home, github, "during_gc", "update", "--tag", "b7001", "--backend", "cpu")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert list((home / "staging").iterdir()), "killed after the first removal: some leftovers remain"
    assert_status_active(capsys, home, "b7000")

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert_no_leftovers(home)


def test_sigkill_before_the_pointer_flip_with_the_real_build_keeps_the_old_one_running(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
) -> None:
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {VULKAN_TAR.format(tag=tag): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    old_binary = Path(payload["active"]["binary"])

    done = run_killed(home, github, "before_pointer_flip", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert_status_active(capsys, home, "b7000")
    assert "version:" in assert_runs(old_binary)

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    # The runtime renamed into runtimes/ before the kill is verified again and switched to.
    assert payload["result"] == "switched" and payload["previous"]["tag"] == "b7000"
    assert "version:" in assert_runs(Path(payload["active"]["binary"]))
    assert len(list((home / "runtimes").iterdir())) == 2, "no second copy of b7001"
    assert_no_leftovers(home)


# -- a failing rename or fsync: an error, and nothing changed ----------------------------


def _assert_unchanged_and_retry_works(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    guard: HomeGuard,
    undo: Callable[[], None],
    tag: str = "b7001",
) -> None:
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    undo()
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == tag
    assert_no_leftovers(home)


@pytest.mark.parametrize("target", ["runtime_dir", "pointer"])
def test_failing_os_replace_is_an_error_and_changes_nothing(
    target: str,
    b7000_active: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = b7000_active
    guard = HomeGuard(None, home)
    real_replace = os.replace
    hits: list[str] = []

    def failing_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        dst_path = Path(os.fsdecode(dst))
        hit = dst_path.parent == home / "runtimes" if target == "runtime_dir" else dst_path == home / "active.json"
        if hit:
            hits.append(str(dst_path))
            raise OSError(errno.EIO, "Input/output error (injected)")
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert hits, "the injected rename was never reached"
    assert code != 0
    assert "Input/output error" in payload["error"]["message"]
    assert "unchanged" in payload["error"]["message"]
    _assert_unchanged_and_retry_works(capsys, home, github, guard, monkeypatch.undo)


def inject_fsync_error(
    monkeypatch: pytest.MonkeyPatch, matches: Callable[[str], bool], *, once: bool = False
) -> list[tuple[str, str]]:
    """Make ``os.fsync`` of a file whose path ``matches`` fail with EIO (only the first time with ``once``).

    Returns the (path, thread name) of every matching fsync, as it happens.
    """
    real_fsync = os.fsync
    hits: list[tuple[str, str]] = []

    def failing_fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if matches(path):
            hits.append((path, threading.current_thread().name))
            if not once or len(hits) == 1:
                raise OSError(errno.EIO, "Input/output error (injected)")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    return hits


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to tell which file is fsynced")
@pytest.mark.parametrize("target", ["/downloads/", "/staging/", ".llama-runtime.json.", ".active.json."])
def test_failing_fsync_is_an_error_and_changes_nothing(
    target: str,
    b7000_active: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = b7000_active
    guard = HomeGuard(None, home)
    hits = inject_fsync_error(monkeypatch, lambda path: path.startswith(str(home)) and target in path)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert len(hits) == 1, "fsync must be tried once and never retried"
    assert code != 0
    assert "Input/output error" in payload["error"]["message"]
    _assert_unchanged_and_retry_works(capsys, home, github, guard, monkeypatch.undo)


def _publish_large(github: FakeGitHub, tmp_path: Path, tag: str, size: int) -> None:
    """Publish ``tag`` with a stand-in server and ``libbig.so`` of ``size`` random (incompressible) bytes."""
    files: dict[str, bytes | Path] = {
        "llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)"),
        "libbig.so": os.urandom(size),
    }
    archive = build_release_archive(
        tmp_path / f"{tag}.tar.gz", "tar-tagdir", files, modes={"llama-server": 0o755}, tag=tag
    )
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to tell which file is fsynced")
@pytest.mark.parametrize(
    ("size", "suffix", "flushed_by"),
    [
        # Over the size written on a thread of its own: flushed ahead while the next members inflate.
        (5 * 1024 * 1024, "/libbig.so", "flush-ahead"),
        # Fetched as ranges: the archive is flushed after the extraction got its end of stream.
        (MIN_PARALLEL_BYTES + 1024 * 1024, ".part.ranged", "MainThread"),
    ],
    ids=["large-file-flushed-ahead", "ranged-archive"],
)
def test_a_flush_beside_the_extraction_that_fails_once_fails_the_install(
    size: int,
    suffix: str,
    flushed_by: str,
    b7000_active: Path,
    github: FakeGitHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flushes that run beside the extraction fail the install with their error. The kernel
    reports a lost write-back to one fsync only: a later flush of the same file would succeed."""
    home = b7000_active
    _publish_large(github, tmp_path, "b7002", size)
    guard = HomeGuard(None, home)
    hits = inject_fsync_error(monkeypatch, lambda path: path.startswith(str(home)) and path.endswith(suffix), once=True)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")

    assert [thread for _path, thread in hits] == [flushed_by], hits
    assert code != 0
    assert "Input/output error" in payload["error"]["message"]
    _assert_unchanged_and_retry_works(capsys, home, github, guard, monkeypatch.undo, tag="b7002")


# -- what counts as a leftover --------------------------------------------------------


def test_cleanup_removes_only_what_nothing_refers_to(
    b7000_active: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.activate.gc import clean_leftovers
    from llama_runtime.updater.fetch.download import download_name

    home = Home(b7000_active)
    active = json.loads(home.pointer_path.read_text())["active"]
    installed = home.load(active).marker
    doomed = [
        home.staging_dir / "1234-abcd1234",
        home.staging_dir / "1234-abcd1234.extra",
        home.downloads_dir / "install-file-1234-abcd1234",
        home.root / ".active.json.k2j3.tmp",
        home.cache_dir / ".etag-x8y9",
        home.downloads_dir / download_name(installed.sha256, installed.asset, repo=installed.repo, size=installed.size),
        home.runtimes_dir / "ggml-org_llama.cpp-b6999-cpu-0000dead",  # no marker, not named
    ]
    kept = [
        home.downloads_dir
        / download_name("f" * 64, "llama-b7002-bin-ubuntu-x64.tar.gz", repo=REPO, size=1),  # resumable
        home.runtimes_dir / "ggml-org_llama.cpp-b6998-cpu-0000beef",  # a damaged marker: doctor's call
    ]
    for path in doomed[:3] + doomed[-1:] + kept[1:]:
        path.mkdir(parents=True)
    for path in doomed[3:-1] + kept[:1]:
        path.write_bytes(b"x")
    (kept[1] / "llama-runtime.json").write_text("{")
    before = snapshot_tree(home.runtime_path(active))

    removed = {leftover.path for leftover in clean_leftovers(home)}
    assert removed == set(doomed)
    assert not any(p.exists() for p in doomed)
    assert all(p.exists() for p in kept)
    assert snapshot_tree(home.runtime_path(active)) == before
    assert_status_active(capsys, b7000_active, "b7000")


def test_cleanup_keeps_a_markerless_directory_the_pointer_names(b7000_active: Path) -> None:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.activate.gc import find_leftovers

    home = Home(b7000_active)
    active = json.loads(home.pointer_path.read_text())["active"]
    (home.runtime_path(active) / "llama-runtime.json").unlink()
    assert find_leftovers(home) == []
