#!/usr/bin/env python3
"""Benchmarks of ``llama-runtime update``, each against its baseline measured in the same run.

Everything talks to the GitHub-like server of tests/fakegithub.py on 127.0.0.1,
which runs inside this process, so the server's own cost and machine load hit
both sides of every ratio alike.

(a) ``update`` of a SIZE MB ``.tar.gz`` vs the durable naive pipeline
    ``curl -o f && openssl dgst -sha256 f && tar xzf f && sync`` of the same URL,
    alternating, the page cache dropped before each run (goal <= 0.7x of the medians).
(b) a blob host capped at 3 MB/s per connection, a 40 MB asset: ``update`` vs one
    ``curl -o`` (goal <= 0.5x).
(c) a second release whose archive has the same digest: bytes fetched for it (goal 0).
(d) peak RSS of ``update`` (``os.wait4``) at each size (goal <= 64 MB, flat).
(e) ``status --json`` over a bare ``python -c pass`` (goal <= 100 ms).
(f) a connection reset at 50%: share of the asset fetched again (goal <= 55%).

The asset holds SIZE MB of incompressible bytes plus a stand-in ``llama-server``
(gzip level 1 by default, to keep building it cheap).

Usage:
    .venv/bin/python scripts/bench.py [--sizes 256,1024] [--repeat 3] [--quick] [--json] [--profile FILE]

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakegithub import FakeGitHub, Fault  # noqa: E402

REPO: Final = "ggml-org/llama.cpp"
MB: Final = 1_000_000
#: Bytes of random data written per step when building an asset.
_BUILD_CHUNK: Final = 4 * 1024 * 1024
GOAL_PIPELINE: Final = 0.7
GOAL_CAPPED: Final = 0.5
#: What slow CDNs give one connection (issue 15), and the asset size (b) is stated for.
CAP_BYTES_PER_S: Final = 3 * MB
CAPPED_MB: Final = 40
GOAL_RSS_MB: Final = 64.0
#: "Flat": memory must not grow with the asset; a few MB of allocator noise are allowed.
GOAL_RSS_SPREAD_MB: Final = 8.0
GOAL_STATUS_MS: Final = 100.0
GOAL_REFETCH: Final = 0.55
#: Size of the asset of (c); the cache makes its size irrelevant to the result.
SAME_DIGEST_MB: Final = 24
DROP_CACHES: Final = Path("/proc/sys/vm/drop_caches")
STAND_IN: Final = (
    b"#!/bin/sh\n"
    b'case "$1" in\n'
    # No build number: one stand-in serves every tag (and two tags share one digest in (c)).
    b"  --version) echo 'llama-server bench stand-in' >&2; exit 0 ;;\n"
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


@dataclass
class Flusher:
    """Empties the page cache before a timed run: ``drop_caches`` when allowed, else fadvise."""

    files: list[Path] = field(default_factory=list)
    method: str = ""

    def __call__(self) -> None:
        os.sync()  # dirty pages of the previous run are written back untimed
        try:
            DROP_CACHES.write_text("3\n")
            self.method = "sync + echo 3 > /proc/sys/vm/drop_caches"
            return
        except OSError:
            pass
        # Not root (or a read-only /proc/sys): evict at least the files this script wrote.
        for path in self.files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        self.method = "sync + posix_fadvise(DONTNEED) on the assets (drop_caches not permitted)"


def measure(argv: list[str], flush: Flusher, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run ``argv`` after flushing; wall time and peak RSS (the process and the children it waited for)."""
    flush()
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


def cli(home: Path, api_url: str, *args: str, profile: Path | None = None) -> list[str]:
    runner = ["-m", "cProfile", "-o", str(profile), "-m"] if profile else ["-m"]
    return [sys.executable, *runner, "llama_runtime", *args, "--home", str(home), "--api-url", api_url, "--json"]


def env_for_update() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env.pop("LLAMA_RUNTIME_TEST_KILL_AT", None)
    return env


def url_of(gh: FakeGitHub, tag: str) -> str:
    return next(
        a["browser_download_url"] for r in gh._repos[REPO].releases if r["tag_name"] == tag for a in r["assets"]
    )


def update(gh: FakeGitHub, home: Path, tag: str, flush: Flusher, profile: Path | None = None) -> Run:
    argv = cli(home, gh.api_url, "update", "--tag", tag, "--backend", "cpu", profile=profile)
    run = measure(argv, flush, env_for_update(), ROOT)
    if run.returncode != 0:
        raise SystemExit(f"update failed ({run.returncode}): {run.stderr}")
    return run


def shell(script: str, flush: Flusher) -> Run:
    run = measure(["sh", "-c", script], flush)
    if run.returncode != 0:
        raise SystemExit(f"the baseline failed: {run.stderr}")
    return run


def bench_pipeline(gh: FakeGitHub, work: Path, tag: str, repeat: int, flush: Flusher) -> tuple[list[Run], list[Run]]:
    """(a)+(d): ``update`` and the durable naive pipeline, alternating."""
    url = url_of(gh, tag)
    updates: list[Run] = []
    naive: list[Run] = []
    for i in range(repeat):
        home = work / f"home-{tag}-{i}"
        updates.append(update(gh, home, tag, flush))
        shutil.rmtree(home)
        dest = work / f"naive-{i}"
        dest.mkdir()
        naive.append(
            shell(
                f"curl -sS -L -o {dest}/f '{url}' && openssl dgst -sha256 {dest}/f >/dev/null"
                f" && mkdir {dest}/x && tar xzf {dest}/f -C {dest}/x && sync",
                flush,
            )
        )
        shutil.rmtree(dest)
    return updates, naive


def bench_capped(work: Path, level: int, repeat: int, flush: Flusher) -> tuple[list[float], list[float]]:
    """(b): ``update`` vs one ``curl`` against a host capping each connection at 3 MB/s."""
    asset = build_asset(work / "capped.tar.gz", "b9500", CAPPED_MB, level)
    flush.files.append(asset)
    updates: list[float] = []
    curls: list[float] = []
    with FakeGitHub(rate_cap=CAP_BYTES_PER_S) as gh:
        gh.add_release(REPO, "b9500", {"llama-b9500-bin-ubuntu-x64.tar.gz": asset})
        url = url_of(gh, "b9500")
        for i in range(repeat):
            home = work / f"home-capped-{i}"
            updates.append(update(gh, home, "b9500", flush).seconds)
            shutil.rmtree(home)
            curls.append(shell(f"curl -sS -L -o {work}/capped-curl '{url}'", flush).seconds)
            (work / "capped-curl").unlink()
    asset.unlink()
    return updates, curls


def bench_same_digest(work: Path, level: int, flush: Flusher) -> tuple[int, int]:
    """(c): bytes fetched for a first release, and for a second one with the same archive digest."""
    asset = build_asset(work / "same.tar.gz", "b9600", SAME_DIGEST_MB, level)
    with FakeGitHub() as gh:
        for tag in ("b9600", "b9601"):
            gh.add_release(REPO, tag, {f"llama-{tag}-bin-ubuntu-x64.tar.gz": asset})
        home = work / "home-same"
        update(gh, home, "b9600", flush)
        first = gh.download_bytes_sent
        update(gh, home, "b9601", flush)
        second = gh.download_bytes_sent - first
    shutil.rmtree(home)
    asset.unlink()
    return first, second


def bench_status(gh: FakeGitHub, work: Path, tag: str, runs: int, flush: Flusher) -> tuple[float, float]:
    """(e): medians of ``python -c pass`` and ``status --json`` on a home with a runtime (warm cache)."""
    home = work / "home-status"
    update(gh, home, tag, flush)
    bare: list[float] = []
    status: list[float] = []
    env = env_for_update()
    for _ in range(runs):
        bare.append(measure([sys.executable, "-c", "pass"], os.sync, env, ROOT).seconds)  # type: ignore[arg-type]
        run = measure(cli(home, gh.api_url, "status"), os.sync, env, ROOT)  # type: ignore[arg-type]
        if run.returncode != 0:
            raise SystemExit(f"status failed: {run.stderr}")
        status.append(run.seconds)
    shutil.rmtree(home)
    return statistics.median(bare), statistics.median(status)


def bench_resume(gh: FakeGitHub, work: Path, tag: str, name: str, size: int, flush: Flusher) -> float:
    """(f): share of the asset fetched again after a reset at 50%."""
    cut = size // 2
    gh.inject(name, Fault(reset_after_bytes=cut))
    before = gh.download_bytes_sent
    home = work / "home-resume"
    update(gh, home, tag, flush)
    sent = gh.download_bytes_sent - before
    shutil.rmtree(home)
    return (sent - cut) / size


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,1024", help="asset sizes in MB for (a)/(d) (default 256,1024)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per size; the medians count")
    parser.add_argument("--status-runs", type=int, default=15, help="runs for (e)")
    parser.add_argument("--level", type=int, default=1, help="gzip level of the assets (0 stores)")
    parser.add_argument("--quick", action="store_true", help="64 and 256 MB, one run each, 5 status runs")
    parser.add_argument("--only", default="abcdef", help="which benchmarks to run, e.g. 'ad' (default all)")
    parser.add_argument("--workdir", type=Path, help="where assets and homes go (default: a temp dir)")
    parser.add_argument("--profile", type=Path, help="also write a cProfile of one update of the largest size")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)
    sizes = [64, 256] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    repeat = 1 if args.quick else args.repeat
    only = set(args.only)

    work = Path(tempfile.mkdtemp(prefix="llama-bench-", dir=args.workdir))
    flush = Flusher()
    results: dict[str, Any] = {"sizes": {}}
    checks: list[tuple[str, bool]] = []
    try:
        with FakeGitHub() as gh:
            published: dict[int, tuple[str, str, int]] = {}
            for number, size_mb in enumerate(sizes if only & set("adef") else []):
                tag = f"b{9000 + number}"
                name = f"llama-{tag}-bin-ubuntu-x64.tar.gz"
                started = time.perf_counter()
                asset = build_asset(work / name, tag, size_mb, args.level)
                flush.files.append(asset)
                _say(args, f"built {name}: {asset.stat().st_size / MB:.0f} MB in {time.perf_counter() - started:.1f} s")
                gh.add_release(REPO, tag, {name: asset})
                published[size_mb] = (tag, name, asset.stat().st_size)
            for size_mb in sizes if only & set("ad") else []:
                updates, naive = bench_pipeline(gh, work, published[size_mb][0], repeat, flush)
                up, base = _median([r.seconds for r in updates]), _median([r.seconds for r in naive])
                entry = {
                    "update_s": [round(r.seconds, 3) for r in updates],
                    "naive_durable_s": [round(r.seconds, 3) for r in naive],
                    "ratio": round(up / base, 3),
                    "peak_rss_mb": round(max(r.max_rss_mb for r in updates), 1),
                }
                results["sizes"][str(size_mb)] = entry
                _say(args, f"{size_mb} MB: {entry}")
                if "a" in only:
                    checks.append(
                        (f"(a) {size_mb} MB update <= {GOAL_PIPELINE}x naive", entry["ratio"] <= GOAL_PIPELINE)
                    )
                if "d" in only:
                    checks.append(
                        (f"(d) {size_mb} MB peak RSS <= {GOAL_RSS_MB} MB", entry["peak_rss_mb"] <= GOAL_RSS_MB)
                    )
            if "d" in only and results["sizes"]:
                rss = [e["peak_rss_mb"] for e in results["sizes"].values()]
                spread_ok = max(rss) - min(rss) <= GOAL_RSS_SPREAD_MB
                checks.append((f"(d) peak RSS flat (spread <= {GOAL_RSS_SPREAD_MB} MB)", spread_ok))
            if args.profile and published:
                tag = published[max(published)][0]
                update(gh, work / "home-profile", tag, flush, profile=args.profile)
                shutil.rmtree(work / "home-profile")
                _say(args, f"profile of one update of {max(published)} MB: {args.profile}")
            if "b" in only:
                ups, curls = bench_capped(work, args.level, repeat, flush)
                ratio = round(statistics.median(ups) / statistics.median(curls), 3)
                results["capped"] = {"update_s": ups, "curl_s": curls, "ratio": ratio, "asset_mb": CAPPED_MB}
                _say(args, f"capped: {results['capped']}")
                checks.append((f"(b) 3 MB/s per connection: update <= {GOAL_CAPPED}x curl", ratio <= GOAL_CAPPED))
            if "c" in only:
                first, second = bench_same_digest(work, args.level, flush)
                results["same_digest"] = {"first_release_bytes": first, "second_release_bytes": second}
                checks.append(("(c) same digest: 0 bytes fetched for the second release", second == 0))
            near = min(published, key=lambda s: abs(s - 256)) if published else None
            if "e" in only and near is not None:
                bare, status = bench_status(gh, work, published[near][0], 5 if args.quick else args.status_runs, flush)
                over = round((status - bare) * 1000, 1)
                results["status"] = {"bare_python_ms": round(bare * 1000, 1), "over_bare_ms": over}
                checks.append((f"(e) status over bare <= {GOAL_STATUS_MS} ms", over <= GOAL_STATUS_MS))
            if "f" in only and near is not None:
                tag, name, size = published[near]
                share = bench_resume(gh, work, tag, name, size, flush)
                results["resume"] = {"asset_mb": round(size / MB), "refetched_share": round(share, 3)}
                checks.append((f"(f) refetched after a 50% cut <= {GOAL_REFETCH:.0%}", share <= GOAL_REFETCH))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results["flush"] = flush.method
    results["goals"] = {name: ok for name, ok in checks}
    results["goals_met"] = all(ok for _n, ok in checks)
    print(json.dumps(results, indent=2) if args.json else _report(results))
    return 0 if results["goals_met"] else 1


def _say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def _report(results: dict[str, Any]) -> str:
    lines = ["", f"page cache: {results['flush']}"]
    for size, e in results["sizes"].items():
        lines.append(
            f"{size:>5} MB  update {e['update_s']} s  naive+sync {e['naive_durable_s']} s  "
            f"ratio {e['ratio']:.2f}x  peak RSS {e['peak_rss_mb']:.1f} MB"
        )
    if "capped" in results:
        c = results["capped"]
        lines.append(
            f"3 MB/s per connection, {c['asset_mb']} MB: update {c['update_s']} s, curl {c['curl_s']} s, "
            f"ratio {c['ratio']:.2f}x"
        )
    if "same_digest" in results:
        lines.append(f"same digest: second release fetched {results['same_digest']['second_release_bytes']} bytes")
    if "status" in results:
        lines.append(f"status --json over bare python: {results['status']['over_bare_ms']} ms")
    if "resume" in results:
        lines.append(f"resume after a 50% cut: {results['resume']['refetched_share']:.1%} fetched again")
    lines += [f"  [{'ok' if ok else 'MISSED'}] {name}" for name, ok in results["goals"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
