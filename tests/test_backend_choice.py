"""The backend a user asked for is the one kept; what the host surely cannot serve is refused or re-detected.

* an explicit backend is recorded even when the active build already is of it;
* an explicit ``auto`` detects afresh at any tag;
* a stored request the host is sure it cannot serve is re-detected, with a warning;
* an explicit GPU backend without its driver or device is refused before any download, as CUDA is.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llama_runtime import BackendUnavailableError
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.marker import read_marker
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.sources.github import GitHubClient
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, HomeGuard, stand_in_server, stand_in_tarball
from tests.test_host import FakeFiles, FakeRunner

PLAIN = HostFacts(os="linux", arch="x64", sources=(("os", "test"),))
WITH_VULKAN = replace(PLAIN, vulkan=True)
WITH_ROCM = replace(PLAIN, rocm=True, rocm_gfx=("gfx1100",))
#: Detection is sure: no ROCm stack, no Vulkan loader, no Level Zero loader.
NOTHING = replace(
    PLAIN,
    absent=(("rocm", "no rocminfo, hipinfo or amd-smi GPU, no /dev/kfd"), ("vulkan", "no Vulkan loader (libvulkan)"),
            ("sycl", "no Level Zero loader (libze_loader)")),
)  # fmt: skip
ROCM_TAR = "llama-{tag}-bin-ubuntu-rocm-7.14-x64.tar.gz"
SYCL_TAR = "llama-{tag}-bin-ubuntu-sycl-fp32-x64.tar.gz"


def _publish(github: FakeGitHub, tmp_path: Path, tag: str, *names: str) -> None:
    """``tag`` with a stand-in build for each asset name; a GPU one lists a device of its backend."""
    devices = {"vulkan": "  Vulkan0: stand-in GPU\\n", "rocm": "  ROCm0: stand-in gfx1100\\n"}
    assets: dict[str, bytes | Path] = {}
    for name in names:
        backend = next((b for b in devices if f"-{b}-" in name), None)
        script = stand_in_server(f"version: {tag[1:]} (stand-in)", devices=devices.get(backend or "", ""))
        libs = (f"ggml-{'hip' if backend == 'rocm' else backend}",) if backend else ()
        assets[name] = stand_in_tarball(tmp_path / f"{tag}-{len(assets)}.tar.gz", tag=tag, script=script, libs=libs)
    github.add_release(REPO, tag, assets)


def _installer(home: Path, github: FakeGitHub, host: HostFacts) -> Installer:
    """An installer on ``host`` (it detects once: a changed host is a new installer, as a new process is)."""
    return Installer(Home(home), source=GitHubClient(github.api_url, REPO), host=lambda: host)


# -- an explicit backend at the active build ----------------------------------------------------


def test_an_explicit_backend_at_the_active_build_is_recorded_and_later_updates_follow_it(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b100", CPU_TAR.format(tag="b100"))
    installer = _installer(home, github, PLAIN)
    assert installer.update(UpdateRequest(REPO, tag="b100")).active.marker.backend_request == "auto"
    kept = installer.update(UpdateRequest(REPO, tag="b100", backend="cpu"))
    assert kept.result == "up_to_date"
    assert read_marker(kept.active.path).backend_request == "cpu"  # on disk, for the next update
    _publish(github, tmp_path, "b101", CPU_TAR.format(tag="b101"), VULKAN_TAR.format(tag="b101"))
    later = _installer(home, github, WITH_VULKAN).update(UpdateRequest(REPO))  # a Vulkan device appeared
    assert (later.active.marker.tag, later.active.marker.backend) == ("b101", "cpu")


def test_an_explicit_auto_at_the_active_build_detects_afresh(github: FakeGitHub, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b100", CPU_TAR.format(tag="b100"), VULKAN_TAR.format(tag="b100"))
    assert _installer(home, github, PLAIN).update(UpdateRequest(REPO, tag="b100")).active.marker.backend == "cpu"
    again = _installer(home, github, WITH_VULKAN).update(UpdateRequest(REPO, tag="b100", backend="auto"))
    assert (again.result, again.active.marker.backend) == ("installed", "vulkan")


def test_an_explicit_auto_that_detects_the_same_build_records_auto(github: FakeGitHub, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b100", CPU_TAR.format(tag="b100"))
    installer = _installer(home, github, PLAIN)
    installer.update(UpdateRequest(REPO, tag="b100", backend="cpu"))
    again = installer.update(UpdateRequest(REPO, tag="b100", backend="auto"))
    assert again.result == "up_to_date"
    assert read_marker(again.active.path).backend_request == "auto"


# -- a stored request the host cannot serve -----------------------------------------------------


def test_a_stored_request_the_host_surely_cannot_serve_is_redetected_with_a_warning(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b100", ROCM_TAR.format(tag="b100"))
    first = _installer(home, github, WITH_ROCM).update(UpdateRequest(REPO, tag="b100", backend="rocm"))
    assert first.active.marker.backend == "rocm"
    _publish(github, tmp_path, "b101", ROCM_TAR.format(tag="b101"), CPU_TAR.format(tag="b101"))
    outcome = _installer(home, github, NOTHING).update(UpdateRequest(REPO))  # the ROCm GPU is gone
    assert (outcome.active.marker.backend, outcome.active.marker.backend_request) == ("cpu", "auto")
    assert any("stored backend request 'rocm'" in w and "no ROCm GPU detected" in w for w in outcome.warnings)


# -- an explicit GPU backend without its stack: refused before any download -----------------------


@pytest.mark.parametrize(
    ("backend", "name", "says"),
    [
        ("rocm", ROCM_TAR, "no ROCm GPU detected (no rocminfo"),
        ("vulkan", VULKAN_TAR, "no Vulkan driver detected (no Vulkan loader"),
        ("sycl", SYCL_TAR, "no Level Zero GPU detected (no Level Zero loader"),
    ],
)
def test_an_explicit_gpu_backend_the_host_surely_lacks_is_refused_before_any_download(
    github: FakeGitHub, tmp_path: Path, backend: str, name: str, says: str
) -> None:
    home = tmp_path / "home"
    _publish(github, tmp_path, "b100", CPU_TAR.format(tag="b100"))
    _publish(github, tmp_path, "b101", CPU_TAR.format(tag="b101"), name.format(tag="b101"))
    installer = _installer(home, github, NOTHING)
    installer.update(UpdateRequest(REPO, tag="b100", backend="cpu"))
    guard = HomeGuard(None, home)
    with pytest.raises(BackendUnavailableError) as caught:
        installer.update(UpdateRequest(REPO, tag="b101", backend=backend))
    assert caught.value.exit_code == 5 and says in caught.value.message
    assert github.requests_to("blob", "b101") == []  # nothing of b101 was downloaded
    guard.assert_intact("b100")


def test_an_unsure_host_still_lets_the_device_check_decide() -> None:
    release = Release(REPO, "b100", (Asset(ROCM_TAR.format(tag="b100"), 1, "https://example.invalid/a"),))
    assert choose_asset(release, PLAIN, "rocm").backend == "rocm"  # not detected, but not surely absent


# -- what detection is sure of --------------------------------------------------------------------


def test_detection_is_sure_only_without_any_trace_of_the_stack() -> None:
    bare = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert {name for name, _ in bare.absent} == {"rocm", "vulkan", "sycl"}
    traces = FakeFiles(texts={"/dev/kfd": ""}, libraries={"vulkan": "libvulkan.so.1", "ze_loader": "libze_loader.so.1"})
    traced = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=traces)
    assert traced.absent == ()
    hidden = detect_host(FakeRunner(), {"HIP_VISIBLE_DEVICES": ""}, system="Linux", machine="x86_64", files=traces)
    assert hidden.sure_absent("rocm") == "HIP_VISIBLE_DEVICES hides every GPU"
    windows = detect_host(FakeRunner(), {}, system="Windows", machine="AMD64", files=FakeFiles())
    assert windows.absent == ()  # sure only where the traces are files we can look at
