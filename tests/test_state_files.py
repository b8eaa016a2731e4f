"""State files are data, not trust; `server` verbs are not blocked by a download.

``jobs/current.json`` and ``server/server.json`` as a crash, a bug or a hostile
user could leave them: out-of-range numbers and ids that are paths. Every
command answers (never exit 1), nothing is written outside ``jobs/``, and the
active runtime is unchanged and runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RuntimeUpdater
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.runtime.procinfo import process_start_ticks
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, HomeGuard, assert_runs, publish_stand_in, run_json


@pytest.fixture
def installed(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> Home:
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return Home(home)


@pytest.fixture
def live_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_job_cancel_of_a_job_id_that_is_a_path_writes_nothing_outside_jobs(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    live_process: subprocess.Popen[bytes],
) -> None:
    frozen = HomeGuard(None, installed.root)
    record = {
        "id": "../../x",
        "phase": "download",
        "pid": live_process.pid,
        "proc_start": process_start_ticks(live_process.pid),
    }
    (installed.jobs_dir / "current.json").write_text(json.dumps(record))
    code, payload = run_json(capsys, home, github.api_url, "job", "cancel")
    assert code == 0, payload
    assert payload["job"] is None
    assert not (home.parent / "x.cancel").exists() and not (home / "x.cancel").exists()
    assert not [p for p in home.parent.rglob("*.cancel")]
    frozen.assert_intact("b7000")


@pytest.mark.parametrize(
    "record",
    [
        {"id": "deadbeefdeadbeef", "phase": "download", "pid": 10**30},
        {"id": "deadbeefdeadbeef", "phase": "download", "pid": 1, "done_bytes": 10**40, "total_bytes": 1e400},
        {"id": "deadbeefdeadbeef", "phase": "done", "pid": 1, "started_at": 1e400, "updated_at": -1e400},
    ],
    ids=["huge_pid", "huge_bytes", "infinite_times"],
)
def test_a_job_record_with_out_of_range_numbers_is_no_job_and_breaks_nothing(
    record: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    text = json.dumps(record).replace("Infinity", "1e400")  # what a hostile file would spell
    (installed.jobs_dir / "current.json").write_text(text)
    code, payload = run_json(capsys, home, github.api_url, "job", "status")
    assert code == 0, payload
    assert payload["job"] is None
    ready = RuntimeUpdater(home, repo=REPO, backend="cpu", api_url=github.api_url).ensure()
    assert ready.ready and not ready.update_running
    frozen.assert_intact("b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))


@pytest.mark.parametrize(
    "record",
    [
        {"pid": 2**64, "binary": "/bin/true", "args": []},
        {"pid": 10**30, "binary": "/bin/true", "args": [], "port": 8080},
        {"pid": "LIVE", "binary": "/bin/true", "args": [], "proc_start": 10**40},
    ],
    ids=["pid_2_64", "pid_10_30", "huge_start_time"],
)
def test_a_server_record_with_out_of_range_numbers_is_not_ours_and_breaks_nothing(
    record: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    live_process: subprocess.Popen[bytes],
) -> None:
    frozen = HomeGuard(None, installed.root)
    installed.server_dir.mkdir(parents=True, exist_ok=True)
    if record["pid"] == "LIVE":  # an unrelated live process: never signalled on such a record
        record = {**record, "pid": live_process.pid}
    (installed.server_dir / "server.json").write_text(json.dumps(record))
    code, payload = run_json(capsys, home, github.api_url, "server", "status")
    assert code == 0, payload
    assert payload["running"] is False
    code, payload = run_json(capsys, home, github.api_url, "server", "stop")
    assert code == 0, payload
    assert live_process.poll() is None
    frozen.assert_intact("b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload


def test_server_verbs_are_not_blocked_by_an_update_that_holds_the_update_lock(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    with UpdateLock(installed.lock_path).hold("update"):  # a download in progress
        code, payload = run_json(capsys, home, github.api_url, "server", "stop")
        assert code == 0, payload
        code, payload = run_json(capsys, home, github.api_url, "server", "status")
        assert code == 0, payload
    frozen.assert_intact("b7000")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _write_trial(home: Home, *, before: dict[str, Any], server: dict[str, Any] | None, runtime: str) -> None:
    record = {
        "schema": 1,
        "runtime": runtime,
        "name": "b7001 (cpu)",
        "before": before,
        "before_name": "b7000 (cpu)",
        "server": server,
        "pid": _dead_pid(),
        "proc_start": 1,
        "since": 0.0,
    }
    (home.root / "trial.json").write_text(json.dumps(record))


def test_a_trial_record_naming_any_binary_never_runs_it_when_gc_finishes_the_trial(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed.root)
    ran = tmp_path / "planted-ran"
    planted = tmp_path / "planted.sh"
    planted.write_text(f"#!/bin/sh\n: > '{ran}'\nsleep 30\n")
    planted.chmod(0o755)
    active = installed.read_pointer()
    _write_trial(
        installed,
        before={"active": active.active, "previous": active.previous},
        server={"binary": str(planted), "args": [], "cwd": None, "managed": True},
        runtime=active.active or "",
    )
    code, payload = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, payload
    assert not ran.exists(), "gc ran the binary a trial record named"
    assert not (installed.root / "trial.json").exists()
    frozen.assert_intact("b7000", capsys=capsys)


@pytest.mark.parametrize("name", ["..", ".", "../../x", "not-installed-b6999"])
def test_a_trial_record_naming_no_installed_runtime_never_reaches_the_pointer(
    name: str, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, installed: Home
) -> None:
    frozen = HomeGuard(None, installed.root)
    current = installed.read_pointer().active or ""
    _write_trial(installed, before={"active": name, "previous": None}, server=None, runtime=current)
    code, payload = run_json(capsys, home, github.api_url, "which")
    assert code == 0 and "b7000" in payload["binary"], payload
    code, payload = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, payload
    assert json.loads((installed.root / "active.json").read_text())["active"] == current
    frozen.assert_intact("b7000", capsys=capsys)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload


@pytest.mark.parametrize("binary", ["python", "installed"])
def test_a_server_record_copying_a_live_process_identity_is_never_signalled(
    binary: str,
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    live_process: subprocess.Popen[bytes],
) -> None:
    frozen = HomeGuard(None, installed.root)
    named = sys.executable if binary == "python" else str(installed.load(installed.read_pointer().active or "").binary)
    record: dict[str, object] = {
        "pid": live_process.pid,
        "proc_start": process_start_ticks(live_process.pid),
        "binary": named,
        "args": [],
        "port": 1,
    }
    installed.server_dir.mkdir(parents=True, exist_ok=True)
    (installed.server_dir / "server.json").write_text(json.dumps(record))
    code, payload = run_json(capsys, home, github.api_url, "server", "status")
    assert code == 0 and payload["running"] is False, payload
    code, payload = run_json(capsys, home, github.api_url, "server", "stop")
    assert code == 0, payload
    assert live_process.poll() is None, "server stop signalled a process the record only claimed"
    frozen.assert_intact("b7000", capsys=capsys)


def test_which_never_names_a_build_on_trial_even_when_nothing_was_checked_before_it(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    installed: Home,
    live_process: subprocess.Popen[bytes],
) -> None:
    frozen = HomeGuard(None, installed.root)
    current = installed.read_pointer().active or ""
    record = {
        "schema": 1,
        "runtime": current,
        "name": "b7000 (cpu)",
        "before": {"active": None, "previous": None},
        "before_name": "no managed runtime",
        "server": None,
        "pid": live_process.pid,  # its switch is still running: nothing has been checked yet
        "proc_start": process_start_ticks(live_process.pid),
        "since": 0.0,
    }
    (installed.root / "trial.json").write_text(json.dumps(record))
    code, payload = run_json(capsys, home, github.api_url, "which")
    assert code == 5, payload
    code, payload = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and payload["active"] is None and payload["trial"]["owner_running"] is True, payload
    (installed.root / "trial.json").unlink()
    frozen.assert_intact("b7000", capsys=capsys)
