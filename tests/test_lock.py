"""The cross-process update lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llama_runtime import BusyError
from llama_runtime.runtime.lock import UpdateLock

_HOLDER = """
import sys, time
from pathlib import Path
from llama_runtime.runtime.lock import UpdateLock
with UpdateLock(Path(sys.argv[1])).hold("update (test holder)"):
    print("held", flush=True)
    time.sleep(60)
"""


def _hold_in_child(lock_path: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lock_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_process_gets_busy_naming_what_holds_the_lock(tmp_path: Path) -> None:
    lock_path = tmp_path / "locks" / "update.lock"
    child = _hold_in_child(lock_path)
    try:
        lock = UpdateLock(lock_path)
        assert lock.is_held()
        with pytest.raises(BusyError) as caught, lock.hold("update", timeout=0):
            pass
        # Event order, not a stopwatch: the refusal came while the child still holds the lock (it
        # holds it until killed below), so timeout 0 did not wait for the lock to come free.
        assert child.poll() is None and lock.is_held()
        assert caught.value.exit_code == 3
        assert f"update (test holder), pid {child.pid}" in caught.value.message
    finally:
        child.kill()
        child.wait()


def test_lock_is_released_by_the_kernel_when_the_holder_is_killed(tmp_path: Path) -> None:
    lock_path = tmp_path / "locks" / "update.lock"
    child = _hold_in_child(lock_path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with UpdateLock(lock_path).hold("update", timeout=5):
        assert lock_path.exists()
    assert lock_path.exists()  # never deleted: deleting a lock file races with its next user


def test_lock_waits_up_to_its_timeout_then_succeeds_when_released(tmp_path: Path) -> None:
    lock_path = tmp_path / "locks" / "update.lock"
    child = _hold_in_child(lock_path)
    subprocess.Popen([sys.executable, "-c", f"import os,time,signal; time.sleep(0.5); os.kill({child.pid}, 9)"])
    try:
        lock = UpdateLock(lock_path)
        with lock.hold("scheduler", timeout=30):
            owner = lock.owner()
            assert owner is not None and (owner.pid, owner.operation) == (os.getpid(), "scheduler")
            assert child.wait(timeout=30) == -9  # taken once the holder was gone, not beside it
    finally:
        child.kill()
        child.wait()


def test_busy_says_who_holds_the_lock_since_when_and_how_to_cancel_it(tmp_path: Path) -> None:
    lock_path = tmp_path / "locks" / "update.lock"
    child = _hold_in_child(lock_path)
    try:
        with pytest.raises(BusyError) as caught, UpdateLock(lock_path).hold("rollback", timeout=0.2):
            pass
        message, hint = caught.value.message, caught.value.hint or ""
        assert f"pid {child.pid}" in message and "update (test holder)" in message
        assert "since " in message and " UTC" in message and " s ago" in message
        assert "llama-runtime job cancel" in hint
    finally:
        child.kill()
        child.wait()
