"""Ctrl-C at any point: the server comes back, and the message tells the truth.

The truth is read from the pointer after the interruption, never assumed: a
Ctrl-C after the pointer flip reports the new runtime as active.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.activate.activation import Activation
from llama_runtime.updater.activate.pipeline import InstallPipeline
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in
from tests.test_server_swap import _http_server_build, served_b7000  # noqa: F401  (fixture)
from tests.test_server_swap import home as swap_home  # noqa: F401  (fixture)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_while_the_old_server_stops_restarts_it_and_keeps_the_pointer(
    how: str,
    served_b7000: dict[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    swap_home: Path,  # noqa: F811  (tmp_path/"home" with test_server_swap's stray-server clean-up)
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = swap_home
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): _http_server_build(tmp_path, "b7001")})
    guard = HomeGuard(tmp_path, home)
    real_stop = ManagedServer.stop
    calls = {"n": 0}

    def stopped_then_interrupted(self: ManagedServer, *args: Any, **kwargs: Any) -> None:
        real_stop(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1 and how == "ctrl-c":
            raise KeyboardInterrupt  # Ctrl-C lands while the update waits for the stop
        if calls["n"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # systemd stops the service right then

    monkeypatch.setattr(ManagedServer, "stop", stopped_then_interrupted)
    code = main(["update", "--tag", "b7001", "--backend", "cpu", "--home", str(home), "--api-url", github.api_url])
    err = capsys.readouterr().err
    assert code == 130
    assert "b7000" in err and "active" in err
    guard.assert_intact("b7000")
    status = ManagedServer(Home(home).server_dir).status()
    assert status.running and status.runtime_name == served_b7000["runtime"]["name"]


def test_ctrl_c_after_the_pointer_flip_says_the_new_runtime_is_active(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    args = ["--backend", "cpu", "--home", str(home), "--api-url", github.api_url]
    assert main(["update", "--tag", "b7000", *args]) == 0
    capsys.readouterr()
    real_switch = Activation.switch

    def flipped_then_interrupted(self: Activation, *a: Any, **kw: Any) -> Any:
        real_switch(self, *a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(Activation, "switch", flipped_then_interrupted)
    code = main(["update", "--tag", "b7001", "--json", *args])
    assert code == 130
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "cancelled"
    assert "unchanged" not in error["message"]
    assert "b7001" in error["message"]
    pointer = Home(home).read_pointer()
    assert pointer.active is not None and Home(home).load(pointer.active).marker.tag == "b7001"
    job = json.loads((home / "jobs" / "current.json").read_text())
    assert job["phase"] == "cancelled" and "b7001 (cpu) is active" in job["error"]["message"]


def test_ctrl_c_before_anything_changed_names_the_runtime_still_active(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    args = ["--backend", "cpu", "--home", str(home), "--api-url", github.api_url]
    assert main(["update", "--tag", "b7000", *args]) == 0
    capsys.readouterr()
    guard = HomeGuard(tmp_path, home)

    def interrupted(*_a: Any, **_kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(InstallPipeline, "install_archives", interrupted)
    code = main(["update", "--tag", "b7001", *args])
    assert code == 130
    assert "b7000 (cpu) is active" in capsys.readouterr().err
    guard.assert_intact("b7000")


#: Runs the command the way ARGV[1] names (the console script's file, or ``-m llama_runtime``) with the
#: import of the command itself held up, so that a signal lands while the command is still loading.
_HELD_IMPORT = """
import importlib.abc, runpy, sys, time
how, home = sys.argv[1], sys.argv[2]

class HeldImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "llama_runtime.updater.cli.main":
            print("importing", flush=True)
            time.sleep(60)
        return None

sys.meta_path.insert(0, HeldImport())
sys.argv = ["llama-runtime", "status", "--home", home]
if how == "module":
    runpy.run_module("llama_runtime", run_name="__main__", alter_sys=True)
else:
    runpy.run_path(how, run_name="__main__")
"""


@pytest.mark.parametrize("how", ["module", "console_script"])
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"])
def test_a_signal_while_the_command_loads_ends_with_the_shells_status_and_no_traceback(
    how: str, signum: int, status: int, tmp_path: Path
) -> None:
    import subprocess
    import sys

    entry = how if how == "module" else str(Path(sys.executable).with_name("llama-runtime"))
    child = subprocess.Popen(
        [sys.executable, "-c", _HELD_IMPORT, entry, str(tmp_path / "home")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "importing"
        child.send_signal(signum)
        _out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == status, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert not (tmp_path / "home").exists()  # nothing was done
