"""App start-up (``ensure()``) and ``status --json`` over a bare interpreter: wall clock, CPU and ``-X importtime``.

Each round runs, in turn, a bare ``python -c pass``, then for each tree (this checkout, and any
``--other DIR``, a checkout of another commit, run in DIR with ``PYTHONPATH=DIR``) the start-up of
scripts/bench_startup.py and the ``status --json`` of scripts/bench_status.py: once timed (wall
clock and the child's CPU time) and once under ``-X importtime``. Alternating in one run puts the
machine's load on every side alike. Printed per call: the medians over the rounds less the bare
interpreter's (wall, CPU, and the summed "self" column of ``-X importtime``, the import time of
each module alone, which a wait for a core between imports does not inflate), and the modules
imported. ``--top K`` lists the K modules with the largest median self time. ``--dataclasses`` also
runs each call once per round with ``dataclasses``' class builder timed: how many dataclasses the call
builds, the milliseconds that takes, and the import of ``dataclasses`` itself (with ``inspect``). It
only reports.

Usage: python scripts/bench_importtime.py [--runs N] [--top K] [--dataclasses] [--other DIR]...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import STARTUP, seed_finished_job
from bench_status import seed_home

#: Enough rounds that one slow start (a page fault, a preempted core) does not move the median.
DEFAULT_RUNS: Final[int] = 15
_LINE: Final = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| *(\S+)$")
ROOT: Final = Path(__file__).resolve().parent.parent
#: Put before a call's code: times ``import dataclasses`` and every class it builds, reported at exit.
CENSUS: Final = """
import atexit, json, sys, time
began = time.perf_counter()
import dataclasses
took = {"import_ms": (time.perf_counter() - began) * 1000, "classes": 0, "build_ms": 0.0}
build = dataclasses._process_class
def timed(cls, *args, **kwargs):
    start = time.perf_counter()
    try:
        return build(cls, *args, **kwargs)
    finally:
        took["classes"] += 1
        took["build_ms"] += (time.perf_counter() - start) * 1000
dataclasses._process_class = timed
atexit.register(lambda: print("DATACLASSES " + json.dumps(took), file=sys.stderr))
"""
STATUS_CODE: Final = """
import runpy
sys.argv = ["llama-runtime", "status", "--json"]
runpy.run_module("llama_runtime", run_name="__main__")
"""


def self_times(stderr: str) -> dict[str, int]:
    """Module -> its self time in microseconds, from ``-X importtime``'s lines."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if match:
            found[match[3]] = found.get(match[3], 0) + int(match[1])
    return found


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Wall-clock and CPU (user + system of the child) milliseconds of one run, and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "start-up over bare python").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--dataclasses", action="store_true", help="also count and time the dataclasses built")
    parser.add_argument("--other", action="append", default=[], metavar="DIR", help="another checkout to compare")
    args = parser.parse_args()
    trees = [ROOT, *(Path(d).resolve() for d in args.other)]
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_home(home)
        seed_finished_job(home)
        env = {**os.environ, "LLAMA_RUNTIME_HOME": str(home), "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package starts from .pyc files
        calls: dict[str, tuple[list[str], dict[str, str], Path]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], env, ROOT)
        }
        census: dict[str, list[str]] = {}
        for tree in trees:
            tree_env = {**env, "PYTHONPATH": str(tree)}
            label = "" if tree == ROOT else f" [{tree}]"
            calls[f"import + ensure(){label}"] = ([sys.executable, "-c", STARTUP, str(home)], tree_env, tree)
            status = [sys.executable, "-m", "llama_runtime", "status", "--json"]
            calls[f"status --json{label}"] = (status, tree_env, tree)
            census[f"import + ensure(){label}"] = [sys.executable, "-c", CENSUS + STARTUP, str(home)]
            census[f"status --json{label}"] = [sys.executable, "-c", CENSUS + STATUS_CODE]
        built: dict[str, list[dict[str, float]]] = {name: [] for name in census}
        timed: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
        imports: dict[str, list[dict[str, int]]] = {name: [] for name in calls}
        for round_ in range(args.runs + 1):  # round 0 warms the page cache and writes .pyc files
            for name, (argv, call_env, cwd) in calls.items():
                wall, cpu, _ = run_once(argv, call_env, cwd)
                *_, err = run_once([argv[0], "-X", "importtime", *argv[1:]], call_env, cwd)
                if args.dataclasses and name in census:
                    *_, told = run_once(census[name], call_env, cwd)
                    if round_:
                        built[name].append(json.loads(told.rpartition("DATACLASSES ")[2]))
                if round_:
                    timed[name].append((wall, cpu))
                    imports[name].append(self_times(err))
    bare_wall, bare_cpu, bare_import = (
        statistics.median(t[0] for t in timed["python -c pass"]),
        statistics.median(t[1] for t in timed["python -c pass"]),
        statistics.median(sum(r.values()) for r in imports["python -c pass"]) / 1000,
    )
    print(f"python -c pass: wall {bare_wall:.1f} ms, CPU {bare_cpu:.1f} ms, importtime {bare_import:.1f} ms (medians)")
    print(f"medians of {args.runs} rounds, over the bare interpreter's: wall / CPU / importtime self-time sum")
    for name in list(calls)[1:]:
        wall = statistics.median(t[0] for t in timed[name]) - bare_wall
        cpu = statistics.median(t[1] for t in timed[name]) - bare_cpu
        imported = statistics.median(sum(r.values()) for r in imports[name]) / 1000 - bare_import
        count = len(imports[name][-1])
        print(f"  {name}: {wall:+6.1f} / {cpu:+6.1f} / {imported:+6.1f} ms, {count} modules")
        if built.get(name):
            kinds = ("classes", "build_ms", "import_ms")
            classes, build_ms, import_ms = (statistics.median(b[k] for b in built[name]) for k in kinds)
            print(
                f"      dataclasses: {classes:.0f} built in {build_ms:.1f} ms; importing the module: {import_ms:.1f} ms"
            )
        if args.top:
            kept = imports[name]
            medians = {m: statistics.median(r.get(m, 0) for r in kept) / 1000 for m in kept[-1]}
            for module, ms in sorted(medians.items(), key=lambda kv: -kv[1])[: args.top]:
                print(f"      {ms:6.2f} ms  {module}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
