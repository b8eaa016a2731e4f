#!/usr/bin/env python3
"""Benchmarks of ``llama-runtime update`` against the physical floor, in one run, one local server.

Every ratio compares two things measured in this run against the same
GitHub-like server on 127.0.0.1 (tests/fakegithub.py), so machine load and
the server's own speed affect both sides alike:

(a) ``update`` of a SIZE MB asset vs ``curl -o`` + ``sha256sum`` + ``tar x``
    of the same URL (goal <= 1.0x: hash while downloading, never read twice).
    ``update`` also fsyncs what it installs; the floor is shown both without
    and with a final ``sync`` so that cost is visible, not hidden.
(b) peak RSS of the ``update`` process (``os.wait4``) per size (goal <= 64 MB, flat).
(c) ``status --json`` over a bare ``python -c pass`` (goal <= 100 ms).
(d) a connection reset at 50% of the body: bytes fetched again after the cut,
    as a share of the asset (goal <= 55%).

The asset is a ``.tar.gz`` of SIZE MB of incompressible bytes plus a stand-in
``llama-server`` (gzip level 1 by default, to keep building it cheap).

Usage:
    .venv/bin/python scripts/bench.py [--sizes 256,1024] [--repeat 3] [--quick] [--json]

Not part of the test suite. Exit code 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakegithub import FakeGitHub, Fault  # noqa: E402

REPO: Final = "ggml-org/llama.cpp"
MB: Final = 1_000_000
#: Bytes of random data written per step when building an asset.
_BUILD_CHUNK: Final = 4 * 1024 * 1024
GOAL_RATIO: Final = 1.0
GOAL_RSS_MB: Final = 64.0
#: "Flat": memory must not grow with the asset; a few MB of allocator noise are allowed.
GOAL_RSS_SPREAD_MB: Final = 8.0
#: The size the speed goal (a) is stated for.
GOAL_SIZE_MB: Final = 256
GOAL_STATUS_MS: Final = 100.0
GOAL_REFETCH: Final = 0.55
STAND_IN: Final = (
    b"#!/bin/sh\n"
    b'case "$1" in\n'
    b"  --version) echo 'version: 9000 (bench)' >&2; exit 0 ;;\n"
    b"  --list-devices) printf 'Available devices:\\n'; exit 0 ;;\n"
    b"esac\n"
    b"exit 0\n"
)


@dataclass
class Run:
    """One measured process."""

    seconds: float
    max_rss_mb: float
    returncode: int
    stderr: str


def measure(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run ``argv``; wall time and peak RSS (this process and the children it waited for).

    Dirty pages of the previous run are flushed first (untimed), so no run pays
    for another's writeback.
    """
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    rss = usage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return Run(seconds, rss, proc.returncode, err.decode(errors="replace"))


def build_asset(path: Path, tag: str, size_mb: int, level: int) -> Path:
    """``llama-<tag>/`` with a stand-in llama-server and ``size_mb`` MB of random bytes."""
    size = size_mb * MB
    with tarfile.open(path, "w:gz", compresslevel=level) as tf:
        top = tarfile.TarInfo(f"llama-{tag}")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(top)
        server = tarfile.TarInfo(f"llama-{tag}/llama-server")
        server.size, server.mode = len(STAND_IN), 0o755
        tf.addfile(server, _Bytes(STAND_IN))
        pad = tarfile.TarInfo(f"llama-{tag}/libpad.so")
        pad.size, pad.mode = size, 0o755
        tf.addfile(pad, _Random(size))
    return path


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        out, self.pos = self.data[self.pos : end], min(end, len(self.data))
        return out


class _Random:
    """Incompressible bytes on demand, without holding them all in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left, _BUILD_CHUNK)
        self.left -= n
        return os.urandom(n)


def cli(home: Path, api_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "llama_runtime", *args, "--home", str(home), "--api-url", api_url, "--json"]


def env_for_update() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env.pop("LLAMA_RUNTIME_TEST_KILL_AT", None)
    return env


def bench_update(gh: FakeGitHub, work: Path, tag: str, repeat: int) -> tuple[list[Run], list[float], list[float]]:
    """(a)+(b): ``update`` runs and the curl/sha256sum/tar floor, interleaved."""
    url = next(a["browser_download_url"] for r in gh._repos[REPO].releases if r["tag_name"] == tag for a in r["assets"])
    updates: list[Run] = []
    floor: list[float] = []
    floor_sync: list[float] = []
    env = env_for_update()
    for i in range(repeat):
        home = work / f"home-{tag}-{i}"
        run = measure(cli(home, gh.api_url, "update", "--tag", tag, "--backend", "cpu"), env, ROOT)
        if run.returncode != 0:
            raise SystemExit(f"update failed ({run.returncode}): {run.stderr}")
        updates.append(run)
        shutil.rmtree(home)
        for with_sync, into in ((False, floor), (True, floor_sync)):
            dest = work / f"floor-{i}"
            dest.mkdir()
            script = (
                f"curl -sS -L -o {dest}/a.tar.gz '{url}' && sha256sum {dest}/a.tar.gz >/dev/null"
                f" && mkdir {dest}/x && tar xzf {dest}/a.tar.gz -C {dest}/x" + (" && sync" if with_sync else "")
            )
            base = measure(["sh", "-c", script])
            if base.returncode != 0:
                raise SystemExit(f"the curl baseline failed: {base.stderr}")
            into.append(base.seconds)
            shutil.rmtree(dest)
    return updates, floor, floor_sync


def bench_status(gh: FakeGitHub, work: Path, tag: str, runs: int) -> tuple[float, float]:
    """(c): medians of ``python -c pass`` and ``status --json`` on a home with a runtime."""
    home = work / "home-status"
    env = env_for_update()
    done = measure(cli(home, gh.api_url, "update", "--tag", tag, "--backend", "cpu"), env, ROOT)
    if done.returncode != 0:
        raise SystemExit(f"update for the status benchmark failed: {done.stderr}")
    bare: list[float] = []
    status: list[float] = []
    for _ in range(runs):
        bare.append(measure([sys.executable, "-c", "pass"], env, ROOT).seconds)
        run = measure(cli(home, gh.api_url, "status"), env, ROOT)
        if run.returncode != 0:
            raise SystemExit(f"status failed: {run.stderr}")
        status.append(run.seconds)
    shutil.rmtree(home)
    return statistics.median(bare), statistics.median(status)


def bench_resume(gh: FakeGitHub, work: Path, tag: str, name: str, size: int) -> float:
    """(d): share of the asset fetched again after a reset at 50%."""
    cut = size // 2
    gh.inject(name, Fault(reset_after_bytes=cut))
    before = gh.download_bytes_sent
    home = work / "home-resume"
    run = measure(cli(home, gh.api_url, "update", "--tag", tag, "--backend", "cpu"), env_for_update(), ROOT)
    if run.returncode != 0:
        raise SystemExit(f"update after the cut failed: {run.stderr}")
    sent = gh.download_bytes_sent - before
    shutil.rmtree(home)
    return (sent - cut) / size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,1024", help="asset sizes in MB, comma separated (default 256,1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size for (a)/(b); the median counts")
    parser.add_argument("--status-runs", type=int, default=15, help="runs for (c)")
    parser.add_argument("--level", type=int, default=1, help="gzip level of the asset (0 stores)")
    parser.add_argument("--quick", action="store_true", help="64 and 256 MB, one run each, 5 status runs")
    parser.add_argument("--workdir", type=Path, help="where assets and homes go (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)
    sizes = [64, 256] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    repeat = 1 if args.quick else args.repeat
    status_runs = 5 if args.quick else args.status_runs

    work = Path(tempfile.mkdtemp(prefix="llama-bench-", dir=args.workdir))
    results: dict[str, Any] = {"sizes": {}, "goals_met": True}
    try:
        with FakeGitHub() as gh:
            published: dict[int, tuple[str, str, int]] = {}
            for number, size_mb in enumerate(sizes):
                tag = f"b{9000 + number}"
                name = f"llama-{tag}-bin-ubuntu-x64.tar.gz"
                started = time.perf_counter()
                asset = build_asset(work / name, tag, size_mb, args.level)
                _say(args, f"built {name}: {asset.stat().st_size / MB:.0f} MB in {time.perf_counter() - started:.1f} s")
                gh.add_release(REPO, tag, {name: asset})
                published[size_mb] = (tag, name, asset.stat().st_size)
            for size_mb in sizes:
                tag, _name, _size = published[size_mb]
                updates, floor, floor_sync = bench_update(gh, work, tag, repeat)
                up = statistics.median(r.seconds for r in updates)
                entry = {
                    "update_s": round(up, 3),
                    "curl_sha256sum_tar_s": round(statistics.median(floor), 3),
                    "curl_sha256sum_tar_sync_s": round(statistics.median(floor_sync), 3),
                    "ratio": round(up / statistics.median(floor), 3),
                    "ratio_vs_sync": round(up / statistics.median(floor_sync), 3),
                    "peak_rss_mb": round(max(r.max_rss_mb for r in updates), 1),
                }
                results["sizes"][str(size_mb)] = entry
                _say(args, f"{size_mb} MB: {entry}")
            tag, name, size = published[min(sizes, key=lambda s: abs(s - 256))]
            bare, status = bench_status(gh, work, tag, status_runs)
            results["status"] = {
                "bare_python_ms": round(bare * 1000, 1),
                "status_json_ms": round(status * 1000, 1),
                "over_bare_ms": round((status - bare) * 1000, 1),
            }
            share = bench_resume(gh, work, tag, name, size)
            results["resume"] = {"asset_mb": round(size / MB), "refetched_share": round(share, 3)}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    sized = results["sizes"].items()
    # The speed goal is stated for 256 MB; smaller assets mostly time the interpreter's start-up.
    checks = [
        (f"(a) {s} MB ratio <= {GOAL_RATIO}", e["ratio"] <= GOAL_RATIO) for s, e in sized if int(s) == GOAL_SIZE_MB
    ]
    checks += [(f"(b) {s} MB peak RSS <= {GOAL_RSS_MB} MB", e["peak_rss_mb"] <= GOAL_RSS_MB) for s, e in sized]
    rss = [e["peak_rss_mb"] for e in results["sizes"].values()]
    checks.append((f"(b) peak RSS flat (spread <= {GOAL_RSS_SPREAD_MB} MB)", max(rss) - min(rss) <= GOAL_RSS_SPREAD_MB))
    checks.append((f"(c) status over bare <= {GOAL_STATUS_MS} ms", results["status"]["over_bare_ms"] <= GOAL_STATUS_MS))
    checks.append((f"(d) refetched <= {GOAL_REFETCH:.0%}", results["resume"]["refetched_share"] <= GOAL_REFETCH))
    results["goals"] = {name: ok for name, ok in checks}
    results["goals_met"] = all(ok for _n, ok in checks)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _report(results)
    return 0 if results["goals_met"] else 1


def _say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def _report(results: dict[str, Any]) -> None:
    print()
    print(f"{'size':>7} {'update':>9} {'curl+sha+tar':>13} {'(+sync)':>9} {'ratio':>7} {'vs sync':>8} {'peak RSS':>9}")
    for size, e in results["sizes"].items():
        print(
            f"{size + ' MB':>7} {e['update_s']:>8.2f}s {e['curl_sha256sum_tar_s']:>12.2f}s "
            f"{e['curl_sha256sum_tar_sync_s']:>8.2f}s {e['ratio']:>6.2f}x {e['ratio_vs_sync']:>7.2f}x "
            f"{e['peak_rss_mb']:>6.1f} MB"
        )
    s = results["status"]
    print(
        f"status --json: {s['status_json_ms']} ms, bare python: {s['bare_python_ms']} ms, "
        f"over bare: {s['over_bare_ms']} ms"
    )
    r = results["resume"]
    print(f"resume after a reset at 50% of {r['asset_mb']} MB: {r['refetched_share']:.1%} of the asset fetched again")
    for name, ok in results["goals"].items():
        print(f"  [{'ok' if ok else 'MISSED'}] {name}")


if __name__ == "__main__":
    sys.exit(main())
