"""Every switch computes: the shipped check model runs on the build's device before it is accepted.

A build that answers ``--version`` and ``--list-devices`` but dies on its first model (SIGILL on a CPU
without the features it was compiled for, CUDA without kernels for this GPU) or computes garbage is
refused by a plain update with no model configured, and the old runtime stays active and runs.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

import pytest

from llama_runtime.runtime.exits import describe_run, exit_meaning
from llama_runtime.updater.verify.compute import CHECK_MODEL, CHECK_MODEL_SHA256, EXPECTED_ANSWER
from tests.fakegithub import FakeGitHub
from tests.helpers import (
    REPO,
    STAND_IN_SERVER_PY,
    VULKAN_TAR,
    HomeGuard,
    publish_stand_in,
    real_build,
    run_json,
)


def dies_on_a_model(signal_name: str) -> bytes:
    """A stand-in that answers --version and --list-devices, then dies of ``signal_name`` given ``-m``."""
    return f"""#!/bin/sh
case "$1" in
  --version) echo 'version: 7001 (stand-in)' >&2; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
echo "load_tensors: loading model tensors"
kill -{signal_name} $$
""".encode()


def answers(letters: str) -> bytes:
    """A stand-in whose server computes ``letters`` instead of the check model's answer."""
    server = STAND_IN_SERVER_PY.replace('ANSWER = "abcdefghijklmnopqrstuvwxyz"', f"ANSWER = {letters!r}")
    return f"""#!/bin/sh
case "$1" in
  --version) echo 'version: 7001 (stand-in)' >&2; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
exec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(server)} "$@"
""".encode()


@pytest.fixture
def b7000_active(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, home: Path) -> HomeGuard:
    publish_stand_in(github, tmp_path, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7000"
    return HomeGuard(None, home)


def test_a_build_that_dies_of_sigill_on_its_first_model_is_refused_naming_the_illegal_instruction(
    b7000_active: HomeGuard, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, home: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7001", script=dies_on_a_model("ILL"))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    message = payload["error"]["message"]
    assert "failed the compute check" in message and "SIGILL: illegal instruction" in message, message
    assert "CPU variants" in message, message
    b7000_active.assert_intact("b7000", capsys=capsys)


def test_a_build_that_computes_a_wrong_answer_is_refused_and_the_old_runtime_stays(
    b7000_active: HomeGuard, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, home: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7001", script=answers("zzzzzzzzzzzzzzzz"))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    assert "wrong answer" in payload["error"]["message"] and EXPECTED_ANSWER in payload["error"]["message"]
    b7000_active.assert_intact("b7000", capsys=capsys)


def test_every_switch_records_its_compute_check_and_an_opt_out_is_recorded_too(
    b7000_active: HomeGuard, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, home: Path
) -> None:
    from llama_runtime.runtime.layout import Home

    layout = Home(home)
    checked = layout.load(layout.read_pointer().active or "").marker.compute_check
    assert checked["answer"] == EXPECTED_ANSWER and checked["sha256"] == CHECK_MODEL_SHA256, checked
    assert checked["device_layers"] == "none"  # a CPU build computes on the CPU
    publish_stand_in(github, tmp_path, "b7001")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--no-compute-check")
    assert code == 0, payload
    skipped = layout.load(layout.read_pointer().active or "").marker.compute_check
    assert skipped == {"skipped": "turned off (--no-compute-check)"}


@pytest.mark.real_binary
def test_the_real_build_computes_the_known_answer_with_every_layer_on_its_vulkan_device(
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    home: Path,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
) -> None:
    real_build()
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload
    from llama_runtime.runtime.layout import Home

    layout = Home(home)
    checked = layout.load(layout.read_pointer().active or "").marker.compute_check
    assert checked["answer"] == EXPECTED_ANSWER and checked["device_layers"] == "all", checked


def test_the_shipped_check_model_is_the_one_its_sha256_pins() -> None:
    assert hashlib.sha256(CHECK_MODEL.read_bytes()).hexdigest() == CHECK_MODEL_SHA256
    assert CHECK_MODEL.stat().st_size < 400 * 1024  # a few hundred KB at most


def test_the_check_model_script_writes_the_shipped_bytes(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    try:
        from make_check_model import write_check_model  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert write_check_model(tmp_path / "check.gguf") == CHECK_MODEL_SHA256


@pytest.mark.parametrize(
    ("code", "output", "said"),
    [
        (-4, "", "SIGILL: illegal instruction — this build needs CPU features this machine lacks"),
        (-11, "", "SIGSEGV: segmentation fault"),
        (
            1,
            "ggml_cuda_init: found 1 CUDA devices\nCUDA : ARCHS = 750,800,860 \n"
            "CUDA error: no kernel image is available for execution on the device",
            "CUDA: no kernel image is available for this GPU (this GPU is SM 12.0); "
            "the build's kernels are for SM 750,800,860",
        ),
        (1, "CUDA error: the provided PTX was compiled with an unsupported toolchain.", "unsupported PTX"),
        (
            -6,
            "ggml_vulkan: Device memory allocation failed\nvk::Queue::submit: ErrorDeviceLost",
            "Vulkan: the device was lost",
        ),
        (1, "error: unknown argument\nbye", "exit 1 (bye)"),
        (None, "", "did not finish within its time limit"),
    ],
)
def test_a_failed_run_is_named_by_its_signal_or_by_what_it_printed(code: int | None, output: str, said: str) -> None:
    assert said in exit_meaning(code, output, gpu_sm="12.0")


def test_a_version_run_ended_by_a_signal_says_so_rather_than_a_bare_status() -> None:
    assert describe_run("--version", -4, "").startswith("--version was ended by SIGILL: illegal instruction")
    assert describe_run("--version", 1, "bad flag") == "--version exited 1 (bad flag)"
