"""Trust records out of a runtime's reach: what the updater accepted is kept outside the runtime folder.

A marker rewritten by hand to match a changed binary, a file planted beside the binary, or a listed
file gone: ``status``, ``doctor`` and ``use`` say damaged (exit 6) and name it, whatever the folder's
own marker claims; an accepted folder is read-only; ``doctor --repair`` reinstalls rather than keeps it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from tests.fakegithub import FakeGitHub
from tests.helpers import publish_stand_in, run_json


@pytest.fixture
def two_builds(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, home: Path) -> Home:
    """b7000 then b7001 installed (stand-ins): b7001 active, b7000 the rollback target."""
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag)
        assert code == 0, payload
    return Home(home)


def _runtime_dir(layout: Home, tag: str) -> Path:
    return next(r.path for r in layout.installed() if r.marker.tag == tag)


def _tamper_consistently(runtime_dir: Path) -> None:
    """Change the binary and rewrite the marker so that it matches: only a record outside can tell."""
    marker_file = runtime_dir / "llama-runtime.json"
    marker = json.loads(marker_file.read_text())
    binary = runtime_dir / marker["binary"]
    for path in (runtime_dir, binary.parent, binary, marker_file):
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)
    binary.write_bytes(binary.read_bytes() + b"\n# changed\n")
    marker["files"][marker["binary"]] = {
        "size": binary.stat().st_size,
        "sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
    }
    marker_file.write_text(json.dumps(marker))


def test_an_accepted_runtime_folder_is_read_only(two_builds: Home) -> None:
    runtime_dir = _runtime_dir(two_builds, "b7001")
    modes = {p.relative_to(runtime_dir).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in runtime_dir.rglob("*")}
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o555
    for rel, mode in modes.items():
        path = runtime_dir / rel
        if path.is_symlink():
            continue
        assert mode in (0o555, 0o444), (rel, oct(mode))
    assert modes["llama-b7001/llama-server"] == 0o555


def test_a_marker_rewritten_to_match_a_changed_binary_is_damage_for_status_doctor_and_use(
    two_builds: Home, capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    _tamper_consistently(_runtime_dir(two_builds, "b7001"))
    code, status = run_json(capsys, home, None, "status")
    assert code == 6 and "llama-runtime.json was changed after the runtime was accepted" in json.dumps(status)
    code, doctor = run_json(capsys, home, None, "doctor")
    assert code == 6 and "llama-runtime.json was changed" in json.dumps(doctor), doctor
    # The previous runtime, tampered the same way, is refused by use.
    _tamper_consistently(_runtime_dir(two_builds, "b7000"))
    code, used = run_json(capsys, home, None, "use", "b7000")
    assert code == 6 and "llama-runtime.json was changed" in json.dumps(used), used


def test_a_file_planted_beside_the_binary_is_named(
    two_builds: Home, capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    runtime_dir = _runtime_dir(two_builds, "b7001")
    folder = runtime_dir / "llama-b7001"
    os.chmod(folder, 0o755)
    (folder / "libggml-evil.so").write_bytes(b"\x7fELF planted")
    code, status = run_json(capsys, home, None, "status")
    assert code == 6, status
    assert "llama-b7001/libggml-evil.so is not part of the accepted runtime" in status["error"]["message"]


def test_doctor_repair_reinstalls_a_tampered_runtime_rather_than_keep_it(
    two_builds: Home, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    _tamper_consistently(_runtime_dir(two_builds, "b7001"))
    code, repaired = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, repaired
    code, status = run_json(capsys, home, None, "status")
    assert code == 0 and status["active"]["tag"] == "b7001", status
    binary = Path(status["active"]["binary"])
    assert b"# changed" not in binary.read_bytes()


def test_remove_deletes_a_read_only_runtime_and_its_record(
    two_builds: Home, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7002")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002")
    assert code == 0, payload
    old = _runtime_dir(two_builds, "b7000")
    assert (home / "trust" / f"{old.name}.json").is_file()
    code, payload = run_json(capsys, home, None, "remove", "b7000")
    assert code == 0, payload
    assert not old.exists()
    assert not (home / "trust" / f"{old.name}.json").exists()
