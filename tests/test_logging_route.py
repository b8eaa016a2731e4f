"""Where the library's log lines go: nowhere by default, an app's ``logging`` once it listens,
stderr once ``configure_logging`` asks (the CLI)."""

from __future__ import annotations

import subprocess
import sys

#: Logs one warning with a field, as a module of the library does, then says it is done.
SCRIPT = """
import logging, sys
if sys.argv[1] == "logging":
    logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
if sys.argv[1] == "stderr":
    import llama_runtime
    llama_runtime.configure_logging(level="warning")
from llama_runtime.updater.logs import get_logger
get_logger("llama_runtime.updater.example").warning("cache set aside", path="/tmp/x")
get_logger("llama_runtime.updater.example").debug("never shown", detail=1)
print("done")
"""


def run(route: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, route], capture_output=True, text=True, timeout=60, check=True)


def test_an_embedding_app_that_configures_no_logging_hears_nothing_on_its_stderr_or_stdout() -> None:
    done = run("silent")
    assert done.stdout == "done\n" and done.stderr == ""


def test_an_app_that_configures_logging_gets_the_lines_through_its_module_logger() -> None:
    done = run("logging")
    assert done.stdout == "done\n"
    assert done.stderr.splitlines() == ["llama_runtime.updater.example WARNING cache set aside path=/tmp/x"]


def test_configure_logging_sends_the_lines_to_stderr_as_the_cli_does() -> None:
    done = run("stderr")
    assert done.stdout == "done\n"
    assert "cache set aside" in done.stderr and "never shown" not in done.stderr
