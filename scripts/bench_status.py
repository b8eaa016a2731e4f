"""How much does ``llama-runtime status --json`` cost over a bare interpreter start?

Runs ``python -c pass`` and ``python -m updater.cli status --json`` alternately,
N times each, in the same run (so machine load affects both alike), and prints
the medians (wall clock, and CPU time of the child: on a loaded machine the
wall clock mostly measures waiting for a core), their difference and their
ratio. The budget is 40 ms over the bare start (wall clock). A throwaway home
with one fake installed runtime makes ``status`` read a pointer and a marker, as it does on a real machine.

Usage: python scripts/bench_status.py [--runs N] [--budget-ms MS]
Exit code 1 when the median wall-clock difference is over the budget. POSIX only (``resource``).
"""

from __future__ import annotations

import argparse
import hashlib
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

#: Extra start-up cost ``status`` may add over ``python -c pass``.
DEFAULT_BUDGET_MS: Final[float] = 40.0
#: Enough runs that one slow start (a cold page cache) does not move the median.
DEFAULT_RUNS: Final[int] = 21


def seed_home(root: Path) -> None:
    """A home with one accepted runtime (pointer, marker, binary, trust record); status needs no network."""
    name = "ggml-org_llama.cpp-b7000-cpu-00000000"
    runtime = root / "runtimes" / name
    runtime.mkdir(parents=True)
    binary = runtime / "llama-server"
    binary.write_bytes(b"#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    marker = {
        "schema_version": 1,
        "repo": "ggml-org/llama.cpp",
        "tag": "b7000",
        "backend": "cpu",
        "backend_request": "cpu",
        "asset": "llama-b7000-bin-ubuntu-x64.tar.gz",
        "size": 1,
        "sha256": "0" * 64,
        "digest_verified": True,
        "installed_at": "2025-01-01T00:00:00Z",
        "binary": "llama-server",
        # Its real digest: status and ensure() hash a file whose stat fingerprint is not recorded yet.
        "files": {
            "llama-server": {"size": binary.stat().st_size, "sha256": hashlib.sha256(binary.read_bytes()).hexdigest()}
        },
    }
    (runtime / "llama-runtime.json").write_text(json.dumps(marker))
    (root / "active.json").write_text(json.dumps({"schema_version": 1, "active": name, "previous": None}))
    # As an update leaves it: accepted, so status and ensure() check the folder against its trust record.
    from llama_runtime.runtime.trust import record_trust

    record_trust(root, name, runtime)


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system of the child) seconds of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--budget-ms", type=float, default=DEFAULT_BUDGET_MS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_home(home)
        # An unreachable API proves status makes no request: any request would fail or hang.
        env = {**os.environ, "LLAMA_RUNTIME_HOME": str(home), "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
        bare_argv = [sys.executable, "-c", "pass"]
        status_argv = [sys.executable, "-m", "llama_runtime", "status", "--json"]
        time_once(status_argv, env)  # warm the page cache and .pyc files
        bare: list[tuple[float, float]] = []
        status: list[tuple[float, float]] = []
        for _ in range(args.runs):
            bare.append(time_once(bare_argv, env))
            status.append(time_once(status_argv, env))
    extra = {}
    for column, what in ((0, "wall"), (1, "cpu")):
        bare_ms = statistics.median(r[column] for r in bare) * 1000
        status_ms = statistics.median(r[column] for r in status) * 1000
        extra[what] = status_ms - bare_ms
        print(f"[{what}] python -c pass:               median {bare_ms:7.1f} ms over {args.runs} runs")
        print(f"[{what}] llama-runtime status --json:  median {status_ms:7.1f} ms over {args.runs} runs")
        print(
            f"[{what}] difference: {extra[what]:+.1f} ms (budget {args.budget_ms:.0f} ms), "
            f"ratio {status_ms / bare_ms:.1f}x"
        )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0 if extra["wall"] <= args.budget_ms else 1


if __name__ == "__main__":
    sys.exit(main())
