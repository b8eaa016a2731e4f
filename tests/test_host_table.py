"""The host table: a machine -> the asset of today's build it gets (or why none) -> the source that says so.

The release is b11541 (2026-10-10), upstream's 36 assets as shared/reference/upstream-2026-10.md lists
them ("The 36 assets of one build") and release-publish.yml @5641289a names them. Each row's source is
the workflow or document the fact was read from, or ``UNKNOWN`` ("unknown: decided by running") where
no source says it: those rows never refuse, and the binary's own run decides on the machine.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llama_runtime import BackendUnavailableError, UserInputError
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.facts import UNKNOWN
from llama_runtime.updater.choice.host import HostFacts, host_from_json
from llama_runtime.updater.release.assetnames import not_runtime_reason, parse_asset_name
from llama_runtime.updater.release.release import Asset, Release
from tests.fakegithub import FakeGitHub
from tests.helpers import cli_process

TAG = "b11541"
#: b11541's assets; the Windows cudart zips carry no tag (byte-identical across builds).
NAMES: tuple[str, ...] = tuple(
    n.format(t=TAG)
    for n in (
        "llama-{t}-bin-macos-arm64.tar.gz", "llama-{t}-bin-macos-x64.tar.gz", "llama-{t}-xcframework.zip",
        "llama-{t}-bin-ubuntu-x64.tar.gz", "llama-{t}-bin-ubuntu-arm64.tar.gz", "llama-{t}-bin-ubuntu-s390x.tar.gz",
        "llama-{t}-bin-ubuntu-vulkan-x64.tar.gz", "llama-{t}-bin-ubuntu-vulkan-arm64.tar.gz",
        "llama-{t}-bin-ubuntu-cuda-12.8-x64.tar.gz", "cudart-llama-{t}-bin-ubuntu-cuda-12.8-x64.tar.gz",
        "llama-{t}-bin-ubuntu-cuda-13.4-x64.tar.gz", "cudart-llama-{t}-bin-ubuntu-cuda-13.4-x64.tar.gz",
        "llama-{t}-bin-ubuntu-cuda-13.4-arm64.tar.gz", "cudart-llama-{t}-bin-ubuntu-cuda-13.4-arm64.tar.gz",
        "llama-{t}-bin-ubuntu-rocm-10.0-x64.tar.gz", "llama-{t}-bin-ubuntu-openvino-2026.4.1-x64.tar.gz",
        "llama-{t}-bin-ubuntu-sycl-fp32-x64.tar.gz", "llama-{t}-bin-ubuntu-sycl-fp16-x64.tar.gz",
        "llama-{t}-bin-linux-arm64-snapdragon.tar.gz", "llama-{t}-bin-android-arm64.tar.gz",
        "llama-{t}-bin-android-arm64-snapdragon.tar.gz",
        "llama-{t}-bin-win-cpu-x64.zip", "llama-{t}-bin-win-cpu-arm64.zip", "llama-{t}-bin-win-opencl-adreno-arm64.zip",
        "llama-{t}-bin-win-cuda-12.4-x64.zip", "cudart-llama-bin-win-cuda-12.4-x64.zip",
        "llama-{t}-bin-win-cuda-13.4-x64.zip", "cudart-llama-bin-win-cuda-13.4-x64.zip",
        "llama-{t}-bin-win-cuda-13.4-arm64.zip", "cudart-llama-bin-win-cuda-13.4-arm64.zip",
        "llama-{t}-bin-win-vulkan-x64.zip", "llama-{t}-bin-win-vulkan-arm64.zip",
        "llama-{t}-bin-win-openvino-2026.4.1-x64.zip", "llama-{t}-bin-win-sycl-x64.zip",
        "llama-{t}-bin-win-rocm-10.0-x64.zip", "llama-{t}-ui.tar.gz",
    )
)  # fmt: skip
B11541 = Release(
    "ggml-org/llama.cpp",
    TAG,
    tuple(Asset(n, 1000, f"http://127.0.0.1/{n}") for n in NAMES),
    published_at="2026-10-10T12:00:00Z",
    prerelease=True,
)

X86 = frozenset({"sse4_2", "avx", "avx2", "fma"})


def host(platform: str, **facts: object) -> HostFacts:
    os_name, arch = platform.split("-")
    base = HostFacts(
        os=os_name, arch=arch, metal=platform == "macos-arm64", cpu_features=X86 if arch == "x64" else frozenset()
    )
    return replace(base, **facts)  # type: ignore[arg-type]


def nvidia(platform: str, cuda: str, driver: str, *caps: str, **facts: object) -> HostFacts:
    return host(platform, cuda_driver_version=cuda, nvidia_driver=driver, compute_capabilities=caps, **facts)


# Sources, as the rows cite them.
RELEASE = "release.yml @002efcd4"
PUBLISH = "release-publish.yml @5641289a"
GGML = (
    "ggml-cuda/CMakeLists.txt defaults (86-real 89-real 120a-real 121a-real; the rest PTX) "
    "+ NVIDIA minor-version compatibility"
)
RANK = "ranking: a line the driver fully supports before a minor-compatible one"
COMPRESS = "unslothai/unsloth #12842: 12.8 compressed kernels need a 12.4 driver"

#: (case, host, request, expected asset or "refused: <message regex>", source)
TABLE: list[tuple[str, HostFacts, str, str, str]] = [
    ("mac-arm64-metal", host("macos-arm64", macos_version="15.4"), "auto", "macos-arm64.tar.gz",
     f"{RELEASE} macos-26 runner; #26375 pinned the deployment target before this build"),
    ("mac-x64-14", host("macos-x64", macos_version="14.6"), "auto", "macos-x64.tar.gz",
     f"{RELEASE} CMAKE_OSX_DEPLOYMENT_TARGET=13.3"),
    ("mac-x64-13.0", host("macos-x64", macos_version="13.0"), "auto", r"refused: macOS 13\.3",
     f"{RELEASE} CMAKE_OSX_DEPLOYMENT_TARGET=13.3"),
    ("linux-x64-cpu", host("linux-x64", glibc_version="2.35"), "auto", "ubuntu-x64.tar.gz", f"{RELEASE} ubuntu-22.04"),
    ("linux-x64-cpu-old-glibc", host("linux-x64", glibc_version="2.31"), "auto", r"refused: glibc 2\.35",
     f"{RELEASE} ubuntu-22.04"),
    ("linux-x64-vulkan", host("linux-x64", vulkan=True), "auto", "ubuntu-vulkan-x64.tar.gz", f"{RELEASE} ubuntu-22.04"),
    ("linux-x64-cuda13.4-driver", nvidia("linux-x64", "13.4", "615.10", "8.9"), "auto", "ubuntu-cuda-13.4-x64.tar.gz",
     PUBLISH),
    ("linux-x64-cuda-driver13.0", nvidia("linux-x64", "13.0", "580.65.06", "12.0"), "auto",
     "ubuntu-cuda-12.8-x64.tar.gz", RANK),
    ("linux-x64-cuda-old-glibc", nvidia("linux-x64", "13.4", "615.10", "8.9", glibc_version="2.28"), "auto",
     "ubuntu-cuda-13.4-x64.tar.gz", f"{UNKNOWN}: no source names the glibc of the nvidia/cuda build image"),
    ("linux-x64-12.4-driver-native-8.6", nvidia("linux-x64", "12.4", "550.54.14", "8.6"), "auto",
     "ubuntu-cuda-12.8-x64.tar.gz", GGML),
    ("linux-x64-12.6-driver-ptx-only-a100", nvidia("linux-x64", "12.6", "560.35.03", "8.0"), "auto",
     "ubuntu-x64.tar.gz", GGML),
    ("linux-x64-12.4-driver-ptx-only-t4-vulkan", nvidia("linux-x64", "12.4", "550.54.14", "7.5", vulkan=True), "auto",
     "ubuntu-vulkan-x64.tar.gz", GGML),
    ("linux-x64-12.4-driver-cc-unknown", nvidia("linux-x64", "12.4", "550.54.14", vulkan=True), "auto",
     "ubuntu-vulkan-x64.tar.gz", f"{GGML}: native code for an unknown GPU cannot be confirmed"),
    ("linux-x64-12.2-driver", nvidia("linux-x64", "12.2", "535.183", "8.6"), "cuda",
     r"refused: CUDA 12\.8 .*below CUDA 12\.4", COMPRESS),
    ("linux-arm64-gb10-driver13.0", nvidia("linux-arm64", "13.0", "580.95.05", "12.1"), "auto",
     "ubuntu-cuda-13.4-arm64.tar.gz", GGML),
    ("linux-arm64-orin-driver13.0", nvidia("linux-arm64", "13.0", "580.00", "8.7"), "auto",
     "ubuntu-cuda-13.4-arm64.tar.gz", f"{GGML} (86-real SASS runs on 8.7)"),
    ("linux-arm64-gh200-driver13.0", nvidia("linux-arm64", "13.0", "580.95.05", "9.0", vulkan=True), "auto",
     "ubuntu-vulkan-arm64.tar.gz", GGML),
    ("linux-arm64-cuda13.4-driver", nvidia("linux-arm64", "13.4", "615.10", "9.0"), "auto",
     "ubuntu-cuda-13.4-arm64.tar.gz", PUBLISH),
    ("linux-x64-rocm10-gfx1100", host("linux-x64", rocm=True, rocm_gfx=("gfx1100",), vulkan=True), "auto",
     "ubuntu-rocm-10.0-x64.tar.gz", f"{UNKNOWN}: the ROCm 10.0 GPU_TARGETS are in no stored source"),
    ("linux-x64-rocm10-gfx803", host("linux-x64", rocm=True, rocm_gfx=("gfx803",), vulkan=True), "auto",
     "ubuntu-rocm-10.0-x64.tar.gz", f"{UNKNOWN}: gfx803 is outside every known list, yet 10.0's is not known"),
    ("linux-s390x", host("linux-s390x", glibc_version="2.39"), "auto", "ubuntu-s390x.tar.gz",
     f"{RELEASE} ubuntu-24.04-s390x"),
    ("linux-s390x-old-glibc", host("linux-s390x", glibc_version="2.35"), "auto", r"refused: glibc 2\.39",
     f"{RELEASE} ubuntu-24.04-s390x"),
    ("linux-arm64-cpu", host("linux-arm64"), "auto", "ubuntu-arm64.tar.gz", f"{RELEASE} ubuntu-24.04-arm"),
    ("linux-arm64-snapdragon", host("linux-arm64"), "opencl", "linux-arm64-snapdragon.tar.gz",
     f"{PUBLISH}: Snapdragon (CPU, Adreno GPU, Hexagon NPU); ggml-opencl is its GPU backend"),
    ("android-cpu", host("android-arm64"), "auto", "android-arm64.tar.gz", RELEASE),
    ("android-snapdragon", host("android-arm64"), "opencl", "android-arm64-snapdragon.tar.gz", PUBLISH),
    ("win-arm64-adreno", host("windows-arm64"), "opencl", "win-opencl-adreno-arm64.zip", RELEASE),
    ("win-arm64-cpu", host("windows-arm64"), "auto", "win-cpu-arm64.zip", RELEASE),
    ("win-arm64-vulkan", host("windows-arm64", vulkan=True), "auto", "win-vulkan-arm64.zip", PUBLISH),
    ("win-arm64-cuda", nvidia("windows-arm64", "13.4", "615.10", "12.1"), "auto", "win-cuda-13.4-arm64.zip", PUBLISH),
    ("win-x64-cpu", host("windows-x64"), "auto", "win-cpu-x64.zip", RELEASE),
    ("win-x64-cuda12.4", nvidia("windows-x64", "12.4", "551.61", "8.6"), "auto", "win-cuda-12.4-x64.zip", RELEASE),
    ("win-x64-cuda13.4", nvidia("windows-x64", "13.4", "615.10", "8.9"), "auto", "win-cuda-13.4-x64.zip", PUBLISH),
    ("win-x64-driver13.0", nvidia("windows-x64", "13.0", "580.88", "8.9"), "auto", "win-cuda-12.4-x64.zip", RANK),
    ("win-x64-12.2-driver-native", nvidia("windows-x64", "12.2", "535.98", "8.9"), "auto", "win-cuda-12.4-x64.zip",
     f"{RELEASE} windows-cuda sets no CMAKE_CUDA_ARCHITECTURES; {GGML}"),
    ("win-x64-12.2-driver-ptx-only", nvidia("windows-x64", "12.2", "535.98", "7.5", vulkan=True), "auto",
     "win-vulkan-x64.zip", GGML),
    ("win-x64-rocm10", host("windows-x64", rocm=True, rocm_gfx=("gfx1201",)), "auto", "win-rocm-10.0-x64.zip",
     f"{UNKNOWN}: the ROCm 10.0 GPU_TARGETS are in no stored source"),
    ("linux-x64-openvino", host("linux-x64", glibc_version="2.39"), "openvino", "ubuntu-openvino-2026.4.1-x64.tar.gz",
     f"{RELEASE} ubuntu-24.04"),
    ("linux-x64-openvino-old-glibc", host("linux-x64", glibc_version="2.35"), "openvino", r"refused: glibc 2\.39",
     f"{RELEASE} ubuntu-24.04"),
    ("win-x64-openvino", host("windows-x64"), "openvino", "win-openvino-2026.4.1-x64.zip", PUBLISH),
    ("linux-x64-sycl-level-zero", host("linux-x64", sycl=True), "auto", "ubuntu-sycl-fp16-x64.tar.gz",
     f"{RELEASE} ubuntu-24-sycl; llama-install.sh picks fp16 on a Level Zero GPU"),
    ("linux-x64-sycl-requested", host("linux-x64"), "sycl", "ubuntu-sycl-fp32-x64.tar.gz", f"{RELEASE} ubuntu-24-sycl"),
    ("win-x64-sycl", host("windows-x64", sycl=True), "auto", "win-sycl-x64.zip", f"{RELEASE} windows-sycl"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "facts", "request_", "expected", "source"), TABLE, ids=[t[0] for t in TABLE])
def test_host_gets_the_asset_its_facts_allow(
    case: str, facts: HostFacts, request_: str, expected: str, source: str
) -> None:
    assert source, f"{case}: every row names its source"
    if expected.startswith("refused: "):
        with pytest.raises(BackendUnavailableError, match=expected.removeprefix("refused: ")):
            choose_asset(B11541, facts, request_)
        return
    choice = choose_asset(B11541, facts, request_)
    assert choice.asset.name == f"llama-{TAG}-bin-{expected}"
    if choice.backend == "cuda":  # every CUDA build takes its runtime: tagged on Linux, untagged on Windows
        version = choice.info.backend_version
        tagged = f"{TAG}-" if facts.os == "linux" else ""
        ext = "tar.gz" if facts.os == "linux" else "zip"
        os_token = "ubuntu" if facts.os == "linux" else "win"
        want = f"cudart-llama-{tagged}bin-{os_token}-cuda-{version}-{facts.arch}.{ext}"
        assert [a.name for a in choice.extra_assets] == [want]
    if source.startswith(UNKNOWN) and choice.backend == "rocm":
        assert "decides" in choice.reason  # the unknown is said, and the run decides


def test_the_table_covers_every_runtime_archive_of_today_s_build() -> None:
    chosen = {f"llama-{TAG}-bin-{row[3]}" for row in TABLE if not row[3].startswith("refused: ")}
    runtimes = {n for n in NAMES if (i := parse_asset_name(n)) is not None and not i.is_companion}
    assert len(NAMES) == 36 and len(runtimes) == 28
    assert runtimes - chosen == set()


def test_every_asset_of_today_s_build_is_understood() -> None:
    for name in NAMES:
        assert parse_asset_name(name) is not None or not_runtime_reason(name) is not None, name
    assert "web UI" in (not_runtime_reason(f"llama-{TAG}-ui.tar.gz") or "")
    assert "XCFramework" in (not_runtime_reason(f"llama-{TAG}-xcframework.zip") or "")
    snapdragon = parse_asset_name(f"llama-{TAG}-bin-linux-arm64-snapdragon.tar.gz")
    assert snapdragon is not None and (snapdragon.backend, snapdragon.variant) == ("opencl", "snapdragon")


def test_ptx_only_gpu_on_an_older_driver_is_explained_and_the_next_candidate_taken() -> None:
    choice = choose_asset(B11541, nvidia("linux-x64", "12.4", "550.54.14", "7.5", vulkan=True), "auto")
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    why = verdicts[f"llama-{TAG}-bin-ubuntu-cuda-12.8-x64.tar.gz"]
    assert "only PTX for compute capability 7.5" in why and "cannot JIT-compile" in why


def test_minor_version_compatibility_below_its_driver_floor_is_not_taken() -> None:
    # 13.x minor-version compatibility starts at r580 (docs.nvidia.com/deploy/cuda-compatibility).
    facts = nvidia("linux-arm64", "13.0", "575.51", "12.1", vulkan=True)
    choice = choose_asset(B11541, facts, "auto")
    assert choice.backend == "vulkan"
    assert "r580" in {c.asset_name: c.why for c in choice.candidates}[f"llama-{TAG}-bin-ubuntu-cuda-13.4-arm64.tar.gz"]


@pytest.mark.parametrize("platform", ["linux-s390x", "android-arm64", "linux-arm64", "macos-x64", "windows-arm64"])
def test_host_file_of_every_upstream_platform_plans(platform: str) -> None:
    os_name, arch = platform.split("-")
    facts = host_from_json({"os": os_name, "arch": arch}, "host.json")
    assert facts.platform == platform
    choose_asset(B11541, replace(facts, cpu_features=X86 if arch == "x64" else frozenset()), "auto")


@pytest.mark.parametrize("platform", ["linux-riscv64", "freebsd-x64", "windows-x86"])
def test_host_file_of_a_platform_upstream_does_not_publish_is_refused_listing_the_valid_ones(platform: str) -> None:
    os_name, arch = platform.split("-")
    with pytest.raises(UserInputError) as caught:
        host_from_json({"os": os_name, "arch": arch}, "host.json")
    assert platform in caught.value.message and "linux-s390x" in caught.value.message
    assert "android-arm64" in caught.value.message


def test_plan_explains_the_snapdragon_build_auto_leaves_to_a_request() -> None:
    choice = choose_asset(B11541, host("linux-arm64"), "auto")
    why = {c.asset_name: c.why for c in choice.candidates}[f"llama-{TAG}-bin-linux-arm64-snapdragon.tar.gz"]
    assert why.startswith("not considered: opencl is installed only on request (--backend opencl)")
    assert "Adreno" in why and "Hexagon" in why


def test_plan_host_file_for_s390x_plans_and_an_unpublished_platform_is_exit_2(
    tmp_path: Path, github: FakeGitHub
) -> None:
    names = [f"llama-{TAG}-bin-ubuntu-s390x.tar.gz", f"llama-{TAG}-bin-ubuntu-x64.tar.gz", f"llama-{TAG}-ui.tar.gz"]
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 64)
    github.add_release("ggml-org/llama.cpp", TAG, {n: tmp_path / n for n in names})
    common = ["--home", str(tmp_path / "home"), "--api-url", github.api_url, "--json"]
    s390x = tmp_path / "s390x.json"
    s390x.write_text(json.dumps({"os": "linux", "arch": "s390x", "glibc_version": "2.39"}))
    done = cli_process("plan", "--tag", TAG, "--host", str(s390x), "--explain", *common)
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["asset"] == f"llama-{TAG}-bin-ubuntu-s390x.tar.gz"
    riscv = tmp_path / "riscv.json"
    riscv.write_text(json.dumps({"os": "linux", "arch": "riscv64"}))
    refused = cli_process("plan", "--tag", TAG, "--host", str(riscv), *common)
    assert refused.returncode == 2
    assert "linux-s390x" in refused.stdout + refused.stderr and "Traceback" not in refused.stderr
