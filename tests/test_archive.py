"""Safe extraction of release archives: layouts, hostile members, caps, cancel."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from llama_runtime import CancelledError, IntegrityError, LlamaRuntimeError
from llama_runtime.errors import UnsafeArchiveError
from llama_runtime.updater.stage.archive import extract_archive, find_server_binary
from llama_runtime.updater.stage.archive_rules import DEFAULT_LIMITS, ExtractLimits, Member, MemberKind, MemberPlan
from tests.archives import (
    HOSTILE_LIMITS,
    LAYOUTS,
    TAR_HOSTILE_KINDS,
    ZIP_HOSTILE_KINDS,
    build_hostile_tar,
    build_hostile_zip,
    build_release_archive,
)

SERVER = b"\x7fELF pretend llama-server\n"
LIB = b"\x7fELF pretend libllama\n" * 100
README = b"# llama.cpp\n"
CHAIN = {"libllama.so": "libllama.so.0", "libllama.so.0": "libllama.so.0.0.7021"}

# Where each layout puts its files, relative to the extraction root.
PREFIX = {
    "tar-root": "",
    "tar-tagdir": "llama-b7000/",
    "zip-buildbin": "build/bin/",
    "zip-root": "",
}

# Why each hostile kind must be refused: a fragment of the refusal sentence.
REASON = {
    "dotdot": "would be written outside the runtime directory",
    "absolute": "would be written outside the runtime directory",
    "drive_letter": "would be written outside the runtime directory",
    "zip_dotdot_name": "would be written outside the runtime directory",
    "backslash": "contains a backslash",
    "nul_name": "has a NUL byte",
    "symlink_escape": "points outside the runtime directory",
    "symlink_then_write_through": "would be written through the symlink",
    "hardlink_outside": "does not point to a regular file extracted earlier",
    "device": "is a character device",
    "fifo": "is a fifo",
    "zip_bomb": "above the 200:1 limit",
    "too_many_members": "more than 200 members",
    "dangling_symlink": "dangling link",
    "duplicate_members": "appears more than once",
    "absolute_symlink": "points to the absolute path",
}


def archive_name(layout: str) -> str:
    return "llama-b7000-bin-test" + (".tar.gz" if layout.startswith("tar-") else ".zip")


def tree(top: Path, skip: Path) -> dict[str, tuple[str, int]]:
    """Everything under ``top`` except ``skip``: path → (type, size), links not followed."""
    seen: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) != skip]
        for name in dirnames + filenames:
            st = os.lstat(Path(dirpath, name))
            rel = str(Path(dirpath, name).relative_to(top))
            seen[rel] = (stat.filemode(st.st_mode), st.st_size)
    return seen


def release(tmp_path: Path, layout: str) -> tuple[Path, dict[str, bytes]]:
    windows = layout == "zip-root"
    files = (
        {"llama-server.exe": SERVER, "llama.dll": LIB, "README.md": README}
        if windows
        else {"llama-server": SERVER, "libllama.so.0.0.7021": LIB, "README.md": README}
    )
    archive = build_release_archive(
        tmp_path / archive_name(layout),
        layout,
        files,
        symlinks={} if windows else CHAIN,
        modes={"README.md": 0o644},
    )
    return archive, files


# --- good archives ----------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_release_layout_extracts_every_file_with_its_digest(tmp_path: Path, layout: str) -> None:
    archive, files = release(tmp_path, layout)

    result = extract_archive(archive, tmp_path / "dest")

    expected = {PREFIX[layout] + name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()}
    assert result.files == expected
    assert result.total_bytes == sum(len(data) for data in files.values())
    for name, data in files.items():
        assert (tmp_path / "dest" / (PREFIX[layout] + name)).read_bytes() == data


@pytest.mark.parametrize("layout", ["tar-root", "tar-tagdir", "zip-buildbin"])
def test_release_layout_keeps_symlink_chain_intact(tmp_path: Path, layout: str) -> None:
    archive, _ = release(tmp_path, layout)

    result = extract_archive(archive, tmp_path / "dest")

    base = tmp_path / "dest" / PREFIX[layout]
    assert result.symlinks == {PREFIX[layout] + name: target for name, target in CHAIN.items()}
    for name, target in CHAIN.items():
        assert (base / name).is_symlink()
        assert os.readlink(base / name) == target
    assert (base / "libllama.so").read_bytes() == LIB


@pytest.mark.parametrize("layout", ["tar-root", "tar-tagdir", "zip-buildbin"])
def test_unix_layout_restores_exec_bit_only_where_archived(tmp_path: Path, layout: str) -> None:
    archive, _ = release(tmp_path, layout)

    extract_archive(archive, tmp_path / "dest")

    base = tmp_path / "dest" / PREFIX[layout]
    assert os.stat(base / "llama-server").st_mode & 0o777 == 0o755
    assert os.stat(base / "README.md").st_mode & 0o777 == 0o644


@pytest.mark.parametrize("layout", ["tar-tagdir", "zip-buildbin"])
def test_setuid_and_world_writable_modes_are_dropped(tmp_path: Path, layout: str) -> None:
    archive = build_release_archive(
        tmp_path / archive_name(layout),
        layout,
        {"llama-server": SERVER, "notes.txt": README},
        modes={"llama-server": 0o6777, "notes.txt": 0o1666},
    )

    extract_archive(archive, tmp_path / "dest")

    base = tmp_path / "dest" / PREFIX[layout]
    assert stat.S_IMODE(os.stat(base / "llama-server").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(base / "notes.txt").st_mode) == 0o644


def test_windows_zip_without_unix_modes_extracts_without_exec_bits(tmp_path: Path) -> None:
    archive, _ = release(tmp_path, "zip-root")

    extract_archive(archive, tmp_path / "dest")

    assert os.stat(tmp_path / "dest" / "llama-server.exe").st_mode & 0o111 == 0


def test_large_file_given_as_path_is_streamed_into_the_archive(tmp_path: Path) -> None:
    big = tmp_path / "libggml-cuda.so"
    big.write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # spans several 1 MiB chunks
    archive = build_release_archive(tmp_path / "a.tar.gz", "tar-tagdir", {"libggml-cuda.so": big})

    result = extract_archive(archive, tmp_path / "dest")

    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    assert result.files["llama-b7000/libggml-cuda.so"] == (big.stat().st_size, digest)


def test_tar_hardlink_to_earlier_member_is_extracted_as_a_copy(tmp_path: Path) -> None:
    archive = tmp_path / "links.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("llama-b7000/libggml.so.0")
        info.size, info.mode = len(LIB), 0o755
        tf.addfile(info, io.BytesIO(LIB))
        link = tarfile.TarInfo("llama-b7000/libggml.so")
        link.type, link.linkname, link.mode = tarfile.LNKTYPE, "llama-b7000/libggml.so.0", 0o755
        tf.addfile(link)

    result = extract_archive(archive, tmp_path / "dest")

    copy = tmp_path / "dest" / "llama-b7000" / "libggml.so"
    assert copy.read_bytes() == LIB
    assert not copy.is_symlink()
    assert result.files["llama-b7000/libggml.so"] == result.files["llama-b7000/libggml.so.0"]


def tar_with(archive: Path, members: list[tuple[str, bytes, str]]) -> Path:
    """A tar.gz of (name, type, linkname) members; regular files hold LIB."""
    with tarfile.open(archive, "w:gz") as tf:
        for name, kind, linkname in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, linkname
            info.size = len(LIB) if kind == tarfile.REGTYPE else 0
            tf.addfile(info, io.BytesIO(LIB) if kind == tarfile.REGTYPE else None)
    return archive


@pytest.mark.parametrize(
    "members",
    [
        # the link comes before its target
        [("a/copy", tarfile.LNKTYPE, "a/lib"), ("a/lib", tarfile.REGTYPE, "")],
        # the target is a symlink, not a regular file
        [
            ("a/lib", tarfile.REGTYPE, ""),
            ("a/sym", tarfile.SYMTYPE, "lib"),
            ("a/copy", tarfile.LNKTYPE, "a/sym"),
        ],
        # the target is a directory
        [("a/lib", tarfile.REGTYPE, ""), ("a/copy", tarfile.LNKTYPE, "a")],
        # the target climbs out
        [("a/lib", tarfile.REGTYPE, ""), ("a/copy", tarfile.LNKTYPE, "a/../../lib")],
    ],
)
def test_tar_hardlink_not_to_an_earlier_regular_member_is_refused(
    tmp_path: Path, members: list[tuple[str, bytes, str]]
) -> None:
    archive = tar_with(tmp_path / "links.tar.gz", members)

    error = assert_refused_without_escape(tmp_path, archive)

    assert "hard link 'a/copy'" in error.message


def test_zip_content_in_a_tar_gz_name_is_detected_by_magic_bytes(tmp_path: Path) -> None:
    archive, _ = release(tmp_path, "zip-buildbin")
    renamed = archive.rename(tmp_path / "llama-b7000-bin-test.tar.gz")

    result = extract_archive(renamed, tmp_path / "dest")

    assert "build/bin/llama-server" in result.files


# --- hostile archives ---------------------------------------------------------------


def assert_refused_without_escape(tmp_path: Path, archive: Path) -> UnsafeArchiveError:
    dest = tmp_path / "dest"
    before = tree(tmp_path, dest)

    with pytest.raises(UnsafeArchiveError) as caught:
        extract_archive(archive, dest, limits=HOSTILE_LIMITS)

    assert tree(tmp_path, dest) == before
    assert caught.value.message.startswith(f"Refusing {archive.name}: ")
    assert caught.value.exit_code == 8
    return caught.value


@pytest.mark.parametrize("kind", TAR_HOSTILE_KINDS)
def test_hostile_tar_is_refused_and_nothing_lands_outside_dest(tmp_path: Path, kind: str) -> None:
    archive = build_hostile_tar(tmp_path / f"{kind}.tar.gz", kind)

    error = assert_refused_without_escape(tmp_path, archive)

    assert REASON[kind] in error.message


@pytest.mark.parametrize("kind", ZIP_HOSTILE_KINDS)
def test_hostile_zip_is_refused_and_nothing_lands_outside_dest(tmp_path: Path, kind: str) -> None:
    archive = build_hostile_zip(tmp_path / f"{kind}.zip", kind)

    error = assert_refused_without_escape(tmp_path, archive)

    assert REASON[kind] in error.message


@pytest.mark.parametrize(
    ("builder", "kind"),
    [(build_hostile_tar, k) for k in TAR_HOSTILE_KINDS if k != "dangling_symlink"]
    + [(build_hostile_zip, k) for k in ZIP_HOSTILE_KINDS if k != "dangling_symlink"],
)
def test_hostile_member_is_refused_before_anything_is_written(
    tmp_path: Path, builder: Callable[[Path, str], Path], kind: str
) -> None:
    archive = builder(tmp_path / ("x.tar.gz" if builder is build_hostile_tar else "x.zip"), kind)

    with pytest.raises(UnsafeArchiveError):
        extract_archive(archive, tmp_path / "dest", limits=HOSTILE_LIMITS)

    assert list((tmp_path / "dest").iterdir()) == []


def test_default_member_cap_admits_20000_members_and_refuses_the_next() -> None:
    """The real cap, counted on the pure plan (the archives above use a small injected one)."""
    plan = MemberPlan("x.tar.gz", DEFAULT_LIMITS)
    for index in range(DEFAULT_LIMITS.max_members):
        plan.admit(Member(f"llama-b7000/f{index}", MemberKind.FILE, mode=0o644, size=0))
    with pytest.raises(UnsafeArchiveError) as caught:
        plan.admit(Member("llama-b7000/one-more", MemberKind.FILE, mode=0o644, size=0))
    assert "more than 20000 members" in caught.value.message


def test_dotdot_refusal_names_the_member_and_the_reason(tmp_path: Path) -> None:
    archive = build_hostile_zip(tmp_path / "llama-b7000-bin-ubuntu-x64.zip", "dotdot")

    error = assert_refused_without_escape(tmp_path, archive)

    assert error.message == (
        "Refusing llama-b7000-bin-ubuntu-x64.zip: member '../escaped' would be written outside the runtime directory."
    )


def test_zip_dotdot_inside_name_is_refused_not_rewritten(tmp_path: Path) -> None:
    archive = build_hostile_zip(tmp_path / "a.zip", "zip_dotdot_name")

    error = assert_refused_without_escape(tmp_path, archive)

    assert "build/bin/../../../escaped" in error.message
    assert not (tmp_path / "dest" / "build" / "bin" / "escaped").exists()


def test_symlink_chain_that_resolves_outside_is_refused(tmp_path: Path) -> None:
    # Each link stays inside on paper; followed for real, x leaves the root.
    archive = build_release_archive(
        tmp_path / "a.tar.gz",
        "tar-tagdir",
        {"sub/keep": b"x"},
        symlinks={"sub/up": "../..", "x": "sub/up/.."},
    )

    error = assert_refused_without_escape(tmp_path, archive)

    assert "resolves outside" in error.message


def test_dangling_symlink_refusal_names_the_link(tmp_path: Path) -> None:
    name = "llama-b9165-bin-ubuntu-vulkan-x64.tar.gz"
    archive = build_hostile_tar(tmp_path / name, "dangling_symlink")

    error = assert_refused_without_escape(tmp_path, archive)

    assert "'llama-b7000/libggml.so'" in error.message
    assert "dangling" in error.message


def test_symlink_to_a_later_member_is_not_dangling(tmp_path: Path) -> None:
    archive = tmp_path / "order.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        link = tarfile.TarInfo("llama-b7000/libllama.so")
        link.type, link.linkname = tarfile.SYMTYPE, "libllama.so.0"
        tf.addfile(link)
        info = tarfile.TarInfo("llama-b7000/libllama.so.0")
        info.size = len(LIB)
        tf.addfile(info, io.BytesIO(LIB))

    extract_archive(archive, tmp_path / "dest")

    assert (tmp_path / "dest" / "llama-b7000" / "libllama.so").read_bytes() == LIB


# --- caps ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_archive_over_total_byte_cap_is_refused(tmp_path: Path, layout: str) -> None:
    archive, files = release(tmp_path, layout)
    cap = sum(len(data) for data in files.values()) - 1

    limits = ExtractLimits(max_total_bytes=cap)

    error = assert_refused_without_escape_with(tmp_path, archive, limits)

    assert f"more than {cap} bytes" in error.message


def test_hardlink_copies_count_towards_the_byte_cap(tmp_path: Path) -> None:
    # Hard links declare no size, so only the bytes actually written catch this.
    archive = tmp_path / "links.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("lib.so")
        info.size = 600
        tf.addfile(info, io.BytesIO(bytes(600)))
        for index in range(3):
            link = tarfile.TarInfo(f"copy{index}.so")
            link.type, link.linkname = tarfile.LNKTYPE, "lib.so"
            tf.addfile(link)

    limits = ExtractLimits(max_total_bytes=1000)
    error = assert_refused_without_escape_with(tmp_path, archive, limits)

    assert "more than 1000 bytes" in error.message


@pytest.mark.parametrize("layout", LAYOUTS)
def test_archive_over_member_cap_is_refused(tmp_path: Path, layout: str) -> None:
    archive, _ = release(tmp_path, layout)

    error = assert_refused_without_escape_with(tmp_path, archive, ExtractLimits(max_members=2))

    assert "more than 2 members" in error.message


def test_zip_member_over_compression_ratio_is_refused(tmp_path: Path) -> None:
    archive = build_release_archive(tmp_path / "a.zip", "zip-buildbin", {"zeros.bin": bytes(64 * 1024)})
    limits = ExtractLimits(max_ratio=10, ratio_floor_bytes=1024)

    error = assert_refused_without_escape_with(tmp_path, archive, limits)

    assert "'build/bin/zeros.bin'" in error.message
    assert "10:1" in error.message


def test_small_zip_member_is_exempt_from_the_ratio_cap(tmp_path: Path) -> None:
    archive = build_release_archive(tmp_path / "a.zip", "zip-buildbin", {"zeros.bin": bytes(64 * 1024)})

    result = extract_archive(
        archive, tmp_path / "dest", limits=ExtractLimits(max_ratio=10, ratio_floor_bytes=128 * 1024)
    )

    assert result.files["build/bin/zeros.bin"][0] == 64 * 1024


def assert_refused_without_escape_with(tmp_path: Path, archive: Path, limits: ExtractLimits) -> UnsafeArchiveError:
    dest = tmp_path / "dest"
    before = tree(tmp_path, dest)
    with pytest.raises(UnsafeArchiveError) as caught:
        extract_archive(archive, dest, limits=limits)
    assert tree(tmp_path, dest) == before
    return caught.value


# --- not archives, bad destinations, cancel ----------------------------------------


def test_non_archive_file_is_refused_as_an_integrity_error(tmp_path: Path) -> None:
    bogus = tmp_path / "llama-b7000-bin-ubuntu-x64.tar.gz"
    bogus.write_text("<html>rate limited</html>")

    with pytest.raises(IntegrityError) as caught:
        extract_archive(bogus, tmp_path / "dest")

    assert caught.value.message == f"{bogus.name} is not a zip or tar.gz archive."
    assert caught.value.exit_code == 8


def test_truncated_tar_gz_is_refused_as_corrupt(tmp_path: Path) -> None:
    archive, _ = release(tmp_path, "tar-tagdir")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])

    with pytest.raises(UnsafeArchiveError) as caught:
        extract_archive(archive, tmp_path / "dest")

    assert "corrupt or truncated" in caught.value.message


def test_non_empty_destination_is_rejected_as_a_bug(tmp_path: Path) -> None:
    archive, _ = release(tmp_path, "tar-tagdir")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "old").write_bytes(b"x")

    with pytest.raises(LlamaRuntimeError) as caught:
        extract_archive(archive, tmp_path / "dest")

    assert caught.value.exit_code == 1
    assert (tmp_path / "dest" / "old").read_bytes() == b"x"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("allowed_polls", [0, 3])
def test_cancel_stops_extraction(tmp_path: Path, layout: str, allowed_polls: int) -> None:
    archive, _ = release(tmp_path, layout)
    polls: list[int] = []

    def cancel() -> bool:
        polls.append(1)
        return len(polls) > allowed_polls

    with pytest.raises(CancelledError) as caught:
        extract_archive(archive, tmp_path / "dest", cancel=cancel)

    assert caught.value.exit_code == 130
    assert len(polls) == allowed_polls + 1


# --- find_server_binary ---------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_server_binary_is_found_in_every_release_layout(tmp_path: Path, layout: str) -> None:
    archive, _ = release(tmp_path, layout)
    extract_archive(archive, tmp_path / "dest")

    found = find_server_binary(tmp_path / "dest")

    name = "llama-server.exe" if layout == "zip-root" else "llama-server"
    assert found == tmp_path / "dest" / (PREFIX[layout] + name)


def make_tree(root: Path, files: list[str]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(SERVER)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (["build/bin/Release/llama-server.exe"], "build/bin/Release/llama-server.exe"),
        (["bin/llama-server", "bin/libllama.so"], "bin/llama-server"),
        (["build/bin/llama-server", "llama-server"], "llama-server"),
        (["llama-b7000/llama-server", "llama-b7000/x/llama-server"], "llama-b7000/llama-server"),
        (["build/bin/server"], "build/bin/server"),
        (["server.exe"], "server.exe"),
        (["server", "build/bin/llama-server"], "build/bin/llama-server"),
    ],
)
def test_server_binary_prefers_new_name_then_shallowest(tmp_path: Path, files: list[str], expected: str) -> None:
    root = make_tree(tmp_path / "rt", files)

    assert find_server_binary(root) == root / expected


def test_server_binary_symlink_to_file_inside_root_is_accepted(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "rt", ["llama-b7000/llama-server-impl"])
    (root / "llama-b7000" / "llama-server").symlink_to("llama-server-impl")

    assert find_server_binary(root) == root / "llama-b7000" / "llama-server"


def test_server_binary_symlink_leaving_root_is_ignored(tmp_path: Path) -> None:
    make_tree(tmp_path, ["elsewhere/llama-server"])
    root = tmp_path / "rt"
    root.mkdir()
    (root / "llama-server").symlink_to(tmp_path / "elsewhere" / "llama-server")

    assert find_server_binary(root) is None


def test_directory_named_like_the_server_is_not_a_binary(tmp_path: Path) -> None:
    root = tmp_path / "rt"
    (root / "llama-server").mkdir(parents=True)

    assert find_server_binary(root) is None


def test_zip_built_with_symlinks_round_trips_through_zipfile(tmp_path: Path) -> None:
    # Guards the builder: links are stored the way `zip -y` stores them.
    archive, _ = release(tmp_path, "zip-buildbin")

    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("build/bin/libllama.so")
        assert stat.S_ISLNK(info.external_attr >> 16)
        assert zf.read(info) == b"libllama.so.0"


# --- names the filesystem cannot hold, and tar extended headers -------------------------


def tar_of(archive: Path, members: dict[str, bytes], *, fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(archive, "w:gz", format=fmt) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return archive


def zip_of(archive: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return archive


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("llama-b7000/" + "a" * 256, "has a path component longer than 255 bytes"),
        ("llama-b7000/" + "é" * 128, "has a path component longer than 255 bytes"),  # 128 chars, 256 bytes
        ("/".join(["d" * 200] * 21) + "/f", "has a name longer than 4096 bytes"),
    ],
)
@pytest.mark.parametrize("build", [tar_of, zip_of])
def test_member_name_longer_than_the_filesystem_allows_is_refused_before_writing(
    tmp_path: Path, build: Callable[[Path, dict[str, bytes]], Path], name: str, reason: str
) -> None:
    suffix = ".tar.gz" if build is tar_of else ".zip"
    archive = build(tmp_path / f"long{suffix}", {"llama-b7000/llama-server": SERVER, name: b"x"})

    error = assert_refused_without_escape(tmp_path, archive)

    assert reason in error.message
    assert len(error.message) < 300  # the name is quoted shortened
    assert list((tmp_path / "dest").iterdir()) == []  # refused in the plan pass


def test_component_of_exactly_255_bytes_extracts(tmp_path: Path) -> None:
    name = "llama-b7000/" + "a" * 255
    archive = tar_of(tmp_path / "ok.tar.gz", {name: b"x"})

    result = extract_archive(archive, tmp_path / "dest")

    assert name in result.files


def test_symlink_target_longer_than_path_max_is_refused(tmp_path: Path) -> None:
    archive = tar_with(
        tmp_path / "link.tar.gz",
        [("a/lib", tarfile.REGTYPE, ""), ("a/l", tarfile.SYMTYPE, "/".join(["."] * 2100) + "/lib")],
    )

    error = assert_refused_without_escape(tmp_path, archive)

    assert "symlink 'a/l' has a target longer than 4096 bytes" in error.message


def test_member_the_filesystem_cannot_create_is_refused_naming_it(tmp_path: Path) -> None:
    # Every name is within the caps, but the staging path plus the name passes PATH_MAX.
    deep = tmp_path.joinpath(*["s" * 250] * ((4000 - len(str(tmp_path))) // 251))
    deep.mkdir(parents=True)
    archive = tar_of(tmp_path / "deep.tar.gz", {"llama-b7000/" + "b" * 250 + "/llama-server": SERVER})

    with pytest.raises(UnsafeArchiveError) as caught:
        extract_archive(archive, deep / "dest")

    assert caught.value.exit_code == 8
    assert caught.value.message.startswith("Refusing deep.tar.gz: member 'llama-b7000/bbbb")
    assert "could not be written (File name too long)." in caught.value.message


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_while_writing_stays_an_os_error_for_the_installer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    archive, _ = release(tmp_path, "tar-tagdir")
    real_fdopen = os.fdopen

    def full(fd: int, mode: str = "r", *args: object, **kwargs: object) -> object:
        if "w" in mode:
            os.close(fd)
            raise OSError(code, os.strerror(code))
        return real_fdopen(fd, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("llama_runtime.updater.stage.archive.os.fdopen", full)

    with pytest.raises(OSError) as caught:
        extract_archive(archive, tmp_path / "dest")

    assert not isinstance(caught.value, UnsafeArchiveError)
    assert caught.value.errno == code


def raw_tar_gz(archive: Path, blocks: list[bytes]) -> Path:
    """A tar.gz of hand-made header/body blocks, padded and terminated like tarfile does."""
    data = b"".join(b + b"\0" * (-len(b) % tarfile.BLOCKSIZE) for b in blocks) + b"\0" * 2 * tarfile.BLOCKSIZE
    archive.write_bytes(gzip.compress(data))
    return archive


def header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n"
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))
    return f"{length}{body}".encode()


def test_pax_header_declaring_a_gigabyte_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # tarfile would buffer the whole declared body; the gzip stays tiny.
    archive = raw_tar_gz(tmp_path / "pax.tar.gz", [header("././@PaxHeader", tarfile.XHDTYPE, 1 << 30)])

    error = assert_refused_without_escape(tmp_path, archive)

    assert f"an extended (PAX/GNU) header of {1 << 30} bytes" in error.message


def test_gnu_long_name_header_over_64_kib_is_refused(tmp_path: Path) -> None:
    name = "/".join(["d" * 200] * 400)  # 80 KiB: a GNU 'L' header carries it
    archive = tar_of(tmp_path / "gnu.tar.gz", {name: b"x"}, fmt=tarfile.GNU_FORMAT)

    error = assert_refused_without_escape(tmp_path, archive)

    assert "extended (PAX/GNU) header" in error.message


def test_endless_chain_of_pax_headers_is_refused(tmp_path: Path) -> None:
    record = pax_record("comment", "hi")
    blocks = [b for _ in range(9) for b in (header("././@PaxHeader", tarfile.XHDTYPE, len(record)), record)]
    archive = raw_tar_gz(tmp_path / "chain.tar.gz", [*blocks, header("f", tarfile.REGTYPE, 0)])

    error = assert_refused_without_escape(tmp_path, archive)

    assert "more than 8 extended headers in a row" in error.message


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_long_names_within_the_caps_extract_in_pax_and_gnu_tars(tmp_path: Path, fmt: int) -> None:
    name = "llama-b7000/" + "/".join(["d" * 200] * 3) + "/llama-server"  # needs an extended header
    archive = tar_of(tmp_path / "ok.tar.gz", {name: SERVER}, fmt=fmt)

    result = extract_archive(archive, tmp_path / "dest")

    assert result.files[name] == (len(SERVER), hashlib.sha256(SERVER).hexdigest())
