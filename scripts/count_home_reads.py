"""How often does one ``update`` look at the home? Pointer reads, home scans, marker parses, hashes.

Runs real updates (the CLI in this process, ``--json``) against tests/fakegithub.py's
FakeGitHub on 127.0.0.1 in a throwaway home, with N runtimes already installed, and
counts by wrapping the functions that do the reading (a measurement, not a test):

* pointer reads: :meth:`runtime.layout.Home.read_pointer`;
* home scans: ``os.scandir``/``os.listdir``/``Path.iterdir`` of ``runtimes/``;
* marker parses: :func:`runtime.marker.parse_marker` (every marker read ends there);
* file hashes: :func:`runtime.fsutil.sha256_file`, wherever it was imported; "max per
  binary" is the most times one installed runtime's ``llama-server`` was hashed.

"(locked)" columns count only what happened while the update lock was held
(:meth:`runtime.lock.UpdateLock.hold`): the CLI reads the pointer and the active marker
once or twice before it takes the lock (settings, "is anything active?").

Three updates per N: ``install`` (a newer release is published: download, verify,
activate), ``up to date`` (the same update again: the "nothing to do" path) and
``switch`` (``--tag b7000``, installed but no longer active: verified again and switched to).

Usage: python scripts/count_home_reads.py [--n 1 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package (FakeGitHub, archives)

from llama_runtime.runtime import fsutil, marker
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, stand_in_tarball


class Counts:
    """What one update read; ``runtimes_dir`` tells a home scan from any other listing."""

    def __init__(self, runtimes_dir: Path) -> None:
        self.runtimes_dir = str(runtimes_dir)
        self.pointer = 0
        self.scans = 0
        self.markers = 0
        self.locked = False
        self.pointer_locked = 0
        self.scans_locked = 0
        self.markers_locked = 0
        self.hashes: Counter[str] = Counter()

    def scanned(self, path: object) -> None:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) == self.runtimes_dir:
            self.scans += 1
            self.scans_locked += self.locked

    def row(self) -> dict[str, int]:
        binaries = [n for p, n in self.hashes.items() if "/runtimes/" in p and p.endswith("llama-server")]
        return {
            "pointer reads": self.pointer,
            "(locked)": self.pointer_locked,
            "home scans": self.scans,
            "(locked) ": self.scans_locked,
            "marker parses": self.markers,
            " (locked)": self.markers_locked,
            "file hashes": sum(self.hashes.values()),
            "max hashes of one binary": max(binaries, default=0),
        }


@contextlib.contextmanager
def counting(counts: Counts) -> Iterator[None]:
    """Wrap the reading functions for the duration of the block."""
    saved: list[tuple[object, str, object]] = []

    def patch(owner: object, name: str, wrapper: Callable[..., Any]) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper)

    read_pointer, parse, sha, scandir, listdir, iterdir, hold = (
        Home.read_pointer,
        marker.parse_marker,
        fsutil.sha256_file,
        os.scandir,
        os.listdir,
        Path.iterdir,
        UpdateLock.hold,
    )

    def counted_pointer(self: Home) -> Any:
        counts.pointer += 1
        counts.pointer_locked += counts.locked
        return read_pointer(self)

    def counted_parse(payload: object, path: Path) -> Any:
        counts.markers += 1
        counts.markers_locked += counts.locked
        return parse(payload, path)

    @contextlib.contextmanager
    def counted_hold(self: UpdateLock, *args: Any, **kwargs: Any) -> Iterator[Any]:
        outer = counts.locked
        with hold(self, *args, **kwargs) as held:
            counts.locked = self.lock_path.name == "update.lock" or outer
            try:
                yield held
            finally:
                counts.locked = outer

    def counted_sha(path: Path) -> str:
        counts.hashes[str(path)] += 1
        return sha(path)

    def counted_scandir(path: Any = ".") -> Any:
        counts.scanned(path)
        return scandir(path)

    def counted_listdir(path: Any = ".") -> list[Any]:
        counts.scanned(path)
        return listdir(path)

    def counted_iterdir(self: Path) -> Iterator[Path]:
        counts.scanned(self)
        return iterdir(self)

    patch(Home, "read_pointer", counted_pointer)
    patch(marker, "parse_marker", counted_parse)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("llama_runtime") and getattr(module, "sha256_file", None) is sha:
            patch(module, "sha256_file", counted_sha)
    patch(os, "scandir", counted_scandir)
    patch(os, "listdir", counted_listdir)
    patch(Path, "iterdir", counted_iterdir)
    patch(UpdateLock, "hold", counted_hold)
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def cli(home: Path, api_url: str, *args: str) -> dict[str, Any]:
    """``llama-runtime ARGS --home HOME --api-url URL --json`` in this process; fails loudly on an error."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*args, "--home", str(home), "--api-url", api_url, "--json"])
    payload: dict[str, Any] = json.loads(out.getvalue())
    if code != 0:
        raise SystemExit(f"`{' '.join(args)}` exited {code}: {payload}")
    return payload


def publish(github: FakeGitHub, work: Path, tag: str) -> None:
    archive = stand_in_tarball(work / f"{tag}.tar.gz", tag=tag)
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})


def measure(n: int) -> dict[str, dict[str, int]]:
    """Counts of an installing update and an up-to-date one over ``n`` installed runtimes."""
    rows: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as github:
        work, home = Path(tmp), Path(tmp) / "home"
        for number in range(7000, 7000 + n):
            publish(github, work, f"b{number}")
            cli(home, github.api_url, "update", "--tag", f"b{number}", "--backend", "cpu")
        publish(github, work, f"b{7000 + n}")
        pinned = ("--tag", "b7000")  # installed, not active: a switch to the copy on disk
        for label, tag in (("install", ()), ("up to date", ()), ("switch", pinned)):
            counts = Counts(Home(home).runtimes_dir)
            with counting(counts):
                result = cli(home, github.api_url, "update", *tag, "--backend", "cpu")
            rows[f"N={n} {label} ({result.get('result')})"] = counts.row()
    return rows


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, nargs="+", default=[1, 5], help="installed runtimes before the update")
    args = parser.parse_args(argv)
    os.environ.setdefault("LLAMA_RUNTIME_SERVER_PORT", "0")
    rows: dict[str, dict[str, int]] = {}
    for n in args.n:
        rows.update(measure(n))
    columns = list(next(iter(rows.values())))
    width = max(len(k) for k in rows)
    print(" " * width + " | " + " | ".join(columns))
    for label, row in rows.items():
        print(label.ljust(width) + " | " + " | ".join(str(row[c]).rjust(len(c)) for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
