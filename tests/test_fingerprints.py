"""Damage is seen cheaply, by stat fingerprints confirmed by a hash.

A same-size garbage ``llama-server`` (ENOEXEC) was "ready" for ``status``, ``which``,
``list`` and ``ensure()``: they compared sizes only. Now each recorded file's stat
(size, mtime, ctime, inode; ``fingerprints.json`` in the home) is compared with the
one recorded when its bytes last matched the marker; a file whose stat changed is
hashed. Changed bytes are damage; intact ones (a ``touch``, a ``cp -a`` of the home,
a re-link) refresh the record. Every failure test shows the previous runtime
unchanged and running.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RuntimeUpdater
from llama_runtime.runtime.fingerprint import FINGERPRINTS_NAME, Fingerprints, RuntimeCheck
from llama_runtime.runtime.layout import Home
from llama_runtime.types import FileRecord, InstallMarker
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, assert_runs, publish_stand_in, run_json, snapshot_tree, stand_in_tarball


@pytest.fixture
def two_installed(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> Home:
    """Stand-in CPU builds b7000 (previous) and b7001 (active)."""
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
    return Home(home)


class PreviousIntact:
    """The previous runtime (b7000): its files must not change and it must run."""

    def __init__(self, h: Home) -> None:
        self.h = h
        self.name = h.read_pointer().previous or ""
        self.files = snapshot_tree(h.runtime_path(self.name))

    def assert_unchanged_and_runs(self) -> None:
        assert self.h.read_pointer().previous == self.name or self.h.read_pointer().active == self.name
        assert snapshot_tree(self.h.runtime_path(self.name)) == self.files
        assert_runs(self.h.load(self.name).binary)


def active_binary(h: Home) -> Path:
    return h.load(h.read_pointer().active or "").binary


def garbage_same_size(binary: Path) -> None:
    """Overwrite in place (same inode) with bytes no kernel can execute."""
    size = binary.stat().st_size
    with binary.open("r+b") as handle:
        handle.write(b"\0garbage" * (size // 8) + b"\0" * (size % 8))


def listed(capsys: pytest.CaptureFixture[str], home: Path, api_url: str) -> dict[str, dict[str, Any]]:
    code, payload = run_json(capsys, home, api_url, "list")
    assert code == 0, payload
    return {item["name"]: item for item in payload["installed"]}


def updater(home: Path, github: FakeGitHub) -> RuntimeUpdater:
    return RuntimeUpdater(home, repo=REPO, backend="cpu", api_url=github.api_url)


def test_same_size_garbage_llama_server_is_damage_for_status_which_list_and_ensure(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    binary = active_binary(h)
    size = binary.stat().st_size
    garbage_same_size(binary)
    assert binary.stat().st_size == size
    with pytest.raises(OSError) as ran:
        subprocess.run([str(binary), "--version"], capture_output=True, check=False)
    assert ran.value.errno == errno.ENOEXEC
    for verb in ("status", "which"):
        code, payload = run_json(capsys, home, github.api_url, verb)
        assert code == 6, payload
        assert payload["error"]["code"] == "corrupt_state"
        assert "llama-server does not match its recorded sha256" in payload["error"]["message"]
    items = listed(capsys, home, github.api_url)
    active = items[h.read_pointer().active or ""]
    assert any("llama-server does not match" in d for d in active["damage"]), active
    assert items[previous.name]["damage"] == []
    result = updater(home, github).ensure()
    assert not result.ready
    assert "does not match its recorded sha256" in result.problem
    previous.assert_unchanged_and_runs()


def test_ensure_install_if_missing_repairs_a_same_size_garbage_llama_server(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home, tmp_path: Path
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    publish_stand_in(github, tmp_path, "b7002")  # start-up repairs what was installed, it does not upgrade
    garbage_same_size(active_binary(h))
    result = updater(home, github).ensure(install_if_missing=True)
    assert result.ready and result.installed, result.problem
    assert result.runtime.marker.tag == "b7001"
    assert_runs(result.binary)
    # The repaired runtime was fingerprinted at install: the next check hashes nothing. The damaged
    # copy (neither active nor previous) went with the retention that follows every install.
    items = listed(capsys, home, github.api_url)
    assert (items[result.runtime.name]["damage"], items[result.runtime.name]["suspect"]) == ([], [])
    assert [i["tag"] for i in items.values() if i["damage"]] == []
    previous.assert_unchanged_and_runs()


def test_install_fingerprints_every_file_so_the_first_check_hashes_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    stamps = Fingerprints.load(h.root).runtimes
    for runtime in h.installed():
        assert set(stamps[runtime.name]) == set(runtime.marker.files)
    items = listed(capsys, home, github.api_url)
    assert [(i["damage"], i["suspect"]) for i in items.values()] == [([], []), ([], [])]


def test_touch_of_every_file_is_not_damage_and_the_record_is_refreshed(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    active = h.load(h.read_pointer().active or "")
    for rel in active.marker.files:
        os.utime(active.path / rel, ns=(1_000_000_000, 1_000_000_000))  # `touch -d 1970-01-01T00:00:01`
    before = Fingerprints.load(h.root).runtimes[active.name]
    first = listed(capsys, home, github.api_url)[active.name]
    assert first["damage"] == [] and sorted(first["suspect"]) == sorted(active.marker.files)
    after = Fingerprints.load(h.root).runtimes[active.name]
    assert after != before and all(stamp[1] == 1_000_000_000 for stamp in after.values())
    assert listed(capsys, home, github.api_url)[active.name]["suspect"] == []
    code, payload = run_json(capsys, home, github.api_url, "status")
    assert code == 0, payload
    assert updater(home, github).ensure().ready


def test_rewritten_binary_with_its_mtime_set_back_is_still_damage(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    binary = active_binary(h)
    st = binary.stat()
    garbage_same_size(binary)
    os.utime(binary, ns=(st.st_atime_ns, st.st_mtime_ns))  # `touch -r`: size, mtime and inode as recorded
    result = updater(home, github).ensure()
    assert not result.ready and "does not match its recorded sha256" in result.problem
    code, payload = run_json(capsys, home, github.api_url, "status")
    assert code == 6, payload
    previous.assert_unchanged_and_runs()


def test_a_home_copied_with_cp_a_is_not_damaged(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home, tmp_path: Path
) -> None:
    copy = tmp_path / "restored"
    subprocess.run(["cp", "-a", str(home), str(copy)], check=True)
    h = Home(copy)
    active = h.load(h.read_pointer().active or "")
    assert os.stat(active.binary).st_ino != os.stat(two_installed.root / active.binary.relative_to(copy)).st_ino
    items = listed(capsys, copy, github.api_url)
    assert all(i["damage"] == [] and sorted(i["suspect"]) == sorted(i_files(h, n)) for n, i in items.items())
    assert updater(copy, github).ensure().ready
    code, payload = run_json(capsys, copy, github.api_url, "status")
    assert code == 0, payload
    assert all(i["suspect"] == [] for i in listed(capsys, copy, github.api_url).values())


def i_files(h: Home, name: str) -> list[str]:
    return list(h.load(name).marker.files)


def test_relink_to_an_identical_copy_is_suspect_then_intact_and_refreshes_the_record(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home, tmp_path: Path
) -> None:
    h = two_installed
    binary = active_binary(h)
    twin = h.root / "twin"  # same filesystem: what a hard-link dedupe of identical files does
    shutil.copy2(binary, twin)
    os.link(twin, binary.with_name("relink.tmp"))
    os.replace(binary.with_name("relink.tmp"), binary)
    twin.unlink()
    name = h.read_pointer().active or ""
    first = listed(capsys, home, github.api_url)[name]
    assert first["damage"] == [] and first["suspect"] == [binary.relative_to(h.runtime_path(name)).as_posix()]
    assert Fingerprints.load(h.root).runtimes[name]
    assert listed(capsys, home, github.api_url)[name]["suspect"] == []
    assert updater(home, github).ensure().ready


def test_a_home_without_fingerprints_gets_them_on_first_check(
    home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    (h.root / FINGERPRINTS_NAME).unlink()  # a home installed before fingerprints existed
    result = updater(home, github).ensure()
    assert result.ready, result.problem
    stamps = Fingerprints.load(h.root).runtimes
    assert set(stamps) == {result.runtime.name}
    assert set(stamps[result.runtime.name]) == set(result.runtime.marker.files)


@pytest.mark.parametrize("content", ["fifo", b"[" * 5000, b"{not json", b'{"schema_version": 1, "runtimes": 7}'])
def test_a_damaged_fingerprint_file_is_rebuilt_not_trusted(
    home: Path, github: FakeGitHub, two_installed: Home, content: Any, tmp_path: Path
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    path = h.root / FINGERPRINTS_NAME
    elsewhere = tmp_path / "elsewhere.json"
    planted = path.read_bytes()
    elsewhere.write_bytes(planted)  # stamps that would be right, behind a link we did not make
    path.unlink()
    if content == "fifo":
        os.mkfifo(path)  # must not hang a start-up
    else:
        path.write_bytes(content)
    result = updater(home, github).ensure()
    assert result.ready, result.problem
    assert json.loads(path.read_bytes())["runtimes"][result.runtime.name]  # rebuilt by hashing
    assert elsewhere.read_bytes() == planted
    garbage_same_size(active_binary(h))
    result = updater(home, github).ensure()
    assert not result.ready and "does not match its recorded sha256" in result.problem
    previous.assert_unchanged_and_runs()


def test_doctor_repair_of_a_garbage_binary_reinstalls_it_and_records_its_fingerprints(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, two_installed: Home
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    garbage_same_size(active_binary(h))
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    name = h.read_pointer().active or ""
    assert set(Fingerprints.load(h.root).runtimes[name]) == set(h.load(name).marker.files)
    item = listed(capsys, home, github.api_url)[name]
    assert (item["damage"], item["suspect"]) == ([], [])
    assert_runs(active_binary(h))
    previous.assert_unchanged_and_runs()


def test_ensure_install_if_missing_repairs_a_library_rewritten_at_the_same_size(
    home: Path, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for tag in ("b7000", "b7001"):
        archive = stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag, libs=("ggml",))
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
    h = Home(home)
    previous = PreviousIntact(h)
    active = h.load(h.read_pointer().active or "")
    library = next(active.path / rel for rel in active.marker.files if "libggml" in rel)
    garbage_same_size(library)
    assert not updater(home, github).ensure().ready
    result = updater(home, github).ensure(install_if_missing=True)
    assert result.ready and result.installed, result.problem
    assert result.runtime.marker.tag == "b7001" and result.runtime.name != active.name
    assert_runs(result.binary)
    previous.assert_unchanged_and_runs()


def _runtime_dir(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, InstallMarker]:
    """A runtime directory under ``tmp_path/runtimes/r`` and the marker that records its files."""
    root = tmp_path / "runtimes" / "r"
    root.mkdir(parents=True)
    records = {}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
        records[rel] = FileRecord(len(data), hashlib.sha256(data).hexdigest())
    marker = InstallMarker(
        repo=REPO,
        tag="b7000",
        backend="cpu",
        backend_request="cpu",
        asset="a.tar.gz",
        size=1,
        sha256="0" * 64,
        digest_verified=True,
        installed_at="2026-01-01T00:00:00Z",
        binary="llama-server",
        files=records,
    )
    return root, marker


def test_a_file_rewritten_while_it_is_hashed_gets_no_stamp(tmp_path: Path) -> None:
    root, marker = _runtime_dir(tmp_path, {"llama-server": b"server bytes", "libggml.so": b"library"})
    stamps = Fingerprints(tmp_path / FINGERPRINTS_NAME)

    def hash_then_rewrite(path: Path) -> str:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.name == "libggml.so":
            path.write_bytes(b"LIBRARY")  # same size, other bytes, after they were hashed
        return digest

    found = stamps.check("r", root, marker, hash_then_rewrite)
    assert found.damage == () and sorted(found.suspect) == ["libggml.so", "llama-server"]
    assert set(stamps.runtimes["r"]) == {"llama-server"}  # never blessed: the next check hashes it
    again = stamps.check("r", root, marker)
    assert again.damage == ("libggml.so does not match its recorded sha256",) and again.suspect == ("libggml.so",)


def test_a_second_hard_link_to_a_file_is_suspect_then_intact(tmp_path: Path) -> None:
    root, marker = _runtime_dir(tmp_path, {"llama-server": b"server bytes"})
    stamps = Fingerprints(tmp_path / FINGERPRINTS_NAME)
    stamps.record("r", root, marker)
    os.link(root / "llama-server", tmp_path / "dedupe-twin")  # what a dedupe of another runtime's copy does
    assert stamps.check("r", root, marker) == RuntimeCheck((), ("llama-server",))
    assert stamps.check("r", root, marker) == RuntimeCheck((), ())
    assert stamps.save() and Fingerprints.load(tmp_path).runtimes == stamps.runtimes


def test_a_linked_fingerprint_file_is_refused_naming_it_and_never_written_through(
    home: Path, github: FakeGitHub, two_installed: Home, tmp_path: Path
) -> None:
    h = two_installed
    previous = PreviousIntact(h)
    path = h.root / FINGERPRINTS_NAME
    elsewhere = tmp_path / "elsewhere.json"
    planted = path.read_bytes()
    elsewhere.write_bytes(planted)  # stamps that would be right, behind a link the tool did not make
    path.unlink()
    path.symlink_to(elsewhere)
    result = updater(home, github).ensure()
    assert not result.ready and str(path) in result.problem and "link" in result.problem  # as any link in the home
    assert elsewhere.read_bytes() == planted and path.is_symlink()
    path.unlink()
    assert updater(home, github).ensure().ready
    previous.assert_unchanged_and_runs()
