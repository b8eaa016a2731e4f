"""A backend asked for by name must be served: a build that lists no device of it is exit 6, never a CPU fallback.

Against the real llama-server Vulkan build: with ``GGML_VK_VISIBLE_DEVICES=0`` it lists Mesa's
software device (lavapipe); unset or empty, it lists no Vulkan device at all, which is how a
machine without a Vulkan GPU looks to it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_runtime import VerificationError
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.verify.verify import check_requested_device
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, HomeGuard, run_json

#: How the environment hides lavapipe from llama.cpp: the variable unset, or set empty.
_HIDDEN = pytest.mark.parametrize("hidden", ["unset", "empty"])


def _hide_software_vulkan(monkeypatch: pytest.MonkeyPatch, hidden: str) -> None:
    if hidden == "unset":
        monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "")
    if detect_host().sure_absent("vulkan") is not None:
        pytest.skip("no Vulkan loader here: --backend vulkan is refused before any download instead")


@_HIDDEN
def test_explicit_vulkan_whose_build_lists_no_vulkan_device_is_exit_6_and_keeps_the_previous_runtime(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    hidden: str,
) -> None:
    _hide_software_vulkan(monkeypatch, hidden)
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball})
    guard = HomeGuard(None, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 6, payload
    assert "requested vulkan but the installed build lists no Vulkan device" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


@_HIDDEN
def test_allow_no_device_installs_with_a_warning_that_status_and_doctor_keep_showing(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    hidden: str,
) -> None:
    _hide_software_vulkan(monkeypatch, hidden)
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball})
    code, payload = run_json(
        capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan", "--allow-no-device"
    )
    assert code == 0, payload
    said = "requested vulkan but the installed build lists no Vulkan device"
    assert any(said in w for w in payload["warnings"]), payload["warnings"]
    code, status = run_json(capsys, b7000_home, None, "status")
    assert code == 0 and status["active"]["tag"] == "b7001"
    assert said in status["active"]["device_warning"]
    code, doctor = run_json(capsys, b7000_home, None, "doctor")
    assert code == 0 and doctor["healthy"] is True
    assert any(said in a for a in doctor["advice"]), doctor["advice"]
    from llama_runtime.updater.cli.main import main

    assert main(["doctor", "--home", str(b7000_home)]) == 0
    shown = capsys.readouterr().out
    assert said in shown and "Everything checks out" not in shown


def test_explicit_vulkan_with_its_device_listed_installs_without_a_warning(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    github.add_release(REPO, "b7001", {VULKAN_TAR.format(tag="b7001"): real_vulkan_tarball})
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["active"]["device_warning"] is None
    assert not any("lists no Vulkan device" in w for w in payload["warnings"])


# -- install-file: the same rule for a file on disk ------------------------------------------


@pytest.mark.e2e
def test_install_file_with_explicit_vulkan_whose_build_lists_no_device_is_exit_6_and_keeps_the_previous_runtime(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    real_vulkan_tarball: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide_software_vulkan(monkeypatch, "empty")
    archive = tmp_path / VULKAN_TAR.format(tag="b7000")
    archive.write_bytes(real_vulkan_tarball.read_bytes())
    guard = HomeGuard(None, b7000_home)
    code, payload = run_json(capsys, b7000_home, None, "install-file", str(archive), "--backend", "vulkan")
    assert code == 6, payload
    assert "requested vulkan but the installed build lists no Vulkan device" in payload["error"]["message"]
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


@pytest.mark.e2e
def test_install_file_allow_no_device_installs_with_the_warning_status_keeps_showing(
    capsys: pytest.CaptureFixture[str],
    b7000_home: Path,
    real_vulkan_tarball: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide_software_vulkan(monkeypatch, "empty")
    archive = tmp_path / VULKAN_TAR.format(tag="b7000")
    archive.write_bytes(real_vulkan_tarball.read_bytes())
    code, payload = run_json(
        capsys, b7000_home, None, "install-file", str(archive), "--backend", "vulkan", "--allow-no-device"
    )
    assert code == 0, payload
    said = "requested vulkan but the installed build lists no Vulkan device"
    assert said in payload["active"]["device_warning"]
    code, status = run_json(capsys, b7000_home, None, "status")
    assert code == 0 and said in status["active"]["device_warning"]


# -- the rule itself --------------------------------------------------------------------------


def test_a_named_gpu_backend_without_its_device_is_refused_in_the_seeds_words() -> None:
    with pytest.raises(VerificationError) as caught:
        check_requested_device("vulkan", "vulkan", ("CPU0: x86",), allow_no_device=False)
    assert caught.value.message == "requested vulkan but the installed build lists no Vulkan device"


@pytest.mark.parametrize(
    ("request_", "backend", "devices"),
    [
        ("auto", "vulkan", ()),  # auto chose by detection: its own device check applies
        ("cpu", "cpu", ()),  # not a GPU backend
        ("rocm", "rocm", ("ROCm0: gfx1100",)),  # listed
    ],
)
def test_what_the_rule_leaves_alone(request_: str, backend: str, devices: tuple[str, ...]) -> None:
    assert check_requested_device(request_, backend, devices, allow_no_device=False) is None


def test_allow_no_device_turns_the_failure_into_the_warning_to_record() -> None:
    warning = check_requested_device("cuda", "cuda", (), allow_no_device=True)
    assert warning is not None and warning.startswith("requested cuda but the installed build lists no CUDA device")
