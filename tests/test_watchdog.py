"""A command that outlives its signal explains itself: the kill loop's watchdog gets its stacks.

``scripts/killloop.py`` runs every child with ``LLAMA_RUNTIME_TEST_STACKS``; a
child still running long after its signal gets SIGUSR1 (the CLI armed
faulthandler for it), and the loop records the dump before it kills the child.
Here a real ``update`` is told to hang at a checkpoint
(``LLAMA_RUNTIME_TEST_HANG_AT``), and the loop's own functions ask it where.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from llama_runtime.updater.checkpoints import HANG_AT_ENV
from llama_runtime.updater.cli.watchdog import STACKS_ENV
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, publish_stand_in

ROOT = Path(__file__).resolve().parent.parent
#: Longest the hanging child may take to reach its checkpoint (seconds; a loaded 2-core machine).
REACH_SECONDS = 60.0

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="SIGUSR1 is POSIX")


def _killloop() -> ModuleType:
    spec = importlib.util.spec_from_file_location("killloop", ROOT / "scripts" / "killloop.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault("killloop", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)  # registered first: its dataclasses look their module up
    return module


@pytest.mark.e2e
def test_an_update_hanging_at_a_checkpoint_has_its_stacks_dumped_and_the_old_runtime_stays(
    github: FakeGitHub, b7000_home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    killloop = _killloop()
    publish_stand_in(github, tmp_path, "b7001")
    guard = HomeGuard(tmp_path, b7000_home)
    stacks = tmp_path_factory.mktemp("stacks") / "update.txt"  # beside, not in, what the guard watches
    env = {**os.environ, HANG_AT_ENV: "after_download", STACKS_ENV: str(stacks)}
    args = ["update", "--tag", "b7001", "--backend", "cpu", "--home", str(b7000_home), "--api-url", github.api_url]
    child = subprocess.Popen(
        [sys.executable, "-m", "llama_runtime", *args, "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    reaper = threading.Timer(REACH_SECONDS, child.kill)  # one that never gets there ends the read below
    reaper.start()
    try:
        assert child.stderr is not None
        said = ""
        for line in child.stderr:  # log lines may come first; the checkpoint says it hangs, then does
            said += line.decode(errors="replace")
            if "hanging at after_download" in said:
                break
        assert "hanging at after_download" in said, said
        dump = killloop.wait_or_dump(child, stacks, timeout=0.5)
    finally:
        reaper.cancel()
        if child.poll() is None:
            child.kill()
        child.wait()
    assert dump is not None and "most recent call first" in dump, dump
    assert "checkpoints.py" in dump and "in checkpoint" in dump, dump  # where it hangs, by name
    assert child.returncode == -signal.SIGKILL  # the watchdog killed it after the dump
    guard.assert_intact("b7000")


def test_a_command_that_ends_in_time_is_not_dumped(tmp_path: Path) -> None:
    killloop = _killloop()
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    assert killloop.wait_or_dump(done, tmp_path / "none.txt", timeout=30) is None
    assert done.returncode == 0
