"""The embeddable API in one process: ensure, start_update, job handles, cancel, resume.

Each test that changes nothing asserts the active runtime is untouched and runs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from llama_runtime import BusyError, JobState, RuntimeUpdater, UserInputError
from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.runtime.procinfo import process_start_ticks
from llama_runtime.types import JobResult
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.cli.main import main
from tests.archives import build_release_archive
from tests.fakeclock import FakeClock
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, stand_in_server

# Incompressible padding so that a dripped download lasts long enough to overlap.
PAD_BYTES = 96 * 1024
# Generous bound for "eventually"; conditions are polled, never slept for.
EVENTUALLY_SECONDS = 30.0


def cpu_tarball(directory: Path, tag: str, pad: int = 0) -> Path:
    """A stand-in CPU_TAR build of ``tag`` (plus ``pad`` random bytes to make it bigger)."""
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)")}
    if pad:
        files["libpad.so"] = os.urandom(pad)
    path = directory / f"{tag}-{pad}.tar.gz"
    return build_release_archive(path, "tar-tagdir", files, modes={"llama-server": 0o755}, tag=tag)


def publish(github: FakeGitHub, directory: Path, tag: str, *, pad: int = 0, prerelease: bool = False) -> str:
    """Publish a CPU_TAR build of ``tag``; returns the asset name."""
    name = CPU_TAR.format(tag=tag)
    github.add_release(REPO, tag, {name: cpu_tarball(directory, tag, pad)}, prerelease=prerelease)
    return name


def slow_down(github: FakeGitHub, asset: str) -> None:
    """Drip the asset so an update lasts a couple of seconds."""
    github.inject(asset, Fault(drip_seconds=0.02, drip_chunk=1024, times=None))


def make_updater(home: Path, github: FakeGitHub, clock: Clock = SYSTEM_CLOCK) -> RuntimeUpdater:
    return RuntimeUpdater(
        home, repo=REPO, backend="cpu", api_url=github.api_url, host=lambda: host_for_platform("linux-x64"), clock=clock
    )


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENTUALLY_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def downloading(state: JobState | None) -> bool:
    return state is not None and state.phase == "download" and state.done_bytes > 0


@pytest.fixture
def installed(home: Path, github: FakeGitHub, tmp_path: Path) -> RuntimeUpdater:
    """b7000 (stand-in CPU_TAR build) installed and active."""
    publish(github, tmp_path, "b7000")
    updater = make_updater(home, github)
    state = updater.start_update(tag="b7000").wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    return updater


# -- start-up -------------------------------------------------------------------------


def test_ensure_with_nothing_installed_says_so_and_makes_no_request(home: Path, github: FakeGitHub) -> None:
    result = make_updater(home, github).ensure()
    assert not result.ready and result.binary is None and not result.update_running
    assert result.problem is not None and "installed" in result.problem
    assert github.requests == []


def test_ensure_with_verified_runtime_returns_it_without_network(installed: RuntimeUpdater, github: FakeGitHub) -> None:
    before = len(github.requests)
    result = installed.ensure()
    assert result.ready and not result.update_running and result.problem is None
    assert result.runtime is not None and result.runtime.marker.tag == "b7000"
    assert len(github.requests) == before
    assert result.binary is not None
    assert_runs(result.binary)


def test_ensure_with_binary_of_wrong_size_reports_it_not_ready(installed: RuntimeUpdater) -> None:
    binary = installed.ensure().binary
    assert binary is not None
    binary.write_bytes(binary.read_bytes() + b"\n# tampered\n")
    result = installed.ensure()
    assert not result.ready
    assert result.problem is not None and "differs" in result.problem


def test_ensure_install_if_missing_installs_the_newest_release(home: Path, github: FakeGitHub, tmp_path: Path) -> None:
    publish(github, tmp_path, "b7000")
    publish(github, tmp_path, "b7001")
    result = make_updater(home, github).ensure(install_if_missing=True)
    assert result.ready and result.installed
    assert result.runtime is not None and result.runtime.marker.tag == "b7001"
    assert result.binary is not None
    assert_runs(result.binary)


# -- the button -----------------------------------------------------------------------


def test_the_clock_given_to_the_updater_times_the_job_and_the_install(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000")
    updater = make_updater(home, github, clock=FakeClock(1_700_000_000.0))
    state = updater.start_update(tag="b7000").wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    recorded = updater.jobs.current()
    assert recorded is not None and recorded.started_at == recorded.updated_at == 1_700_000_000.0
    ready = updater.ensure()
    assert ready.ready and ready.runtime.marker.installed_at == "2023-11-14T22:13:20.000Z"


def test_second_start_update_while_running_returns_same_job_and_downloads_once(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    slow_down(github, asset)
    first = installed.start_update()
    second = installed.start_update()
    assert second.id == first.id
    assert first.owned and not second.owned
    final = second.wait(EVENTUALLY_SECONDS)
    assert final.phase == "done", final.error
    assert first.wait(EVENTUALLY_SECONDS).phase == "done"
    assert len(github.requests_to("blob", asset)) == 1
    assert final.result is not None and final.result.active is not None and final.result.active.marker.tag == "b7001"
    assert_runs(active_binary(final.result))


def test_job_events_go_through_the_phases_and_end_with_the_result(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    job = installed.start_update()
    states = list(job.events(timeout=EVENTUALLY_SECONDS))
    phases = [s.phase for s in states]
    assert phases[-1] == "done"
    seen = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert [p for p in seen if p in ("download", "verify", "activate", "done")] == [
        "download",
        "verify",
        "activate",
        "done",
    ]
    downloads = [s for s in states if s.phase == "download"]
    size = (tmp_path / f"b7001-{PAD_BYTES}.tar.gz").stat().st_size
    assert downloads[-1].done_bytes == downloads[-1].total_bytes == size
    assert len(github.requests_to("blob", asset)) == 1
    assert states[-1].result is not None and states[-1].result.result == "installed"


def test_button_while_another_process_holds_the_lock_fails_fast_with_busy(installed: RuntimeUpdater) -> None:
    frozen = HomeGuard(None, installed.home)
    with UpdateLock(Home(installed.home).lock_path).hold("rollback"), pytest.raises(BusyError) as caught:
        installed.start_update()
    assert "rollback" in caught.value.message
    current = installed.jobs.current()  # no job was claimed for the refused press
    assert current is not None and current.tag == "b7000" and current.phase == "done"
    frozen.assert_intact("b7000", staging_empty=True)


def test_button_with_join_false_while_a_job_runs_says_busy_with_its_progress(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    slow_down(github, asset)
    job = installed.start_update()
    # The busy message reads the job file, which is written just after the in-memory state changes
    # (an fsync on a busy disk can take a while): wait for the file too.
    eventually(lambda: downloading(job.state()) and downloading(installed.jobs.current()), "the download to start")
    with pytest.raises(BusyError) as caught:
        installed.start_update(join=False)
    assert "download" in caught.value.message and job.id in caught.value.message
    assert job.wait(EVENTUALLY_SECONDS).phase == "done"


def test_start_update_of_another_tag_while_a_job_runs_is_busy_naming_that_job(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    """The API joined a b7001 job for ``tag="b7002"`` and ended "done" with b7001 active."""
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    publish(github, tmp_path, "b7002")
    slow_down(github, asset)
    frozen = HomeGuard(None, installed.home)
    job = installed.start_update(tag="b7001")
    eventually(lambda: downloading(installed.jobs.current()), "the download to start")
    with pytest.raises(BusyError) as caught:
        installed.start_update(tag="b7002")
    assert caught.value.exit_code == 3  # the CLI's answer to the same case
    assert job.id in caught.value.message and "b7001" in caught.value.message and "b7002" in caught.value.message
    assert installed.start_update(tag="b7001").id == job.id  # the same tag still joins
    frozen.assert_intact("b7000")  # nothing of the refused request happened; b7000 still runs
    assert job.wait(EVENTUALLY_SECONDS).phase == "done"
    assert not github.requests_to("api", "b7002")


@pytest.mark.parametrize("method", ["start_update", "update", "plan"])
def test_api_bare_build_number_is_refused_before_any_request_with_the_clis_hint(
    installed: RuntimeUpdater, github: FakeGitHub, method: str
) -> None:
    frozen = HomeGuard(None, installed.home)
    before = len(github.requests)
    with pytest.raises(UserInputError) as caught:
        getattr(installed, method)(tag="7000")
    assert "did you mean b7000?" in caught.value.message
    assert len(github.requests) == before
    frozen.assert_intact("b7000", staging_empty=True)


def leftover_running_job(home: Path, pid: int, proc_start: int | None) -> None:
    """What a process killed mid-download leaves in jobs/current.json."""
    then = time.time() - 3600
    state = JobState(
        id="deadbeefdeadbeef",
        phase="download",
        pid=pid,
        done_bytes=1000,
        total_bytes=5000,
        started_at=then,
        updated_at=then,
        proc_start=proc_start,
    )
    (home / "jobs" / "current.json").write_text(json.dumps(state.to_json()))


def test_button_after_a_restart_with_the_same_pid_starts_a_new_job(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    # In a container the app gets the same pid after every restart.
    publish(github, tmp_path, "b7001")
    leftover_running_job(installed.home, os.getpid(), process_start_ticks(os.getpid()))
    assert not installed.ensure().update_running
    job = installed.start_update()
    assert job.owned and job.id != "deadbeefdeadbeef"
    state = job.wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    assert state.result is not None
    assert_runs(active_binary(state.result))


def test_button_when_the_crashed_jobs_pid_now_names_another_process_starts_a_new_job(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7001")
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = process_start_ticks(unrelated.pid)
        if ticks is None:
            pytest.skip("process start times are not available on this platform")
        leftover_running_job(installed.home, unrelated.pid, ticks - 100)  # the crashed owner started earlier
        job = installed.start_update()
        assert job.owned
        state = job.wait(EVENTUALLY_SECONDS)
    finally:
        unrelated.kill()
        unrelated.wait()
    assert state.phase == "done", state.error


def test_lock_owner_record_left_by_a_crash_does_not_make_the_button_busy(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    # kill -9 while holding the lock: the kernel frees the lock, the owner record stays
    # (and after a container restart its pid is ours again).
    publish(github, tmp_path, "b7001")
    lock = UpdateLock(Home(installed.home).lock_path)
    owner = {"pid": os.getpid(), "operation": "button", "since": time.time() - 3600}
    lock.owner_path.write_text(json.dumps(owner))
    assert not installed.update_running()
    state = installed.start_update().wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error


def test_ctrl_c_in_a_foreground_job_records_it_cancelled_and_propagates(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed.home)
    publish(github, tmp_path, "b7001", pad=PAD_BYTES)

    def ctrl_c_during_download(state: JobState) -> None:
        if state.phase == "download":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        installed.start_update(background=False, listener=ctrl_c_during_download)
    current = installed.jobs.current()
    assert current is not None and current.phase == "cancelled" and not current.stale
    assert current.error is not None and current.error.code == "cancelled"
    frozen.assert_intact("b7000", staging_empty=True)
    assert installed.start_update().wait(EVENTUALLY_SECONDS).phase == "done"  # nothing left blocking


@pytest.mark.parametrize("cuda", ["nan", "-12", "12.x"])
def test_a_malformed_cuda_version_is_refused_before_any_job_starts(installed: RuntimeUpdater, cuda: str) -> None:
    frozen = HomeGuard(None, installed.home)
    before = installed.jobs.current()
    with pytest.raises(UserInputError, match=r"use a line such as '12' or '12\.4'"):
        installed.start_update(cuda_version=cuda)
    assert installed.jobs.current() == before
    frozen.assert_intact("b7000", staging_empty=True)


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -1.0])
def test_lock_timeout_that_is_not_a_finite_non_negative_number_is_bad_input(
    installed: RuntimeUpdater, seconds: float
) -> None:
    frozen = HomeGuard(None, installed.home)
    before = installed.jobs.current()
    with pytest.raises(UserInputError):
        installed.start_update(lock_timeout=seconds)
    assert installed.jobs.current() == before
    frozen.assert_intact("b7000", staging_empty=True)


# -- cancel and resume ----------------------------------------------------------------


def test_cancel_during_download_adds_no_runtime_and_keeps_the_partial_for_resume(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed.home)
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    github.inject(asset, Fault(drip_seconds=0.02, drip_chunk=1024, times=1))
    job = installed.start_update()
    eventually(lambda: downloading(job.state()), "the download to start")
    job.cancel()
    state = job.wait(EVENTUALLY_SECONDS)
    assert state.phase == "cancelled"
    assert state.error is not None and state.error.code == "cancelled"
    frozen.assert_intact("b7000", staging_empty=True)
    partials = list(Home(installed.home).downloads_dir.glob(f"*{asset}.part"))
    assert len(partials) == 1
    kept = partials[0].stat().st_size
    assert 0 < kept < PAD_BYTES

    # The next job asks only for the rest.
    resumed = installed.start_update().wait(EVENTUALLY_SECONDS)
    assert resumed.phase == "done", resumed.error
    last = github.requests_to("blob", asset)[-1]
    assert last.headers.get("range") == f"bytes={kept}-"
    assert resumed.result is not None
    assert_runs(active_binary(resumed.result))
    assert list(Home(installed.home).downloads_dir.glob("*.part")) == []


def test_cancel_while_the_new_binary_is_verified_activates_nothing(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    # events.md: a cancel is honoured until activation begins, not only while downloading.
    frozen = HomeGuard(None, installed.home)
    slow = stand_in_server("version: 7001 (stand-in)").replace(b"--version)", b"--version) sleep 2;")
    archive = build_release_archive(tmp_path / "slow.tar.gz", "tar-tagdir", {"llama-server": slow},
                                    modes={"llama-server": 0o755}, tag="b7001")  # fmt: skip
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): archive})
    job = installed.start_update(tag="b7001")
    eventually(lambda: (s := job.state()) is not None and s.phase == "verify", "verification to start")
    job.cancel()
    state = job.wait(EVENTUALLY_SECONDS)
    assert state.phase == "cancelled", state
    assert state.error is not None and "nothing was activated" in state.error.message
    frozen.assert_intact("b7000", staging_empty=True)


def test_cancel_from_another_handle_stops_the_job(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed.home)
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    slow_down(github, asset)
    job = installed.start_update()
    eventually(lambda: downloading(job.state()), "the download to start")
    follower = make_updater(installed.home, github).current_job()
    assert follower is not None and follower.id == job.id and not follower.owned
    follower.cancel()  # the cancel file, as another process would write it
    assert job.wait(EVENTUALLY_SECONDS).phase == "cancelled"
    assert follower.wait(EVENTUALLY_SECONDS).phase == "cancelled"
    frozen.assert_intact("b7000", staging_empty=True)


def test_download_cut_mid_body_resumes_with_range_and_installs(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    github.inject(asset, Fault(reset_after_bytes=40_000))
    state = installed.start_update().wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    blob = github.requests_to("blob", asset)
    assert len(blob) == 2
    assert "range" not in blob[0].headers
    resumed_at = int(blob[1].headers["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 40_000
    assert state.result is not None
    assert_runs(active_binary(state.result))


def test_resume_against_a_server_that_ignores_range_restarts_cleanly(
    installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    asset = publish(github, tmp_path, "b7001", pad=PAD_BYTES)
    github.inject(asset, Fault(drip_seconds=0.02, drip_chunk=1024, times=1))
    job = installed.start_update()
    eventually(lambda: downloading(job.state()), "the download to start")
    job.cancel()
    assert job.wait(EVENTUALLY_SECONDS).phase == "cancelled"
    github.inject(asset, Fault(ignore_range=True))
    state = installed.start_update().wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    last = github.requests_to("blob", asset)[-1]
    assert last.headers.get("range") and last.status == 200  # asked to resume, got the whole file
    assert state.result is not None
    assert_runs(active_binary(state.result))


class RecordingAppServer:
    """An app's own llama-server control: records what the updater asks of it."""

    def __init__(self, binary: Path) -> None:
        self.binary: Path | None = binary
        self.args = ["--port", "8080", "--models-dir", "/models"]
        self.calls: list[str] = []

    def is_running(self) -> bool:
        return self.binary is not None

    def stop(self, timeout: float) -> None:
        self.calls.append("stop")
        self.binary = None

    def start(self, binary: Path, args: Sequence[str]) -> None:
        self.calls.append(f"start {Path(binary).parent.name} {' '.join(args)}")
        self.binary = Path(binary)

    def wait_healthy(self, timeout: float) -> bool:
        self.calls.append("health")
        return True

    def current_args(self) -> list[str]:
        return list(self.args) if self.binary else []

    def current_binary(self) -> Path | None:
        return self.binary


def test_an_apps_own_server_is_stopped_and_restarted_on_the_new_binary(github: FakeGitHub, tmp_path: Path) -> None:
    home = tmp_path / "home"
    publish(github, tmp_path, "b7000")
    publish(github, tmp_path, "b7001")
    first = make_updater(home, github).start_update(tag="b7000").wait(60)
    assert first.phase == "done", first.error
    old_binary = active_binary(first.result) if first.result else None
    assert old_binary is not None
    app = RecordingAppServer(old_binary)
    updater = RuntimeUpdater(
        home,
        repo=REPO,
        backend="cpu",
        api_url=github.api_url,
        host=lambda: host_for_platform("linux-x64"),
        server=app,  # type: ignore[arg-type]  # a control without endpoint(), as older apps' are
    )
    final = updater.start_update(tag="b7001").wait(60)
    assert final.phase == "done", final.error
    assert app.calls == ["stop", "start llama-b7001 --port 8080 --models-dir /models", "health"]
    assert app.binary is not None and app.binary.name == "llama-server"
    assert final.result is not None and active_binary(final.result) == app.binary
    assert_runs(app.binary)


# -- one composition root ---------------------------------------------------------------


def test_updater_takes_the_api_url_and_repo_from_the_environment_like_the_cli(
    home: Path, github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(github, tmp_path, "b7000")
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_API", github.api_url)
    monkeypatch.setenv("LLAMA_RUNTIME_REPO", REPO)
    updater = RuntimeUpdater(home, backend="cpu", host=lambda: host_for_platform("linux-x64"))
    assert updater.api_url == github.api_url
    state = updater.start_update().wait(EVENTUALLY_SECONDS)
    assert state.phase == "done", state.error
    assert github.requests_to("api"), "the update asked the configured API"


@pytest.mark.parametrize("name", ["LLAMA_RUNTIME_READ_TIMEOUT", "LLAMA_RUNTIME_HEALTH_TIMEOUT"])
def test_updater_and_cli_refuse_the_same_malformed_timeout(
    home: Path, name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(name, "soon")
    with pytest.raises(UserInputError, match=name):
        RuntimeUpdater(home)
    assert main(["status", "--home", str(home), "--json"]) == 2
    assert name in json.loads(capsys.readouterr().out)["error"]["message"]


def test_checked_ready_narrows_the_result_so_binary_is_a_path(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    app = tmp_path / "app.py"
    app.write_text(
        "from pathlib import Path\n"
        "from llama_runtime import RuntimeUpdater\n"
        "result = RuntimeUpdater(Path('home')).ensure()\n"
        "if result.ready:\n"
        "    binary: Path = result.binary\n"
        "else:\n"
        "    problem: str = result.problem\n"
    )
    out, err, code = api.run(["--strict", "--no-incremental", "--follow-imports=silent", str(app)])
    assert code == 0, out + err


def active_binary(result: JobResult | None) -> Path:
    """The ``llama-server`` of the runtime a finished job made active."""
    assert result is not None and result.active is not None
    return result.active.binary
