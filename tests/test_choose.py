"""Asset choice: era listings x host profiles x backend requests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llama_runtime import BackendUnavailableError, UserInputError
from llama_runtime.errors import UnknownBackendError
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.release import Asset, Release

RELEASES = Path(__file__).parent / "data" / "releases"


def load(stem: str, incomplete: frozenset[str] = frozenset()) -> Release:
    data = json.loads((RELEASES / f"{stem}.json").read_text())
    assets = tuple(
        Asset(
            name=name,
            size=1000 + i,
            download_url=f"http://127.0.0.1/{name}",
            state="new" if name in incomplete else "uploaded",
        )
        for i, name in enumerate(data["assets"])
    )
    return Release(repo=data["repo"], tag=data["tag"], assets=assets)


def host(platform: str, **facts: object) -> HostFacts:
    os_name, arch = platform.split("-")
    base = HostFacts(os=os_name, arch=arch, metal=platform == "macos-arm64")
    return replace(base, **facts)  # type: ignore[arg-type]


X86 = frozenset({"sse4_2", "avx", "avx2", "fma"})
NONE_LINUX = host("linux-x64", cpu_features=X86)
VULKAN_LINUX = host("linux-x64", vulkan=True, cpu_features=X86)
CUDA122_WIN = host("windows-x64", cuda_driver_version="12.2", nvidia_driver="535.98", vulkan=True)
CUDA124_WIN = host("windows-x64", cuda_driver_version="12.4", nvidia_driver="551.61", vulkan=True)
CUDA130_WIN = host("windows-x64", cuda_driver_version="13.0", nvidia_driver="580.88", vulkan=True)
CUDA132_WIN = host("windows-x64", cuda_driver_version="13.2", nvidia_driver="590.10")
CUDA124_LINUX = host("linux-x64", cuda_driver_version="12.4", cpu_features=X86)
CUDA130_LINUX = host("linux-x64", cuda_driver_version="13.0", cpu_features=X86)
CUDA134_LINUX_ARM = host("linux-arm64", cuda_driver_version="13.4", vulkan=True)
CUDA134_WIN_ARM = host("windows-arm64", cuda_driver_version="13.4")
ROCM_LINUX = host("linux-x64", rocm=True, vulkan=True, rocm_gfx=("gfx1100",))
ROCM_WIN = host("windows-x64", rocm=True, rocm_gfx=("gfx1100",))
MAC_ARM = host("macos-arm64")
MAC_X64 = host("macos-x64")
WIN_ARM = host("windows-arm64")
WIN_PLAIN = host("windows-x64")

# (release, host, request, cuda pin, chosen asset, extra assets)
TABLE: list[tuple[str, HostFacts, str, str | None, str, tuple[str, ...]]] = [
    # Windows CUDA across every naming era, with the matching untagged cudart.
    ("b2500", CUDA122_WIN, "auto", None, "llama-b2500-bin-win-cublas-cu12.2.0-x64.zip",
     ("cudart-llama-bin-win-cu12.2.0-x64.zip",)),
    ("b2500", replace(CUDA122_WIN, cuda_driver_version="12.0"), "cuda", None,
     "llama-b2500-bin-win-cublas-cu11.7.1-x64.zip", ("cudart-llama-bin-win-cu11.7.1-x64.zip",)),
    ("b4000", CUDA124_WIN, "auto", None, "llama-b4000-bin-win-cuda-cu12.2.0-x64.zip",
     ("cudart-llama-bin-win-cu12.2.0-x64.zip",)),
    ("b5000", CUDA124_WIN, "auto", None, "llama-b5000-bin-win-cuda-cu12.4-x64.zip",
     ("cudart-llama-bin-win-cu12.4-x64.zip",)),
    ("b5400", CUDA124_WIN, "cuda", None, "llama-b5400-bin-win-cuda12.4-x64.zip",
     ("cudart-llama-bin-win-cuda12.4-x64.zip",)),
    ("b5500", CUDA124_WIN, "auto", None, "llama-b5500-bin-win-cuda-12.4-x64.zip",
     ("cudart-llama-bin-win-cuda-12.4-x64.zip",)),
    ("b5500", CUDA124_WIN, "cuda", "11", "llama-b5500-bin-win-cuda-11.7-x64.zip",
     ("cudart-llama-bin-win-cuda-11.7-x64.zip",)),
    ("b7902", CUDA130_WIN, "auto", None, "llama-b7902-bin-win-cuda-12.4-x64.zip",
     ("cudart-llama-bin-win-cuda-12.4-x64.zip",)),
    ("b7902", CUDA132_WIN, "auto", None, "llama-b7902-bin-win-cuda-13.1-x64.zip",
     ("cudart-llama-bin-win-cuda-13.1-x64.zip",)),
    ("b7902", WIN_PLAIN, "cuda", None, "llama-b7902-bin-win-cuda-13.1-x64.zip",
     ("cudart-llama-bin-win-cuda-13.1-x64.zip",)),
    ("b10356", CUDA134_WIN_ARM, "auto", None, "llama-b10356-bin-win-cuda-13.4-arm64.zip",
     ("cudart-llama-bin-win-cuda-13.4-arm64.zip",)),
    # A 12.2 driver never gets a 12.4 build: the highest line not above it, with its own cudart.
    ("b5000", CUDA122_WIN, "auto", None, "llama-b5000-bin-win-cuda-cu11.7-x64.zip",
     ("cudart-llama-bin-win-cu11.7-x64.zip",)),
    ("b4000", CUDA122_WIN, "auto", None, "llama-b4000-bin-win-cuda-cu12.2.0-x64.zip",
     ("cudart-llama-bin-win-cu12.2.0-x64.zip",)),
    ("b7902", replace(CUDA124_WIN, cuda_driver_version=" 12.4\n"), "auto", None,
     "llama-b7902-bin-win-cuda-12.4-x64.zip", ("cudart-llama-bin-win-cuda-12.4-x64.zip",)),
    # Nothing at or below a 12.2 driver: NVIDIA minor-version compatibility takes the closest 12.x,
    # for a GPU the build holds native code for (8.6: ggml's 86-real).
    ("b10015", replace(CUDA122_WIN, compute_capabilities=("8.6",)), "auto", None,
     "llama-b10015-bin-win-cuda-12.4-x64.zip", ("cudart-llama-bin-win-cuda-12.4-x64.zip",)),
    # A driver of an older major line never gets a newer major: auto moves on to Vulkan.
    ("b10015", replace(CUDA122_WIN, cuda_driver_version="11.8"), "auto", None,
     "llama-b10015-bin-win-vulkan-x64.zip", ()),
    # Linux CUDA (post-mirror) takes the tagged cudart.
    ("b11026", CUDA130_LINUX, "auto", None, "llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz",
     ("cudart-llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz",)),
    ("b11026", CUDA134_LINUX_ARM, "auto", None, "llama-b11026-bin-ubuntu-cuda-13.3-arm64.tar.gz",
     ("cudart-llama-b11026-bin-ubuntu-cuda-13.3-arm64.tar.gz",)),
    ("b11026", NONE_LINUX, "cuda", None, "llama-b11026-bin-ubuntu-cuda-13.3-x64.tar.gz",
     ("cudart-llama-b11026-bin-ubuntu-cuda-13.3-x64.tar.gz",)),
    ("b11026", NONE_LINUX, "nvidia", "12", "llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz",
     ("cudart-llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz",)),
    ("b11026", replace(CUDA124_LINUX, compute_capabilities=("8.9",)), "auto", None,
     "llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz", ("cudart-llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz",)),
    ("b11026", replace(CUDA124_LINUX, cuda_driver_version="11.8"), "auto", None,
     "llama-b11026-bin-ubuntu-x64.tar.gz", ()),
    # Linux without a GPU, Vulkan, ROCm, other explicit backends.
    ("b7000", NONE_LINUX, "auto", None, "llama-b7000-bin-ubuntu-x64.zip", ()),
    ("b7250", NONE_LINUX, "auto", None, "llama-b7250-bin-ubuntu-x64.tar.gz", ()),
    ("b7250", NONE_LINUX, "vulkan", None, "llama-b7250-bin-ubuntu-vulkan-x64.tar.gz", ()),
    ("b10015", VULKAN_LINUX, "auto", None, "llama-b10015-bin-ubuntu-vulkan-x64.tar.gz", ()),
    ("b10356", ROCM_LINUX, "auto", None, "llama-b10356-bin-ubuntu-rocm-7.14-x64.tar.gz", ()),
    ("b10015", NONE_LINUX, "sycl", None, "llama-b10015-bin-ubuntu-sycl-fp32-x64.tar.gz", ()),
    ("b10015", NONE_LINUX, "openvino", None, "llama-b10015-bin-ubuntu-openvino-2026.2.1-x64.tar.gz", ()),
    ("b10015", host("linux-s390x"), "auto", None, "llama-b10015-bin-ubuntu-s390x.tar.gz", ()),
    ("b10015", host("android-arm64"), "auto", None, "llama-b10015-bin-android-arm64.tar.gz", ()),
    ("b10356", host("linux-arm64", vulkan=True), "auto", None,
     "llama-b10356-bin-ubuntu-vulkan-arm64.tar.gz", ()),
    # Windows ROCm: a gfx build only for that GPU; the fat build otherwise.
    ("b4000", ROCM_WIN, "auto", None, "llama-b4000-bin-win-hip-x64-gfx1100.zip", ()),
    ("b4000", replace(ROCM_WIN, rocm_gfx=("gfx906",)), "auto", None,
     "llama-b4000-bin-win-noavx-x64.zip", ()),
    ("b7000", ROCM_WIN, "hip", None, "llama-b7000-bin-win-hip-radeon-x64.zip", ()),
    # ROCm outranks Vulkan when the host has both.
    ("b10356", replace(ROCM_WIN, vulkan=True), "auto", None, "llama-b10356-bin-win-rocm-7.14-x64.zip", ()),
    ("b4000", replace(ROCM_WIN, vulkan=True, rocm_gfx=("gfx1030",)), "auto", None,
     "llama-b4000-bin-win-hip-x64-gfx1030.zip", ()),
    # Old fixed-ISA Windows CPU builds need proof of the instruction set.
    ("b2500", WIN_PLAIN, "auto", None, "llama-b2500-bin-win-noavx-x64.zip", ()),
    ("b2500", replace(WIN_PLAIN, cpu_features=X86), "cpu", None, "llama-b2500-bin-win-avx2-x64.zip", ()),
    ("b5000", replace(WIN_PLAIN, cpu_features=X86 | {"avx512f"}), "cpu", None,
     "llama-b5000-bin-win-avx512-x64.zip", ()),
    ("b7000", WIN_PLAIN, "auto", None, "llama-b7000-bin-win-cpu-x64.zip", ()),
    # Windows ARM64 anomalies.
    ("b2500", WIN_ARM, "auto", None, "llama-b2500-bin-win-arm64-x64.zip", ()),
    ("b4000", WIN_ARM, "auto", None, "llama-b4000-bin-win-llvm-arm64.zip", ()),
    ("b5000", WIN_ARM, "opencl", None, "llama-b5000-bin-win-llvm-arm64-opencl-adreno.zip", ()),
    ("b7000", WIN_ARM, "auto", None, "llama-b7000-bin-win-cpu-arm64.zip", ()),
    # macOS.
    ("b8800", MAC_ARM, "auto", None, "llama-b8800-bin-macos-arm64.tar.gz", ()),
    ("b8800", MAC_ARM, "cpu", None, "llama-b8800-bin-macos-arm64-kleidiai.tar.gz", ()),
    ("b7250", MAC_ARM, "metal", None, "llama-b7250-bin-macos-arm64.tar.gz", ()),
    ("b7000", MAC_X64, "auto", None, "llama-b7000-bin-macos-x64.zip", ()),
    # Forks.
    ("janhq-b5000", CUDA124_LINUX, "auto", None, "llama-b5000-bin-linux-avx2-cuda-cu12.0-x64.tar.gz",
     ("cudart-llama-bin-linux-cu12.0-x64.tar.gz",)),
    ("janhq-b6500", CUDA130_LINUX, "auto", None,
     "llama-b6500-bin-linux-cuda-13-common_cpus-x64.tar.gz", ("cudart-llama-bin-linux-cu13.0-x64.tar.gz",)),
    ("janhq-b6500", NONE_LINUX, "auto", None, "llama-b6500-bin-linux-common_cpus-x64.tar.gz", ()),
    # Driver 580 reports CUDA 13.0 on Pascal too, but 13.x cannot target compute capability < 7.5.
    ("janhq-b6500", replace(CUDA130_LINUX, compute_capability="6.1"), "auto", None,
     "llama-b6500-bin-linux-cuda-12-common_cpus-x64.tar.gz", ("cudart-llama-bin-linux-cu12.0-x64.tar.gz",)),
    ("janhq-b6500", replace(CUDA130_LINUX, compute_capability="7.5"), "auto", None,
     "llama-b6500-bin-linux-cuda-13-common_cpus-x64.tar.gz", ("cudart-llama-bin-linux-cu13.0-x64.tar.gz",)),
    ("hybridgroup-b8000", CUDA124_LINUX, "auto", None, "llama-b8000-bin-ubuntu-cuda-x64.tar.gz", ()),
    ("hybridgroup-b8000", CUDA130_LINUX, "auto", None, "llama-b8000-bin-ubuntu-cuda-13-x64.tar.gz", ()),
    ("unslothai-b9596-mix-e6f2453", CUDA124_LINUX, "auto", None,
     "app-b9596-mix-e6f2453-linux-x64-cuda12-portable.tar.gz", ()),
    ("AtomicBot-ai-b10018-1.3.0", CUDA124_LINUX, "auto", None,
     "llama-turboquant-linux-x64-cuda-12.4.tar.gz", ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stem", "facts", "request_", "pin", "asset", "extras"),
    TABLE,
    ids=[f"{t[0]}-{t[1].platform}-{t[2]}-{t[4]}" for t in TABLE],
)
def test_release_host_and_request_choose_the_expected_asset(
    stem: str, facts: HostFacts, request_: str, pin: str | None, asset: str, extras: tuple[str, ...]
) -> None:
    choice = choose_asset(load(stem), facts, request_, pin)
    assert choice.asset.name == asset
    assert tuple(a.name for a in choice.extra_assets) == extras
    assert choice.backend == choice.info.backend
    assert asset in choice.reason
    assert [c.asset_name for c in choice.candidates if c.taken] == [asset]


def test_reason_says_what_was_requested_and_for_which_platform() -> None:
    choice = choose_asset(load("b7000"), NONE_LINUX, "vulkan")
    assert choice.reason == (
        "vulkan requested; llama-b7000-bin-ubuntu-vulkan-x64.zip is the vulkan build for linux-x64."
    )


def test_missing_backend_lists_what_the_platform_has() -> None:
    with pytest.raises(BackendUnavailableError) as caught:
        choose_asset(load("b7000"), host("linux-s390x"), "vulkan")
    assert caught.value.exit_code == 5
    assert caught.value.message == ("No vulkan build of llama.cpp b7000 for linux-s390x. Available here: cpu.")


def test_platform_without_any_build_says_nothing_is_available() -> None:
    with pytest.raises(BackendUnavailableError, match=r"linux-arm64\. Available here: nothing\."):
        choose_asset(load("b7000"), host("linux-arm64"), "cpu")


def test_cpu_on_apple_silicon_is_not_silently_replaced_by_metal() -> None:
    with pytest.raises(BackendUnavailableError, match="Available here: metal"):
        choose_asset(load("b7000"), MAC_ARM, "cpu")


def test_fork_release_is_named_by_its_repository_in_errors() -> None:
    with pytest.raises(BackendUnavailableError, match=r"of janhq/llama\.cpp b6500 for linux-x64"):
        choose_asset(load("janhq-b6500"), NONE_LINUX, "rocm")


def test_explicit_cuda_of_a_newer_major_line_is_refused_with_the_reason() -> None:
    with pytest.raises(BackendUnavailableError, match=r"newer than the driver supports \(11\.8\)"):
        choose_asset(load("b10015"), replace(CUDA122_WIN, cuda_driver_version="11.8"), "cuda")


def test_minor_version_compatibility_is_the_last_resort_and_explained() -> None:
    choice = choose_asset(load("b10015"), replace(CUDA122_WIN, compute_capabilities=("8.6",)), "auto")
    assert choice.info.backend_version == "12.4"
    assert "minor-version compatibility: CUDA 12.4 on a 12.2 driver" in choice.reason
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert "minor-version compatibility" in verdicts["llama-b10015-bin-win-cuda-12.4-x64.zip"]
    assert not verdicts["llama-b10015-bin-win-cuda-13.3-x64.zip"].startswith("usable")  # another major line
    # A line the driver fully supports always wins over a minor-compatible one.
    older = choose_asset(load("b5000"), CUDA122_WIN, "auto")
    assert older.info.backend_version == "11.7" and "minor-version" not in older.reason


@pytest.mark.parametrize("capability", [None, "7.5", "9.0"])
def test_minor_version_compatibility_needs_native_code_for_the_gpu(capability: str | None) -> None:
    # 12.4 holds PTX only for 7.5 and 9.0 (75-virtual, 90-virtual), which a 12.2 driver cannot JIT;
    # an unknown compute capability cannot be confirmed native either: auto takes Vulkan instead.
    facts = replace(CUDA122_WIN, compute_capabilities=(capability,) if capability else ())
    choice = choose_asset(load("b10015"), facts, "auto")
    assert choice.backend == "vulkan"
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert "CUDA 12.4 is newer than this 12.2 driver" in verdicts["llama-b10015-bin-win-cuda-12.4-x64.zip"]


def test_minor_version_compatibility_holds_for_13x_too() -> None:
    choice = choose_asset(load("b11026"), replace(CUDA130_LINUX, compute_capabilities=("8.9",)), "cuda", "13")
    assert choice.info.backend_version == "13.3" and "CUDA 13.3 on a 13.0 driver" in choice.reason


def test_pinned_cuda_line_that_the_release_lacks_is_refused() -> None:
    with pytest.raises(BackendUnavailableError, match=r"not the pinned 12\.4"):
        choose_asset(load("b11026"), NONE_LINUX, "cuda", "12.4")


def test_exact_cuda_pin_selects_that_line() -> None:
    choice = choose_asset(load("b7902"), CUDA132_WIN, "cuda", "12.4")
    assert choice.info.backend_version == "12.4"


def test_auto_skips_cuda_without_a_driver_and_says_so() -> None:
    choice = choose_asset(load("b7000"), WIN_PLAIN, "auto")
    assert choice.backend == "cpu"
    assert "cuda: no usable NVIDIA driver" in choice.reason


def test_an_asset_still_uploading_is_skipped_for_the_next_best() -> None:
    name = "llama-b7902-bin-win-cuda-13.1-x64.zip"
    choice = choose_asset(load("b7902", frozenset({name})), CUDA132_WIN, "auto")
    assert choice.asset.name == "llama-b7902-bin-win-cuda-12.4-x64.zip"
    skipped = {c.asset_name: c.why for c in choice.candidates}
    assert skipped[name].startswith("still uploading")


def test_incomplete_cudart_is_not_taken_as_a_companion() -> None:
    cudart = "cudart-llama-bin-win-cuda-12.4-x64.zip"
    choice = choose_asset(load("b7000", frozenset({cudart})), CUDA124_WIN, "cuda")
    assert choice.extra_assets == ()


def test_asset_naming_another_tag_is_never_mixed_in() -> None:
    release = load("b7000")
    stray = Asset("llama-b6999-bin-win-cuda-12.4-x64.zip", 1, "http://127.0.0.1/x")
    ours = [a for a in release.assets if "cuda-12.4-x64" not in a.name or a.name.startswith("cud")]
    mixed = Release(release.repo, release.tag, (*ours, stray))
    with pytest.raises(BackendUnavailableError, match="names tag b6999"):
        choose_asset(mixed, CUDA124_WIN, "cuda")


def test_fixed_isa_build_the_cpu_lacks_is_never_chosen() -> None:
    choice = choose_asset(load("janhq-b5000"), CUDA124_LINUX, "cuda")
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert "lacks" in verdicts["llama-b5000-bin-linux-avx512-cuda-cu12.0-x64.tar.gz"]


def test_candidates_explain_every_build_of_the_platform() -> None:
    release = load("b10015")
    choice = choose_asset(release, CUDA124_WIN, "auto")
    names = {c.asset_name for c in choice.candidates}
    assert names == {a.name for a in release.assets if a.name.startswith("llama-b10015-bin-win-")
                     and a.name.endswith("-x64.zip")}  # fmt: skip
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert "newer than the driver" in verdicts["llama-b10015-bin-win-cuda-13.3-x64.zip"]
    assert verdicts["llama-b10015-bin-win-vulkan-x64.zip"] == "not considered: another backend"


def test_unknown_backend_request_is_a_user_error() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        choose_asset(load("b7000"), NONE_LINUX, "cuda12")
    assert caught.value.exit_code == 2


def test_malformed_cuda_pin_is_a_user_error() -> None:
    with pytest.raises(UserInputError, match="malformed"):
        choose_asset(load("b7000"), CUDA124_WIN, "cuda", "twelve")


def _release(*names: str) -> Release:
    assets = tuple(Asset(name, 1, f"http://127.0.0.1/{name}") for name in names)
    return Release("ggml-org/llama.cpp", "b1", assets)


@pytest.mark.parametrize(
    ("names", "facts", "best"),
    [
        (("llama-b1-bin-ubuntu-cuda-13-x64.tar.gz", "llama-b1-bin-ubuntu-cuda-13.3-x64.tar.gz"),
         replace(CUDA130_LINUX, cuda_driver_version="13.4"), "llama-b1-bin-ubuntu-cuda-13.3-x64.tar.gz"),
        (("llama-b1-bin-ubuntu-cuda-12-x64.tar.gz", "llama-b1-bin-ubuntu-cuda-12.8-x64.tar.gz"),
         CUDA130_LINUX, "llama-b1-bin-ubuntu-cuda-12.8-x64.tar.gz"),
        (("llama-b1-bin-ubuntu-rocm-7.2-x64.tar.gz", "llama-b1-bin-ubuntu-rocm-7.14-x64.tar.gz"),
         ROCM_LINUX, "llama-b1-bin-ubuntu-rocm-7.14-x64.tar.gz"),
    ],
)  # fmt: skip
def test_higher_line_wins_even_when_the_lower_one_is_written_shorter(
    names: tuple[str, ...], facts: HostFacts, best: str
) -> None:
    for order in (names, names[::-1]):
        assert choose_asset(_release(*order), facts, "auto").asset.name == best


def test_explicit_cuda_13_on_a_pre_turing_gpu_is_refused_with_the_reason() -> None:
    pascal = replace(CUDA130_LINUX, compute_capability="6.1")
    with pytest.raises(BackendUnavailableError, match=r"compute capability 6\.1"):
        choose_asset(load("janhq-b6500"), pascal, "cuda", "13")


def test_unknown_compute_capability_does_not_block_cuda_13() -> None:
    choice = choose_asset(load("hybridgroup-b8000"), replace(CUDA130_LINUX, compute_capability=None), "auto")
    assert choice.info.backend_version == "13"


def test_metal_is_never_chosen_for_an_intel_mac() -> None:
    with pytest.raises(BackendUnavailableError, match=r"No metal build .* for macos-x64\. Available here: cpu\."):
        choose_asset(load("b7902"), MAC_X64, "metal")


def test_cudart_of_another_arch_or_line_is_never_taken() -> None:
    release = _release(
        "llama-b1-bin-win-cuda-13.4-arm64.zip",
        "cudart-llama-bin-win-cuda-13.4-x64.zip",
        "cudart-llama-bin-win-cuda-13.3-arm64.zip",
        "cudart-llama-bin-win-cuda-13-arm64.zip",
    )
    assert choose_asset(release, CUDA134_WIN_ARM, "cuda").extra_assets == ()


def test_auto_never_falls_to_a_lower_backend_while_the_preferred_build_is_uploading() -> None:
    from llama_runtime.errors import ReleaseIncompleteError

    uploading = frozenset({"llama-b7902-bin-win-cuda-12.4-x64.zip", "llama-b7902-bin-win-cuda-13.1-x64.zip"})
    with pytest.raises(ReleaseIncompleteError, match=r"cuda build of llama\.cpp b7902 .* still being uploaded") as err:
        choose_asset(load("b7902", uploading), CUDA130_WIN, "auto")  # Vulkan and CPU are complete
    assert err.value.exit_code == 7
    assert choose_asset(load("b7902"), CUDA130_WIN, "auto").backend == "cuda"
