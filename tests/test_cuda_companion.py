"""A CUDA build installs together with its CUDA runtime companion archive."""

from __future__ import annotations

import json
import os
from pathlib import Path

from llama_runtime.runtime.binary import ProcessResult, run_process
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.activate.transaction import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.sources.github import GitHubClient
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, assert_runs, stand_in_tarball

CUDA_12_8_HOST = HostFacts(os="linux", arch="x64", cuda_driver_version="12.8", nvidia_driver="570.86")


def _lists_a_cuda_device(argv, timeout, env):  # type: ignore[no-untyped-def]
    """What a CUDA build prints on a machine with an NVIDIA GPU."""
    if argv[-1] == "--list-devices":
        return ProcessResult(0, "Available devices:\n  CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)\n")
    return run_process(argv, timeout, env)


def test_linux_cuda_build_gets_its_tagged_cudart_libraries_beside_llama_server(
    github: FakeGitHub, tmp_path: Path
) -> None:
    tag = "b11026"
    build = stand_in_tarball(tmp_path / "cuda.tar.gz", tag=tag, libs=("ggml-base", "ggml-cuda"))
    cudart = build_release_archive(
        tmp_path / "cudart.tar.gz",
        "tar-tagdir",
        {"libcudart.so.12.8.57": b"\x7fELF cudart", "libcublas.so.12.8.4.1": b"\x7fELF cublas"},
        symlinks={"libcudart.so.12": "libcudart.so.12.8.57", "libcublas.so.12": "libcublas.so.12.8.4.1"},
        tag=tag,
    )
    github.add_release(
        REPO,
        tag,
        {
            f"llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": build,
            f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": cudart,
            f"llama-{tag}-bin-ubuntu-x64.tar.gz": stand_in_tarball(tmp_path / "cpu.tar.gz", tag=tag),
        },
    )
    installer = Installer(
        Home(tmp_path / "home"),
        source=GitHubClient(github.api_url, REPO),
        host=lambda: CUDA_12_8_HOST,
        runner=_lists_a_cuda_device,
    )
    outcome = installer.update(UpdateRequest(repo=REPO, tag=tag))  # auto picks CUDA on this host
    marker = outcome.active.marker
    assert (marker.backend, marker.backend_request) == ("cuda", "auto")
    assert [e["name"] for e in marker.extra_assets] == [f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"]
    bin_dir = outcome.active.binary.parent
    assert (bin_dir / "libcudart.so.12.8.57").read_bytes() == b"\x7fELF cudart"
    assert os.readlink(bin_dir / "libcudart.so.12") == "libcudart.so.12.8.57"
    assert f"llama-{tag}/libcublas.so.12.8.4.1" in marker.files
    assert marker.devices == ("CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)",)
    recorded = json.loads((outcome.active.path / "llama-runtime.json").read_text())
    assert recorded["host"]["cuda_driver_version"] == "12.8"
    assert_runs(outcome.active.binary)
