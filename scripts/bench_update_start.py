"""The fixed start-up cost of ``llama-runtime update``: a tiny release, a fresh process, warm and cold.

Publishes a release of a few hundred bytes (bench.py's stand-in ``llama-server``) on
tests/fakegithub.py's FakeGitHub on 127.0.0.1 and runs ``python -m llama_runtime update --tag T
--backend cpu`` into a new home, N times with a warm page cache and N times after ``sync`` and
``echo 3 > /proc/sys/vm/drop_caches`` (root only; elsewhere the cold runs are skipped), and prints
the medians and the modules the update imported (``python -X importtime``, one line per module).
With ``--other PYTHON:DIR`` (another checkout's interpreter, e.g. main's ``.venv/bin/python``, and
its directory) the two alternate run by run, so the machine's load falls on both alike.

At 256 MB the naive pipeline takes ~2 s, so this cost alone bounds bench.py's real-code ratio.
A measurement, not a test: on a shared machine the figures move with its load.

Usage: python scripts/bench_update_start.py [--runs N] [--other PYTHON:DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from bench import DROP_CACHES, REPO, build_asset, env_for_update  # noqa: E402

from tests.fakegithub import FakeGitHub  # noqa: E402

TAG = "b9100"


def update_once(python: str, cwd: str, api_url: str, home: Path, *, cold: bool, extra: tuple[str, ...] = ()) -> str:
    """One ``update`` into a fresh ``home``; its stderr. Cold: dirty pages written back, the page cache dropped."""
    shutil.rmtree(home, ignore_errors=True)
    os.sync()
    if cold:
        DROP_CACHES.write_text("3\n")
    argv = [python, *extra, "-m", "llama_runtime", "update", "--tag", TAG, "--backend", "cpu", "--no-compute-check"]
    argv += ["--home", str(home), "--api-url", api_url, "--json"]
    done = subprocess.run(argv, capture_output=True, env=env_for_update(), cwd=cwd, check=False)
    if done.returncode != 0:
        raise SystemExit(f"update failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return done.stderr.decode(errors="replace")


def modules_imported(python: str, cwd: str, api_url: str, home: Path) -> int:
    """Modules one warm ``update`` imports: ``-X importtime`` writes one line per module (after its header)."""
    err = update_once(python, cwd, api_url, home, cold=False, extra=("-X", "importtime"))
    return sum(1 for line in err.splitlines() if line.startswith("import time:") and "|" in line) - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--other", metavar="PYTHON:DIR", help="another checkout to alternate with")
    args = parser.parse_args()
    pythons = {"this": (sys.executable, str(ROOT))}
    if args.other:
        python, _, where = args.other.partition(":")
        pythons["other"] = (python, where or str(Path(python).resolve().parents[2]))
    can_drop = os.access(DROP_CACHES, os.W_OK)
    modes = ("warm", "cold") if can_drop else ("warm",)
    times: dict[tuple[str, str], list[float]] = {(n, m): [] for n in pythons for m in modes}
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as github:
        asset = build_asset(Path(tmp) / f"llama-{TAG}-bin-ubuntu-x64.tar.gz", TAG, 0, 6)
        github.add_release(REPO, TAG, {asset.name: asset})
        home = Path(tmp) / "home"
        counts = {n: modules_imported(p, d, github.api_url, home) for n, (p, d) in pythons.items()}
        for _ in range(args.runs):
            for mode in modes:
                for name, (python, where) in pythons.items():
                    started = time.perf_counter()
                    update_once(python, where, github.api_url, home, cold=mode == "cold")
                    times[(name, mode)].append(time.perf_counter() - started)
    for name, (_python, where) in pythons.items():
        print(f"{name} ({where}): {counts[name]} modules imported")
        for mode in modes:
            runs = times[(name, mode)]
            shown = " ".join(f"{s:.3f}" for s in runs)
            print(f"  {mode}: median {statistics.median(runs):.3f} s over {len(runs)} runs ({shown})")
    if not can_drop:
        print("cold runs skipped: /proc/sys/vm/drop_caches is not writable (not root, or a container)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
