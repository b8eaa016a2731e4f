"""Start-up, the button and cron in separate processes on one home, during a slow update.

Each scenario ends by asserting one download, a valid pointer and that the
active runtime runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.updater.api.job_store import JobStore
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, assert_runs, cli_process
from tests.test_service import PAD_BYTES, downloading, eventually, make_updater, publish, slow_down

# A child process that drives the embeddable API: python -c CHILD HOME API ACTION
CHILD = """
import json, sys
from pathlib import Path
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.logs import configure_logging
from llama_runtime.updater.api.service import RuntimeUpdater

configure_logging(json_lines=False, level="warning")  # logs to stderr; stdout is for results
home, api, action = sys.argv[1:4]
updater = RuntimeUpdater(
    Path(home), repo="ggml-org/llama.cpp", backend="cpu", api_url=api,
    host=lambda: host_for_platform("linux-x64"),
)
if action == "start":
    job = updater.start_update()
    print(json.dumps({"id": job.id, "owned": job.owned}), flush=True)
    print(json.dumps(job.wait(60).to_json()), flush=True)
elif action == "ensure":
    result = updater.ensure()
    print(json.dumps({
        "ready": result.ready, "update_running": result.update_running,
        "tag": result.runtime.marker.tag if result.runtime else None,
        "binary": str(result.binary) if result.binary else None,
    }), flush=True)
"""
CHILD_TIMEOUT_SECONDS = 60


@pytest.fixture(name="home")
def b7001_downloading_slowly_home(tmp_path: Path, github: FakeGitHub) -> Path:
    """The ``home`` of job tests: b7000 installed and active; b7001 published with a slow download."""
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    assert make_updater(home, github).start_update(tag="b7000").wait(30).phase == "done"
    slow_down(github, publish(github, tmp_path, "b7001", pad=PAD_BYTES))
    return home


def spawn(home: Path, github: FakeGitHub, action: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), github.api_url, action],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines_of(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def cli(home: Path, github: FakeGitHub, *args: str) -> subprocess.CompletedProcess[str]:
    """``llama-runtime ARGS`` as a child process on this test's home and fake GitHub."""
    return cli_process(*args, "--home", str(home), "--api-url", github.api_url, timeout=CHILD_TIMEOUT_SECONDS)


def blob_requests(github: FakeGitHub, tag: str) -> int:
    return len(github.requests_to("blob", f"llama-{tag}-bin-ubuntu-x64.tar.gz"))


def wait_for_download(home: Path) -> None:
    store = JobStore(Home(home))
    eventually(lambda: downloading(store.current()), "the update job to start downloading")


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_active(home: Path, tag: str) -> None:
    h = Home(home)
    active = h.load(h.read_pointer().active or "")
    assert active.marker.tag == tag
    assert_runs(active.binary)
    assert list(h.staging_dir.iterdir()) == []


def test_startup_during_an_update_returns_the_active_runtime_at_once(home: Path, github: FakeGitHub) -> None:
    button = spawn(home, github, "start")
    wait_for_download(home)
    api_before = len(github.requests_to("api"))
    started = lines_of(spawn(home, github, "ensure"))[0]
    assert started["ready"] and started["update_running"] and started["tag"] == "b7000"
    assert len(github.requests_to("api")) == api_before  # start-up asked GitHub nothing
    assert_runs(Path(started["binary"]))
    final = lines_of(button)[-1]
    assert final["phase"] == "done", final["error"]
    assert_active(home, "b7001")


def test_two_button_presses_in_two_processes_share_one_job_and_one_download(home: Path, github: FakeGitHub) -> None:
    first = spawn(home, github, "start")
    wait_for_download(home)
    second = spawn(home, github, "start")
    a, b = lines_of(first), lines_of(second)
    assert a[0]["id"] == b[0]["id"]
    assert a[0]["owned"] and not b[0]["owned"]
    assert a[-1]["phase"] == b[-1]["phase"] == "done"
    assert b[-1]["result"]["active"]["tag"] == "b7001"
    assert blob_requests(github, "b7001") == 1
    assert_active(home, "b7001")


@pytest.fixture
def slow_home(tmp_path: Path, github: FakeGitHub) -> Path:
    """Like ``home``, with a download of ~10 s: two CLI processes must start and finish inside it
    (each pays an interpreter start, seconds on a loaded 2-core machine)."""
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    assert make_updater(home, github).start_update(tag="b7000").wait(30).phase == "done"
    slow_down(github, publish(github, tmp_path, "b7001", pad=5 * PAD_BYTES))
    return home


def test_cron_firing_mid_update_exits_3_and_corrupts_nothing(slow_home: Path, github: FakeGitHub) -> None:
    home = slow_home
    button = spawn(home, github, "start")
    wait_for_download(home)
    guard = HomeGuard(None, home)
    quiet = cli(home, github, "check", "--apply", "--backend", "cpu")
    assert quiet.returncode == 3 and quiet.stdout == "" and quiet.stderr == ""
    as_json = cli(home, github, "check", "--apply", "--backend", "cpu", "--json")
    assert as_json.returncode == 3
    payload = json.loads(as_json.stdout)
    assert payload["skipped"] == "busy" and payload["job"]["phase"] in ("download", "verify", "activate")
    guard.assert_intact(None)
    assert_active(home, "b7000")  # still the active one while the update runs
    final = lines_of(button)[-1]
    assert final["phase"] == "done", final["error"]
    assert blob_requests(github, "b7001") == 1
    assert_active(home, "b7001")


def test_job_status_from_the_cli_follows_a_job_of_another_process(home: Path, github: FakeGitHub) -> None:
    button = spawn(home, github, "start")
    wait_for_download(home)
    status = cli(home, github, "job", "status", "--json")
    assert status.returncode == 0
    job = json.loads(status.stdout)["job"]
    assert job["running"] and job["phase"] in ("download", "verify", "activate") and job["total_bytes"]
    followed = cli(home, github, "job", "wait", "--json")
    assert followed.returncode == 0
    assert json.loads(followed.stdout)["job"]["phase"] == "done"
    assert lines_of(button)[-1]["phase"] == "done"
    assert_active(home, "b7001")


def test_job_wait_that_times_out_while_the_job_runs_exits_3_saying_it_gave_up(home: Path, github: FakeGitHub) -> None:
    """`job wait --timeout N` exited 0 while the job still ran."""
    button = spawn(home, github, "start")
    wait_for_download(home)
    gave_up = cli(home, github, "job", "wait", "--timeout", "0.2", "--json")
    assert gave_up.returncode == 3, gave_up.stderr
    payload = json.loads(gave_up.stdout)
    assert payload["job"]["running"] and payload["error"]["code"] == "busy" and payload["error"]["exit_code"] == 3
    assert "still running" in payload["error"]["message"]
    events = cli(home, github, "job", "wait", "--timeout", "0.2", "--events")
    assert events.returncode == 3, events.stderr
    last = json.loads(events.stdout.splitlines()[-1])
    assert last["type"] == "error" and last["error"]["code"] == "busy" and last["job"]["running"]
    # The waiter gave up and left the job alone: the job runs on to its own end (it may have
    # activated b7001 by now, so the pointer is not frozen here).
    assert lines_of(button)[-1]["phase"] == "done"
    finished = cli(home, github, "job", "wait", "--timeout", "30", "--json")
    assert finished.returncode == 0 and json.loads(finished.stdout)["job"]["phase"] == "done"
    assert_active(home, "b7001")


def test_job_status_and_wait_from_another_terminal_follow_a_cli_update(home: Path, github: FakeGitHub) -> None:
    argv = [sys.executable, "-m", "llama_runtime", "update", "--tag", "b7001", "--backend", "cpu", "--json"]
    update = subprocess.Popen(
        [*argv, "--home", str(home), "--api-url", github.api_url], stdout=subprocess.PIPE, text=True
    )
    wait_for_download(home)
    status = cli(home, github, "job", "status", "--json")
    job = json.loads(status.stdout)["job"]
    assert job["running"] and job["operation"] == "update" and job["tag"] == "b7001"
    followed = cli(home, github, "job", "wait", "--json")
    assert followed.returncode == 0
    assert json.loads(followed.stdout)["job"]["phase"] == "done"
    out, _ = update.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    assert update.returncode == 0 and json.loads(out)["result"] == "installed"
    assert_active(home, "b7001")


def test_job_cancel_from_another_terminal_stops_a_cli_update(home: Path, github: FakeGitHub) -> None:
    pointer = (home / "active.json").read_bytes()
    argv = [sys.executable, "-m", "llama_runtime", "update", "--tag", "b7001", "--backend", "cpu", "--json"]
    update = subprocess.Popen(
        [*argv, "--home", str(home), "--api-url", github.api_url], stdout=subprocess.PIPE, text=True
    )
    wait_for_download(home)
    assert cli(home, github, "job", "cancel", "--json").returncode == 0
    out, _ = update.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    assert update.returncode != 0 and json.loads(out)["error"]["code"] == "cancelled"
    job = JobStore(Home(home)).current()
    assert job is not None and job.phase == "cancelled"
    assert (home / "active.json").read_bytes() == pointer
    assert_active(home, "b7000")


def test_killed_button_process_leaves_a_stale_job_and_the_next_press_recovers(home: Path, github: FakeGitHub) -> None:
    button = spawn(home, github, "start")
    wait_for_download(home)
    button.kill()
    button.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    stale = JobStore(Home(home)).current()
    assert stale is not None and stale.phase == "failed" and stale.stale
    assert_active(home, "b7000")
    again = lines_of(spawn(home, github, "start"))
    assert again[0]["id"] != stale.id and again[-1]["phase"] == "done"
    assert_active(home, "b7001")


def test_cli_update_while_the_button_job_runs_is_busy_with_that_jobs_progress(home: Path, github: FakeGitHub) -> None:
    button = spawn(home, github, "start")
    wait_for_download(home)
    pointer = (home / "active.json").read_bytes()
    busy = cli(home, github, "update", "--tag", "b7001", "--backend", "cpu", "--json")
    assert busy.returncode == 3
    message = json.loads(busy.stdout)["error"]["message"]
    assert message.startswith("Another llama-runtime process is updating this runtime")
    job_id = JobStore(Home(home)).current()
    assert job_id is not None and f"Its job {job_id.id}: " in message
    assert (home / "active.json").read_bytes() == pointer
    assert_active(home, "b7000")
    assert lines_of(button)[-1]["phase"] == "done"
    assert blob_requests(github, "b7001") == 1
    assert_active(home, "b7001")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "systemd-stop"])
def test_ctrl_c_or_sigterm_during_check_apply_exits_130_and_records_the_job_cancelled(
    home: Path, github: FakeGitHub, sig: signal.Signals
) -> None:
    # SIGTERM (systemd stop, `timeout`) is an interruption like Ctrl-C: exit 130 with the
    # JSON error, the job recorded cancelled, nothing half-done left.
    guard = HomeGuard(None, home)
    argv = [sys.executable, "-m", "llama_runtime", "check", "--apply", "--backend", "cpu", "--json"]
    proc = subprocess.Popen(
        [*argv, "--home", str(home), "--api-url", github.api_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As at a terminal, where the foreground command's SIGINT is never ignored. A test run
        # started in the background (`cmd &` in a script, as a CI runner may) passes SIGINT on
        # ignored, Python then installs no KeyboardInterrupt handler, and the update runs to the end.
        preexec_fn=_interruptible,
    )
    wait_for_download(home)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    assert proc.returncode == 130, err
    assert json.loads(out)["error"]["code"] == "cancelled"
    job = JobStore(Home(home)).current()
    assert job is not None and job.phase == "cancelled" and not job.stale
    assert job.error is not None and job.error.code == "cancelled"
    guard.assert_intact(None)
    assert_active(home, "b7000")


def test_three_cli_updates_with_wait_started_at_once_all_succeed_with_one_download(
    home: Path, github: FakeGitHub
) -> None:
    # Each may find the others still resolving (a job claimed, no lock yet): --wait covers that
    # window too, not only an update that is already downloading.
    argv = [sys.executable, "-m", "llama_runtime", "update", "--tag", "b7001", "--backend", "cpu", "--wait", "60",
            "--json", "--home", str(home), "--api-url", github.api_url]  # fmt: skip
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [proc.communicate(timeout=CHILD_TIMEOUT_SECONDS) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], results
    assert blob_requests(github, "b7001") == 1
    assert_active(home, "b7001")


def test_starting_the_server_while_another_process_holds_its_lock_is_busy_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """filelock's Timeout is an OSError: the lock's wait must end as BusyError (exit 3), never as the raw error."""
    from llama_runtime import BusyError
    from llama_runtime.runtime import server

    server_dir = tmp_path / "server"
    server_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(server_dir / server.LOCK_NAME)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(server, "SERVER_LOCK_TIMEOUT_SECONDS", 0.05)
        with pytest.raises(BusyError, match="starting or stopping the server"):
            server.ManagedServer(server_dir).start(tmp_path / "llama-server", [])
        assert not (server_dir / "server.json").exists()
    finally:
        holder.kill()
        holder.wait()


HOLD_LOCK = """
import sys, time, filelock
lock = filelock.FileLock(sys.argv[1], thread_local=False)
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""
