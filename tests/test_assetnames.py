"""Asset-name grammar across llama.cpp eras and forks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime.updater.release.assetnames import parse_asset_name

RELEASES = Path(__file__).parent / "data" / "releases"

# name -> "os arch backend backend_version variant archive kind tag" ("-" = None;
# kind is "main" for a runtime archive, "cudart" for a CUDA runtime companion).
CASES: dict[str, str] = {
    # upstream, oldest first
    "llama-b2000-bin-win-avx2-x64.zip": "windows x64 cpu - avx2 zip main b2000",
    "llama-b2500-bin-win-cublas-cu12.2.0-x64.zip": "windows x64 cuda 12.2.0 - zip main b2500",
    "llama-b2500-bin-win-kompute-x64.zip": "windows x64 vulkan - kompute zip main b2500",
    "llama-b2500-bin-win-clblast-x64.zip": "windows x64 opencl - clblast zip main b2500",
    "llama-b2500-bin-win-arm64-x64.zip": "windows arm64 cpu - - zip main b2500",
    "llama-b2400-bin-win-arm64-x64.zip": "windows arm64 cpu - - zip main b2400",  # first ARM64 build
    "llama-b2500-bin-macos-arm64.zip": "macos arm64 metal - - zip main b2500",
    "cudart-llama-bin-win-cu11.7.1-x64.zip": "windows x64 cuda 11.7.1 - zip cudart -",
    "llama-b3000-bin-win-cuda-cu12.2.0-x64.zip": "windows x64 cuda 12.2.0 - zip main b3000",
    "llama-b3000-bin-win-rpc-x64.zip": "windows x64 cpu - rpc zip main b3000",
    "llama-b3000-bin-win-llvm-arm64.zip": "windows arm64 cpu - llvm zip main b3000",
    "llama-b3000-bin-win-msvc-arm64.zip": "windows arm64 cpu - msvc zip main b3000",
    "llama-b4000-bin-win-hip-x64-gfx1100.zip": "windows x64 rocm gfx1100 - zip main b4000",
    "llama-b4300-bin-win-cuda-cu12.4-x64.zip": "windows x64 cuda 12.4 - zip main b4300",
    "llama-b4300-bin-win-cuda-cu11.7-x64.zip": "windows x64 cuda 11.7 - zip main b4300",
    "cudart-llama-bin-win-cu12.4-x64.zip": "windows x64 cuda 12.4 - zip cudart -",
    "llama-b4400-bin-win-llvm-arm64-opencl-adreno.zip": "windows arm64 opencl - llvm-adreno zip main b4400",
    "llama-b5400-bin-win-cuda12.4-x64.zip": "windows x64 cuda 12.4 - zip main b5400",
    "cudart-llama-bin-win-cuda12.4-x64.zip": "windows x64 cuda 12.4 - zip cudart -",
    "llama-b5400-bin-win-opencl-adreno-arm64.zip": "windows arm64 opencl - adreno zip main b5400",
    "llama-b5400-bin-win-cpu-arm64.zip": "windows arm64 cpu - - zip main b5400",
    "llama-b5455-bin-win-hip-gfx1100-x64.zip": "windows x64 rocm gfx1100 - zip main b5455",
    "llama-b5500-bin-win-hip-radeon-x64.zip": "windows x64 rocm - radeon zip main b5500",
    "llama-b7000-bin-win-cuda-12.4-x64.zip": "windows x64 cuda 12.4 - zip main b7000",
    "cudart-llama-bin-win-cuda-13.1-x64.zip": "windows x64 cuda 13.1 - zip cudart -",
    "llama-b6800-bin-ubuntu-s390x-z15.zip": "linux s390x cpu - z15 zip main b6800",
    "llama-b7000-bin-ubuntu-s390x.zip": "linux s390x cpu - - zip main b7000",
    "llama-b7100-bin-910b-openEuler-aarch64.zip": "linux arm64 cann - 910b zip main b7100",
    "llama-b7902-bin-910b-openEuler-x86-aclgraph.tar.gz": "linux x64 cann - 910b-aclgraph tar.gz main b7902",
    "llama-b7902-bin-910b-openEuler-aarch64-aclgraph.tar.gz": "linux arm64 cann - 910b-aclgraph tar.gz main b7902",
    "llama-b7902-bin-310p-openEuler-x86.tar.gz": "linux x64 cann - 310p tar.gz main b7902",
    "llama-b7250-bin-macos-arm64.tar.gz": "macos arm64 metal - - tar.gz main b7250",
    "llama-b7250-bin-macos-x64.zip": "macos x64 cpu - - zip main b7250",
    "llama-b8700-bin-macos-arm64-kleidiai.tar.gz": "macos arm64 cpu - kleidiai tar.gz main b8700",
    "llama-b8200-bin-ubuntu-rocm-7.2-x64.tar.gz": "linux x64 rocm 7.2 - tar.gz main b8200",
    "llama-b8400-bin-ubuntu-openvino-2026.0-x64.tar.gz": "linux x64 openvino 2026.0 - tar.gz main b8400",
    "llama-b8600-bin-ubuntu-vulkan-arm64.tar.gz": "linux arm64 vulkan - - tar.gz main b8600",
    "llama-b8831-bin-android-arm64.tar.gz": "android arm64 cpu - - tar.gz main b8831",
    "llama-b8900-bin-ubuntu-sycl-fp16-x64.tar.gz": "linux x64 sycl - fp16 tar.gz main b8900",
    "llama-b8900-bin-win-sycl-x64.zip": "windows x64 sycl - - zip main b8900",
    "llama-b9900-bin-win-openvino-2026.2.1-x64.zip": "windows x64 openvino 2026.2.1 - zip main b9900",
    "llama-b10345-bin-win-cuda-13.4-arm64.zip": "windows arm64 cuda 13.4 - zip main b10345",
    "llama-b10356-bin-win-rocm-7.14-x64.zip": "windows x64 rocm 7.14 - zip main b10356",
    "llama-b10356-bin-ubuntu-rocm-7.14-x64.tar.gz": "linux x64 rocm 7.14 - tar.gz main b10356",
    "llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz": "linux x64 cuda 12.8 - tar.gz main b11026",
    "cudart-llama-b11026-bin-ubuntu-cuda-13.3-arm64.tar.gz": "linux arm64 cuda 13.3 - tar.gz cudart b11026",
    "cudart-llama-bin-win-cuda-13.4-arm64.zip": "windows arm64 cuda 13.4 - zip cudart -",
    "llama-b10772-bin-win-rocm-10.0-x64.zip": "windows x64 rocm 10.0 - zip main b10772",
    "llama-b11459-bin-win-vulkan-arm64.zip": "windows arm64 vulkan - - zip main b11459",
    # janhq
    "llama-b6500-bin-linux-cuda-12-common_cpus-x64.tar.gz": "linux x64 cuda 12 common_cpus tar.gz main b6500",
    "llama-b6500-bin-linux-vulkan-common_cpus-x64.tar.gz": "linux x64 vulkan - common_cpus tar.gz main b6500",
    "llama-b5000-bin-linux-avx2-cuda-cu12.0-x64.tar.gz": "linux x64 cuda 12.0 avx2 tar.gz main b5000",
    "cudart-llama-bin-linux-cu12.0-x64.tar.gz": "linux x64 cuda 12.0 - tar.gz cudart -",
    # hybridgroup
    "llama-b8000-bin-ubuntu-cuda-x64.tar.gz": "linux x64 cuda - - tar.gz main b8000",
    "llama-b8000-bin-ubuntu-cuda-13-x64.tar.gz": "linux x64 cuda 13 - tar.gz main b8000",
    "llama-b8000-bin-ubuntu-cpu-arm64.tar.gz": "linux arm64 cpu - - tar.gz main b8000",
    # unslothai
    "app-b9596-mix-e6f2453-linux-x64-cuda12-portable.tar.gz": (
        "linux x64 cuda 12 portable tar.gz main b9596-mix-e6f2453"
    ),
    "app-b9781-mix-1f1aaa4-windows-x64-rocm-gfx120X.zip": "windows x64 rocm gfx120X - zip main b9781-mix-1f1aaa4",
    "llama-b9596-mix-e6f2453-bin-macos-arm64.tar.gz": "macos arm64 metal - - tar.gz main b9596-mix-e6f2453",
    # AtomicBot (no tag in the name)
    "llama-turboquant-linux-x64-cuda-12.4.tar.gz": "linux x64 cuda 12.4 - tar.gz main -",
    "llama-turboquant-windows-x64-vulkan.zip": "windows x64 vulkan - - zip main -",
    # lemonade-sdk
    "llama-b1342-ubuntu-rocm-gfx110X-x64.zip": "linux x64 rocm gfx110X - zip main b1342",
    "llama-b1342-windows-rocm-gfx90a-x64.zip": "windows x64 rocm gfx90a - zip main b1342",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_asset_name_parses_to_platform_backend_and_version(name: str) -> None:
    info = parse_asset_name(name)
    assert info is not None
    os, arch, backend, version, variant, archive, kind, tag = (None if v == "-" else v for v in CASES[name].split())
    assert (info.os, info.arch, info.backend) == (os, arch, backend)
    assert (info.backend_version, info.variant, info.archive) == (version, variant, archive)
    assert (info.is_companion, info.tag) == (kind == "cudart", tag)
    assert info.name == name


@pytest.mark.parametrize(
    "name",
    [
        "llama-b9299-ui.tar.gz",
        "llama-b5000-xcframework.zip",
        "llama-b7250-xcframework.tar.gz",
        "llama.cpp-source-b9596-mix-e6f2453.tar.gz",
        "llama-b8000-bin-wasm-simd.tar.gz",
        "llama-b8000-bin-ubuntu-trixie-cpu-arm64.tar.gz",  # unknown qualifier: not guessed
        "llama-b7000-bin-win-cuda-12.4-x64.7z",  # unknown archive type
        "llama-b7000-bin-win-cuda-vulkan-x64.zip",  # two backends
        "llama-b7000-bin-solaris-x64.zip",
        "llama-b7000-bin-win-x64-arm32.zip",
        "cudart-llama-bin-win-vulkan-x64.zip",  # companion of a non-CUDA backend
        "llama-b9999-bin-win-hip-gfx1100-gfx1030-x64.zip",  # two gfx targets: which one?
        "llama-b9999-bin-win-cuda-12.4-13.1-x64.zip",  # two CUDA lines
        "llama-b9999-bin-win-arm64-arm64.zip",  # only "arm64-x64" is the known anomaly
        "llama-b9999-bin-ubuntu-arm64-x64.tar.gz",  # ... and only on Windows
        "llama-b9999-bin-win-x86.zip",  # x86 outside openEuler is a 32-bit build
        "llama-b9999-bin-ubuntu-x86.tar.gz",
        "checksums.txt",
        "",
        ".zip",
    ],
)
def test_non_runtime_or_unknown_name_is_none_not_an_error(name: str) -> None:
    assert parse_asset_name(name) is None


def test_cudart_companion_is_not_mistaken_for_the_server_archive() -> None:
    info = parse_asset_name("cudart-llama-bin-win-cuda-12.4-x64.zip")
    assert info is not None and info.is_companion


def test_version_numbers_are_read_not_listed() -> None:
    info = parse_asset_name("llama-b99999-bin-ubuntu-openvino-2031.7.4-x64.tar.gz")
    assert info is not None and info.backend_version == "2031.7.4"
    cuda = parse_asset_name("llama-b99999-bin-win-cuda-17.9-arm64.zip")
    assert cuda is not None and (cuda.backend, cuda.backend_version) == ("cuda", "17.9")


def _era_files() -> list[Path]:
    return sorted(RELEASES.glob("*.json"))


@pytest.mark.parametrize("path", _era_files(), ids=lambda p: p.stem)
def test_every_runtime_asset_of_an_era_parses_with_the_release_tag(path: Path) -> None:
    release = json.loads(path.read_text())
    ignored = {n for n in release["assets"] if parse_asset_name(n) is None}
    for name in set(release["assets"]) - ignored:
        info = parse_asset_name(name)
        assert info is not None
        assert info.tag in (None, release["tag"]), name
    # Only non-runtime files (UI, xcframework, sources, unknown fork extras) are skipped.
    non_runtime = ("-ui.", "xcframework", "source", "wasm", "trixie")
    assert all(any(marker in name for marker in non_runtime) for name in ignored), ignored


def test_b7902_listing_has_twenty_assets_two_of_them_cuda_runtimes() -> None:
    release = json.loads((RELEASES / "b7902.json").read_text())
    infos = [parse_asset_name(n) for n in release["assets"]]
    assert len(release["assets"]) == 20
    runtimes = [i for i in infos if i is not None and not i.is_companion]
    companions = [i for i in infos if i is not None and i.is_companion]
    assert len(runtimes) == 17
    assert sorted(c.backend_version or "" for c in companions) == ["12.4", "13.1"]


@pytest.mark.parametrize(("stem", "assets", "ubuntu"), [("b10356", 27, 9), ("b11026", 33, 12)])
def test_era_listing_has_the_published_asset_count(stem: str, assets: int, ubuntu: int) -> None:
    # asset_naming.md: b10356 has 9 Ubuntu assets, b11026 was published with 33.
    release = json.loads((RELEASES / f"{stem}.json").read_text())
    infos = [parse_asset_name(n) for n in release["assets"]]
    linux = [i for i in infos if i is not None and i.os == "linux" and not i.is_companion]
    assert (len(release["assets"]), len(linux)) == (assets, ubuntu)
