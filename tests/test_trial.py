"""Trial activation: SIGKILL inside a server switch, and the next locking command reverts it.

The real build serves the tiny model on its CPU path; ``update`` runs as a child
that SIGKILLs itself at each checkpoint of the switch (the old server about to
stop and stopped, the new one waited on, its completion check begun). Until a
locking command runs, readers hand out the last checked runtime and report the
trial; afterwards b7000 is active, its server runs (restarted with its
arguments) and generates, and the same update, run again, checks b7001 afresh.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import probe_inference
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.listen import free_port
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.runtime.trial import TRIAL_FILE, read_trial
from llama_runtime.updater.checkpoints import SWITCH_CHECKPOINTS
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, assert_runs, kill_leftover_server, run_json
from tests.helpers import run_killed as shared_run_killed
from tests.tinymodel import write_tiny_llama

pytestmark = [pytest.mark.real_binary, pytest.mark.slow]

CPU_ARGS = ("--device", "none")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    yield path
    kill_leftover_server(path)


@pytest.fixture
def serving_b7000(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    tiny_model: Path,
    vk_env: dict[str, str],
) -> dict[str, Any]:
    """The real b7000 serving the tiny model on the CPU; the same bytes published as b7001."""
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {VULKAN_TAR.format(tag=tag): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "120", "--", "-m", str(tiny_model), *CPU_ARGS
    )
    assert code == 0 and started["healthy"] is True, started
    return started


def run_killed(home: Path, github: FakeGitHub, point: str, *args: str) -> subprocess.CompletedProcess[str]:
    return shared_run_killed(home, github.api_url, point, *args, timeout=180)


def assert_b7000_serves(home: Path, args: list[str]) -> None:
    """b7000 is active, and its llama-server runs with the arguments it had and generates."""
    pointer = json.loads((home / "active.json").read_text())
    assert "b7000" in pointer["active"]
    server = ManagedServer(Home(home).server_dir)
    status = server.status()
    assert status.running and status.healthy, status
    assert status.runtime_name is not None and "b7000" in status.runtime_name
    assert server.current_args() == args
    assert_runs(status.binary or Path("/missing"))
    url = server.endpoint()
    assert url is not None
    assert probe_inference(url, timeout=60).ok


@pytest.mark.parametrize("point", SWITCH_CHECKPOINTS)
def test_sigkill_inside_the_switch_is_reverted_by_the_next_locking_command_and_b7000_serves(
    point: str,
    serving_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
) -> None:
    args = ManagedServer(Home(home).server_dir).current_args()
    done = run_killed(home, github, point, "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    trial = read_trial(Home(home))
    assert trial is not None and "b7001" in trial.runtime and trial.server is not None
    assert trial.server.args == tuple(args)

    # Readers report the trial and hand out the last checked runtime; they change nothing.
    code, shown = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and "b7000" in shown["active"]["name"], shown
    assert shown["trial"]["runtime"] == trial.runtime and shown["trial"]["owner_running"] is False
    code, which = run_json(capsys, home, github.api_url, "which")
    assert code == 0 and "b7000" in which["binary"]
    code, listed = run_json(capsys, home, github.api_url, "list")
    assert code == 0 and [e["active"] for e in listed["installed"] if "b7000" in e["name"]] == [True]
    assert (home / TRIAL_FILE).exists()

    # The next locking command finishes the trial: b7000 active, its server back with its arguments.
    code, cleaned = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, cleaned
    assert not (home / TRIAL_FILE).exists()
    assert_b7000_serves(home, args)

    # Nothing was left believing b7001 is fine: the same update checks it again and switches.
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["result"] == "switched" and payload["gate"]["checked"] is True
    assert not (home / TRIAL_FILE).exists()


def test_update_after_a_killed_switch_says_it_reverted_and_then_checks_the_build_again(
    serving_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    done = run_killed(home, github, "during_completion_check", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["warnings"][0].startswith("The switch to b7001 (vulkan) ")
    assert "reverted to b7000 (vulkan) and restarted its llama-server" in payload["warnings"][0]
    assert payload["result"] == "switched" and payload["gate"]["checked"] is True


def test_doctor_reports_an_abandoned_trial_and_repair_reverts_it(
    serving_b7000: dict[str, Any], capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    args = ManagedServer(Home(home).server_dir).current_args()
    done = run_killed(home, github, "during_health_wait", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code != 0, report
    assert "reverts to b7000 (vulkan)" in json.dumps(report)
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert not (home / TRIAL_FILE).exists()
    assert_b7000_serves(home, args)


def test_ensure_hands_out_the_last_checked_runtime_while_a_switch_is_on_trial(
    serving_b7000: dict[str, Any], home: Path, github: FakeGitHub
) -> None:
    from llama_runtime import RuntimeUpdater

    done = run_killed(home, github, "during_completion_check", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    ready = RuntimeUpdater(home=home).ensure()
    assert ready.ready and "b7000" in ready.runtime.name
    assert ready.trial is not None and "b7001" in ready.trial


def _server_runs(home: Path) -> bool:
    return ManagedServer(Home(home).server_dir).is_running()


@pytest.mark.parametrize("point", SWITCH_CHECKPOINTS)
def test_server_restart_after_a_killed_switch_brings_back_b7000_with_its_last_arguments(
    point: str,
    serving_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
) -> None:
    args = ManagedServer(Home(home).server_dir).current_args()
    done = run_killed(home, github, point, "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    down = not _server_runs(home)

    # status and which name the checked build, and status says whether the switch left the server down.
    code, shown = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and "b7000" in shown["active"]["name"], shown
    assert shown["trial"]["server_down"] is down
    code, which = run_json(capsys, home, github.api_url, "which")
    assert code == 0 and "b7000" in which["binary"] and "b7001" not in which["binary"]
    code, said = run_json(capsys, home, github.api_url, "server", "status")
    assert code == 0 and (said["down_after_switch"] is not None) is down, said

    code, restarted = run_json(capsys, home, github.api_url, "server", "restart", "--timeout", "120")
    assert code == 0 and restarted["healthy"] is True, restarted
    assert "b7000" in restarted["runtime"]["name"]
    assert restarted["recovered"].startswith("The switch to b7001 (vulkan) ")
    assert not (home / TRIAL_FILE).exists()
    assert_b7000_serves(home, args)


def test_server_start_after_a_killed_switch_runs_the_checked_build_with_the_arguments_given(
    serving_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tiny_model: Path,
) -> None:
    done = run_killed(home, github, "after_server_stop", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not _server_runs(home)
    code, shown = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and shown["trial"]["server_down"] is True

    new_args = ["-m", str(tiny_model), *CPU_ARGS, "--ctx-size", "256"]
    code, started = run_json(capsys, home, github.api_url, "server", "start", "--timeout", "120", "--", *new_args)
    assert code == 0 and started["healthy"] is True, started
    assert "b7000" in started["runtime"]["name"] and "b7000" in started["runtime_name"]
    assert not (home / TRIAL_FILE).exists()
    pointer = json.loads((home / "active.json").read_text())
    assert "b7000" in pointer["active"]
    running = ManagedServer(Home(home).server_dir).current_args()
    assert running[: len(new_args)] == new_args

    # The next locking command has nothing left to revert: the user's server keeps running untouched.
    pid = started["pid"]
    code, cleaned = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, cleaned
    assert ManagedServer(Home(home).server_dir).status().pid == pid
    assert_b7000_serves(home, running)


def test_gc_after_a_killed_switch_restarts_b7000_with_the_arguments_the_user_started_last(
    serving_b7000: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    tiny_model: Path,
) -> None:
    done = run_killed(home, github, "during_completion_check", "update", "--tag", "b7001", "--backend", "vulkan")
    assert done.returncode == -signal.SIGKILL, done.stderr
    trial = read_trial(Home(home))
    assert trial is not None
    # The user restarted the server meanwhile with new arguments, the way an older llama-runtime (or an app
    # driving ManagedServer) did: on the build on trial, the trial left unfinished.
    server = ManagedServer(Home(home).server_dir)
    binary = server.current_binary()
    assert binary is not None and "b7001" in str(binary)
    server.stop()
    server.start(binary, ["-m", str(tiny_model), *CPU_ARGS, "--ctx-size", "320", "--port", str(free_port())])
    assert server.wait_healthy(120)
    latest = server.current_args()

    code, cleaned = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, cleaned
    assert not (home / TRIAL_FILE).exists()
    assert_b7000_serves(home, latest)
