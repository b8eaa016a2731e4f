"""What asset names cannot say: the facts table, host files and the facts each host probe reads.

Cases are built from the facts (upstream's release workflow, ROCm's families, NVIDIA's driver
floors), one group per finding of the issue; each names the fact that decides it."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from llama_runtime import BackendUnavailableError, UserInputError
from llama_runtime.types import ProcessResult
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.facts import FACTS, GFX_FAMILIES
from llama_runtime.updater.choice.host import HostFacts, host_from_json, load_host_file
from llama_runtime.updater.choice.host_detect import detect_host
from llama_runtime.updater.release.release import Asset, Release
from tests.fakegithub import FakeGitHub
from tests.helpers import cli_process
from tests.test_host import FakeFiles, FakeRunner

UPSTREAM = "ggml-org/llama.cpp"
FORK = "unslothai/llama.cpp"


def release(repo: str, tag: str, *names: str, published_at: str | None = None) -> Release:
    assets = tuple(Asset(name=n, size=1000, download_url=f"http://127.0.0.1/{n}") for n in names)
    return Release(repo=repo, tag=tag, assets=assets, published_at=published_at)


def host(platform: str, **facts: object) -> HostFacts:
    os_name, arch = platform.split("-")
    return replace(HostFacts(os=os_name, arch=arch, metal=platform == "macos-arm64"), **facts)  # type: ignore[arg-type]


X86 = frozenset({"avx", "avx2", "fma"})

# -- CUDA toolkit minor behind a coarse name -------------------------------------------------------

FORK_CUDA = release(
    FORK,
    "b9596-mix-e6f2453",
    "app-b9596-mix-e6f2453-linux-x64-cuda12-portable.tar.gz",
    "app-b9596-mix-e6f2453-linux-x64-cpu.tar.gz",
)


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("12.2", "app-b9596-mix-e6f2453-linux-x64-cpu.tar.gz"),  # r535 cannot load 12.8's compressed kernels
        ("12.3", "app-b9596-mix-e6f2453-linux-x64-cpu.tar.gz"),
        ("12.4", "app-b9596-mix-e6f2453-linux-x64-cuda12-portable.tar.gz"),  # r550 can
        ("13.0", "app-b9596-mix-e6f2453-linux-x64-cuda12-portable.tar.gz"),
    ],
)
def test_fork_cuda12_bundle_built_with_12_8_needs_a_12_4_driver(driver: str, expected: str) -> None:
    chosen = choose_asset(FORK_CUDA, host("linux-x64", cuda_driver_version=driver, cpu_features=X86), "auto")
    assert chosen.asset.name == expected


def test_explicit_cuda_on_a_12_2_driver_names_the_compressed_kernels() -> None:
    with pytest.raises(BackendUnavailableError, match=r"CUDA 12\.8 .*below CUDA 12\.4"):
        choose_asset(FORK_CUDA, host("linux-x64", cuda_driver_version="12.2", cpu_features=X86), "cuda")


def test_upstream_cuda_12_4_build_stays_usable_on_a_12_4_driver() -> None:
    rel = release(UPSTREAM, "b9000", "llama-b9000-bin-win-cuda-12.4-x64.zip", "llama-b9000-bin-win-cpu-x64.zip")
    chosen = choose_asset(rel, host("windows-x64", cuda_driver_version="12.4"), "auto")
    assert chosen.asset.name == "llama-b9000-bin-win-cuda-12.4-x64.zip"


# -- ROCm: family bundles, upstream's target list, the runtime major -----------------------------

FAMILY = release(
    FORK,
    "b9781-mix-1f1aaa4",
    "app-b9781-mix-1f1aaa4-linux-x64-rocm-gfx110X.tar.gz",
    "app-b9781-mix-1f1aaa4-linux-x64-rocm-gfx103X.tar.gz",
    "app-b9781-mix-1f1aaa4-linux-x64-rocm-gfx120X.tar.gz",
    "app-b9781-mix-1f1aaa4-linux-x64-cpu.tar.gz",
)


@pytest.mark.parametrize(
    ("gfx", "bundle"),
    [
        ("gfx1100", "gfx110X"),
        ("gfx1103", "gfx110X"),
        ("gfx1031", "gfx103X"),
        ("gfx1201", "gfx120X"),
        ("gfx1104", None),  # not in gfx110X although it shares the prefix
        ("gfx1033", None),
        ("gfx1035", None),
        ("gfx1202", None),
    ],
)
def test_rocm_family_bundle_holds_only_its_members(gfx: str, bundle: str | None) -> None:
    chosen = choose_asset(FAMILY, host("linux-x64", rocm=True, rocm_gfx=(gfx,), cpu_features=X86), "auto")
    if bundle is None:
        assert chosen.backend == "cpu"
    else:
        assert chosen.asset.name == f"app-b9781-mix-1f1aaa4-linux-x64-rocm-{bundle}.tar.gz"


UPSTREAM_ROCM = release(
    UPSTREAM, "b9900", "llama-b9900-bin-ubuntu-rocm-7.2-x64.tar.gz", "llama-b9900-bin-ubuntu-vulkan-x64.tar.gz"
)


@pytest.mark.parametrize(
    ("gfx", "runtime", "backend"),
    [
        ("gfx1100", "7.2.1", "rocm"),
        ("gfx1010", "7.2.1", "vulkan"),  # not in the build's GPU_TARGETS
        ("gfx1035", "7.2.1", "vulkan"),
        ("gfx1100", "6.4.1", "vulkan"),  # a ROCm 6 host cannot load a ROCm 7 build
        ("gfx1100", None, "rocm"),  # runtime unknown: the install's own device check decides
    ],
)
def test_upstream_rocm_build_needs_its_gfx_target_and_runtime_major(
    gfx: str, runtime: str | None, backend: str
) -> None:
    h = host("linux-x64", rocm=True, rocm_gfx=(gfx,), rocm_runtime_version=runtime, vulkan=True, cpu_features=X86)
    assert choose_asset(UPSTREAM_ROCM, h, "auto").backend == backend


# -- macOS minimum version ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "published", "macos", "ok"),
    [
        ("b9427", "2026-05-28T10:00:00Z", "15.4", True),  # before the macos-26 runner
        ("b9428", "2026-05-30T10:00:00Z", "15.4", False),  # llama.cpp #23878: minos 26.0
        ("b9800", "2026-07-20T10:00:00Z", "14.6", False),
        ("b9800", "2026-07-20T10:00:00Z", "26.1", True),
        ("b10300", "2026-08-05T10:00:00Z", "15.4", True),  # after #26375 pinned the target again
        ("b9800", "2026-07-20T10:00:00Z", None, True),  # unknown: the Mach-O check decides on the Mac
    ],
)
def test_macos_arm64_builds_of_the_macos26_era_need_macos_26(
    tag: str, published: str, macos: str | None, ok: bool
) -> None:
    rel = release(UPSTREAM, tag, f"llama-{tag}-bin-macos-arm64.tar.gz", published_at=published)
    h = host("macos-arm64", macos_version=macos)
    if ok:
        assert choose_asset(rel, h, "auto").backend == "metal"
    else:
        with pytest.raises(BackendUnavailableError, match=r"needs macOS 26\.0"):
            choose_asset(rel, h, "auto")


def test_macos_x64_build_needs_13_3() -> None:
    rel = release(UPSTREAM, "b9000", "llama-b9000-bin-macos-x64.tar.gz")
    with pytest.raises(BackendUnavailableError, match=r"macOS 13\.3"):
        choose_asset(rel, host("macos-x64", macos_version="12.7"), "auto")
    assert choose_asset(rel, host("macos-x64", macos_version="13.3"), "auto").backend == "cpu"


# -- Vulkan API, SYCL, glibc ----------------------------------------------------------------------

VULKAN_CPU = release(UPSTREAM, "b9000", "llama-b9000-bin-ubuntu-vulkan-x64.tar.gz", "llama-b9000-bin-ubuntu-x64.tar.gz")


@pytest.mark.parametrize(("api", "backend"), [("1.1.130", "cpu"), ("1.2.0", "vulkan"), ("1.3.280", "vulkan")])
def test_a_vulkan_1_1_device_is_not_a_vulkan_host(api: str, backend: str) -> None:
    h = host("linux-x64", vulkan=True, vulkan_api_version=api, cpu_features=X86)
    assert choose_asset(VULKAN_CPU, h, "auto").backend == backend


SYCL = release(
    UPSTREAM,
    "b8000",
    "llama-b8000-bin-ubuntu-sycl-fp32-x64.tar.gz",
    "llama-b8000-bin-ubuntu-sycl-fp16-x64.tar.gz",
    "llama-b8000-bin-ubuntu-vulkan-x64.tar.gz",
    "llama-b8000-bin-ubuntu-x64.tar.gz",
)


def test_intel_arc_with_level_zero_gets_the_sycl_fp16_build() -> None:
    h = host("linux-x64", sycl=True, vulkan=True, cpu_features=X86)
    assert choose_asset(SYCL, h, "auto").asset.name == "llama-b8000-bin-ubuntu-sycl-fp16-x64.tar.gz"
    without = host("linux-x64", vulkan=True, cpu_features=X86)
    assert choose_asset(SYCL, without, "auto").backend == "vulkan"


@pytest.mark.parametrize(("glibc", "ok"), [("2.31", False), ("2.35", True), ("2.39", True), (None, True)])
def test_upstream_linux_x64_builds_need_the_glibc_of_ubuntu_22_04(glibc: str | None, ok: bool) -> None:
    rel = release(UPSTREAM, "b9000", "llama-b9000-bin-ubuntu-x64.tar.gz")
    h = host("linux-x64", glibc_version=glibc, cpu_features=X86)
    if ok:
        assert choose_asset(rel, h, "auto").backend == "cpu"
    else:
        with pytest.raises(BackendUnavailableError, match=r"glibc 2\.35"):
            choose_asset(rel, h, "auto")


def test_arm64_builds_need_the_glibc_of_ubuntu_24_04() -> None:
    rel = release(UPSTREAM, "b9000", "llama-b9000-bin-ubuntu-arm64.tar.gz")
    with pytest.raises(BackendUnavailableError, match=r"glibc 2\.39"):
        choose_asset(rel, host("linux-arm64", glibc_version="2.36"), "auto")


ROCM_714 = release(
    UPSTREAM, "b10665", "llama-b10665-bin-ubuntu-rocm-7.14-x64.tar.gz", "llama-b10665-bin-ubuntu-vulkan-x64.tar.gz"
)
ROCM_10 = release(
    UPSTREAM, "b11541", "llama-b11541-bin-ubuntu-rocm-10.0-x64.tar.gz", "llama-b11541-bin-ubuntu-vulkan-x64.tar.gz"
)


@pytest.mark.parametrize(("gfx", "backend"), [("gfx1152", "rocm"), ("gfx950", "rocm"), ("gfx906", "vulkan")])
def test_upstream_rocm_7_14_build_holds_only_its_gpu_targets(gfx: str, backend: str) -> None:
    h = host("linux-x64", rocm=True, rocm_gfx=(gfx,), vulkan=True, cpu_features=X86)
    assert choose_asset(ROCM_714, h, "auto").backend == backend


@pytest.mark.parametrize("gfx", ["gfx1100", "gfx906", "gfx803"])
def test_upstream_rocm_10_0_targets_are_unknown_so_the_run_decides(gfx: str) -> None:
    h = host("linux-x64", rocm=True, rocm_gfx=(gfx,), vulkan=True, cpu_features=X86, glibc_version="2.31")
    chosen = choose_asset(ROCM_10, h, "auto")
    assert chosen.backend == "rocm"  # no refusal on a guess: neither a target list nor a glibc floor is known
    assert "unknown: decided by running" in chosen.reason


def test_linux_cuda_builds_have_no_guessed_glibc_floor() -> None:
    rel = release(UPSTREAM, "b11541", "llama-b11541-bin-ubuntu-cuda-13.4-arm64.tar.gz")
    h = host("linux-arm64", cuda_driver_version="13.4", compute_capabilities=("12.1",), glibc_version="2.35")
    assert choose_asset(rel, h, "auto").backend == "cuda"


@pytest.mark.parametrize(("tag", "backend"), [("b11000", "cuda"), ("b7000", "vulkan")])
def test_minor_version_compatibility_needs_a_build_whose_architectures_are_known(tag: str, backend: str) -> None:
    # ggml's defaults are read for b7676 onwards; an older build's architecture list is unknown.
    rel = release(UPSTREAM, tag, f"llama-{tag}-bin-win-cuda-12.4-x64.zip", f"llama-{tag}-bin-win-vulkan-x64.zip")
    h = host(
        "windows-x64", cuda_driver_version="12.2", nvidia_driver="535.98", compute_capabilities=("8.6",), vulkan=True
    )
    assert choose_asset(rel, h, "auto").backend == backend


# -- right answers that must stay right -------------------------------------------------------------


def test_a_cudart_archive_is_never_a_runtime() -> None:
    rel = release(UPSTREAM, "b9000", "cudart-llama-bin-win-cuda-12.4-x64.zip", "llama-b9000-bin-win-cpu-x64.zip")
    assert choose_asset(rel, host("windows-x64", cuda_driver_version="12.4"), "auto").backend == "cpu"


def test_blackwell_on_a_13_1_driver_runs_the_12_4_build() -> None:
    rel = release(UPSTREAM, "b9000", "llama-b9000-bin-win-cuda-12.4-x64.zip", "llama-b9000-bin-win-cuda-13.3-x64.zip")
    h = host("windows-x64", cuda_driver_version="13.1", compute_capability="12.0", compute_capabilities=("12.0",))
    assert choose_asset(rel, h, "auto").asset.name == "llama-b9000-bin-win-cuda-12.4-x64.zip"


def test_every_fact_row_names_its_source() -> None:
    assert len(FACTS) >= 8
    for row in FACTS:
        assert row.builds and row.needs and len(row.source) > 10
    assert all(len(members) >= 2 for members in GFX_FAMILIES.values())


# -- host probes for the new facts ----------------------------------------------------------------


def test_doctor_facts_are_read_from_their_probes() -> None:
    runner = FakeRunner(
        {
            "getconf GNU_LIBC_VERSION": ProcessResult(0, "glibc 2.36\n"),
            "vulkaninfo --summary": ProcessResult(
                0, "deviceType = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\ndeviceName = X\napiVersion = 1.3.280\n"
            ),
            "sycl-ls": ProcessResult(0, "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) A770\n"),
        }
    )
    files = FakeFiles(texts={"/opt/rocm/.info/version": "6.4.1-120\n"})
    h = detect_host(runner, {}, system="Linux", machine="x86_64", files=files)
    assert (h.glibc_version, h.vulkan_api_version, h.sycl, h.rocm_runtime_version) == ("2.36", "1.3.280", True, "6.4.1")
    assert runner.calls.count(("vulkaninfo", "--summary")) == 1  # asked once per pass
    sources = h.to_json()["sources"]
    assert isinstance(sources, dict) and sources["glibc_version"] == "getconf"


def test_old_vulkaninfo_api_format_is_read() -> None:
    runner = FakeRunner(
        {
            "vulkaninfo --summary": ProcessResult(
                0, "deviceType = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU\napiVersion = 4198400 (1.1.0)\n"
            )
        }
    )
    h = detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert h.vulkan_api_version == "1.1.0"


def test_macos_version_comes_from_sw_vers() -> None:
    runner = FakeRunner({"sw_vers -productVersion": ProcessResult(0, "15.4.1\n")})
    assert detect_host(runner, {}, system="Darwin", machine="arm64", files=FakeFiles()).macos_version == "15.4.1"


# -- host files ----------------------------------------------------------------------------------


def test_host_file_round_trips_every_fact() -> None:
    h = host(
        "linux-x64", cuda_driver_version="12.4", compute_capability="8.6", compute_capabilities=("8.6", "8.9"),
        rocm=True, rocm_gfx=("gfx1100",), rocm_runtime_version="7.2.1", vulkan=True, vulkan_api_version="1.3.1",
        sycl=True, glibc_version="2.35", cpu_features=X86, gpu_names=("RTX 3090",),
    )  # fmt: skip
    again = host_from_json(json.loads(json.dumps(h.to_json())))
    assert replace(again, sources=()) == replace(h, sources=())


def test_missing_keys_are_unknown_and_unknown_keys_ignored() -> None:
    h = host_from_json({"os": "windows", "arch": "x64", "from_the_future": 1})
    assert h.cuda_driver_version is None and not h.vulkan and h.glibc_version is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"os": "plan9", "arch": "x64"}, "platform"),
        ({"os": "linux", "arch": "x64", "vulkan": "yes"}, "`vulkan` must be true or false"),
        ({"os": "linux", "arch": "x64", "rocm_gfx": "gfx1100"}, "`rocm_gfx` must be a list"),
        ([1, 2], "no host object"),
        ({"cuda_driver_version": "12.4"}, "needs `os` and `arch`"),
    ],
)
def test_bad_host_file_is_exit_2_saying_what_is_valid(tmp_path: Path, payload: object, message: str) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(UserInputError, match=message) as caught:
        load_host_file(path)
    assert caught.value.exit_code == 2


def test_a_fifo_as_host_file_is_exit_2_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "host.fifo"
    os.mkfifo(fifo)
    with pytest.raises(UserInputError, match="not a regular file"):
        load_host_file(fifo)


def test_missing_host_file_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="Cannot read the host file"):
        load_host_file(tmp_path / "nope.json")


def test_plan_host_reproduces_this_machines_choice_from_its_doctor_json(
    tmp_path: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["llama-b7000-bin-ubuntu-x64.tar.gz", "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz",
             "llama-b7000-bin-win-cpu-x64.zip", "llama-b7000-bin-win-cuda-12.4-x64.zip",
             "cudart-llama-bin-win-cuda-12.4-x64.zip", "llama-b7000-bin-macos-arm64.tar.gz",
             "llama-b7000-bin-ubuntu-rocm-7.2-x64.tar.gz"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 64)
    github.add_release(UPSTREAM, "b7000", {n: tmp_path / n for n in names})
    common = ["--home", str(tmp_path / "home"), "--api-url", github.api_url, "--json"]
    doctor = cli_process("doctor", *common)
    host_file = tmp_path / "this-host.json"
    host_file.write_text(json.dumps(json.loads(doctor.stdout)["host"]))
    here = cli_process("plan", "--tag", "b7000", *common)
    there = cli_process("plan", "--tag", "b7000", "--host", str(host_file), *common)
    assert here.returncode == there.returncode == 0, (here.stdout, there.stdout)
    assert json.loads(there.stdout)["asset"] == json.loads(here.stdout)["asset"]

    def plan_for(facts: dict[str, object]) -> dict[str, object]:
        path = tmp_path / "other.json"
        path.write_text(json.dumps({"host": facts}))  # a whole doctor --json works too
        done = cli_process("plan", "--tag", "b7000", "--host", str(path), *common)
        assert done.returncode == 0, done.stdout
        return json.loads(done.stdout)

    windows = plan_for({"os": "windows", "arch": "x64", "cuda_driver_version": "12.6", "compute_capability": "8.6"})
    assert windows["asset"] == "llama-b7000-bin-win-cuda-12.4-x64.zip"
    assert windows["extra_assets"] == ["cudart-llama-bin-win-cuda-12.4-x64.zip"]
    mac = plan_for({"os": "macos", "arch": "arm64", "metal": True, "macos_version": "15.4"})
    assert mac["asset"] == "llama-b7000-bin-macos-arm64.tar.gz"
    rocm = plan_for({"os": "linux", "arch": "x64", "rocm": True, "rocm_gfx": ["gfx1100"],
                     "rocm_runtime_version": "7.2.1", "glibc_version": "2.39"})  # fmt: skip
    assert rocm["asset"] == "llama-b7000-bin-ubuntu-rocm-7.2-x64.tar.gz"
    old_rocm = plan_for({"os": "linux", "arch": "x64", "rocm": True, "rocm_gfx": ["gfx1010"], "vulkan": True})
    assert old_rocm["asset"] == "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz"
    both = cli_process("plan", "--host", str(host_file), "--platform", "windows-x64", *common)
    assert both.returncode == 2
