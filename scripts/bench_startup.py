"""How much do ``from llama_runtime import RuntimeUpdater`` and ``ensure()`` cost an app at start-up?

Runs ``python -c pass`` and a start-up script (import the public API, build a
``RuntimeUpdater`` on a home with one installed runtime and the record of the
update job that installed it, call ``ensure()``)
alternately, N times each, in the same run (so machine load affects both
alike), and prints the medians, their difference and their ratio. The budget
is 20 ms over the bare start: network (httpx), locking (filelock),
logging (structlog) and process control are imported only when first used.
It also lists which of those modules the start-up imported (none should be).

Both wall-clock and CPU time (user + system of the child) are reported: on a
shared, loaded machine the wall clock mostly measures waiting for a core.

The children may write bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped from
their environment): an installed app starts from ``.pyc`` files (pip compiles
them at install time), so compiling every module from source on every start
would measure a development setting, not an app's start-up.

Usage: python scripts/bench_startup.py [--runs N] [--budget-ms MS]
Exit code 1 when the median CPU difference is over the budget or a deferred
module was imported. POSIX only (``resource``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_status import seed_home

from llama_runtime.runtime.layout import Home
from llama_runtime.updater.api.job_store import JobState, JobStore

#: Extra start-up cost the public API and ``ensure()`` may add over ``python -c pass``.
DEFAULT_BUDGET_MS: Final[float] = 20.0
#: Enough runs that one slow start (a cold page cache) does not move the median.
DEFAULT_RUNS: Final[int] = 21
#: Modules start-up must not need: each is imported by the first call that uses it.
DEFERRED: Final[tuple[str, ...]] = (
    "httpx",
    "urllib.request",
    "filelock",
    "structlog",
    "subprocess",
    "psutil",
    # The release model and the composition root: only a check or an update needs them.
    "packaging",
    "llama_runtime.updater.release.channel",
    "llama_runtime.updater.release.release",
    "llama_runtime.updater.engine",
    # The update job beyond its record (ensure reads only the job store), and the scheduled check.
    "llama_runtime.updater.api.jobs",
    "llama_runtime.updater.api.check",
    "llama_runtime.updater.choice.decide",
    # The archive extractor's inflater (ISA-L): only an install reads an archive.
    "isal",
    # The sandbox and the binary's runs (with shutil, which brings bz2 and lzma): only a run of a build needs them.
    "llama_runtime.runtime.sandbox",
    "llama_runtime.runtime.binary",
    # The whole home read at once: only an operation on every runtime needs it.
    "llama_runtime.runtime.snapshot",
    "shutil",
    "bz2",
    "lzma",
    # The network layer's TLS, the CLI's parser.
    "ssl",
    "argparse",
)

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


def seed_finished_job(home: Path) -> None:
    """The record the update that installed the runtime left: ``ensure()`` reads it on every start."""
    done = JobState(id="0" * 16, phase="done", pid=1, operation="startup", tag="b7000", started_at=1.0, updated_at=2.0)
    JobStore(Home(home)).write(done)


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one run of ``argv``.

    CPU time is what start-up costs the machine; on a loaded machine the wall
    clock also counts the time spent waiting for a core.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--budget-ms", type=float, default=DEFAULT_BUDGET_MS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_home(home)
        seed_finished_job(home)
        # An unreachable API proves start-up makes no request: any request would fail or hang.
        env = {**os.environ, "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        bare_argv = [sys.executable, "-c", "pass"]
        startup_argv = [sys.executable, "-c", STARTUP, str(home)]
        time_once(startup_argv, env)  # warm the page cache and .pyc files
        report = [sys.executable, "-c", REPORT.format(deferred=DEFERRED), str(home)]
        loaded = json.loads(subprocess.run(report, capture_output=True, env=env, check=True, text=True).stdout)
        bare: list[tuple[float, float]] = []
        startup: list[tuple[float, float]] = []
        for _ in range(args.runs):
            bare.append(time_once(bare_argv, env))
            startup.append(time_once(startup_argv, env))
    extra = {}
    for column, what in ((0, "wall"), (1, "cpu")):
        bare_ms = statistics.median(r[column] for r in bare) * 1000
        startup_ms = statistics.median(r[column] for r in startup) * 1000
        extra[what] = startup_ms - bare_ms
        print(f"[{what}] python -c pass:                    median {bare_ms:7.1f} ms over {args.runs} runs")
        print(f"[{what}] import RuntimeUpdater + ensure():  median {startup_ms:7.1f} ms over {args.runs} runs")
        print(
            f"[{what}] difference: {extra[what]:+.1f} ms (budget {args.budget_ms:.0f} ms), "
            f"ratio {startup_ms / bare_ms:.2f}x"
        )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"deferred modules imported at start-up: {', '.join(loaded) or 'none'}")
    return 0 if extra["cpu"] <= args.budget_ms and not loaded else 1


if __name__ == "__main__":
    sys.exit(main())
