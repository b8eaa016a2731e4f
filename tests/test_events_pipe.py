"""``--events`` and a reader that goes away or stops reading.

The app's end of the pipe is real: closed after the first line, or full before the
child writes anything (the test fills it and never reads), so every line the child
writes would block a writer that writes from the job's thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from llama_runtime.runtime.layout import Home
from llama_runtime.updater.api.job_store import JobState, JobStore
from llama_runtime.updater.cli.events import LAST_LINE_TIMEOUT_SECONDS, EventStream
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard
from tests.test_concurrency import (
    CHILD_TIMEOUT_SECONDS,
    assert_active,
    b7001_downloading_slowly_home,  # noqa: F401  (the `home` fixture: b7000 active, b7001 dripping)
    wait_for_download,
)
from tests.test_events import cli_argv

#: "Promptly": the cancel reaches the download loop at once, the last line waits its bound, and
#: a Python child needs about a second to start and end on a busy machine.
PROMPT_END_SECONDS = LAST_LINE_TIMEOUT_SECONDS + 8.0


@contextlib.contextmanager
def full_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose buffer is already full: a blocking write to it waits until someone reads."""
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(write_fd, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write_fd, b"x" * 65536)
        os.set_blocking(write_fd, True)
        yield read_fd, write_fd
    finally:
        for fd in (read_fd, write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def unread_update(home: Path, github: FakeGitHub, stderr: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``update --events`` whose stdout is a full pipe nobody reads, downloading b7001."""
    with full_pipe() as (_read_fd, write_fd), stderr.open("wb") as err:
        proc = subprocess.Popen(cli_argv(home, github, "update", "--events"), stdout=write_fd, stderr=err)
        os.close(write_fd)  # the child holds the only writing end; the test holds the reading one
        try:
            wait_for_download(home)  # the job runs on although no line was taken
            yield proc
        finally:
            proc.kill()
            proc.wait(CHILD_TIMEOUT_SECONDS)


def wait_ended(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """The child's exit code and how many seconds it took to end from now."""
    start = time.monotonic()
    code = proc.wait(CHILD_TIMEOUT_SECONDS)
    return code, time.monotonic() - start


def assert_not_busy(home: Path, github: FakeGitHub) -> None:
    """The cancelled job released the lock: the job is over, and the next update runs and installs."""
    job = JobStore(Home(home)).current()
    assert job is not None and job.phase == "cancelled" and not job.running, job
    again = subprocess.run(
        cli_argv(home, github, "update", "--json"), capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECONDS
    )
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert json.loads(again.stdout)["result"] == "installed"
    assert_active(home, "b7001")


def test_app_closing_stdout_after_the_first_line_still_installs_with_exit_0(home: Path, github: FakeGitHub) -> None:
    proc = subprocess.Popen(
        cli_argv(home, github, "update", "--events"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "phase", first
        proc.stdout.close()  # the app went away; the update goes on
        _, err = proc.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    finally:
        proc.kill()
    stderr = err.decode(errors="replace")
    assert proc.returncode == 0, stderr
    for noise in ("Traceback", "Exception ignored", "BrokenPipeError"):
        assert noise not in stderr, stderr
    assert_active(home, "b7001")


def test_sigterm_while_stdout_is_never_read_cancels_promptly_and_releases_the_lock(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, home)
    with unread_update(home, github, tmp_path / "stderr") as proc:
        proc.send_signal(signal.SIGTERM)
        code, took = wait_ended(proc)
    assert code == 130, (tmp_path / "stderr").read_text()
    assert took < PROMPT_END_SECONDS, f"took {took:.1f}s to end"
    frozen.assert_intact("b7000", staging_empty=True)
    assert_not_busy(home, github)


def test_job_cancel_while_stdout_is_never_read_ends_the_update_promptly(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, home)
    with unread_update(home, github, tmp_path / "stderr") as proc:
        cancel = subprocess.run(
            cli_argv(home, github, "job", "cancel", "--json"),
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_SECONDS,
        )
        assert cancel.returncode == 0 and json.loads(cancel.stdout)["cancel_requested"], cancel.stdout
        code, took = wait_ended(proc)
    assert code == 130, (tmp_path / "stderr").read_text()
    assert took < PROMPT_END_SECONDS, f"took {took:.1f}s to end"
    frozen.assert_intact("b7000", staging_empty=True)
    job = JobStore(Home(home)).current()
    assert job is not None and job.phase == "cancelled" and not job.running, job


class StuckReader:
    """A stream whose reader took one line and then stopped, until :meth:`resume`."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._go = threading.Event()

    def write(self, text: str) -> int:
        if self.lines:
            self._go.wait(CHILD_TIMEOUT_SECONDS)
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def resume(self) -> None:
        self._go.set()


def test_stuck_reader_never_blocks_the_job_and_gets_every_phase_and_the_newest_progress() -> None:
    reader = StuckReader()
    stream = EventStream(reader)  # type: ignore[arg-type]  # a text stream in all that is used

    def report() -> None:
        stream(JobState(id="j", phase="download", pid=1, done_bytes=0, total_bytes=1000, message="a"))
        for done in range(100, 1001, 100):  # the completing line comes unthrottled, the others are the newest kept
            stream(JobState(id="j", phase="download", pid=1, done_bytes=done, total_bytes=1000, message="a"))
        stream(JobState(id="j", phase="verify", pid=1, message="extracting"))
        stream.warning("w")

    # Event order, not a stopwatch: every report returns while the reader is still stuck.
    job = threading.Thread(target=report, daemon=True)
    job.start()
    job.join(timeout=60)  # a bound on a hang, not on speed
    assert not job.is_alive(), "reporting waited for the reader"
    assert not stream.drain(0.2)  # the reader is stuck: the lines wait, the job does not
    reader.resume()
    stream.result({"result": "installed"})
    lines = [json.loads(line) for line in reader.lines]
    assert [line["type"] for line in lines if line["type"] != "progress"] == [
        "phase",
        "phase",
        "warning",
        "phase",
        "result",
    ]
    progress = [line["done_bytes"] for line in lines if line["type"] == "progress"]
    assert progress[-1] == 1000 and progress == sorted(progress) and len(progress) <= 3
    assert lines.index(next(line for line in lines if line.get("phase") == "verify")) > lines.index(
        next(line for line in lines if line.get("done_bytes") == 1000)
    )
