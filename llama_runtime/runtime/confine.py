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
  user's own configuration, never a credential. The GPU drivers' shader caches are the
  sandbox's own (:func:`shader_caches`), never the user's. Once a build is accepted, the
  managed server runs with the user's environment and arguments.
* The environment is the first layer only: the run itself happens in the host's sandbox
  (:mod:`~llama_runtime.runtime.sandbox`), which hides the files and processes the
  environment filter cannot.
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
from llama_runtime.runtime.sandbox import Confinement, Sandbox

__all__ = [
    "PASSED_NAMES",
    "PASSED_PREFIXES",
    "SCRATCH_NAMES",
    "SHADER_CACHE_NAMES",
    "confined",
    "confined_env",
    "library_dirs",
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


#: The drivers' shader-cache settings. A build not yet accepted never gets the user's own caches
#: (a hostile one could poison what the accepted server later loads): they point at the sandbox's
#: cache, kept apart for such runs, or at the scratch directory.
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


def shader_caches(cache: Path) -> dict[str, str]:
    """The drivers' shader caches, all under ``cache`` (pure).

    Mesa (lavapipe, RADV, ANV) adds ``mesa_shader_cache`` itself, NVIDIA's driver and CUDA are
    given their own folders. Without a kept cache the software Vulkan device compiles every
    pipeline again on every check (seconds to a minute).
    """
    return {
        "MESA_SHADER_CACHE_DIR": str(cache),
        "__GL_SHADER_DISK_CACHE_PATH": str(cache / "nvidia"),
        "CUDA_CACHE_PATH": str(cache / "cuda"),
    }


def passes(name: str) -> bool:
    """Whether the variable ``name`` reaches a build not yet accepted."""
    upper = name.upper()
    return upper in PASSED_NAMES or upper.startswith(PASSED_PREFIXES)


def confined_env(env: Mapping[str, str], scratch: Path, shader_cache: Path | None = None) -> dict[str, str]:
    """``env`` reduced to what a build not yet accepted may see, its home and temp at ``scratch`` (pure).

    The drivers' shader caches are ``shader_cache`` (the sandbox's own), else inside ``scratch``.
    """
    kept = {name: value for name, value in env.items() if passes(name)}
    kept.update(shader_caches(shader_cache or scratch / ".cache"))
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


def library_dirs(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The absolute folders of ``env``'s ``LD_LIBRARY_PATH``: the user's driver and toolkit libraries."""
    value = env.get("LD_LIBRARY_PATH", "")
    return tuple(Path(p) for p in value.split(os.pathsep) if p and os.path.isabs(p))


def confined(runner: ProcessRunner, sandbox: Sandbox, readable: Sequence[Path] = ()) -> ProcessRunner:
    """``runner`` as a build not yet accepted is run: in ``sandbox``, the confined environment, a scratch directory.

    ``readable`` are the paths the run may read besides the system (the staged build). With
    :func:`~llama_runtime.runtime.binary.run_process` the command runs in the sandbox; another
    runner (a test's stand-in, which starts nothing) gets the environment alone.
    """

    def run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
        given = os.environ if env is None else env
        with scratch_dir() as scratch:
            safe = confined_env(given, scratch, sandbox.shader_cache)
            if runner is not run_process:
                return runner(argv, timeout, safe)
            rules = Confinement(
                scratch=scratch,
                readable=(*readable, *library_dirs(given)),
                shader_cache=sandbox.shader_cache,
            )
            return sandbox.run(argv, timeout, safe, rules)

    return run
