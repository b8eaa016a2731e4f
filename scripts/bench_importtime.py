"""What do app start-up (``ensure()``) and ``status --json`` import, and at what cost, by ``python -X importtime``?

Less sensitive to a loaded machine than a wall clock: ``-X importtime`` times each module's own
import (its "self" column, microseconds), so time spent waiting for a core between imports is not
counted. Runs a bare ``python -c pass``, the start-up of scripts/bench_startup.py and the ``status
--json`` of scripts/bench_status.py alternately, N times each, with ``-X importtime``, and prints for
each the median of the summed self times, that median less the bare one's, and the modules imported.
``--top K`` lists the K modules with the largest median self time of each call. It only reports.

Usage: python scripts/bench_importtime.py [--runs N] [--top K]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import STARTUP, seed_finished_job
from bench_status import seed_home

#: Enough runs that one slow import (a page fault, a preempted core) does not move the median.
DEFAULT_RUNS: Final[int] = 15
_LINE: Final = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| *(\S+)$")


def self_times(stderr: str) -> dict[str, int]:
    """Module -> its self time in microseconds, from ``-X importtime``'s lines."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if match:
            found[match[3]] = found.get(match[3], 0) + int(match[1])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "importtime of start-up and status").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_home(home)
        seed_finished_job(home)
        env = {**os.environ, "LLAMA_RUNTIME_HOME": str(home), "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        calls = {
            "python -c pass": [sys.executable, "-X", "importtime", "-c", "pass"],
            "import + ensure()": [sys.executable, "-X", "importtime", "-c", STARTUP, str(home)],
            "status --json": [sys.executable, "-X", "importtime", "-m", "llama_runtime", "status", "--json"],
        }
        runs: dict[str, list[dict[str, int]]] = {name: [] for name in calls}
        for _ in range(args.runs + 1):  # the first round warms the page cache and writes .pyc files
            for name, argv in calls.items():
                done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed: {done.stderr[-2000:]}")
                runs[name].append(self_times(done.stderr))
    bare = statistics.median(sum(r.values()) for r in runs["python -c pass"][1:]) / 1000
    for name, measured in runs.items():
        kept = measured[1:]
        total = statistics.median(sum(r.values()) for r in kept) / 1000
        count = len(kept[-1])
        print(f"{name:18} {count:4d} modules, self times: median {total:6.1f} ms, {total - bare:+6.1f} over bare")
        if args.top and name != "python -c pass":
            medians = {m: statistics.median(r.get(m, 0) for r in kept) / 1000 for m in kept[-1]}
            for module, ms in sorted(medians.items(), key=lambda kv: -kv[1])[: args.top]:
                print(f"    {ms:6.2f} ms  {module}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
