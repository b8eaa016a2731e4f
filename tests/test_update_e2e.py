"""End to end: the CLI against a GitHub-like server on 127.0.0.1 and the real llama-server.

Every failing update asserts that the previously active runtime is unchanged
(byte for byte, pointer included) and still runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.cli.main import main
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import (
    CPU_TAR,
    REPO,
    VULKAN_TAR,
    HomeGuard,
    assert_runs,
    publish_stand_in,
    real_build,
    run_json,
    stand_in_server,
    stand_in_tarball,
)


def publish_real(github: FakeGitHub, tarball: Path, tag: str, name: str = VULKAN_TAR) -> None:
    github.add_release(REPO, tag, {name.format(tag=tag): tarball})


@pytest.fixture
def installed_b7000(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
) -> dict[str, Any]:
    """b7000 (vulkan, the real build) installed and active."""
    publish_real(github, real_vulkan_tarball, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    assert run_json(capsys, home, None, "unpin")[0] == 0  # `update --tag` pinned it; later updates move on
    return payload


def failing_update(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *args: str
) -> tuple[int, dict[str, Any]]:
    """Run an update expected to fail; assert b7000 stayed active (files and pointer) and runs."""
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", *args)
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    return code, payload


# -- the happy path -------------------------------------------------------------------


def test_update_real_vulkan_build_installs_verifies_and_runs(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert installed_b7000["result"] == "installed"
    active = installed_b7000["active"]
    assert (active["repo"], active["tag"], active["backend"], active["backend_request"]) == (
        REPO,
        "b7000",
        "vulkan",
        "vulkan",
    )
    assert installed_b7000["previous"] is None
    assert "version:" in assert_runs(Path(active["binary"]))
    marker = json.loads(Path(active["marker_path"]).read_text())
    assert marker["digest_verified"] is True
    assert marker["asset"] == "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz"
    assert marker["binary"] == "llama-b7000/llama-server"
    assert any(d.startswith("Vulkan0:") for d in marker["devices"]), marker["devices"]
    assert "version:" in marker["version"]  # what the binary said (build 1: a shallow clone)
    assert marker["build_check"] == "unverifiable" and marker["reported_build"] == 1
    assert marker["files"]["llama-b7000/llama-server"]["size"] > 0
    # soname chains survive as links inside the runtime
    lib = Path(active["runtime_dir"]) / "llama-b7000" / "libllama.so"
    assert lib.is_symlink() and lib.resolve().name.startswith("libllama.so.0.")
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and status["active"]["tag"] == "b7000" and status["override"] is None


def test_same_update_again_is_up_to_date_and_downloads_nothing(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    blob_requests = len(github.requests_to("blob"))
    api_requests = len(github.requests_to("api"))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0
    assert payload["result"] == "up_to_date"
    assert payload["active"]["runtime_dir"] == installed_b7000["active"]["runtime_dir"]
    assert len(github.requests_to("blob")) == blob_requests
    assert len(github.requests_to("api")) == api_requests


def test_update_without_backend_keeps_the_stored_request(
    installed_b7000: dict[str, Any],
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
) -> None:
    github.add_release(
        REPO,
        "b7001",
        {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball, CPU_TAR.format(tag="b7001"): real_vulkan_tarball},
    )
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 0, payload
    assert payload["active"]["backend"] == "vulkan"
    assert payload["active"]["backend_request"] == "vulkan"
    assert payload["previous"]["tag"] == "b7000"


def test_rollback_reactivates_previous_runtime_which_runs(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7000"
    assert payload["previous"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    code, status = run_json(capsys, home, github.api_url, "status")
    assert status["active"]["tag"] == "b7000"


def test_rollback_with_nothing_before_exits_2_and_changes_nothing(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 2
    assert "no previous runtime" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


# -- failing updates leave the previous runtime active and runnable ------------------


def test_new_binary_that_exits_1_is_rejected_with_exit_6(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = stand_in_tarball(tmp_path / "broken.tar.gz", tag="b7001", script=stand_in_server(exit_code=1))
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): broken})
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "cpu")
    assert code == 6
    assert "--version exited 1" in payload["error"]["message"]


def test_digest_mismatch_exits_8_and_keeps_nothing(
    installed_b7000: dict[str, Any],
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    tmp_path: Path,
) -> None:
    # Other bytes than b7000's: the same digest would come from the asset cache, not the network.
    other = tmp_path / "other.tar.gz"
    other.write_bytes(real_vulkan_tarball.read_bytes() + b"\0" * 1024)
    publish_real(github, other, "b7001")
    github.inject(VULKAN_TAR.format(tag="b7001"), Fault(wrong_bytes=True, times=None))
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "vulkan")
    assert code == 8, payload
    assert "sha256" in payload["error"]["message"].lower() or "digest" in payload["error"]["message"].lower()
    assert list((home / "downloads").iterdir()) == []


@pytest.mark.parametrize(
    "command",
    [("update",), ("update", "--tag", "v0.2.0"), ("check",), ("list", "--available"), ("mirror", "sync")],
    ids=["stable latest", "explicit tag", "check", "list --available", "mirror sync"],
)
def test_a_nightly_tag_txt_failing_its_published_digest_is_exit_8_and_b7000_keeps_running(
    command: tuple[str, ...],
    installed_b7000: dict[str, Any],
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): b"never fetched"}, stable=False)
    # The API publishes the digest of "b7001\n"; the CDN serves "b7000\n" (same size: only the digest tells).
    github.cut_version(REPO, "v0.2.0", "b7001", served=b"b7000\n")
    args = (*command, "--dest", str(tmp_path / "mirror")) if command[0] == "mirror" else command
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, *args)
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)
    assert (code, payload["error"]["code"]) == (8, "digest_mismatch"), payload
    assert "v0.2.0 nightly-tag.txt does not match the sha256 GitHub publishes" in payload["error"]["message"]
    assert not github.requests_to("blob", "b7001")  # nothing the pointer names was downloaded


def test_archive_without_llama_server_exits_6(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = build_release_archive(
        tmp_path / "noserver.tar.gz", "tar-tagdir", {"llama-cli": b"#!/bin/sh\n"}, tag="b7001"
    )
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): empty})
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "cpu")
    assert code == 6
    assert "no llama-server" in payload["error"]["message"]


def test_vulkan_asset_holding_a_cpu_only_build_is_rejected_with_exit_6(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cpu_only = stand_in_tarball(
        tmp_path / "cpuonly.tar.gz",
        tag="b7001",
        script=stand_in_server(devices="  (none)\\n"),
        libs=("ggml-base", "ggml-cpu", "ggml", "llama"),
    )
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): cpu_only})
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "vulkan")
    assert code == 6
    assert "requested vulkan" in payload["error"]["message"]


def test_real_build_without_its_vulkan_library_is_rejected_with_exit_6(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    build = real_build(exclude=("libggml-vulkan",))
    stripped = build_release_archive(
        tmp_path / "novk.tar.gz", "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7001"
    )
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): stripped})
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "vulkan")
    assert code == 6, payload


def test_missing_release_exits_7_with_the_release_named(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, payload = failing_update(capsys, home, github, "--tag", "b7999", "--backend", "vulkan")
    assert code == 7
    assert payload["error"]["message"].startswith("Release b7999 not found in ggml-org/llama.cpp")


def test_unknown_backend_exits_2_listing_valid_names(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "VLLM")
    assert code == 2
    assert payload["error"]["message"].startswith("Unknown backend 'VLLM'")
    assert "Choose one of: auto, cpu, cuda, vulkan, rocm" in payload["error"]["message"]


def test_cli_as_a_subprocess_speaks_the_contract(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llama_runtime", "status", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert set(payload) >= {"active", "installed", "override"}
    assert set(payload["active"]) >= {
        "repo",
        "tag",
        "backend",
        "backend_request",
        "runtime_dir",
        "binary",
        "marker_path",
        "installed_at",
    }


def test_release_without_digest_installs_with_digest_verified_false_and_a_warning(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = stand_in_tarball(tmp_path / "old.tar.gz", tag="b5000")
    github.add_release(REPO, "b5000", {CPU_TAR.format(tag="b5000"): old}, digests=False)
    code = main(
        [
            "update",
            "--tag",
            "b5000",
            "--backend",
            "cpu",
            "--home",
            str(home),
            "--api-url",
            github.api_url,
            "--json",
            "--log-json",
        ]
    )
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert code == 0, payload
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["digest_verified"] is False
    assert any("no published digest" in w for w in payload["warnings"])
    log_lines = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    assert any(line.get("event") == "no digest published" for line in log_lines)


def test_require_digest_refuses_a_release_without_digest_with_exit_8(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = stand_in_tarball(tmp_path / "old.tar.gz", tag="b5000")
    github.add_release(REPO, "b5000", {CPU_TAR.format(tag="b5000"): old}, digests=False)
    code, payload = failing_update(capsys, home, github, "--tag", "b5000", "--backend", "cpu", "--require-digest")
    assert code == 8
    assert "no published sha256 digest" in payload["error"]["message"]
    assert not github.requests_to("blob", "b5000")  # refused before downloading a byte


def test_nightly_latest_is_the_highest_build_number_not_the_newest_date(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for tag in ("b9999", "b10000", "b9998"):
        tarball = stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag)
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): tarball}, stable=False)
    github.add_release(REPO, "b10001", {CPU_TAR.format(tag="b10001"): b"x"}, draft=True)
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--latest", "--backend", "cpu", "--channel", "nightly"
    )
    assert code == 0, payload
    assert payload["active"]["tag"] == "b10000"


def test_token_goes_to_the_api_host_only(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake is a loopback http origin: the contract's LLAMA_RUNTIME_GITHUB_TOKEN goes there,
    # GITHUB_TOKEN only to https://api.github.com (tests/test_hostile_remote.py).
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "ghp_secret")
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    api = github.requests_to("api", "/releases")
    blobs = github.requests_to("blob")
    assert api and all(r.headers.get("authorization") == "Bearer ghp_secret" for r in api)
    assert blobs and all("authorization" not in r.headers for r in blobs)
    assert all(r.headers.get("user-agent", "").startswith("llama-runtime/") for r in api)


def test_latest_older_than_the_active_build_is_never_installed_by_a_plain_update(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7005")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7005", "--backend", "cpu")
    assert code == 0, payload
    assert run_json(capsys, home, None, "unpin")[0] == 0  # `update --tag` pinned it; later updates move on
    # a mirror that lags behind: its newest release is older than what runs here
    with FakeGitHub() as lagging:
        lagging.add_release(
            REPO, "b7000", {CPU_TAR.format(tag="b7000"): stand_in_tarball(tmp_path / "o.tar.gz", tag="b7000")}
        )
        code, payload = run_json(capsys, home, lagging.api_url, "update")
    assert code == 0, payload
    assert payload["result"] == "up_to_date" and payload["active"]["tag"] == "b7005"
    assert any("older than the active b7005" in w for w in payload["warnings"])
    assert [r.path for r in lagging.requests_to("blob")] == [lagging.requests_to("blob")[0].path]
    assert lagging.requests_to("blob")[0].path.endswith("/nightly-tag.txt")  # resolving, not downloading


def test_vulkan_build_that_lists_no_vulkan_device_on_a_vulkan_host_is_rejected_with_exit_6(
    installed_b7000: dict[str, Any], home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # It carries libggml-vulkan, but cannot see the device this machine has (vk_env shows Mesa's).
    blind = stand_in_tarball(
        tmp_path / "blind.tar.gz",
        tag="b7001",
        script=stand_in_server(devices="  (none)\\n"),
        libs=("ggml-base", "ggml-cpu", "ggml-vulkan"),
    )
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): blind})
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "vulkan")
    assert code == 6, payload
    assert "lists no vulkan device" in payload["error"]["message"]


def test_an_undigested_download_left_by_a_fork_update_is_never_installed_for_upstream(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = CPU_TAR.format(tag="b5000")
    theirs = stand_in_tarball(tmp_path / "fork.tar.gz", tag="b5000", script=stand_in_server("version: 5000 (FORK)"))
    ours = stand_in_tarball(tmp_path / "up.tar.gz", tag="b5000", script=stand_in_server("version: 5000 (UPSTREAM)"))
    size = max(theirs.stat().st_size, ours.stat().st_size)
    for archive in (theirs, ours):  # same name, same size: only the repository differs
        archive.write_bytes(archive.read_bytes().ljust(size, b"\0"))
    github.add_release("someone/llama.cpp", "b5000", {name: theirs}, digests=False)
    github.add_release(REPO, "b5000", {name: ours}, digests=False)
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--tag", "b5000", "--backend", "cpu", "--repo", "someone/llama.cpp"
    )
    assert code == 0 and "FORK" in payload["active"]["binary_version"]
    # an update of the fork killed after its download finished leaves the complete file behind
    (home / "downloads").mkdir(exist_ok=True)
    for leftover in ("nodigest-someone_llama.cpp", "nodigest-ggml-org_llama.cpp", "nodigest"):
        (home / "downloads" / f"{leftover}-{size}-{name}.part").write_bytes(theirs.read_bytes())
    # --repo: without it the update would stay on the fork the active runtime came from
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--tag", "b5000", "--backend", "cpu", "--repo", REPO
    )
    assert code == 0, payload
    assert payload["active"]["repo"] == REPO
    assert "UPSTREAM" in payload["active"]["binary_version"]
