"""Where one ``update`` spends its wall time, against this host's floor measured in the same run.

``scripts/bench.py --breakdown`` runs this. For each repetition it runs one
``llama-runtime update`` of a real-shaped build (bench.py's real-code payload:
the llama-server build and the machine's own shared libraries, gzip -6) as a
child process with the updater's span collector on
(:mod:`llama_runtime.runtime.spans`), then the durable naive pipeline
(``curl -o f && openssl dgst -sha256 f && tar xzf f && sync``) of the same URL.
After the pairs it measures the host's floor for the same bytes:

* inflate alone: one pass of the inflater the updater uses (ISA-L where
  installed, else zlib) over the archive, from memory;
* write+fsync alone: files of the installed tree's sizes written from memory,
  each fsynced, then their directories;
* hash alone: sha256 of the archive, from memory;
* all three at once, one thread each (each releases the GIL): the floor.

Phases that overlap (the download, inflating, writing, hashing and the early
fsyncs run together) are printed as tallies: the seconds each activity took,
summed over its calls, whichever thread made them. Spans (resolve, download,
verify, fsync tree, marker, switch, trim) are stretches of the main thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
MB: Final = 1_000_000
CHUNK: Final = 1024 * 1024
#: Output sizes (MB of machine code beside the stand-in server) of ``--size``: ``full`` is the
#: 600 MiB (~630 MB) a CUDA-sized build unpacks to; ``small`` keeps a CI job to a minute or two.
SIZES_MB: Final = {"small": 64, "full": 630}

#: The child: the CLI's own entry point, with the span collector on, its records written as JSON.
CHILD: Final = """
import json, sys, time
started = time.monotonic()
from llama_runtime.runtime import spans
collector = spans.collect()
out, sys.argv = sys.argv[1], ["llama-runtime", *sys.argv[2:]]
from llama_runtime.updater.cli.entry import run
import llama_runtime.updater.cli.main  # what run() imports first: the parser and every command module
imported = time.monotonic()
code = run()
ended = time.monotonic()
spans.stop_collecting()
record = {
    "started": started, "imported": imported, "ended": ended, "code": code,
    "spans": [[s.name, s.thread, s.start, s.end] for s in collector.spans],
    "tallies": collector.tallies, "counts": collector.counts,
}
with open(out, "w") as fh:
    json.dump(record, fh)
raise SystemExit(code)
"""


@dataclass
class UpdateRun:
    """One instrumented update: its wall time and what the collector recorded."""

    seconds: float
    launched: float
    record: dict[str, Any]


def instrumented_update(argv: list[str], env: dict[str, str], record: Path) -> UpdateRun:
    """Run ``llama-runtime ARGV`` in a child with the span collector on."""
    launched = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(record), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        check=False,
    )
    seconds = time.monotonic() - launched
    if done.returncode != 0:
        raise SystemExit(f"update failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return UpdateRun(seconds, launched, json.loads(record.read_text()))


def phases(run: UpdateRun) -> dict[str, float]:
    """Seconds of each phase of ``run``, in the order they happen (overlapping activities as tallies)."""
    rec = run.record
    spans = rec["spans"]
    first = min((s[2] for s in spans), default=rec["ended"])
    last = max((s[3] for s in spans), default=rec["ended"])
    out: dict[str, float] = {
        "interpreter start": rec["started"] - run.launched,
        "imports of the CLI (main and its modules)": rec["imported"] - rec["started"],
    }
    out["parse, lock, decide (before the first span)"] = first - rec["imported"]
    for name in ("resolve", "download", "provenance", "extract", "verify", "fsync tree", "marker", "switch", "trim"):
        out[name] = _span_total(spans, name)
    out["verification runs (binary runs inside verify and switch)"] = _span_total(spans, "binary run")
    tallies = rec["tallies"]
    waiting = tallies.get("input", 0.0)
    out["  download: waiting for bytes (extraction thread)"] = waiting
    out["  inflate (extraction thread)"] = max(tallies.get("inflate+input", 0.0) - waiting, 0.0)
    out["  write (member bytes)"] = tallies.get("write", 0.0)
    out["  hash files (sha256 for the marker)"] = tallies.get("hash files", 0.0)
    out["  hash download (sha256 of the archive)"] = tallies.get("hash download", 0.0)
    out["  download write (range workers' pwrite)"] = tallies.get("download write", 0.0)
    out["  fsync ahead (large files, own thread)"] = tallies.get("fsync ahead", 0.0)
    out["after the last phase (job record, output, exit)"] = run.launched + run.seconds - last
    out["total"] = run.seconds
    return out


def _span_total(spans: list[list[Any]], name: str) -> float:
    return sum(float(s[3]) - float(s[2]) for s in spans if s[0] == name)


# -- the floor ------------------------------------------------------------------------------------


def inflater() -> tuple[str, Any]:
    """The inflater the updater's extractor uses: ISA-L's when installed, else zlib."""
    from llama_runtime.updater.stage.archive_rules import _gzip_class

    if _gzip_class().__module__.startswith("isal"):
        from isal import isal_zlib

        return "isal", isal_zlib
    import zlib

    return "zlib", zlib


def tree_sizes(root: Path) -> list[int]:
    """Sizes of the regular files under ``root`` (the installed runtime)."""
    return [
        (Path(d) / f).stat().st_size
        for d, _dirs, files in os.walk(root)
        for f in files
        if not (Path(d) / f).is_symlink()
    ]


def inflate_alone(data: bytes, module: Any) -> float:
    inflate = module.decompressobj(31)
    started = time.monotonic()
    for at in range(0, len(data), CHUNK):
        inflate.decompress(data[at : at + CHUNK])
    return time.monotonic() - started


def hash_alone(data: bytes) -> float:
    digest = hashlib.sha256()
    started = time.monotonic()
    view = memoryview(data)
    for at in range(0, len(data), CHUNK):
        digest.update(view[at : at + CHUNK])
    return time.monotonic() - started


def write_fsync_alone(dest: Path, sizes: list[int], block: bytes) -> float:
    """Files of ``sizes`` written in 1 MiB writes, each fsynced, then the directory (one flat directory)."""
    dest.mkdir(parents=True)
    started = time.monotonic()
    for number, size in enumerate(sizes):
        fd = os.open(dest / f"f{number}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            left = size
            while left > 0:
                left -= os.write(fd, block[: min(left, len(block))])
            os.fsync(fd)
        finally:
            os.close(fd)
    dfd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    seconds = time.monotonic() - started
    shutil.rmtree(dest)
    return seconds


def floor(archive: Path, sizes: list[int], work: Path) -> dict[str, Any]:
    """Each part of the floor alone, then all three at once (one thread each)."""
    name, module = inflater()
    data = archive.read_bytes()
    block = module.decompressobj(31).decompress(data[: 4 * CHUNK])[:CHUNK] or os.urandom(CHUNK)
    os.sync()
    alone = {
        f"inflate alone ({name})": inflate_alone(data, module),
        "write+fsync alone": write_fsync_alone(work / "floor-write", sizes, block),
        "hash alone (sha256 of the archive)": hash_alone(data),
    }
    os.sync()
    threads = [
        threading.Thread(target=inflate_alone, args=(data, module)),
        threading.Thread(target=write_fsync_alone, args=(work / "floor-together", sizes, block)),
        threading.Thread(target=hash_alone, args=(data,)),
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    together = time.monotonic() - started
    return {**alone, "floor (all three at once)": together, "output_bytes": sum(sizes), "inflater": name}


# -- the run ---------------------------------------------------------------------------------------


def host() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return {"nproc": nproc or str(os.cpu_count()), "cpu": model, "load_before": os.getloadavg()}


def run_breakdown(size: str, repeat: int, level: int, asset_cache: Path | None, workdir: Path | None) -> dict[str, Any]:
    """The breakdown: ``repeat`` alternating pairs (instrumented update, naive pipeline), then the floor."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench  # the payload, the server and the naive pipeline are bench.py's

    from tests.fakegithub import FakeGitHub

    work = Path(tempfile.mkdtemp(prefix="llama-breakdown-", dir=workdir))
    flush = bench.Flusher()
    result: dict[str, Any] = {"host": host(), "size": size}
    try:
        tag = "b9900"
        name = f"llama-{tag}-bin-ubuntu-x64.tar.gz"
        args = _BuildArgs(asset_cache, level)
        built = time.monotonic()
        asset = bench._built(work / name, tag, "real", SIZES_MB[size], args)  # type: ignore[arg-type]
        flush.files.append(asset)
        print(f"built {asset.stat().st_size / MB:.0f} MB in {time.monotonic() - built:.1f} s", file=sys.stderr)
        updates: list[UpdateRun] = []
        naive: list[float] = []
        sizes: list[int] = []
        with FakeGitHub() as gh:
            gh.add_release(bench.REPO, tag, {name: asset})
            url = bench.url_of(gh, tag)
            env = bench.env_for_update()
            for i in range(repeat):
                home = work / f"home-{i}"
                argv = [
                    "update",
                    "--tag",
                    tag,
                    "--backend",
                    "cpu",
                    "--no-compute-check",
                    "--home",
                    str(home),
                    "--api-url",
                    gh.api_url,
                ]
                flush()
                updates.append(instrumented_update([*argv, "--json"], env, work / f"record-{i}.json"))
                sizes = tree_sizes(next((home / "runtimes").iterdir()))
                shutil.rmtree(home)
                dest = work / f"naive-{i}"
                dest.mkdir()
                naive.append(
                    bench.shell(
                        f"curl -sS -L -o {dest}/f '{url}' && openssl dgst -sha256 {dest}/f >/dev/null"
                        f" && mkdir {dest}/x && tar xzf {dest}/f -C {dest}/x && sync",
                        flush,
                    ).seconds
                )
                shutil.rmtree(dest)
        result["floor"] = floor(asset, sizes, work)
        result["asset_mb"] = round(asset.stat().st_size / MB, 1)
        result["output_mb"] = round(result["floor"]["output_bytes"] / MB, 1)
        result["runs"] = [phases(u) for u in updates]
        result["naive_s"] = naive
    finally:
        shutil.rmtree(work, ignore_errors=True)
    update_s = statistics.median(u.seconds for u in updates)
    result["update_s"] = update_s
    result["ratio_to_floor"] = update_s / result["floor"]["floor (all three at once)"]
    result["ratio_to_naive"] = update_s / statistics.median(naive)
    result["host"]["load_after"] = os.getloadavg()
    return result


@dataclass
class _BuildArgs:
    asset_cache: Path | None
    level: int


def report(result: dict[str, Any]) -> str:
    h = result["host"]
    lines = [
        f"host: {h['nproc']} CPUs ({h['cpu']}); load average before "
        f"{' '.join(f'{x:.1f}' for x in h['load_before'])}, after {' '.join(f'{x:.1f}' for x in h['load_after'])}",
        f"asset: {result['asset_mb']} MB .tar.gz of real machine code, {result['output_mb']} MB out "
        f"(--size {result['size']})",
        "",
        "phase (seconds; one column per update; indented: tallies of overlapping activities)",
    ]
    runs = result["runs"]
    for key in runs[0]:
        lines.append(f"  {key:<58} " + "  ".join(f"{r[key]:6.3f}" for r in runs))
    lines.append("")
    lines.append("this host's floor for the same bytes (measured after the updates, from memory):")
    for key, value in result["floor"].items():
        if isinstance(value, float):
            lines.append(f"  {key:<58} {value:6.3f}")
    lines += [
        "",
        "  naive durable pipeline (curl + openssl + tar xzf + sync): "
        + ", ".join(f"{s:.3f}" for s in result["naive_s"]),
        f"update (median): {result['update_s']:.3f} s",
        f"ratio to the floor: {result['ratio_to_floor']:.2f}x   ratio to the naive pipeline: "
        f"{result['ratio_to_naive']:.2f}x",
    ]
    return "\n".join(lines)
