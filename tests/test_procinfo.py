"""Process identity (runtime/procinfo.py): on Linux read from /proc, and the same figures psutil gives."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llama_runtime.runtime import procinfo
from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks

linux_only = pytest.mark.skipif(not procinfo._PROC_STAT, reason="reads /proc/<pid>/stat (Linux)")


def _psutil_ticks(pid: int) -> int:
    return round(psutil.Process(pid).create_time() * 100)


@linux_only
def test_start_time_from_proc_is_psutils_for_this_process_and_a_child_with_parentheses_in_its_name() -> None:
    # A command name with spaces and parentheses (a process may rename itself), which /proc/<pid>/stat
    # ends at the last ")".
    renamed = (
        "import sys; open('/proc/self/comm', 'w').write('odd ) x (y'); print('ready', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", renamed], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert Path(f"/proc/{child.pid}/comm").read_text().strip() == "odd ) x (y"
        for pid in (os.getpid(), child.pid):
            assert process_start_ticks(pid) == _psutil_ticks(pid)
        assert pid_alive(child.pid)
    finally:
        child.communicate(b"")


@linux_only
def test_a_zombie_is_not_alive_and_a_reaped_pid_has_no_start_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pid_alive(child.pid)  # exited, not yet waited for
    assert process_start_ticks(child.pid) == _psutil_ticks(child.pid)
    child.wait()
    assert not pid_alive(child.pid)
    assert process_start_ticks(child.pid) is None


def test_out_of_range_pids_are_never_processes() -> None:
    for pid in (0, -1, 2**31):
        assert not pid_alive(pid)
        assert process_start_ticks(pid) is None


def test_without_proc_psutil_gives_the_same_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = (pid_alive(os.getpid()), process_start_ticks(os.getpid()))
    monkeypatch.setattr(procinfo, "_PROC_STAT", False)
    assert (pid_alive(os.getpid()), process_start_ticks(os.getpid())) == expected == (True, _psutil_ticks(os.getpid()))


@linux_only
def test_a_process_hidden_from_proc_is_asked_of_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc mounted with hidepid=2 shows only our own processes: the pid's entry is missing.
    monkeypatch.setattr(procinfo, "_proc_stat", lambda pid: None)
    assert pid_alive(os.getpid())  # the kernel still knows it
    assert pid_alive(1)  # init: another user's (or ours, as root): alive either way
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)
