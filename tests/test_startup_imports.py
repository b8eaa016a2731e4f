"""Start-up stays light: ``from llama_runtime import RuntimeUpdater`` and ``ensure()`` import none of
the modules that only a check or an update needs (the list scripts/bench_startup.py times against).

A merge of modules can pull a heavy import onto this path without any behaviour changing (one did:
process identity merged beside the health probe brought ``http.client`` to every app's start-up),
so the set is checked here, in a fresh interpreter, not only in the benchmark.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def bench_startup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_startup", ROOT / "scripts" / "bench_startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_public_api_and_ensure_import_no_deferred_module(tmp_path: Path) -> None:
    bench = bench_startup()
    home = tmp_path / "home"
    bench.seed_finished_job(home)  # ensure() reads the last job's record on every start
    code = bench.REPORT.replace("assert ready.ready, ready.problem\n", "").format(deferred=bench.DEFERRED)
    done = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
