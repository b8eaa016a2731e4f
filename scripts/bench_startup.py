"""How much do ``from llama_runtime import RuntimeUpdater`` and ``ensure()`` cost an app at start-up?

Runs ``python -c pass`` and a start-up script (import the public API, build a
``RuntimeUpdater`` on a home with one installed runtime, call ``ensure()``)
alternately, N times each, in the same run (so machine load affects both
alike), and prints the medians, their difference and their ratio. The budget
(issue 10) is 30 ms over the bare start: network (httpx), locking (filelock),
logging (structlog) and process control are imported only when first used.
It also lists which of those modules the start-up imported (none should be).

Usage: python scripts/bench_startup.py [--runs N] [--budget-ms MS]
Exit code 1 when the median difference is over the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_status import seed_home, time_once

#: Extra start-up cost the public API and ``ensure()`` may add over ``python -c pass`` (issue 10).
DEFAULT_BUDGET_MS: Final[float] = 30.0
#: Enough runs that one slow start (a cold page cache) does not move the median.
DEFAULT_RUNS: Final[int] = 21
#: Modules start-up must not need: each is imported by the first call that uses it.
DEFERRED: Final[tuple[str, ...]] = ("httpx", "urllib.request", "filelock", "structlog", "subprocess", "psutil")

STARTUP: Final = """
import sys
from llama_runtime import RuntimeUpdater
ready = RuntimeUpdater(sys.argv[1]).ensure()
assert ready.ready, ready.problem
"""
REPORT: Final = (
    STARTUP
    + """
import json
print(json.dumps(sorted(m for m in {deferred!r} if m in sys.modules)))
"""
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--budget-ms", type=float, default=DEFAULT_BUDGET_MS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_home(home)
        # An unreachable API proves start-up makes no request: any request would fail or hang.
        env = {**os.environ, "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
        bare_argv = [sys.executable, "-c", "pass"]
        startup_argv = [sys.executable, "-c", STARTUP, str(home)]
        time_once(startup_argv, env)  # warm the page cache and .pyc files
        report = [sys.executable, "-c", REPORT.format(deferred=DEFERRED), str(home)]
        loaded = json.loads(subprocess.run(report, capture_output=True, env=env, check=True, text=True).stdout)
        bare: list[float] = []
        startup: list[float] = []
        for _ in range(args.runs):
            bare.append(time_once(bare_argv, env))
            startup.append(time_once(startup_argv, env))
    bare_ms = statistics.median(bare) * 1000
    startup_ms = statistics.median(startup) * 1000
    extra = startup_ms - bare_ms
    print(f"python -c pass:                         median {bare_ms:7.1f} ms over {args.runs} runs")
    print(f"import RuntimeUpdater + ensure():       median {startup_ms:7.1f} ms over {args.runs} runs")
    print(f"difference: {extra:+.1f} ms (budget {args.budget_ms:.0f} ms), ratio {startup_ms / bare_ms:.1f}x")
    print(f"deferred modules imported at start-up: {', '.join(loaded) or 'none'}")
    return 0 if extra <= args.budget_ms else 1


if __name__ == "__main__":
    sys.exit(main())
