"""The persisted job state: claim (single-flight), staleness, cancel files, progress records."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime import BusyError, CancelledError
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks
from llama_runtime.updater.api.job_store import KEEP_FINISHED, JobState, JobStore
from llama_runtime.updater.api.jobs import JobRecorder
from llama_runtime.updater.cli.progressbar import terminal_progress
from llama_runtime.updater.progress import Progress, RateMeter
from tests.fakeclock import FakeClock


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    home = Home(tmp_path / "home")
    home.ensure()
    return JobStore(home)


def new_job(job_id: str = "a1", pid: int | None = None) -> JobState:
    return JobState(id=job_id, phase="resolve", pid=os.getpid() if pid is None else pid, started_at=1.0)


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(done.stdout)


def test_job_state_survives_a_json_round_trip() -> None:
    state = JobState(
        id="ff", phase="download", pid=42, tag="b7001", done_bytes=5, total_bytes=10, rate=2.5, eta=2.0, message="x"
    )
    assert JobState.from_json(json.loads(json.dumps(state.to_json()))) == state


@pytest.mark.parametrize("payload", [None, [], {"id": "x"}, {"id": "x", "phase": "flying", "pid": 1}, "text"])
def test_damaged_job_record_counts_as_no_job(payload: object) -> None:
    assert JobState.from_json(payload) is None


def test_unreadable_current_file_is_no_job(store: JobStore) -> None:
    store.current_path.write_text("{not json")
    assert store.current() is None


def test_first_claim_wins_and_second_claim_gets_the_running_job(store: JobStore) -> None:
    first, claimed = store.claim(new_job("a1"))
    assert claimed and first.id == "a1"
    second, claimed_again = store.claim(new_job("b2"))
    assert not claimed_again and second.id == "a1"
    assert store.current() == first


def test_claim_after_a_finished_job_starts_a_new_one(store: JobStore) -> None:
    store.write(JobState(id="a1", phase="done", pid=os.getpid()))
    state, claimed = store.claim(new_job("b2"))
    assert claimed and state.id == "b2"
    assert store.get("a1") is not None and store.get("a1").phase == "done"  # type: ignore[union-attr]


def test_job_of_a_dead_process_is_reported_failed_not_running(store: JobStore) -> None:
    pid = dead_pid()
    assert not pid_alive(pid)
    store.write(JobState(id="a1", phase="download", pid=pid, done_bytes=3, total_bytes=9))
    state = store.current()
    assert state is not None and state.phase == "failed" and state.stale and not state.running
    assert state.error is not None and str(pid) in state.error.message
    new, claimed = store.claim(new_job("b2"))
    assert claimed and new.id == "b2"


def test_before_claim_may_refuse_and_then_nothing_is_written(store: JobStore) -> None:
    def refuse() -> None:
        raise BusyError("Another llama-runtime process is updating this runtime.")

    with pytest.raises(BusyError):
        store.claim(new_job("a1"), before_claim=refuse)
    assert store.current() is None


def test_cancel_file_written_by_another_store_stops_the_recorder(store: JobStore) -> None:
    state, _ = store.claim(new_job("a1"))
    ticks = FakeClock(1000.0)
    recorder = JobRecorder(store, state, clock=ticks)
    assert not recorder.cancel_requested()
    JobStore(store.home).request_cancel("a1")
    ticks.now += 1.0
    assert recorder.cancel_requested()
    recorder.finish("cancelled", exc=CancelledError("The download was cancelled; the partial file is kept."))
    assert not store.cancel_path("a1").exists()
    final = store.current()
    assert final is not None and final.phase == "cancelled"
    assert final.error is not None and final.error.code == "cancelled"


def test_recorder_persists_phase_changes_at_once_and_throttles_byte_counts(store: JobStore) -> None:
    state, _ = store.claim(new_job("a1"))
    ticks = FakeClock(1000.0)
    recorder = JobRecorder(store, state, clock=ticks)
    seen: list[JobState] = []
    recorder.subscribe(seen.append)
    recorder.on_progress(Progress("download", 0, 1000, "asset.tar.gz"))
    assert store.current().phase == "download"  # type: ignore[union-attr]
    ticks.now += 0.01
    recorder.on_progress(Progress("download", 100, 1000, "asset.tar.gz"))
    assert store.current().done_bytes == 0  # type: ignore[union-attr]  # throttled on disk
    assert seen[-1].done_bytes == 100  # listeners see every event
    ticks.now += 1.0
    recorder.on_progress(Progress("download", 600, 1000, "asset.tar.gz"))
    on_disk = store.current()
    assert on_disk is not None and on_disk.done_bytes == 600
    assert on_disk.rate == pytest.approx(600 / 1.01)
    assert on_disk.eta == pytest.approx(400 / (600 / 1.01))


def test_finished_job_records_are_pruned_and_leave_no_temp_files(store: JobStore) -> None:
    for n in range(KEEP_FINISHED + 3):
        store.write(JobState(id=f"j{n}", phase="done", pid=os.getpid()))
    records = [p for p in store.dir.iterdir() if p.name != "current.json"]
    assert len([p for p in records if p.suffix == ".json"]) == KEEP_FINISHED
    assert not [p for p in records if p.name.endswith(".tmp")]


@pytest.fixture
def unrelated_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that has nothing to do with any job."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_running_record_with_our_pid_that_this_process_never_claimed_is_stale(store: JobStore) -> None:
    # A container restarts the app with the same pid: the crashed run's record names us.
    store.write(JobState(id="crashed", phase="download", pid=os.getpid(), proc_start=process_start_ticks(os.getpid())))
    state = store.current()
    assert state is not None and state.stale and state.phase == "failed"
    new, claimed = store.claim(new_job("b2"))
    assert claimed and new.id == "b2"


def test_job_claimed_by_this_process_runs_until_its_recorder_finishes(store: JobStore) -> None:
    state, claimed = store.claim(new_job("a1"))
    assert claimed and state.proc_start == process_start_ticks(os.getpid())
    assert JobStore(store.home).current() == state  # a second store in this process sees it running
    JobRecorder(store, state).finish("done", result={})
    final = store.current()
    assert final is not None and final.phase == "done" and not final.stale


@pytest.mark.parametrize(
    ("recorded", "running"),
    [("same", True), ("earlier", False), ("missing", False)],
)
def test_running_record_of_a_live_pid_counts_only_with_that_process_start_time(
    store: JobStore, unrelated_process: subprocess.Popen[bytes], recorded: str, running: bool
) -> None:
    ticks = process_start_ticks(unrelated_process.pid)
    if ticks is None:
        pytest.skip("process start times are not available on this platform")
    proc_start = {"same": ticks, "earlier": ticks - 100, "missing": None}[recorded]
    store.write(JobState(id="a1", phase="download", pid=unrelated_process.pid, proc_start=proc_start))
    state = store.current()
    assert state is not None and state.running is running and state.stale is not running


def test_final_state_that_cannot_be_written_leaves_no_running_record(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, _ = store.claim(new_job("a1"))
    recorder = JobRecorder(store, state)
    real_write = store.write

    def disk_full(new: JobState) -> None:
        if not new.running:
            raise OSError(28, "No space left on device")
        real_write(new)

    monkeypatch.setattr(store, "write", disk_full)
    recorder.finish("done", result={})
    assert recorder.finished.is_set() and recorder.state.phase == "done"
    assert not store.current_path.exists()
    monkeypatch.undo()
    new, claimed = JobStore(store.home).claim(new_job("b2"))
    assert claimed and new.id == "b2"


def test_prune_tolerates_records_that_vanish_meanwhile(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_glob = Path.glob

    def glob_with_a_vanished_record(self: Path, pattern: str) -> list[Path]:
        found = list(real_glob(self, pattern))
        return [*found, self / "pruned-by-another-process.json"] if self == store.dir else found

    monkeypatch.setattr(Path, "glob", glob_with_a_vanished_record)
    for n in range(KEEP_FINISHED + 2):
        store.write(JobState(id=f"j{n}", phase="done", pid=os.getpid()))
    monkeypatch.undo()
    assert len([p for p in store.dir.glob("j*.json")]) == KEEP_FINISHED


# -- progress shown to people ---------------------------------------------------------


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    assert terminal_progress(io.StringIO()) is None


def test_progress_bar_on_a_terminal_draws_bytes_and_ends_its_line() -> None:
    tty = FakeTty()
    bar = terminal_progress(tty)
    assert bar is not None
    bar(Progress("resolve", message="resolving the release"))
    bar(Progress("download", 500, 1000, "asset.tar.gz"))
    bar(Progress("download", 1000, 1000, "asset.tar.gz"))
    bar(Progress("verify", message="extracting"))
    text = tty.getvalue()
    assert "resolve: resolving the release\n" in text
    assert "100%" in text and "asset.tar.gz" in text
    assert text.endswith("\nverify: extracting\n")


def test_rate_meter_does_not_count_resumed_bytes_as_transferred() -> None:
    ticks = FakeClock(1000.0)
    meter = RateMeter(clock=ticks)
    assert meter.sample("a", 5_000, 10_000) == (None, None)  # resumed at 5000
    ticks.now += 2.0
    rate, eta = meter.sample("a", 6_000, 10_000)
    assert rate == pytest.approx(500.0) and eta == pytest.approx(8.0)
