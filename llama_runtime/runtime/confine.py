"""How a build not yet accepted runs: an allow-listed environment, an empty home, nothing inherited.

A downloaded ``llama-server`` (from upstream, a fork or a mirror) runs before anything has
accepted it: ``--version`` and ``--list-devices`` (the device check) and the smoke model. Until
then it sees none of the user's secrets (``LLAMA_RUNTIME_GITHUB_TOKEN``, ``GITHUB_TOKEN``,
``HF_TOKEN``, cloud keys, ``*_API_KEY``, proxies with passwords, ``NETRC``) and none of their
files found through ``HOME`` (``~/.netrc``, ``~/.ssh``, ``~/.cache/huggingface``).

Invariants:

* The child's environment holds only :data:`PASSED_NAMES` and names starting with one of
  :data:`PASSED_PREFIXES` (compared in upper case: Windows names ignore case), plus
  :data:`SCRATCH_NAMES` pointing at a fresh empty directory.
* That directory is also its working directory, and it is removed afterwards.
* Its stdin is ``/dev/null`` and it inherits no other descriptor (``close_fds``).
* What is passed selects and finds devices, the way the server will later run; it is the
  user's own configuration, never a credential. The GPU drivers' shader caches stay the
  user's (:func:`shader_caches`): a build compiles its kernels once, not on every check,
  and the smoke model measures the speed the accepted server will have. Once a build is accepted, the managed server
  runs with the user's environment and arguments.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from llama_runtime.runtime.binary import ProcessResult, ProcessRunner, run_process

__all__ = [
    "PASSED_NAMES",
    "PASSED_PREFIXES",
    "SCRATCH_NAMES",
    "SHADER_CACHE_NAMES",
    "confined",
    "confined_env",
    "scratch_dir",
    "shader_caches",
]

#: Names passed as they are. ``PATH``: the loader and the GPU runtimes find their helpers by it.
#: Locale and time zone: what the binary prints. ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER``:
#: the CUDA runtime's device selection; ``GPU_DEVICE_ORDINAL``: ROCm's. ``LD_LIBRARY_PATH`` and
#: macOS's ``DYLD_*_LIBRARY_PATH``: where the user's driver and CUDA/ROCm libraries are found, so
#: the device check sees the devices the accepted server will. The Windows names a process needs
#: to start at all (``SYSTEMROOT``: Winsock; ``PATHEXT``, ``COMSPEC``, ``WINDIR``).
PASSED_NAMES: Final = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "GPU_DEVICE_ORDINAL",
        "LD_LIBRARY_PATH",
        "DYLD_LIBRARY_PATH",
        "DYLD_FALLBACK_LIBRARY_PATH",
        "SYSTEMROOT",
        "SYSTEMDRIVE",
        "WINDIR",
        "COMSPEC",
        "PATHEXT",
        "NUMBER_OF_PROCESSORS",
        "PROCESSOR_ARCHITECTURE",
        "OS",
    }
)
#: Prefixes of names passed. ``LC_``: locale. ``GGML_``: llama.cpp's own backend settings
#: (``GGML_VK_VISIBLE_DEVICES``, read by ``ggml_vk_instance_init`` in ``ggml-vulkan.cpp`` to
#: "emulate CUDA_VISIBLE_DEVICES for Vulkan"; ``GGML_VULKAN_DISABLE_F16``, ``GGML_SYCL_*``,
#: ``GGML_CUDA_*``, ``GGML_METAL_*``). ``HIP_``, ``ROCR_``, ``HSA_``: ROCm's device selection
#: (``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, ``HSA_OVERRIDE_GFX_VERSION``, without which
#: many Radeon cards list no device). ``VK_``: the Vulkan loader's (``VK_ICD_FILENAMES``,
#: ``VK_DRIVER_FILES``, ``VK_LAYER_PATH``). ``ONEAPI_``, ``ZE_``, ``SYCL_``: oneAPI's
#: (``ONEAPI_DEVICE_SELECTOR``, Level Zero's ``ZE_AFFINITY_MASK``, ``SYCL_CACHE_PERSISTENT``).
PASSED_PREFIXES: Final = ("LC_", "GGML_", "HIP_", "ROCR_", "HSA_", "VK_", "ONEAPI_", "ZE_", "SYCL_")
#: Names set to the empty scratch directory: the home, temporary files and per-user caches a
#: build may read or write land there and are removed with it.
SCRATCH_NAMES: Final = (
    "HOME",
    "USERPROFILE",
    "TMPDIR",
    "TEMP",
    "TMP",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)


#: The drivers' shader-cache settings, passed as they are when set.
SHADER_CACHE_NAMES: Final = frozenset(
    {
        "MESA_SHADER_CACHE_DIR",
        "MESA_SHADER_CACHE_MAX_SIZE",
        "MESA_SHADER_CACHE_DISABLE",
        "__GL_SHADER_DISK_CACHE_PATH",
        "__GL_SHADER_DISK_CACHE_SIZE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
        "CUDA_CACHE_DISABLE",
    }
)


def shader_caches(env: Mapping[str, str]) -> dict[str, str]:
    """Where the GPU drivers keep compiled shaders for the user of ``env``, named explicitly (pure).

    The empty home would otherwise hide them: Mesa (lavapipe, RADV, ANV) keeps
    ``$XDG_CACHE_HOME/mesa_shader_cache`` (else ``~/.cache``), NVIDIA's driver
    ``$XDG_CACHE_HOME/nvidia`` and CUDA ``~/.nv/ComputeCache``. Without them the
    software Vulkan device compiles every pipeline again (seconds to a minute).
    Only these directories are named; nothing else of the home is.
    """
    found = {name: value for name, value in env.items() if name.upper() in SHADER_CACHE_NAMES}
    home = env.get("HOME") or env.get("USERPROFILE")
    cache_root = env.get("XDG_CACHE_HOME") or (str(Path(home) / ".cache") if home else None)
    if cache_root:
        found.setdefault("MESA_SHADER_CACHE_DIR", cache_root)  # Mesa adds mesa_shader_cache itself
        found.setdefault("__GL_SHADER_DISK_CACHE_PATH", str(Path(cache_root) / "nvidia"))
    if home:
        found.setdefault("CUDA_CACHE_PATH", str(Path(home) / ".nv" / "ComputeCache"))
    return found


def passes(name: str) -> bool:
    """Whether the variable ``name`` reaches a build not yet accepted."""
    upper = name.upper()
    return upper in PASSED_NAMES or upper.startswith(PASSED_PREFIXES)


def confined_env(env: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """``env`` reduced to what a build not yet accepted may see, its home and temp at ``scratch`` (pure)."""
    kept = {name: value for name, value in env.items() if passes(name)}
    kept.update(shader_caches(env))
    kept.update(dict.fromkeys(SCRATCH_NAMES, str(scratch)))
    return kept


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh empty private directory (mode 0700) outside the home, removed on exit."""
    path = Path(tempfile.mkdtemp(prefix="llama-runtime-confined-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def confined(runner: ProcessRunner) -> ProcessRunner:
    """``runner`` as a build not yet accepted is run: the confined environment, in a scratch directory.

    :func:`~llama_runtime.runtime.binary.run_process` also starts the child in the scratch
    directory; another runner (a test's stand-in, which starts nothing) gets the environment.
    """

    def run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
        with scratch_dir() as scratch:
            safe = confined_env(os.environ if env is None else env, scratch)
            if runner is run_process:
                return run_process(argv, timeout, safe, cwd=scratch)
            return runner(argv, timeout, safe)

    return run
