#!/usr/bin/env python3
"""Bytes once: what kept builds cost on disk, what a CUDA update downloads, how big a home stays.

Everything runs against the fake GitHub (tests/fakegithub.py, a real HTTP server on 127.0.0.1) with
builds that differ the way real successive Linux CUDA builds do: each build's ``llama-server`` and main
libraries are new bytes (incompressible, so archive sizes are real), and every build ships a tagged
``cudart-llama-bN-bin-ubuntu-cuda-12.8-x64.tar.gz`` companion holding the *same* CUDA runtime libraries
under a new top directory, so its digest changes every build (upstream-2026-10.md, "The 36 assets").
The host is a CUDA 12.8 machine whose ``llama-server`` lists one CUDA device (the process seam).

Goals, each printed with its figure and PASS/FAIL:

1. N kept builds cost one build plus the bytes that differ between them, +5%.
2. A second Linux CUDA build of the same CUDA version downloads at most its main archive, +5%
   (asset bytes served by the fake blob host; the API's JSON is not counted).
3. A home under hourly ``check --apply`` for 30 new builds stays within the retention bound: at most
   3 runtimes, and its bytes at most 3 builds' unique bytes plus the cached archives the trim keeps.

Usage:
    .venv/bin/python scripts/bench_disk.py [--main-mb 12] [--cudart-mb 48] [--builds 5] [--hours 30] [--json]

Not part of the test suite (no timed tests); needs the test extra.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_runtime.runtime.binary import ProcessResult, run_process  # noqa: E402
from llama_runtime.runtime.diskuse import home_disk_use  # noqa: E402
from llama_runtime.runtime.fsutil import tree_size  # noqa: E402
from llama_runtime.runtime.layout import Home  # noqa: E402
from llama_runtime.updater.activate.installer import Installer  # noqa: E402
from llama_runtime.updater.activate.pipeline import StoragePolicy  # noqa: E402
from llama_runtime.updater.api.service import RuntimeUpdater  # noqa: E402
from llama_runtime.updater.choice.decide import UpdateRequest  # noqa: E402
from llama_runtime.updater.choice.host import HostFacts  # noqa: E402
from llama_runtime.updater.sources.github import GitHubClient  # noqa: E402
from tests.archives import build_release_archive  # noqa: E402
from tests.fakegithub import FakeGitHub  # noqa: E402
from tests.helpers import stand_in_server  # noqa: E402

REPO: Final = "ggml-org/llama.cpp"
HOST: Final = HostFacts(os="linux", arch="x64", cuda_driver_version="12.8", nvidia_driver="570.86")
MAIN: Final = "llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"
CUDART: Final = "cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"
#: The goals' slack: +5% over the ideal.
SLACK: Final = 1.05
MB: Final = 1_000_000


def lists_a_cuda_device(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
    """What a CUDA build prints on a machine with an NVIDIA GPU (the stand-in answers the rest)."""
    if argv[-1] == "--list-devices":
        return ProcessResult(0, "Available devices:\n  CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)\n")
    return run_process(argv, timeout, env)


class Builds:
    """Publishes successive CUDA builds: new main bytes each, the same CUDA runtime bytes each."""

    def __init__(self, github: FakeGitHub, work: Path, main_mb: float, cudart_mb: float) -> None:
        self.github, self.work = github, work
        self.main_bytes = int(main_mb * MB)
        seeded = random.Random(11130)  # the CUDA runtime: identical in every build
        self.cudart = {
            "libcudart.so.12.8.57": seeded.randbytes(int(cudart_mb * MB * 0.1)),
            "libcublas.so.12.8.4.1": seeded.randbytes(int(cudart_mb * MB * 0.9)),
        }

    def publish(self, number: int) -> str:
        tag = f"b{number}"
        half = self.main_bytes // 2
        main = build_release_archive(
            self.work / MAIN.format(tag=tag),
            "tar-tagdir",
            {
                "llama-server": stand_in_server(f"version: {number} (bench)"),
                "libggml-cuda.so.0.0.1": os.urandom(half),
                "libllama.so.0.0.1": os.urandom(self.main_bytes - half),
            },
            symlinks={"libggml-cuda.so.0": "libggml-cuda.so.0.0.1", "libllama.so.0": "libllama.so.0.0.1"},
            modes={"llama-server": 0o755, "libggml-cuda.so.0.0.1": 0o644, "libllama.so.0.0.1": 0o644},
            tag=tag,
        )
        cudart = build_release_archive(
            self.work / CUDART.format(tag=tag),
            "tar-tagdir",
            dict(self.cudart),
            symlinks={"libcudart.so.12": "libcudart.so.12.8.57", "libcublas.so.12": "libcublas.so.12.8.4.1"},
            modes=dict.fromkeys(self.cudart, 0o644),
            tag=f"cudart-{tag}",
        )
        self.github.add_release(REPO, tag, {MAIN.format(tag=tag): main, CUDART.format(tag=tag): cudart})
        return tag

    def retire(self, tag: str) -> None:
        """Delete the local files the fake serves ``tag`` from, once nothing will fetch it again."""
        for name in (MAIN, CUDART):
            (self.work / name.format(tag=tag)).unlink(missing_ok=True)

    def asset_bytes_downloaded(self, tag: str) -> int:
        """Bytes of ``tag``'s assets the blob host served (every GET, ranges included)."""
        total = 0
        for request in self.github.requests_to("blob", f"-{tag}-bin-"):
            size = next(a["size"] for a in self.assets(tag) if request.path.endswith("/" + a["name"]))
            wanted = request.headers.get("range", "")
            if wanted.startswith("bytes=") and "-" in wanted:
                first, _, last = wanted[len("bytes=") :].partition("-")
                total += (int(last) if last else size - 1) - int(first) + 1
            else:
                total += size
        return total

    def assets(self, tag: str) -> list[dict[str, Any]]:
        release = next(r for r in self.github._repos[REPO].releases if r["tag_name"] == tag)
        return list(release["assets"])


def installer(github: FakeGitHub, home: Path, keep: int) -> Installer:
    return Installer(
        Home(home),
        source=GitHubClient(github.api_url, REPO),
        host=lambda: HOST,
        runner=lists_a_cuda_device,
        gate=None,
        storage=StoragePolicy(keep=keep),
    )


def unique_bytes(home: Path) -> int:
    """Bytes under ``runtimes/``, each file counted once however many runtimes name it."""
    layout = Home(home)
    return home_disk_use(layout.runtimes_dir, []).home_bytes


def goal_kept_builds(opts: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Goal 1: N kept builds against one build plus the bytes that differ."""
    home = work / "kept"
    with FakeGitHub() as github:
        builds = Builds(github, work, opts.main_mb, opts.cudart_mb)
        for i in range(opts.builds):
            tag = builds.publish(11130 + i)
            installer(github, home, keep=0).update(UpdateRequest(repo=REPO, tag=tag, backend="cuda"))
    runtimes = sorted(Home(home).installed(), key=lambda r: r.marker.sequence)
    one_build = tree_size(runtimes[0].path)
    seen = {r.sha256 for r in runtimes[0].marker.files.values()}
    differing = 0
    for runtime in runtimes[1:]:
        for record in runtime.marker.files.values():
            if record.sha256 not in seen:
                differing += record.size
                seen.add(record.sha256)
    ideal = one_build + differing
    measured = unique_bytes(home)
    copies = sum(tree_size(r.path) for r in runtimes)
    return {
        "goal": f"{len(runtimes)} kept builds cost one build plus the bytes that differ, +5%",
        "one_build_mb": round(one_build / MB, 1),
        "differing_mb": round(differing / MB, 1),
        "ideal_mb": round(ideal / MB, 1),
        "measured_mb": round(measured / MB, 1),
        "as_copies_mb": round(copies / MB, 1),
        "ratio_to_ideal": round(measured / ideal, 4),
        "pass": measured <= ideal * SLACK,
    }


def goal_second_cuda_build(opts: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Goal 2: a second CUDA 12.8 build downloads its main archive only."""
    home = work / "second"
    with FakeGitHub() as github:
        builds = Builds(github, work, opts.main_mb, opts.cudart_mb)
        first, second = builds.publish(11130), builds.publish(11425)
        installer(github, home, keep=0).update(UpdateRequest(repo=REPO, tag=first, backend="cuda"))
        outcome = installer(github, home, keep=0).update(UpdateRequest(repo=REPO, tag=second, backend="cuda"))
        main_size = next(a["size"] for a in builds.assets(second) if a["name"] == MAIN.format(tag=second))
        cudart_size = next(a["size"] for a in builds.assets(second) if a["name"] == CUDART.format(tag=second))
        fetched = builds.asset_bytes_downloaded(second)
    return {
        "goal": "a second Linux CUDA build of the same CUDA version fetches at most its main archive, +5%",
        "main_archive_mb": round(main_size / MB, 1),
        "companion_mb": round(cudart_size / MB, 1),
        "downloaded_mb": round(fetched / MB, 1),
        "ratio_to_main": round(fetched / main_size, 4),
        "companion_from": outcome.active.marker.companion_from,
        "pass": fetched <= main_size * SLACK,
    }


def goal_hourly_checks(opts: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Goal 3: 30 hourly ``check --apply`` runs, one new build each, against the retention bound."""
    home = work / "hourly"
    worst: dict[str, Any] = {"runtimes": 0, "home_mb": 0.0, "cache_entries": 0}
    os.environ.pop("LLAMA_RUNTIME_KEEP", None)  # the default, 3
    with FakeGitHub() as github:
        builds = Builds(github, work, opts.main_mb, opts.cudart_mb)
        builds.publish(11000)
        updater = RuntimeUpdater(
            home, repo=REPO, backend="cuda", api_url=github.api_url, host=lambda: HOST, runner=lists_a_cuda_device
        )
        job = updater.update()
        if job.exception is not None:
            raise job.exception
        build_bytes = 0
        for hour in range(opts.hours):
            builds.publish(11001 + hour)
            result = updater.check(apply=True)
            assert result.applied, result
            builds.retire(f"b{11000 + hour}")
            runtimes = Home(home).installed()
            build_bytes = max([build_bytes, *(tree_size(r.path) for r in runtimes)])
            cache = home / "cache" / "assets"
            worst["runtimes"] = max(worst["runtimes"], len(runtimes))
            worst["cache_entries"] = max(worst["cache_entries"], len(list(cache.iterdir())))
            worst["home_mb"] = max(worst["home_mb"], home_disk_use(home, []).home_bytes / MB)
        assets = builds.assets("b11000")
        main_archive = next(a["size"] for a in assets if a["name"] == MAIN.format(tag="b11000"))
        largest = max(a["size"] for a in assets)
    # 3 runtimes share the CUDA runtime: one build plus two builds' own bytes. The cache keeps the kept
    # runtimes' main archives (3) and the two newest entries (at most the size of a companion each).
    main_unique = builds.main_bytes + len(stand_in_server("version: 11000 (bench)"))
    bound_bytes = (build_bytes + 2 * main_unique + 3 * main_archive + 2 * largest) * SLACK
    return {
        "goal": f"{opts.hours} hourly check --apply runs stay within the retention bound (keep 3)",
        "max_runtimes": worst["runtimes"],
        "max_cache_entries": worst["cache_entries"],
        "max_home_mb": round(worst["home_mb"], 1),
        "bound_home_mb": round(bound_bytes / MB, 1),
        "runtimes_as_copies_without_retention_mb": round((opts.hours + 1) * build_bytes / MB, 1),
        "pass": worst["runtimes"] <= 3 and worst["home_mb"] * MB <= bound_bytes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--main-mb", type=float, default=12.0, help="each build's own libraries, MB")
    parser.add_argument("--cudart-mb", type=float, default=48.0, help="the CUDA runtime libraries, MB")
    parser.add_argument("--builds", type=int, default=5, help="kept builds for goal 1")
    parser.add_argument("--hours", type=int, default=30, help="hourly checks for goal 3")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-disk-") as tmp:
        work = Path(tmp)
        results = [goal_kept_builds(opts, work), goal_second_cuda_build(opts, work), goal_hourly_checks(opts, work)]
    if opts.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            verdict = "PASS" if result["pass"] else "FAIL"
            figures = ", ".join(f"{k}={v}" for k, v in result.items() if k not in ("goal", "pass"))
            print(f"[{verdict}] {result['goal']}\n       {figures}")
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
