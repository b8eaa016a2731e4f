"""Progress people see: it fits the terminal (checked through a real pty), is silent without
one, obeys --no-progress/-q/NO_COLOR, and reaches callbacks at most ten times a second; a
job's subscribers have seen its final state when ``wait()`` returns."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from llama_runtime import JobState
from llama_runtime.updater.cli.progressbar import format_bar
from llama_runtime.updater.fetch.download import PROGRESS_INTERVAL_SECONDS, throttled
from tests.fakegithub import FakeGitHub, Fault
from tests.test_service import make_updater, publish

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_NAME = "llama-b7000-bin-ubuntu-vulkan-x64-with-a-rather-long-asset-name.tar.gz"


@pytest.mark.parametrize("width", [20, 40, 60, 80, 100, 200])
def test_a_progress_line_never_reaches_the_last_column(width: int) -> None:
    for done, total, rate, eta in [
        (0, 1, None, None),
        (12_300_000, 27_000_000, 3_200_000.0, 5.2),
        (999_000_000, 1_000_000_000, 999_000_000.0, 86_399.0),
        (5_000_000, None, 1_000.0, None),
    ]:
        line = format_bar(done, total, rate, eta, LONG_NAME, width)
        assert len(line) <= width - 1, (width, line)
        assert "%" in line or total is None  # the numbers always show


def test_a_wide_terminal_shows_the_whole_bar_and_name() -> None:
    line = format_bar(13_500_000, 27_000_000, 3_200_000.0, 4.0, LONG_NAME, 200)
    assert line.startswith("[" + "#" * 14 + "-" * 14 + "]") and line.endswith(LONG_NAME)


def run_in_pty(args: list[str], columns: int, env: dict[str, str]) -> str:
    """Run the CLI with stdin/stdout/stderr on a pty of ``columns`` columns; everything it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_runtime", *args], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def slow_release(github: FakeGitHub, tmp_path: Path) -> str:
    name = publish(github, tmp_path, "b7000", pad=3 * 1024 * 1024)
    github.inject(name, Fault(drip_seconds=0.01, drip_chunk=64 * 1024, times=None))
    return name


def cli_env(home: Path, github: FakeGitHub, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"NO_COLOR", "COLUMNS", "LINES"}}
    env.update(LLAMA_RUNTIME_HOME=str(home), LLAMA_RUNTIME_GITHUB_API=github.api_url, **extra)
    return env


def test_progress_in_an_80_column_pty_never_wraps(
    slow_release: str, github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    out = run_in_pty(["update", "--backend", "cpu"], 80, cli_env(home, github))
    rows = [ANSI.sub("", row) for row in re.split(r"[\r\n]", out)]
    bars = [row for row in rows if "%" in row and "MB" in row]
    phases = [row for row in rows if row.startswith(("resolve", "verify", "activate"))]
    assert bars and phases, out
    assert max(len(row) for row in bars + phases) <= 79, max(bars + phases, key=len)
    assert any("/s" in row for row in bars), "the rate shows once measurable"


def test_progress_in_a_40_column_pty_keeps_the_numbers(
    slow_release: str, github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    out = run_in_pty(["update", "--backend", "cpu"], 40, cli_env(home, github))
    rows = [ANSI.sub("", row) for row in re.split(r"[\r\n]", out)]
    assert max(len(row) for row in rows if "%" in row) <= 39
    assert any("100%" in row for row in rows), out


@pytest.mark.parametrize("flag", ["--no-progress", "-q"])
def test_no_progress_and_quiet_draw_no_bar_on_a_terminal(
    flag: str, slow_release: str, github: FakeGitHub, home: Path
) -> None:
    out = run_in_pty(["update", "--backend", "cpu", flag], 80, cli_env(home, github))
    assert "%" not in out and "download" not in out, out
    # The fake publishes like upstream today: b7000 is the build of the stable release v0.1.0.
    assert "Installed ggml-org/llama.cpp v0.1.0 (build b7000) (cpu)" in out, "the result still shows"


def test_no_progress_when_stderr_is_not_a_terminal(slow_release: str, github: FakeGitHub, home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llama_runtime", "update", "--backend", "cpu"],
        capture_output=True,
        text=True,
        env=cli_env(home, github),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "piped stderr gets no bar"


def test_no_color_turns_colour_off_in_log_lines_on_a_terminal(
    slow_release: str, github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    coloured = run_in_pty(["update", "--backend", "cpu", "-v", "--no-progress"], 200, cli_env(home, github))
    plain = run_in_pty(
        ["update", "--backend", "cpu", "-v", "--no-progress"], 200, cli_env(tmp_path / "h2", github, NO_COLOR="1")
    )
    colours = re.compile(r"\x1b\[[0-9;]*m")
    assert colours.search(coloured), "log lines on a terminal are coloured by default"
    assert not colours.search(plain), plain


def test_throttled_progress_passes_at_most_one_report_per_interval_and_always_the_last() -> None:
    now = [0.0]
    seen: list[int] = []
    report = throttled(lambda done, _total: seen.append(done), clock=lambda: now[0])
    for chunk in range(1, 401):  # 400 chunks of 64 KiB over one second
        now[0] = chunk / 400
        report(chunk * 65536, 400 * 65536)
    assert seen[-1] == 400 * 65536
    assert len(seen) <= 1 / PROGRESS_INTERVAL_SECONDS + 2, len(seen)


def test_an_update_reports_download_progress_at_most_ten_times_a_second(
    github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000", pad=25 * 1024 * 1024)
    updater = make_updater(home, github)
    events: list[tuple[float, str, int]] = []
    started = time.monotonic()
    job = updater.start_update(listener=lambda s: events.append((time.monotonic(), s.phase, s.done_bytes)))
    final = job.wait(120)
    elapsed = time.monotonic() - started
    assert final.phase == "done", final.error
    downloads = [e for e in events if e[1] == "download"]
    assert downloads, events
    assert len(downloads) <= elapsed / PROGRESS_INTERVAL_SECONDS + 3, (len(downloads), elapsed)


def test_wait_returns_only_after_every_subscriber_saw_the_final_state(
    github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    publish(github, tmp_path, "b7000")
    updater = make_updater(home, github)
    seen: list[str] = []

    def slow_listener(state: JobState) -> None:
        if not state.running:
            time.sleep(0.3)  # a UI redrawing its last frame
            seen.append(state.phase)

    job = updater.start_update(listener=slow_listener)
    final = job.wait(120)
    assert final.phase == "done", final.error
    assert seen == ["done"], "wait() returned before the subscriber had the final state"
