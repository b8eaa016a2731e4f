"""The first log line imports structlog without rich (~100 modules of every update's start),
and leaves rich importable for whoever wants it (sigstore's own CLI does)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CODE = """
import json, sys
from llama_runtime.updater.logs import configure_logging, get_logger
configure_logging(level="info")
get_logger("t").info("hello")
without = "rich" not in sys.modules
import rich.console
print(json.dumps([without, "structlog" in sys.modules, rich.console.__name__]))
"""


def test_first_log_line_imports_structlog_without_rich_and_rich_stays_importable() -> None:
    pytest.importorskip("rich")
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    assert "hello" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, True, "rich.console"]


QUIET = """
import json, sys
from llama_runtime.updater.logs import configure_logging, get_logger
configure_logging(level="warning")
get_logger("t").info("quiet info")
get_logger("t").debug("quiet debug")
before = "structlog" in sys.modules
get_logger("t").warning("loud warning")
get_logger("t").info("still quiet")
print(json.dumps([before, "structlog" in sys.modules]))
"""


def test_lines_below_the_configured_level_are_dropped_without_importing_structlog() -> None:
    done = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, True]
    assert "loud warning" in done.stderr
    assert "quiet" not in done.stderr
