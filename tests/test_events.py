"""``--events``: JSON Lines that an app in any language reads to show phase, percent and ETA,
cancel, and attach a second window to a running update."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import JobState
from llama_runtime.updater.cli.events import EVENT_TYPES, MAX_PROGRESS_PER_SECOND, EventStream
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, assert_runs
from tests.test_concurrency import (
    CHILD_TIMEOUT_SECONDS,
    assert_active,
    b7001_downloading_slowly_home,  # noqa: F401  (the `home` fixture)
    blob_requests,
    wait_for_download,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"


def cli_argv(home: Path, github: FakeGitHub, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_runtime",
        *args,
        "--home",
        str(home),
        "--api-url",
        github.api_url,
        "--backend",
        "cpu",
    ]


def spawn(home: Path, github: FakeGitHub, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(cli_argv(home, github, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(proc: subprocess.Popen[str], predicate: Any) -> list[dict[str, Any]]:
    """Lines of ``proc`` up to and including the first one ``predicate`` accepts."""
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    for line in proc.stdout:
        seen.append(json.loads(line))
        if predicate(seen[-1]):
            return seen
    pytest.fail(f"the stream ended before the awaited line; got {seen}")


def finish(proc: subprocess.Popen[str]) -> tuple[list[dict[str, Any]], int]:
    try:
        out, _err = proc.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    finally:
        proc.kill()
    return [json.loads(line) for line in out.splitlines()], proc.returncode


def assert_stream_shape(lines: list[dict[str, Any]]) -> None:
    """Every line typed; exactly one final line, and it is last."""
    assert lines, "no lines"
    assert all(line["type"] in EVENT_TYPES for line in lines)
    finals = [i for i, line in enumerate(lines) if line["type"] in ("result", "error")]
    assert finals == [len(lines) - 1]


def run_events(home: Path, github: FakeGitHub, *args: str) -> list[dict[str, Any]]:
    """``ARGS --events`` to its end: exit 0, and the lines a well-formed stream is made of."""
    done = subprocess.run(
        cli_argv(home, github, *args, "--events"), capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECONDS
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert_stream_shape(lines)
    return lines


def test_update_events_stream_phases_progress_and_the_json_result_last(home: Path, github: FakeGitHub) -> None:
    lines = run_events(home, github, "update")
    phases = [line["phase"] for line in lines if line["type"] == "phase"]
    assert phases == ["resolve", "download", "verify", "activate", "done"]
    progress = [line for line in lines if line["type"] == "progress"]
    assert progress, "no progress line"
    assert set(progress[0]) == {"type", "phase", "done_bytes", "total_bytes", "rate", "eta", "message", "job"}
    assert progress[-1]["done_bytes"] == progress[-1]["total_bytes"]  # the completing line always comes
    assert any(p["eta"] is not None for p in progress)
    result = lines[-1]
    assert result["result"] == "installed" and result["active"]["tag"] == "b7001"
    assert result["previous"]["tag"] == "b7000"
    assert {line["job"] for line in lines if "job" in line} == {lines[0]["job"]}
    assert_active(home, "b7001")


def test_update_events_progress_is_throttled_to_ten_lines_a_second() -> None:
    now = [0.0]
    sink = io.StringIO()
    stream = EventStream(sink, monotonic=lambda: now[0])
    total = 1000
    for done in range(0, total, 10):  # 100 events in one second of the fake clock
        now[0] = done / total
        stream(JobState(id="j", phase="download", pid=1, done_bytes=done, total_bytes=total, message="a"))
    stream(JobState(id="j", phase="download", pid=1, done_bytes=total, total_bytes=total, message="a"))
    assert stream.drain(5.0), "the writer thread did not write the queued lines"
    lines = [json.loads(line) for line in sink.getvalue().splitlines()]
    progress = [line for line in lines if line["type"] == "progress"]
    assert len(progress) <= MAX_PROGRESS_PER_SECOND + 1
    assert progress[-1]["done_bytes"] == total


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_signal_mid_download_cancels_keeps_partial_and_ends_with_cancelled(
    home: Path, github: FakeGitHub, sig: signal.Signals
) -> None:
    frozen = HomeGuard(None, home)
    proc = spawn(home, github, "update", "--events")
    read_until(proc, lambda line: line["type"] == "progress" and line["done_bytes"] > 0)
    proc.send_signal(sig)
    rest, code = finish(proc)
    assert code == 130
    assert rest[-1]["type"] == "error" and rest[-1]["error"]["code"] == "cancelled"
    assert "b7000 (cpu) is active" in rest[-1]["error"]["message"], rest[-1]  # names what runs now
    assert_stream_shape(rest)
    frozen.assert_intact("b7000", staging_empty=True)
    assert any(p.stat().st_size > 0 for p in (home / "downloads").rglob("*b7001*")), "partial download not kept"
    # The next try resumes the kept bytes and installs.
    again = subprocess.run(
        cli_argv(home, github, "update", "--events"), capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECONDS
    )
    assert again.returncode == 0, again.stdout
    ranged = [r for r in github.requests_to("blob", "b7001") if r.headers.get("range")]
    assert ranged, "the second try did not resume with Range"
    assert_active(home, "b7001")


def test_job_cancel_from_another_process_ends_the_stream_cancelled(home: Path, github: FakeGitHub) -> None:
    frozen = HomeGuard(None, home)
    proc = spawn(home, github, "update", "--events")
    read_until(proc, lambda line: line["type"] == "progress" and line["done_bytes"] > 0)
    cancel = subprocess.run(cli_argv(home, github, "job", "cancel", "--json"), capture_output=True, text=True)
    assert cancel.returncode == 0 and json.loads(cancel.stdout)["cancel_requested"]
    rest, code = finish(proc)
    assert code == 130 and rest[-1]["error"]["code"] == "cancelled"
    frozen.assert_intact("b7000", staging_empty=True)


def test_second_window_update_events_attaches_to_the_running_job(home: Path, github: FakeGitHub) -> None:
    first = spawn(home, github, "update", "--events")
    wait_for_download(home)
    second = spawn(home, github, "update", "--events")
    watcher = spawn(home, github, "job", "wait", "--events")
    a, code_a = finish(first)
    b, code_b = finish(second)
    c, code_c = finish(watcher)
    assert (code_a, code_b, code_c) == (0, 0, 0), (a[-1], b[-1], c[-1])
    for lines in (a, b, c):
        assert_stream_shape(lines)
    assert b[0]["phase"] == "attached" and b[-1]["attached"] is True
    assert b[-1]["result"] == a[-1]["result"] == "installed"
    assert b[-1]["active"]["tag"] == a[-1]["active"]["tag"] == c[-1]["job"]["result"]["active"]["tag"] == "b7001"
    assert {line["job"] for line in b} == {a[0]["job"]}
    assert any(line["type"] == "progress" for line in b), "the attached window saw no progress"
    assert blob_requests(github, "b7001") == 1
    assert_active(home, "b7001")


def test_update_events_with_a_tag_while_another_runs_is_busy_not_attached(home: Path, github: FakeGitHub) -> None:
    first = spawn(home, github, "update", "--events")
    wait_for_download(home)
    frozen_pointer = (home / "active.json").read_bytes()
    busy = subprocess.run(
        cli_argv(home, github, "update", "--events", "--tag", "b7000"),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
    )
    assert busy.returncode == 3
    [line] = [json.loads(x) for x in busy.stdout.splitlines()]
    assert line["type"] == "error" and line["error"]["code"] == "busy"
    assert (home / "active.json").read_bytes() == frozen_pointer
    _, code = finish(first)
    assert code == 0


def test_bad_input_with_events_is_one_error_line_and_exit_2(home: Path, github: FakeGitHub) -> None:
    frozen = HomeGuard(None, home)
    done = subprocess.run(
        cli_argv(home, github, "update", "--events", "--tag", "b70;00"),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
    )
    assert done.returncode == 2
    [line] = [json.loads(x) for x in done.stdout.splitlines()]
    assert line["type"] == "error" and "tag" in line["error"]["message"].lower()
    frozen.assert_intact("b7000", staging_empty=True)


def test_use_events_reports_phases_and_switched(home: Path, github: FakeGitHub) -> None:
    assert subprocess.run(cli_argv(home, github, "update"), capture_output=True, timeout=60).returncode == 0
    lines = run_events(home, github, "use", "b7000")
    assert [line["phase"] for line in lines if line["type"] == "phase"][-1] == "done"
    assert lines[-1]["result"] == "switched" and lines[-1]["active"]["tag"] == "b7000"
    assert_active(home, "b7000")


def test_check_apply_events_streams_the_update(home: Path, github: FakeGitHub) -> None:
    lines = run_events(home, github, "check", "--apply")
    assert "download" in [line.get("phase") for line in lines]
    assert lines[-1]["update_available"] is True
    assert_active(home, "b7001")


def test_docs_document_every_event_type_and_field() -> None:
    text = (ROOT / "docs" / "events.md").read_text()
    for kind in EVENT_TYPES:
        assert f"| `{kind}` |" in text, kind
    for field in ("done_bytes", "total_bytes", "rate", "eta", "message", "job", "phase", "error", "attached"):
        assert f"`{field}`" in text, field


def example_env(home: Path, github: FakeGitHub, tmp_path: Path) -> dict[str, str]:
    """A `llama-runtime` on PATH for the examples, pointed at the fake through the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "llama-runtime"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m llama_runtime "$@"\n')
    shim.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "LLAMA_RUNTIME_HOME": str(home),
        "LLAMA_RUNTIME_GITHUB_API": github.api_url,
        "LLAMA_RUNTIME_BACKEND": "cpu",
    }


def run_example(argv: list[str], env: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_SECONDS, cwd=ROOT)
    return done.stdout, done.returncode


EXAMPLE_RUNNERS = {
    "python": lambda: [sys.executable, str(EXAMPLES / "update_button.py")],
    "node": lambda: [shutil.which("node") or pytest.skip("node is not installed"), str(EXAMPLES / "update-button.js")],
}


@pytest.mark.parametrize("language", sorted(EXAMPLE_RUNNERS))
def test_readme_example_shows_percent_eta_and_installs(
    home: Path, github: FakeGitHub, tmp_path: Path, language: str
) -> None:
    out, code = run_example([*EXAMPLE_RUNNERS[language](), "llama-runtime"], example_env(home, github, tmp_path))
    assert code == 0, out
    assert re.search(r"^progress \d+% eta (\d+s|\?)$", out, re.M), out
    assert "phase verify" in out and out.rstrip().endswith("done installed b7001")
    assert_active(home, "b7001")


@pytest.mark.parametrize("language", sorted(EXAMPLE_RUNNERS))
def test_readme_example_cancel_button_leaves_the_active_runtime(
    home: Path, github: FakeGitHub, tmp_path: Path, language: str
) -> None:
    frozen = HomeGuard(None, home)
    env = {**example_env(home, github, tmp_path), "LLAMA_RUNTIME_CANCEL_AFTER_BYTES": "1"}
    out, code = run_example([*EXAMPLE_RUNNERS[language](), "llama-runtime"], env)
    assert code == 130, out
    assert out.rstrip().splitlines()[-1].startswith("error cancelled:")
    frozen.assert_intact("b7000", staging_empty=True)
    active = Path(
        json.loads(
            subprocess.run(
                [sys.executable, "-m", "llama_runtime", "status", "--json", "--home", str(home)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["active"]["binary"]
    )
    assert_runs(active)


@pytest.mark.parametrize("language", sorted(EXAMPLE_RUNNERS))
def test_example_without_the_cli_on_path_says_so_and_exits_127(tmp_path: Path, language: str) -> None:
    """An app launched from a desktop has no terminal PATH: the example says what to do, never crashes."""
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {**os.environ, "PATH": str(bare)}
    env.pop("LLAMA_RUNTIME_CLI", None)
    done = subprocess.run(
        EXAMPLE_RUNNERS[language](), capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_SECONDS, cwd=ROOT
    )
    assert done.returncode == 127, done.stderr
    assert done.stderr.startswith("cannot start llama-runtime: it is not on this app's PATH"), done.stderr
    assert "absolute path" in done.stderr and "LLAMA_RUNTIME_CLI" in done.stderr
    assert "Traceback" not in done.stderr and "\n    at " not in done.stderr  # no stack, Python's or node's


@pytest.mark.parametrize("language", sorted(EXAMPLE_RUNNERS))
def test_example_runs_the_cli_by_the_absolute_path_the_app_passes(
    home: Path, github: FakeGitHub, tmp_path: Path, language: str
) -> None:
    env = example_env(home, github, tmp_path)
    shim = Path(env["PATH"].split(os.pathsep)[0]) / "llama-runtime"
    bare = tmp_path / "empty-bin"
    bare.mkdir()
    out, code = run_example(EXAMPLE_RUNNERS[language](), {**env, "PATH": str(bare), "LLAMA_RUNTIME_CLI": str(shim)})
    assert code == 0, out
    assert out.rstrip().endswith("done installed b7001")
    assert_active(home, "b7001")
