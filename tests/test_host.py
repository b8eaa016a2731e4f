"""Host detection through fake command runners and file views (no GPU needed)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from llama_runtime import UserInputError
from llama_runtime.runtime.binary import CANNOT_EXECUTE, ProcessResult
from llama_runtime.updater.choice.host import PLATFORMS, host_for_platform
from llama_runtime.updater.choice.host_detect import cuda_from_driver, detect_host, run_probe


@dataclass
class FakeFiles:
    """A file view backed by dicts."""

    texts: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)

    def read_text(self, path: str) -> str | None:
        return self.texts.get(path)

    def list_dir(self, path: str) -> tuple[str, ...]:
        return self.dirs.get(path, ())

    def exists(self, path: str) -> bool:
        return path in self.texts or path in self.dirs

    def find_library(self, name: str) -> str | None:
        return self.libraries.get(name)


#: What the real runner answers for a command this machine does not have.
NOT_INSTALLED = ProcessResult(CANNOT_EXECUTE, "cannot execute: No such file or directory")


class FakeRunner:
    """Answers commands from a table; records what was asked."""

    def __init__(self, answers: Mapping[str, ProcessResult] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[tuple[str, ...]] = []
        self.timeouts: list[float] = []

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> ProcessResult:
        self.calls.append(tuple(argv))
        self.timeouts.append(timeout)
        return self.answers.get(" ".join(argv), NOT_INSTALLED)


QUERY = "nvidia-smi --query-gpu=index,uuid,driver_version,compute_cap,name --format=csv,noheader"
QUERY_OLD = "nvidia-smi --query-gpu=index,uuid,driver_version,name --format=csv,noheader"


def nvidia(driver: str, cuda: str, cap: str = "8.6", gpus: int = 1) -> dict[str, ProcessResult]:
    rows = "\n".join(f"{i}, GPU-{i:04d}, {driver}, {cap}, NVIDIA GeForce RTX 30{i}0" for i in range(gpus))
    banner = f"| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda}     |"
    return {QUERY: ProcessResult(0, rows + "\n"), "nvidia-smi": ProcessResult(0, banner)}


def linux(runner: FakeRunner, files: FakeFiles | None = None, **env: str) -> object:
    return detect_host(runner, env, system="Linux", machine="x86_64", files=files or FakeFiles())


@pytest.mark.parametrize(("driver", "cuda"), [("535.183.01", "12.2"), ("550.54.14", "12.4"), ("580.65.06", "13.0")])
def test_nvidia_driver_reports_the_banner_cuda_version(driver: str, cuda: str) -> None:
    host = detect_host(FakeRunner(nvidia(driver, cuda)), {}, system="Linux", machine="x86_64",
                       files=FakeFiles())  # fmt: skip
    assert host.cuda_driver_version == cuda
    assert host.nvidia_driver == driver
    assert host.compute_capability == "8.6"
    assert host.gpu_names == ("NVIDIA GeForce RTX 3000",)
    assert ("cuda_driver_version", "nvidia-smi banner") in host.sources


def test_host_without_gpu_tools_has_no_gpu_facts() -> None:
    host = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert (host.os, host.arch) == ("linux", "x64")
    assert host.cuda_driver_version is None and host.nvidia_driver is None
    assert not (host.vulkan or host.rocm or host.metal)


def test_every_probe_is_time_boxed() -> None:
    runner = FakeRunner(nvidia("550.54.14", "12.4"))
    detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert runner.calls and all(0 < t <= 10 for t in runner.timeouts)


def test_a_runner_that_raises_does_not_break_detection() -> None:
    def broken(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
        raise OSError("boom")

    host = detect_host(broken, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert host.cuda_driver_version is None


def test_a_probe_that_timed_out_is_an_absent_fact() -> None:
    answers = nvidia("550.54.14", "12.4")
    answers[QUERY] = ProcessResult(None, answers[QUERY].output)  # killed after the timeout, half printed
    answers[QUERY_OLD] = ProcessResult(None, "")
    host = detect_host(FakeRunner(answers), {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert (host.cuda_driver_version, host.nvidia_driver) == (None, None)


def test_the_real_probe_runner_reads_stdout_alone_and_answers_for_a_missing_command() -> None:
    script = "import sys; print('deviceName = GPU'); print('WARNING: loader', file=sys.stderr)"
    done = run_probe([sys.executable, "-c", script], 30.0)
    assert (done.returncode, done.output) == (0, "deviceName = GPU\n")
    missing = run_probe(["llama-runtime-no-such-probe"], 30.0)
    assert missing.returncode == CANNOT_EXECUTE and not missing.succeeded


@pytest.mark.parametrize("hidden", ["", "-1", " "])
def test_cuda_visible_devices_empty_or_minus_one_hides_nvidia(hidden: str) -> None:
    runner = FakeRunner(nvidia("550.54.14", "12.4"))
    host = detect_host(runner, {"CUDA_VISIBLE_DEVICES": hidden}, system="Linux",
                       machine="x86_64", files=FakeFiles())  # fmt: skip
    assert host.cuda_driver_version is None
    assert not any(c[0] == "nvidia-smi" for c in runner.calls)


def test_cuda_visible_devices_list_filters_gpus_by_index() -> None:
    runner = FakeRunner(nvidia("550.54.14", "12.4", gpus=3))
    host = detect_host(runner, {"CUDA_VISIBLE_DEVICES": "2"}, system="Linux",
                       machine="x86_64", files=FakeFiles())  # fmt: skip
    assert host.gpu_names == ("NVIDIA GeForce RTX 3020",)


def test_cuda_visible_devices_naming_no_present_gpu_hides_nvidia() -> None:
    runner = FakeRunner(nvidia("550.54.14", "12.4"))
    host = detect_host(runner, {"CUDA_VISIBLE_DEVICES": "GPU-9999"}, system="Linux",
                       machine="x86_64", files=FakeFiles())  # fmt: skip
    assert host.cuda_driver_version is None


def test_old_driver_without_compute_cap_field_still_reports_cuda() -> None:
    runner = FakeRunner({
        QUERY_OLD: ProcessResult(0, "0, GPU-0000, 470.82.01, Tesla T4\n"),
        "nvidia-smi": ProcessResult(0, "Driver Version: 470.82.01    CUDA Version: 11.4"),
    })  # fmt: skip
    host = detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert (host.cuda_driver_version, host.compute_capability) == ("11.4", None)
    assert host.gpu_names == ("Tesla T4",)


def test_missing_banner_falls_back_to_the_driver_table() -> None:
    answers = nvidia("550.54.14", "12.4")
    answers["nvidia-smi"] = ProcessResult(0, "no banner here")
    host = detect_host(FakeRunner(answers), {}, system="Linux", machine="x86_64",
                       files=FakeFiles())  # fmt: skip
    assert host.cuda_driver_version == cuda_from_driver("550.54.14") == "12.4"
    assert ("cuda_driver_version", "driver version table") in host.sources


@pytest.mark.parametrize(("driver", "cuda"), [("535.54.03", "12.2"), ("580.1", "13.0"), ("470", None)])
def test_driver_table_maps_major_to_cuda_line(driver: str, cuda: str | None) -> None:
    assert cuda_from_driver(driver) == cuda


VULKAN_FILES = FakeFiles(
    dirs={
        "/usr/share/vulkan/icd.d": ("radeon_icd.x86_64.json", "lvp_icd.x86_64.json"),
        "/dev/dri": ("card0", "renderD128"),
    },
    libraries={"vulkan": "libvulkan.so.1"},
)


def test_vulkan_loader_and_hardware_icd_mean_vulkan() -> None:
    host = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=VULKAN_FILES)
    assert host.vulkan and host.cuda_driver_version is None
    assert dict(host.sources)["vulkan"].endswith("/dev/dri/renderD128")


def test_vulkan_icd_files_without_a_gpu_device_node_are_not_vulkan() -> None:
    files = FakeFiles(dirs={"/usr/share/vulkan/icd.d": ("radeon_icd.x86_64.json",)},
                      libraries={"vulkan": "libvulkan.so.1"})  # fmt: skip
    host = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=files)
    assert not host.vulkan
    assert dict(host.sources)["vulkan"] == "ICD files but no GPU device node"


def test_only_a_software_vulkan_icd_is_not_vulkan() -> None:
    files = FakeFiles(dirs={"/etc/vulkan/icd.d": ("lvp_icd.x86_64.json",)},
                      libraries={"vulkan": "libvulkan.so.1"})  # fmt: skip
    assert not detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=files).vulkan


def test_software_vulkan_icd_shown_by_ggml_vk_visible_devices_is_vulkan() -> None:
    files = FakeFiles(dirs={"/usr/share/vulkan/icd.d": ("lvp_icd.x86_64.json",)},
                      libraries={"vulkan": "libvulkan.so.1"})  # fmt: skip
    env = {"GGML_VK_VISIBLE_DEVICES": "0"}
    host = detect_host(FakeRunner(), env, system="Linux", machine="x86_64", files=files)
    assert host.vulkan
    assert "shown by GGML_VK_VISIBLE_DEVICES" in dict(host.sources)["vulkan"]


def test_vulkaninfo_cpu_device_counts_only_when_ggml_shows_it() -> None:
    summary = "GPU0:\n\tdeviceType = PHYSICAL_DEVICE_TYPE_CPU\n\tdeviceName = llvmpipe\n"
    runner = FakeRunner({"vulkaninfo --summary": ProcessResult(0, summary)})
    hidden = detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    shown = detect_host(runner, {"GGML_VK_VISIBLE_DEVICES": "0"}, system="Linux", machine="x86_64", files=FakeFiles())
    assert not hidden.vulkan and shown.vulkan


def test_vulkan_icd_without_loader_is_not_vulkan() -> None:
    files = FakeFiles(dirs={"/usr/share/vulkan/icd.d": ("nvidia_icd.json",)})
    assert not detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=files).vulkan


def test_vk_driver_files_variable_replaces_the_default_icd_dirs() -> None:
    files = FakeFiles(texts={"/opt/icd/intel.json": "{}", "/dev/dxg": ""}, libraries={"vulkan": "libvulkan.so.1"})
    env = {"VK_DRIVER_FILES": "/opt/icd/intel.json"}
    assert detect_host(FakeRunner(), env, system="Linux", machine="x86_64", files=files).vulkan


def test_vulkaninfo_summary_decides_when_present() -> None:
    summary = (
        "GPU0:\n\tdeviceType = PHYSICAL_DEVICE_TYPE_CPU\n\tdeviceName = llvmpipe\n"
        "GPU1:\n\tdeviceType = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU\n\tdeviceName = Intel(R) UHD 770\n"
    )
    runner = FakeRunner({"vulkaninfo --summary": ProcessResult(0, summary)})
    host = detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert host.vulkan and host.gpu_names == ("Intel(R) UHD 770",)


def test_rocminfo_gfx_target_means_rocm() -> None:
    runner = FakeRunner({"rocminfo": ProcessResult(0, "  Name:  gfx1100\n  Name: gfx1100\n")})
    host = detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles())
    assert host.rocm and host.rocm_gfx == ("gfx1100",)


def test_hip_visible_devices_empty_hides_rocm() -> None:
    runner = FakeRunner({"rocminfo": ProcessResult(0, "gfx1100")})
    host = detect_host(runner, {"HIP_VISIBLE_DEVICES": ""}, system="Linux", machine="x86_64",
                       files=FakeFiles())  # fmt: skip
    assert not host.rocm


def test_amd_smi_gpu_rows_mean_rocm_when_rocminfo_is_missing() -> None:
    runner = FakeRunner({"amd-smi list": ProcessResult(0, "GPU: 0\n    BDF: 0000:03:00.0\n")})
    assert detect_host(runner, {}, system="Linux", machine="x86_64", files=FakeFiles()).rocm


def test_linux_cpu_flags_come_from_proc_cpuinfo() -> None:
    files = FakeFiles(texts={"/proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n"})
    host = detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=files)
    assert {"avx", "avx2"} <= host.cpu_features and "avx512f" not in host.cpu_features


def test_macos_arm64_has_metal_and_no_gpu_probes() -> None:
    runner = FakeRunner(nvidia("550.54.14", "12.4"))
    host = detect_host(runner, {}, system="Darwin", machine="arm64", files=FakeFiles())
    assert (host.os, host.arch, host.metal) == ("macos", "arm64", True)
    assert host.cuda_driver_version is None
    assert [call[0] for call in runner.calls] == ["sw_vers"]  # the OS version only: no GPU probe


def test_macos_python_under_rosetta_reports_arm64() -> None:
    runner = FakeRunner({"sysctl -n sysctl.proc_translated": ProcessResult(0, "1\n")})
    host = detect_host(runner, {}, system="Darwin", machine="x86_64", files=FakeFiles())
    assert (host.arch, host.metal) == ("arm64", True)


def test_windows_arm64_is_detected_even_from_emulated_x64_python() -> None:
    env = {"PROCESSOR_ARCHITECTURE": "AMD64", "PROCESSOR_ARCHITEW6432": "ARM64"}
    host = detect_host(FakeRunner(), env, system="Windows", machine="AMD64", files=FakeFiles())
    assert host.platform == "windows-arm64"


def test_windows_x64_with_cuda_driver() -> None:
    files = FakeFiles(libraries={"vulkan-1": r"C:\Windows\System32\vulkan-1.dll"})
    host = detect_host(FakeRunner(nvidia("566.03", "12.7")), {}, system="Windows",
                       machine="AMD64", files=files)  # fmt: skip
    assert host.platform == "windows-x64"
    assert (host.cuda_driver_version, host.vulkan) == ("12.7", True)


def test_to_json_is_serialisable_and_names_sources() -> None:
    host = detect_host(FakeRunner(nvidia("550.54.14", "12.4")), {}, system="Linux",
                       machine="aarch64", files=VULKAN_FILES)  # fmt: skip
    data = json.loads(json.dumps(host.to_json()))
    assert data["platform"] == "linux-arm64"
    assert data["cuda_driver_version"] == "12.4"
    assert data["sources"]["nvidia_driver"] == "nvidia-smi --query-gpu"


def test_android_is_recognised_from_its_environment() -> None:
    env = {"ANDROID_ROOT": "/system", "ANDROID_DATA": "/data"}
    host = detect_host(FakeRunner(), env, system="Linux", machine="aarch64", files=FakeFiles())
    assert host.platform == "android-arm64"


@pytest.mark.parametrize("platform", PLATFORMS)
def test_planning_platform_sets_os_and_arch_only(platform: str) -> None:
    host = host_for_platform(platform, None)
    assert host.platform == platform
    assert host.cuda_driver_version is None and not host.vulkan and not host.rocm
    assert host.metal == (platform == "macos-arm64")


def test_planning_with_cuda_version_assumes_that_driver() -> None:
    host = host_for_platform(" Windows-X64 ", "12.4")
    assert (host.platform, host.cuda_driver_version) == ("windows-x64", "12.4")


@pytest.mark.parametrize("bad", ["linux", "win-x64", "linux-x86_64", "", "freebsd-x64"])
def test_unknown_planning_platform_lists_valid_ones(bad: str) -> None:
    with pytest.raises(UserInputError) as caught:
        host_for_platform(bad, None)
    assert "windows-x64" in caught.value.message and "linux-arm64" in caught.value.message


@pytest.mark.parametrize(("platform", "cuda"), [("linux-x64", "twelve"), ("macos-arm64", "12.4")])
def test_bad_cuda_version_for_planning_is_refused(platform: str, cuda: str) -> None:
    with pytest.raises(UserInputError):
        host_for_platform(platform, cuda)


def test_windows_cpu_features_come_from_is_processor_feature_present() -> None:
    present = {37, 38, 39, 40}  # SSE4.1, SSE4.2, AVX, AVX2; no AVX-512F (41)
    asked: list[int] = []

    def feature(pf: int) -> bool:
        asked.append(pf)
        return pf in present

    host = detect_host(
        FakeRunner(), {}, system="Windows", machine="AMD64", files=FakeFiles(), processor_feature=feature
    )
    assert {"avx", "avx2", "sse4_2"} <= host.cpu_features and "avx512f" not in host.cpu_features
    assert 41 in asked
    sources = host.to_json()["sources"]
    assert isinstance(sources, dict) and sources["cpu_features"] == "IsProcessorFeaturePresent"


def test_windows_cpu_probe_that_fails_is_an_absent_fact() -> None:
    def broken(pf: int) -> bool:
        raise OSError("no kernel32")

    host = detect_host(FakeRunner(), {}, system="Windows", machine="AMD64", files=FakeFiles(), processor_feature=broken)
    assert host.cpu_features == frozenset()


def test_planning_an_x64_machine_without_facts_assumes_avx2_and_says_so() -> None:
    host = host_for_platform("windows-x64", None)
    assert "avx2" in host.cpu_features and "avx512f" not in host.cpu_features
    assert "assumed AVX2" in host.to_json()["sources"]["cpu_features"]  # type: ignore[index]
    assert host_for_platform("linux-arm64", None).cpu_features == frozenset()
