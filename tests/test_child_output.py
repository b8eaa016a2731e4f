"""A build's runs are read to their end in bounded memory: a flood of output is cut, never held whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llama_runtime.runtime.capture import OUTPUT_CAP_BYTES, wait_and_capture
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, publish_stand_in, run_json

#: Writes ``MiB`` mebibytes of ``A``, framed by a first and a last line.
_FLOOD = "import sys; w = sys.stdout.write; w('first line\\n'); [w('A' * 1048576) for _ in range({mib})]; w('\\nlast line')"


def _kill(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait()


def test_twenty_mib_of_output_keeps_its_beginning_and_end_and_names_what_was_left_out() -> None:
    child = subprocess.Popen([sys.executable, "-c", _FLOOD.format(mib=20)], stdout=subprocess.PIPE)
    out, timed_out = wait_and_capture(child, 60.0, _kill)
    assert not timed_out and child.returncode == 0
    assert out.startswith("first line\n") and out.endswith("\nlast line")
    assert len(out) <= OUTPUT_CAP_BYTES + 100
    left_out = 20 * 1048576 + len("first line\n\nlast line") - OUTPUT_CAP_BYTES
    assert f"[… {left_out} bytes of output left out …]" in out


def test_output_without_end_is_cut_and_its_writer_stopped_at_the_timeout() -> None:
    child = subprocess.Popen(["/usr/bin/yes", "A" * 100], stdout=subprocess.PIPE)
    out, timed_out = wait_and_capture(child, 1.0, _kill)
    assert timed_out and child.poll() is not None
    assert len(out) <= OUTPUT_CAP_BYTES + 100 and "bytes of output left out" in out


def test_a_short_answer_is_kept_whole() -> None:
    child = subprocess.Popen([sys.executable, "-c", "print('version: 7001 (abc)')"], stdout=subprocess.PIPE)
    assert wait_and_capture(child, 60.0, _kill) == ("version: 7001 (abc)\n", False)


@pytest.mark.e2e
def test_a_new_build_that_floods_its_first_run_is_refused_and_the_active_runtime_stays(
    tmp_path: Path, b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    flood = b"#!/bin/sh\nhead -c 33554432 /dev/zero | tr '\\\\0' A\nexit 1\n"
    publish_stand_in(github, tmp_path, "b7001", script=flood)
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    message = payload["error"]["message"]
    assert "does not run" in message and len(message) < 64 * 1024
    guard.assert_intact("b7000", capsys=capsys)
