"""Bundles: ``export`` the active runtime on one home, ``install-file`` it on another."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.marker import MARKER_NAME
from tests.helpers import CPU_TAR, HomeGuard, assert_runs, run_json, snapshot_tree, stand_in_tarball


def install(capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, tag: str) -> dict[str, Any]:
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag, libs=("ggml", "llama"))
    code, payload = run_json(capsys, home, None, "install-file", str(archive), "--tag", tag)
    assert code == 0, payload
    return payload


@pytest.fixture
def bundle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """b7000 installed on home A and exported; returns the bundle and A's marker."""
    payload = install(capsys, tmp_path / "a", tmp_path, "b7000")
    out = tmp_path / "b7000-bundle.tar.gz"
    code, exported = run_json(capsys, tmp_path / "a", None, "export", "--output", str(out))
    assert code == 0, exported
    assert exported["output"] == str(out)
    return out, json.loads(Path(payload["active"]["marker_path"]).read_text())


def without_marker(snapshot: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in snapshot.items() if k != MARKER_NAME}


def rewrite_member(src: Path, dst: Path, name: str, data: bytes | None) -> Path:
    """Copy a bundle, replacing (or with ``None`` dropping) one member."""
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for info in tin:
            if info.name != name:
                tout.addfile(info, tin.extractfile(info) if info.isreg() else None)
            elif data is not None:
                info.size = len(data)
                tout.addfile(info, io.BytesIO(data))
    return dst


def test_bundle_starts_with_the_marker_and_holds_the_runtime(bundle: tuple[Path, dict[str, Any]]) -> None:
    path, marker = bundle
    with tarfile.open(path, "r:gz") as tf:
        names = tf.getnames()
    assert names[0] == MARKER_NAME
    assert set(marker["files"]) <= set(names)
    assert marker["binary"] in names


def test_bundle_is_readable_by_everyone_it_is_copied_for(bundle: tuple[Path, dict[str, Any]]) -> None:
    path, _marker = bundle
    assert path.stat().st_mode & 0o777 == 0o644


def test_bundle_restores_on_another_home_with_the_same_files(
    bundle: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, original = bundle
    home_b = tmp_path / "b"
    code, payload = run_json(capsys, home_b, None, "install-file", str(path))
    assert code == 0, payload
    active = payload["active"]
    assert (active["repo"], active["tag"], active["backend"]) == (original["repo"], "b7000", "cpu")
    marker = json.loads(Path(active["marker_path"]).read_text())
    assert marker["source"] == "bundle"
    assert marker["files"] == original["files"]
    # Repacked (home A's cache kept no unverified archive): named by the bundle's bytes, not the marker's claim.
    assert (marker["asset"], marker["sha256"]) == (original["asset"], hashlib.sha256(path.read_bytes()).hexdigest())
    runtime_a = Path(json.loads((tmp_path / "a" / "active.json").read_text())["active"])
    assert without_marker(snapshot_tree(Path(active["runtime_dir"]))) == without_marker(
        snapshot_tree(tmp_path / "a" / "runtimes" / runtime_a)
    )
    assert (Path(active["runtime_dir"]) / "llama-b7000" / "libllama.so").is_symlink()
    assert "7000" in assert_runs(Path(active["binary"]))
    code, again = run_json(capsys, home_b, None, "install-file", str(path))
    assert code == 0 and again["result"] == "up_to_date"


def test_bundle_with_a_file_differing_from_its_marker_exits_8_and_changes_nothing(
    bundle: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, marker = bundle
    home_b = tmp_path / "b"
    install(capsys, home_b, tmp_path, "b6999")
    guard = HomeGuard(None, home_b)
    tampered = rewrite_member(path, tmp_path / "tampered.tar.gz", marker["binary"], b"#!/bin/sh\necho evil\n")
    code, payload = run_json(capsys, home_b, None, "install-file", str(tampered))
    assert code == 8, payload
    assert "does not match its marker" in payload["error"]["message"]
    guard.assert_intact("b6999", capsys=capsys)


def test_bundle_missing_a_recorded_file_exits_8(
    bundle: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, marker = bundle
    lib = next(name for name in marker["files"] if "libggml" in name)
    partial = rewrite_member(path, tmp_path / "partial.tar.gz", lib, None)
    code, payload = run_json(capsys, tmp_path / "b", None, "install-file", str(partial))
    assert code == 8, payload
    assert lib in payload["error"]["message"]
    assert not (tmp_path / "b" / "active.json").exists()


@pytest.mark.parametrize(
    ("scenario", "marker_bytes"),
    [
        ("not JSON", b"{not json"),
        ("a field missing", None),
        ("from a newer llama-runtime", None),
    ],
)
def test_bundle_with_an_invalid_marker_exits_8_and_changes_nothing(
    bundle: tuple[Path, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    scenario: str,
    marker_bytes: bytes | None,
) -> None:
    path, marker = bundle
    if scenario == "a field missing":
        marker_bytes = json.dumps({k: v for k, v in marker.items() if k != "backend"}).encode()
    elif scenario == "from a newer llama-runtime":
        marker_bytes = json.dumps({**marker, "schema_version": 999}).encode()
    assert marker_bytes is not None
    home_b = tmp_path / "b"
    install(capsys, home_b, tmp_path, "b6999")
    guard = HomeGuard(None, home_b)
    broken = rewrite_member(path, tmp_path / "broken.tar.gz", MARKER_NAME, marker_bytes)
    code, payload = run_json(capsys, home_b, None, "install-file", str(broken))
    assert code == 8, payload
    assert "doctor" not in json.dumps(payload["error"])
    guard.assert_intact("b6999", capsys=capsys)


def test_bundle_with_a_contradicting_tag_exits_2(
    bundle: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, _ = bundle
    code, payload = run_json(capsys, tmp_path / "b", None, "install-file", str(path), "--tag", "b7001")
    assert code == 2, payload
    assert "b7000" in payload["error"]["message"]


def test_export_with_nothing_active_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, payload = run_json(capsys, tmp_path / "empty", None, "export", "--output", str(tmp_path / "x.tar.gz"))
    assert code == 2, payload
    assert not (tmp_path / "x.tar.gz").exists()


def test_export_of_a_damaged_runtime_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    payload = install(capsys, tmp_path / "a", tmp_path, "b7000")
    Path(payload["active"]["binary"]).write_bytes(b"#!/bin/sh\nexit 0\n")
    code, result = run_json(capsys, tmp_path / "a", None, "export", "--output", str(tmp_path / "x.tar.gz"))
    assert code == 6, result
    assert not (tmp_path / "x.tar.gz").exists()


def test_a_repacked_bundle_whose_files_were_changed_never_passes_for_the_genuine_archive(
    bundle: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bundle's marker is unsigned: its archive sha256 names nothing the home can trust."""
    path, marker = bundle
    genuine = tmp_path / CPU_TAR.format(tag="b7000")  # what `install` installed on home A
    changed = genuine_binary = b""
    with tarfile.open(path, "r:gz") as tin:
        members = {i.name: (i, tin.extractfile(i).read() if i.isreg() else None) for i in tin}  # type: ignore[union-attr]
    genuine_binary = members[marker["binary"]][1] or b""
    changed = genuine_binary + b"\n# changed after the export\n"
    forged = dict(marker)
    forged["files"] = {
        **marker["files"],
        marker["binary"]: {"sha256": hashlib.sha256(changed).hexdigest(), "size": len(changed)},
    }
    out = tmp_path / "forged.tar.gz"
    with tarfile.open(out, "w:gz") as tout:
        data = json.dumps(forged).encode()
        info = tarfile.TarInfo(MARKER_NAME)
        info.size = len(data)
        tout.addfile(info, io.BytesIO(data))
        for name, (info, body) in members.items():
            if name == MARKER_NAME or (body is not None and name not in marker["files"]):
                continue  # the marker is forged; the carried release archive is left out (a repacked bundle)
            if name == marker["binary"]:
                body = changed
                info.size = len(changed)
            tout.addfile(info, io.BytesIO(body) if body is not None else None)
    home_b = tmp_path / "b"
    code, payload = run_json(capsys, home_b, None, "install-file", str(out))
    assert code == 0, payload
    code, payload = run_json(capsys, home_b, None, "install-file", str(genuine), "--tag", "b7000")
    assert code == 0, payload
    assert payload["result"] == "installed", payload
    active = Path(payload["active"]["marker_path"]).parent
    assert (active / marker["binary"]).read_bytes() == genuine_binary
