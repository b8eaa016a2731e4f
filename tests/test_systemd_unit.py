"""docs/systemd.md: the user unit that starts the managed llama-server at boot, through the tool.

Its ``ExecStart`` and ``ExecStop`` are llama-runtime commands that the current CLI's own parser takes
(``server start`` with a wait, ``server stop``), the unit is one systemd accepts (``systemd-analyze
--user verify`` where installed, an ini parse everywhere), and systemd waits longer than the tool does,
so the tool says why a start failed.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme import assert_parses, llama_runtime_words

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "systemd.md"
UNIT_NAME = "llama-runtime-server.service"


def unit_text() -> str:
    found = re.findall(r"<!-- unit: (\S+) -->\n```ini\n(.*?)```", DOC.read_text(), flags=re.S)
    assert [name for name, _ in found] == [UNIT_NAME]
    return found[0][1]


def unit() -> configparser.ConfigParser:
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.read_string(unit_text())
    return parsed


def command(key: str) -> list[str]:
    words = llama_runtime_words(shlex.split(unit()["Service"][key]))
    assert words is not None, f"{key} runs llama-runtime"
    return words


def test_the_server_unit_starts_and_stops_the_server_through_the_tool_with_a_cli_that_parses() -> None:
    start, stop = command("ExecStart"), command("ExecStop")
    assert start[:2] == ["server", "start"] and "--" in start
    assert stop[:2] == ["server", "stop"]
    assert_parses(start)
    assert_parses(stop)


def test_systemd_waits_longer_for_the_start_than_the_tool_waits_for_health() -> None:
    start = command("ExecStart")
    wait = float(start[start.index("--wait") + 1])
    service = unit()["Service"]
    assert service["Type"] == "oneshot" and service["RemainAfterExit"] == "yes"
    assert float(service["TimeoutStartSec"]) > wait


def test_the_readme_links_the_server_unit() -> None:
    assert "(docs/systemd.md)" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_server_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    path = tmp_path / UNIT_NAME
    path.write_text(unit_text())
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "llama-runtime").symlink_to(Path(sys.executable).with_name("llama-runtime"))
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime_dir)}
    result = subprocess.run(["systemd-analyze", "--user", "verify", str(path)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
