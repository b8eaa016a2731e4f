#!/usr/bin/env python3
"""Run ``mypy --strict`` over the package as it is installed: ``llama_runtime.{updater,runtime}``.

The source keeps ``updater/`` and ``runtime/`` at the top level and the build backend maps them under
``llama_runtime`` (see pyproject.toml). mypy has no such mapping, so this lays the installed shape out
as symbolic links in a temporary folder and checks that.

Usage: ``.venv/bin/python scripts/typecheck.py [mypy options]`` (needs the ``dev`` extra).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="llama-runtime-typecheck-") as tmp:
        package = Path(tmp) / "llama_runtime"
        package.mkdir()
        for entry in (ROOT / "llama_runtime").iterdir():
            if entry.suffix in {".py", ".typed"}:
                (package / entry.name).symlink_to(entry)
        (package / "updater").symlink_to(ROOT / "updater", target_is_directory=True)
        (package / "runtime").symlink_to(ROOT / "runtime", target_is_directory=True)
        argv = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *sys.argv[1:]]
        return subprocess.run([*argv, "-p", "llama_runtime"], cwd=tmp, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
