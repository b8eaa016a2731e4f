"""What a killed ``install-file`` or ``export`` leaves behind is removed by the next command, not kept.

``install-file`` copies the archive into ``downloads/install-file-<pid>-<hex>``; ``export`` writes
``.<name>.export-<pid>-<random>.tmp`` beside ``--output``. Killed (SIGKILL, at a checkpoint), each
leaves that copy; the pid in the name tells the next command the writer is gone. Every scenario
ends with the runtime active before still active and running.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llama_runtime.updater.checkpoints import KILL_AT_ENV
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, HomeGuard, assert_runs, cli_process, run_json, run_killed, stand_in_tarball


def _work_dirs(home: Path) -> list[Path]:
    return [p for p in (home / "downloads").iterdir() if p.name.startswith("install-file-")]


@pytest.fixture
def killed_install_file(b7000_home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    """b7000 active, and an ``install-file`` of b7001 killed after extracting: its archive copy is left."""
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7001"), tag="b7001")
    done = run_killed(b7000_home, github.api_url, "after_extract", "install-file", str(archive))
    assert done.returncode < 0, done.stderr
    assert _work_dirs(b7000_home), "the killed install-file left no work directory"
    return archive


def test_gc_removes_the_work_directory_of_a_killed_install_file_at_once(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, github: FakeGitHub, killed_install_file: Path
) -> None:
    guard = HomeGuard(None, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "gc")
    assert code == 0, payload
    assert _work_dirs(b7000_home) == [], "a dead install-file's copy must not wait 24 h"
    guard.assert_intact("b7000", capsys=capsys)


def test_the_next_install_file_removes_a_killed_one_s_work_directory(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, github: FakeGitHub, killed_install_file: Path
) -> None:
    code, payload = run_json(capsys, b7000_home, github.api_url, "install-file", str(killed_install_file))
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    assert _work_dirs(b7000_home) == []


def test_the_next_export_removes_the_temp_bundle_of_a_killed_one_and_nothing_else(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, KILL_AT_ENV: "during_export"}
    killed = cli_process("export", "--output", str(out / "a.tar.gz"), "--home", str(b7000_home), "--json", env=env)
    assert killed.returncode < 0, killed.stderr
    (stale,) = [p for p in out.iterdir() if p.name.startswith(".a.tar.gz.export-")]
    live = out / f".b.tar.gz.export-{os.getpid()}-abcd1234.tmp"  # a writer that still runs: this test
    live.write_bytes(b"in progress")
    unrelated = out / ".notes.tmp"
    unrelated.write_bytes(b"not ours")
    guard = HomeGuard(None, b7000_home)
    code, payload = run_json(capsys, b7000_home, None, "export", "--output", str(out / "c.tar.gz"))
    assert code == 0, payload
    assert not stale.exists(), "the killed export's temp bundle must be removed"
    assert sorted(p.name for p in out.iterdir()) == sorted([live.name, unrelated.name, "c.tar.gz"])
    guard.assert_intact("b7000", capsys=capsys)
