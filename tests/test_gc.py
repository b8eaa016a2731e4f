"""``gc``: frees old runtimes, stale staging and old partial downloads; never what is in use."""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime import CorruptStateError, UserInputError
from llama_runtime.runtime.fsutil import tree_size
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.runtime.server import ManagedServer
from llama_runtime.updater.activate.gc import (
    collect_garbage,
    retain_after_update,
    runtime_names_in_paths,
    runtimes_to_remove,
    stale_staging,
)
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.offline.offline import InstallFileRequest, install_file
from tests.helpers import CPU_TAR, REPO, STAND_IN_SERVER_PY, assert_runs, run_json, snapshot_tree, stand_in_tarball

TAGS = ("b7000", "b7001", "b7002", "b7003", "b7004")


def long_running(tag: str = "b7000") -> bytes:
    """Answers the verification probe as build ``tag``, then stays up like a server would."""
    return f"""#!/bin/sh
case "$1" in
  --version) echo 'version: {tag[1:]} (stand-in)' >&2; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
case " $* " in *" -m "*) exec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(STAND_IN_SERVER_PY)} "$@" ;; esac
exec sleep 60
""".encode()


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """Five runtimes installed one after another (b7004 active, b7003 previous)."""
    home = Home(tmp_path / "home")
    ticks = itertools.count()
    installer = Installer(home, host=detect_host, clock=lambda: f"2026-01-01T00:00:{next(ticks):02d}Z")
    for tag in TAGS:
        archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag, script=long_running(tag))
        install_file(installer, InstallFileRequest(archive=archive, default_repo=REPO, tag=tag))
    return home


def names_by_tag(home: Home) -> dict[str, str]:
    return {r.marker.tag: r.name for r in home.installed()}


@pytest.fixture
def server(home: Home) -> Iterator[ManagedServer]:
    managed = ManagedServer(home.server_dir)
    yield managed
    managed.stop(timeout=5)


def test_gc_keeps_active_previous_and_the_newest_n_and_frees_the_rest(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    runtimes = {r.marker.tag: r for r in home.installed()}
    expected_bytes = tree_size(runtimes["b7000"].path) + tree_size(runtimes["b7001"].path)
    pointer = home.pointer_path.read_bytes()
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "3")  # three in all, as update --keep counts
    assert code == 0, report
    assert sorted(item["tag"] for item in report["removed"]) == ["b7000", "b7001"]
    assert report["freed_bytes"] == expected_bytes
    assert set(names_by_tag(home)) == {"b7002", "b7003", "b7004"}
    assert home.pointer_path.read_bytes() == pointer
    assert "active" in report["kept"][runtimes["b7004"].name]
    assert "previous" in report["kept"][runtimes["b7003"].name]
    assert_runs(runtimes["b7004"].binary)
    code, listed = run_json(capsys, home.root, None, "list")
    assert all(entry["size_bytes"] > 0 for entry in listed["installed"])
    assert list(home.staging_dir.iterdir()) == []


def test_gc_never_removes_the_runtime_a_running_server_uses(
    home: Home, server: ManagedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    old = next(r for r in home.installed() if r.marker.tag == "b7000")
    server.start(old.binary, [])
    assert server.is_running()
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0, report
    assert set(names_by_tag(home)) == {"b7000", "b7003", "b7004"}
    assert "running" in report["kept"][old.name]
    assert server.is_running()


def test_dry_run_reports_the_same_removals_and_deletes_nothing(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot_tree(home.runtimes_dir)
    code, dry = run_json(capsys, home.root, None, "gc", "--keep", "2", "--dry-run")
    assert code == 0, dry
    assert dry["dry_run"] is True and dry["freed_bytes"] > 0
    assert snapshot_tree(home.runtimes_dir) == before
    code, real = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0, real
    assert [i["path"] for i in real["removed"]] == [i["path"] for i in dry["removed"]]
    assert real["freed_bytes"] == dry["freed_bytes"]


def test_gc_removes_stale_staging_and_old_partial_downloads_only(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    stale = home.staging_dir / f"{child.pid}-deadbeef"
    (stale / "llama-b7005").mkdir(parents=True)
    (stale / "llama-b7005" / "llama-server").write_bytes(b"x" * 100)
    live = home.staging_dir / f"{os.getpid()}-cafebabe"
    live.mkdir()
    old_part = home.downloads_dir / "0123-llama-b7005-bin-ubuntu-x64.tar.gz.part"
    old_part.write_bytes(b"y" * 50)
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old_part, (two_days_ago, two_days_ago))
    fresh_part = home.downloads_dir / "4567-llama-b7006-bin-ubuntu-x64.tar.gz.part"
    fresh_part.write_bytes(b"z" * 10)
    old_spool = home.downloads_dir / ".spool-k1ll3d"  # install-file from a pipe, killed with SIGKILL
    (old_spool / "stdin").parent.mkdir()
    (old_spool / "stdin").write_bytes(b"s" * 25)
    os.utime(old_spool, (two_days_ago, two_days_ago))
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "5")
    assert code == 0, report
    assert {(i["kind"], i["path"]) for i in report["removed"]} == {
        ("staging", str(stale)), ("download", str(old_part)), ("download", str(old_spool))
    }  # fmt: skip
    assert report["freed_bytes"] == 175
    assert live.exists() and fresh_part.exists() and not stale.exists() and not old_part.exists()
    assert not old_spool.exists()


def test_gc_while_an_update_holds_the_lock_exits_3_and_removes_nothing(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot_tree(home.runtimes_dir)
    with UpdateLock(home.lock_path).hold("update"):
        code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 3, report
    assert snapshot_tree(home.runtimes_dir) == before


def test_negative_keep_exits_2(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "-1")
    assert code == 2, report


# Mapped-file detection needs memory maps (psutil has them on Linux, Windows and the BSDs).
needs_proc = pytest.mark.skipif(sys.platform == "darwin", reason="psutil has no memory maps on macOS")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts outside the managed server (killed afterwards)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def assert_active_unchanged(home: Home, pointer: bytes, active: InstalledRuntime) -> None:
    assert home.pointer_path.read_bytes() == pointer
    assert_runs(active.binary)


@needs_proc
def test_gc_keeps_a_runtime_whose_executable_an_app_runs_itself(
    home: Home, started: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    old = {r.marker.tag: r for r in home.installed()}["b7000"]
    sleeper = old.path / "llama-sleeper"  # a real executable inside the runtime, like llama-server
    shutil.copy2(Path(shutil.which("sleep") or "/bin/sleep").resolve(), sleeper)
    started.append(subprocess.Popen([str(sleeper), "60"]))
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0, report
    assert set(names_by_tag(home)) == {"b7000", "b7003", "b7004"}
    assert "running" in report["kept"][old.name]
    assert started[0].poll() is None


@needs_proc
def test_gc_keeps_a_runtime_whose_script_server_an_app_runs_itself(
    home: Home, started: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    old = {r.marker.tag: r for r in home.installed()}["b7001"]
    script = old.path / "serve.sh"  # the kernel runs it as "sh <path>": only argv names the runtime
    script.write_bytes(b"#!/bin/sh\nsleep 60 &\nwait\n")
    script.chmod(0o755)
    started.append(subprocess.Popen([str(script)]))
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0, report
    assert set(names_by_tag(home)) == {"b7001", "b7003", "b7004"}
    assert "running" in report["kept"][old.name]


@needs_proc
def test_gc_keeps_a_runtime_whose_library_a_process_has_mapped(
    home: Home, started: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    old = {r.marker.tag: r for r in home.installed()}["b7002"]
    mapper = (
        "import mmap, sys\n"
        "f = open(sys.argv[1], 'rb')\n"
        "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        "f.close()\n"  # only the mapping is left, as with a loaded libggml
        "print('mapped', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", mapper, str(old.binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"mapped\n"
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0, report
    assert set(names_by_tag(home)) == {"b7002", "b7003", "b7004"}
    assert "running" in report["kept"][old.name]


def unseen(_runtimes_dir: Path) -> set[str] | None:
    """A system that does not let us see other processes."""
    return None


def test_gc_where_processes_cannot_be_seen_refuses_to_keep_only_the_protected_and_removes_nothing(
    home: Home, tmp_path: Path
) -> None:
    before, pointer = snapshot_tree(home.runtimes_dir), home.pointer_path.read_bytes()
    active = home.load(home.read_pointer().active or "")
    with pytest.raises(UserInputError, match="use a larger --keep"):
        collect_garbage(home, keep=2, scan_processes=unseen)
    assert snapshot_tree(home.runtimes_dir) == before
    assert_active_unchanged(home, pointer, active)
    report = collect_garbage(home, keep=3, scan_processes=unseen)
    assert sorted(item.tag or "" for item in report.removed) == ["b7000", "b7001"]


def test_retention_with_nothing_to_remove_skips_the_process_scan_and_one_to_remove_scans(home: Home) -> None:
    scans: list[Path] = []
    names = names_by_tag(home)

    def in_use(runtimes_dir: Path) -> set[str] | None:
        scans.append(runtimes_dir)
        return {str(runtimes_dir / names["b7000"] / "llama-server")}

    pointer = home.pointer_path.read_bytes()
    assert retain_after_update(home, 5, scan_processes=in_use).removed == []
    assert scans == []  # five runtimes, keep 5: a scan could not change the answer
    report = retain_after_update(home, 3, scan_processes=in_use)
    assert len(scans) == 1
    assert [item.tag for item in report.removed] == ["b7001"]  # b7000 is in use: the next oldest goes
    assert set(names_by_tag(home)) == {"b7000", "b7002", "b7003", "b7004"}
    assert home.pointer_path.read_bytes() == pointer
    assert_runs(home.load(names["b7004"]).binary)


def test_gc_with_the_pointer_file_missing_exits_6_and_removes_no_runtime(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot_tree(home.runtimes_dir)
    active = home.load(home.read_pointer().active or "")
    home.pointer_path.unlink()
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 6, report
    assert "doctor --repair" in report["error"]["hint"]
    assert snapshot_tree(home.runtimes_dir) == before
    assert_runs(active.binary)


def test_gc_with_a_pointer_naming_a_missing_runtime_removes_no_runtime(home: Home) -> None:
    before = snapshot_tree(home.runtimes_dir)
    home.write_pointer(Pointer(active="gone-runtime", previous=None))
    with pytest.raises(CorruptStateError, match="names no installed runtime"):
        collect_garbage(home, keep=2)
    assert snapshot_tree(home.runtimes_dir) == before


# -- the decisions alone -----------------------------------------------------------------


def _runtime(name: str, stamp: str) -> InstalledRuntime:
    from llama_runtime.types import InstallMarker

    marker = InstallMarker(REPO, name, "cpu", "auto", "a.tar.gz", 1, "0" * 64, False, stamp, "llama-server")
    return InstalledRuntime(name, Path("/nowhere") / name, marker)


def test_keep_counts_only_unprotected_runtimes_newest_first() -> None:
    runtimes = [_runtime(n, f"2026-01-0{i}T00:00:00Z") for i, n in enumerate("abcdef", start=1)]
    doomed, kept = runtimes_to_remove(runtimes, Pointer(active="a", previous="b"), {"c"}, keep=1)
    assert [r.name for r in doomed] == ["d", "e"]
    assert set(kept) == {"a", "b", "c", "f"}


def test_staging_without_a_live_owner_is_stale_and_other_names_are_never_touched() -> None:
    names = ["123-000000aa", "456-000000bb", "456-000000bb.extra", "gc-old-runtime-000000cc", "smoke-000000dd"]
    names += ["notes.txt", "123-x", "smoke-run"]
    expected = ["123-000000aa", "gc-old-runtime-000000cc", "smoke-000000dd"]
    assert stale_staging(names, alive=lambda pid: pid == 456) == expected


def test_paths_name_the_runtime_directory_they_lie_in_even_when_deleted() -> None:
    root = Path("/h/runtimes")
    paths = [
        "/h/runtimes/a/llama-server",
        "/h/runtimes/b/lib/libggml.so (deleted)",
        "/h/runtimes/c (deleted)",
        "/h/runtimes2/d/llama-server",
        "relative/e",
        "/h/runtimes",
    ]
    assert runtime_names_in_paths(paths, root) == {"a", "b", "c"}


def test_gc_keep_counts_runtimes_in_all_as_update_keep_does_on_four_builds(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    """b7001..b7004 (b7004 active, b7003 previous): ``--keep N`` keeps N runtimes, the protected two among them."""
    pointer = home.pointer_path.read_bytes()
    active = home.load(home.read_pointer().active or "")
    code, removed = run_json(capsys, home.root, None, "remove", "b7000")
    assert code == 0, removed
    assert set(names_by_tag(home)) == {"b7001", "b7002", "b7003", "b7004"}
    code, refused = run_json(capsys, home.root, None, "gc", "--keep", "1")  # the previous one is always kept
    assert code == 2 and "0 (keep every runtime) or a whole number of 2 or more" in refused["error"]["message"]
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "0")  # 0 keeps all, as for update
    assert code == 0 and [i for i in report["removed"] if i["kind"] == "runtime"] == [], report
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "3")
    assert code == 0 and [i["tag"] for i in report["removed"] if i["kind"] == "runtime"] == ["b7001"], report
    code, report = run_json(capsys, home.root, None, "gc", "--keep", "2")
    assert code == 0 and [i["tag"] for i in report["removed"] if i["kind"] == "runtime"] == ["b7002"], report
    assert set(names_by_tag(home)) == {"b7003", "b7004"}
    assert_active_unchanged(home, pointer, active)
