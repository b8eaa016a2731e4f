"""The read-ahead an ``update`` starts: it names the files the update imports and is advice only."""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

import httpx
import pytest

import llama_runtime.updater.verify.gate as gate_module
from llama_runtime.updater.cli import readahead


def test_readahead_paths_name_our_bytecode_and_a_third_party_package_and_the_stdlib() -> None:
    ours = py_compile.compile(gate_module.__file__, doraise=True)  # where this interpreter caches it
    theirs = py_compile.compile(str(Path(httpx.__file__).with_name("_client.py")), doraise=True)

    paths = set(readahead.readahead_paths())

    assert ours in paths
    assert theirs in paths
    stdlib = Path(os.__file__).parent / "__pycache__" / f"argparse.{sys.implementation.cache_tag}.pyc"
    assert str(stdlib) in paths
    assert not any(p.endswith(".py") for p in paths)  # sources are not what an import reads


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is POSIX-only")
def test_read_ahead_advises_each_readable_file_and_skips_a_missing_one(tmp_path: Path) -> None:
    present = tmp_path / "present.pyc"
    present.write_bytes(b"x" * 4096)

    assert readahead.will_need(str(present)) is True
    assert readahead.will_need(str(tmp_path / "missing.pyc")) is False
    assert readahead.read_ahead([str(present), str(tmp_path / "missing.pyc")]) == 1
    asked: list[str] = []

    def advise(path: str) -> bool:
        asked.append(path)
        return True

    assert readahead.read_ahead(["a", "b"], advise=advise) == 2
    assert asked == ["a", "b"]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is POSIX-only")
def test_readahead_starts_one_daemon_thread_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead, "_started", False)

    first = readahead.start_readahead()
    second = readahead.start_readahead()

    assert first is not None and first.daemon
    assert second is None
    first.join(timeout=30)
    assert not first.is_alive()


def test_without_posix_fadvise_no_thread_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead, "_started", False)
    monkeypatch.delattr(os, "posix_fadvise", raising=False)

    assert readahead.start_readahead() is None
