"""The binary's own version, read in both formats and checked against the requested build."""

from __future__ import annotations

import pytest

from llama_runtime import VerificationError
from llama_runtime.updater.verify.verify import check_build, parse_version_output
from tests.realbuild import real_bin_dir

NEW = "version: 0.1.1-dev (build 10470, commit 74a7c897)\nbuilt with GNU 13.3.0 for Linux x86_64"
OLD = "ggml_vulkan: Found 1 Vulkan devices:\nversion: 7000 (abcdef1)\nbuilt with cc for x86_64-linux-gnu"


def test_new_format_reports_build_and_semver() -> None:
    identity = parse_version_output(NEW)
    assert (identity.build, identity.version, identity.commit) == (10470, "0.1.1-dev", "74a7c897")
    assert check_build("b10470", identity) == "verified"


def test_old_format_reports_the_build_even_after_log_lines() -> None:
    identity = parse_version_output(OLD)
    assert (identity.build, identity.version, identity.commit) == (7000, None, "abcdef1")
    assert check_build("b7000", identity) == "verified"


def test_fork_tag_is_checked_by_its_build_number() -> None:
    assert check_build("b9596-mix-e6f2453", parse_version_output("version: 9596 (e6f2453)")) == "verified"


@pytest.mark.parametrize(("tag", "output"), [("b10470", NEW.replace("10470", "10471")), ("b6999", OLD)])
def test_another_build_number_is_a_verification_failure_naming_both(tag: str, output: str) -> None:
    with pytest.raises(VerificationError) as err:
        check_build(tag, parse_version_output(output))
    reported = parse_version_output(output).build
    assert f"build {tag[1:]}" in err.value.message and f"reports build {reported}" in err.value.message
    assert err.value.exit_code == 6


@pytest.mark.parametrize(
    "output",
    [
        "version: 0.1.0-dev (build 0, commit unknown)",  # no git at build time
        "version: 0.4.0-dev (build 1, commit 6a1a922)",  # depth-1 clone (lemonade-sdk/llamacpp-rocm #145)
        "version: 1 (6a1a922)",
        "llama-server (custom build)",
        "",
    ],
)
def test_a_binary_without_a_usable_build_number_is_unverifiable_not_failed(output: str) -> None:
    assert check_build("b10470", parse_version_output(output)) == "unverifiable"


def test_a_tag_without_a_build_number_is_unverifiable() -> None:
    assert check_build("llama-prebuilt-master-1f1aaa4", parse_version_output(NEW)) == "unverifiable"


def test_the_real_llama_server_parses_as_a_shallow_clone_build() -> None:
    import subprocess

    directory = real_bin_dir()
    if directory is None:
        pytest.skip("the real llama-server runs on Linux x86_64 only")
    done = subprocess.run([str(directory / "llama-server"), "--version"], capture_output=True, timeout=60, check=False)
    identity = parse_version_output((done.stdout + done.stderr).decode())
    assert identity.build == 1 and identity.version is not None
    assert check_build("b7000", identity) == "unverifiable"
