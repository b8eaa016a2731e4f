"""The install marker (schema, atomic write, tolerant read), the pointer and the marker checks."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from llama_runtime import CorruptStateError, UserInputError, VerificationError
from llama_runtime.errors import ForeignMarkerError
from llama_runtime.runtime.layout import Home, Pointer, runtime_name_of
from llama_runtime.runtime.marker import (
    MARKER_NAME,
    FileRecord,
    InstallMarker,
    read_marker,
    write_marker,
)
from llama_runtime.updater.config import validate_repo
from llama_runtime.updater.verify.verify import Expected, check_marker, read_back_marker

MARKER = InstallMarker(
    repo="ggml-org/llama.cpp",
    tag="b7000",
    backend="vulkan",
    backend_request="vulkan",
    asset="llama-b7000-bin-ubuntu-vulkan-x64.tar.gz",
    size=123,
    sha256="ab" * 32,
    digest_verified=True,
    installed_at="2026-11-30T00:00:00Z",
    binary="llama-b7000/llama-server",
    files={"llama-b7000/llama-server": FileRecord(size=10, sha256="cd" * 32)},
)


def test_marker_round_trips_with_every_required_field(tmp_path: Path) -> None:
    write_marker(tmp_path, MARKER)
    payload = json.loads((tmp_path / MARKER_NAME).read_text())
    for key in (
        "schema_version",
        "repo",
        "tag",
        "backend",
        "backend_request",
        "asset",
        "size",
        "sha256",
        "digest_verified",
        "installed_at",
        "binary",
        "version",
        "devices",
        "files",
    ):
        assert key in payload, key
    assert read_marker(tmp_path) == MARKER


def test_marker_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    write_marker(tmp_path, MARKER)
    assert [p.name for p in tmp_path.iterdir()] == [MARKER_NAME]


def test_reader_tolerates_unknown_extra_fields(tmp_path: Path) -> None:
    payload = MARKER.to_json() | {"added_by_a_newer_version": {"x": 1}}
    (tmp_path / MARKER_NAME).write_text(json.dumps(payload))
    assert read_marker(tmp_path).tag == "b7000"


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b"\xff\xfe", b'{"repo": 1}'])
def test_garbage_marker_is_a_clear_corrupt_state_error(tmp_path: Path, garbage: bytes) -> None:
    (tmp_path / MARKER_NAME).write_bytes(garbage)
    with pytest.raises(CorruptStateError) as caught:
        read_marker(tmp_path)
    assert str(tmp_path) in caught.value.message


def test_missing_marker_means_not_installed(tmp_path: Path) -> None:
    with pytest.raises(CorruptStateError) as caught:
        read_marker(tmp_path)
    assert "no install marker" in caught.value.message


def test_marker_backend_from_a_newer_version_is_refused_not_redetected(tmp_path: Path) -> None:
    (tmp_path / MARKER_NAME).write_text(json.dumps(MARKER.to_json() | {"backend": "webgpu"}))
    with pytest.raises(ForeignMarkerError) as caught:
        read_marker(tmp_path)
    assert "records backend 'webgpu'" in caught.value.message
    assert "refusing to replace it" in caught.value.message


def test_marker_backend_is_normalised_through_the_one_parser(tmp_path: Path) -> None:
    (tmp_path / MARKER_NAME).write_text(json.dumps(MARKER.to_json() | {"backend": " HIP ", "backend_request": "Auto"}))
    marker = read_marker(tmp_path)
    assert (marker.backend, marker.backend_request) == ("rocm", "auto")


# -- the checks, with the seed's wording ------------------------------------------------

EXPECTED = Expected(repo="ggml-org/llama.cpp", tag="b7000", backend_request="vulkan", backend="vulkan")


def test_matching_marker_passes() -> None:
    check_marker(MARKER, EXPECTED)


def test_other_tag_is_pinned_release_x_but_installer_produced_y() -> None:
    with pytest.raises(VerificationError) as caught:
        check_marker(replace(MARKER, tag="b7001"), EXPECTED)
    assert caught.value.message == "pinned release b7000 but installer produced b7001"


def test_other_repo_names_both_repositories() -> None:
    with pytest.raises(VerificationError) as caught:
        check_marker(replace(MARKER, repo="someone/fork"), EXPECTED)
    assert caught.value.message == "pinned release ggml-org/llama.cpp@b7000 but installer produced someone/fork@b7000"


def test_missing_marker_is_installed_backend_unknown() -> None:
    with pytest.raises(VerificationError) as caught:
        check_marker(None, EXPECTED)
    assert caught.value.message == "requested vulkan but the installed backend is unknown"


def test_recorded_request_must_be_what_was_asked() -> None:
    with pytest.raises(VerificationError) as caught:
        check_marker(replace(MARKER, backend_request="auto"), EXPECTED)
    assert caught.value.message == "requested vulkan but the installer recorded auto"


def test_concrete_backend_must_equal_the_request() -> None:
    with pytest.raises(VerificationError) as caught:
        check_marker(replace(MARKER, backend="cpu"), EXPECTED)
    assert caught.value.message == "requested vulkan but the installer produced cpu"


def test_marker_is_read_back_from_disk_not_memory(tmp_path: Path) -> None:
    write_marker(tmp_path, MARKER)
    (tmp_path / MARKER_NAME).write_text(json.dumps(MARKER.to_json() | {"backend": "cpu"}))
    with pytest.raises(VerificationError) as caught:
        read_back_marker(tmp_path, EXPECTED)
    assert caught.value.message == "requested vulkan but the installer produced cpu"


def test_unreadable_marker_on_read_back_is_installed_backend_unknown(tmp_path: Path) -> None:
    (tmp_path / MARKER_NAME).write_text("{")
    with pytest.raises(VerificationError) as caught:
        read_back_marker(tmp_path, EXPECTED)
    assert caught.value.message.startswith("requested vulkan but the installed backend is unknown")


# -- the pointer --------------------------------------------------------------------------


def test_absent_pointer_means_nothing_active(tmp_path: Path) -> None:
    assert Home(tmp_path).read_pointer() == Pointer()


def test_pointer_round_trips_and_is_replaced_atomically(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.write_pointer(Pointer(active="a", previous=None))
    inode_before = os.stat(home.pointer_path).st_ino
    home.write_pointer(Pointer(active="b", previous="a"))
    assert home.read_pointer() == Pointer(active="b", previous="a")
    assert os.stat(home.pointer_path).st_ino != inode_before  # a new file renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["active.json"]


@pytest.mark.parametrize("content", ['{"active": "../../etc"}', "garbage", '{"active": 5}', "[]"])
def test_damaged_pointer_is_a_corrupt_state_error_pointing_at_doctor(tmp_path: Path, content: str) -> None:
    home = Home(tmp_path)
    home.pointer_path.write_text(content)
    with pytest.raises(CorruptStateError) as caught:
        home.read_pointer()
    assert caught.value.hint is not None and "doctor --repair" in caught.value.hint


def test_runtime_names_are_unique_and_filesystem_safe(tmp_path: Path) -> None:
    home = Home(tmp_path)
    names = {home.new_runtime_name("ggml-org/llama.cpp", "b7000", "vulkan") for _ in range(50)}
    assert len(names) == 50
    assert all("/" not in n and n.startswith("ggml-org_llama.cpp-b7000-vulkan-") for n in names)


@pytest.mark.parametrize(
    "bad", ["ggml-org", "a/b/c", "../x", "/llama.cpp", "", "owner/na me", "a/.", "a/llama.cpp.git"]
)
def test_malformed_repo_is_bad_input_saying_what_is_valid(bad: str) -> None:
    with pytest.raises(UserInputError) as caught:
        validate_repo(bad)
    assert "Use OWNER/NAME" in caught.value.message


@pytest.mark.parametrize("binary", ["/bin/sh", "../../bin/sh", "llama-b7000/../../x", "C:/Windows/x.exe", ""])
def test_marker_naming_a_binary_outside_its_runtime_is_corrupt(tmp_path: Path, binary: str) -> None:
    (tmp_path / MARKER_NAME).write_text(json.dumps(MARKER.to_json() | {"binary": binary}))
    with pytest.raises(CorruptStateError) as caught:
        read_marker(tmp_path)
    assert "leaves the runtime directory" in caught.value.message or "invalid" in caught.value.message


def test_runtime_name_of_a_binary_is_its_marked_directory_under_runtimes(tmp_path: Path) -> None:
    runtime = tmp_path / "runtimes" / "b7000-cpu-1a2b"
    (runtime / "build" / "bin").mkdir(parents=True)
    binary = runtime / "build" / "bin" / "llama-server"
    assert runtime_name_of(binary) is None  # no marker: not an installed runtime
    (runtime / "llama-runtime.json").write_text("{}")
    assert runtime_name_of(binary) == "b7000-cpu-1a2b"
    assert runtime_name_of(tmp_path / "elsewhere" / "llama-server") is None
