"""The grammar of llama.cpp release asset names, upstream and forks (pure).

:func:`parse_asset_name` turns a file name into what it holds (OS, arch,
backend, backend version, variant, archive type) or ``None`` when the file is
not a runtime we know how to install (web UI, xcframework, source tarball,
an unknown scheme). Unknown is never an exception: releases gain new assets
all the time, and an unknown name must simply not be a candidate.

Names are matched whole and anchored (``^llama-<tag>-bin-``, ``^cudart-``), never
by substring: ``cudart-llama-bin-win-cuda-12.4-x64.zip`` contains
``bin-win-cuda-12.4-x64`` but is only the CUDA runtime companion. Version
numbers (CUDA, ROCm, OpenVINO) are read with regexes, never listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from llama_runtime.updater.logs import get_logger

OS = Literal["linux", "windows", "macos", "android"]
Arch = Literal["x64", "arm64", "s390x"]
Archive = Literal["zip", "tar.gz"]

_log = get_logger(__name__)

_EXTENSIONS: Final[tuple[tuple[str, Archive], ...]] = ((".tar.gz", "tar.gz"), (".zip", "zip"))

_OS_TOKENS: Final[dict[str, OS]] = {
    "win": "windows",
    "windows": "windows",
    "ubuntu": "linux",
    "linux": "linux",
    "macos": "macos",
    "android": "android",
}
_ARCH_TOKENS: Final[dict[str, Arch]] = {
    "x64": "x64",
    "arm64": "arm64",
    "aarch64": "arm64",
    "s390x": "s390x",
}
# openEuler/CANN names spell x86-64 "x86". Elsewhere "x86" would mean a 32-bit
# build, so it is only accepted inside the openEuler shape.
_OPENEULER_ARCH: Final[dict[str, Arch]] = {"x86": "x64", "aarch64": "arm64"}

# Tokens naming a backend on their own; a version may be glued on ("cuda12.4",
# "cublas", "cu12.2.0") or follow as the next token ("cuda-12.4", "rocm-7.14").
_BACKEND_WORD: Final = re.compile(
    r"^(?P<word>cublas|cuda|cu|hip|rocm|vulkan|kompute|sycl|openvino|opencl|clblast|snapdragon|cpu)"
    r"(?P<version>\d+(?:\.\d+)*)?$"
)
_BACKEND_OF_WORD: Final[dict[str, str]] = {
    "cublas": "cuda",
    "cuda": "cuda",
    "cu": "cuda",
    "hip": "rocm",
    "rocm": "rocm",
    "vulkan": "vulkan",
    "kompute": "vulkan",
    "sycl": "sycl",
    "openvino": "openvino",
    "opencl": "opencl",
    "clblast": "opencl",
    # linux-arm64-snapdragon, android-arm64-snapdragon: "Snapdragon: CPU, Adreno GPU, Hexagon NPU"
    # (release-publish.yml @5641289a). Its GPU backend is ggml-opencl, which the install's device
    # check verifies; the Hexagon NPU rides along (no backend of its own here).
    "snapdragon": "opencl",
    "cpu": "cpu",
}
# Words that are themselves the variant of the backend they imply.
_VARIANT_WORDS: Final[frozenset[str]] = frozenset({"kompute", "clblast", "snapdragon"})
_VERSION: Final = re.compile(r"^\d+(?:\.\d+)*$")
_GFX: Final = re.compile(r"^gfx[0-9a-fx]{3,5}$", re.IGNORECASE)

#: Tokens that qualify a build without changing its backend.
VARIANT_TOKENS: Final[frozenset[str]] = frozenset(
    {
        "noavx", "avx", "avx2", "avx512",  # fixed-ISA Windows CPU builds (<= b5275), janhq
        "openblas", "rpc", "llvm", "msvc", "kleidiai", "common_cpus",
        "fp16", "fp32", "z15", "aclgraph", "adreno", "radeon",
        "legacy", "older", "newer", "portable",  # unslothai bundle profiles
    }
)  # fmt: skip

# Whole-name shapes, tried in order.
_COMPANION: Final = re.compile(r"^cudart-llama-(?:(?P<tag>.+?)-)?bin-(?P<rest>.+)$")
_OPENEULER: Final = re.compile(
    r"^llama-(?P<tag>.+?)-bin-(?P<chip>910b|310p)-openEuler-(?P<arch>x86|aarch64)(?P<graph>-aclgraph)?$"
)
_UPSTREAM: Final = re.compile(r"^llama-(?P<tag>.+?)-bin-(?P<rest>.+)$")
_UNSLOTH: Final = re.compile(r"^app-(?P<tag>.+?)-(?P<os>linux|windows|macos)-(?P<arch>x64|arm64)-(?P<rest>.+)$")
_ATOMIC: Final = re.compile(r"^llama-turboquant-(?P<os>linux|windows|win|macos)-(?P<arch>x64|arm64)(?:-(?P<rest>.+))?$")
_LEMONADE: Final = re.compile(
    r"^llama-(?P<tag>b\d+)-(?P<os>ubuntu|windows)-(?P<rest>rocm-gfx[0-9a-z]+)-(?P<arch>x64)$",
    re.IGNORECASE,
)
_NOT_RUNTIME: Final = re.compile(r"^(?:llama-.+-(?P<kind>xcframework|ui)|llama\.cpp-source-.+)$")
#: Why a release file that is not a runtime is skipped (release-publish.yml @5641289a packs both).
_NOT_RUNTIME_WHY: Final[dict[str | None, str]] = {
    "ui": "the web UI alone (llama-server embeds its own); no runtime",
    "xcframework": "the iOS/macOS XCFramework (a library for apps); no llama-server",
    None: "a source archive; no runtime",
}


@dataclass(frozen=True)
class AssetInfo:
    """What a release asset holds, read from its name alone.

    Attributes:
        name: The file name.
        os: Operating system the build runs on.
        arch: CPU architecture.
        backend: Canonical backend name (see ``runtime.marker``).
        backend_version: CUDA/ROCm/OpenVINO line or gfx target as written
            ("12.4", "12.2.0", "7.14", "2026.2.1", "gfx1100"), if any.
        variant: Qualifier of the build ("avx2", "fp16", "kleidiai", "llvm-adreno").
        archive: ``"zip"`` or ``"tar.gz"``.
        is_companion: A CUDA runtime archive (``cudart-…``), not a runtime itself.
        tag: The release tag embedded in the name, if the name carries one.
    """

    name: str
    os: OS
    arch: Arch
    backend: str
    backend_version: str | None
    variant: str | None
    archive: Archive
    is_companion: bool = False
    tag: str | None = None

    @property
    def platform(self) -> str:
        """``os-arch``, e.g. ``linux-x64``."""
        return f"{self.os}-{self.arch}"


@dataclass(frozen=True)
class _Parts:
    backend: str
    version: str | None
    variant: str | None


def _split_extension(name: str) -> tuple[str, Archive] | None:
    for suffix, archive in _EXTENSIONS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], archive
    return None


def _is_version_of(token: str, backend: str | None, version: str | None) -> bool:
    """A bare version ("12.4") follows its backend word; a gfx target follows hip/rocm.

    A name holds at most one: a second one ("hip-gfx1100-gfx1030") is not understood.
    """
    if version is not None:
        return False
    if _GFX.match(token):
        return backend == "rocm"
    return bool(_VERSION.match(token)) and backend not in (None, "cpu")


def _classify(tokens: list[str], default: str) -> _Parts | None:
    """Read backend, version and variant from the tokens between platform and arch."""
    backend: str | None = None
    version: str | None = None
    variant: list[str] = []
    for token in tokens:
        word = _BACKEND_WORD.match(token)
        if word and not (word["word"] == "cu" and word["version"] is None):
            named = _BACKEND_OF_WORD[word["word"]]
            if backend is not None and backend != named:
                return None  # two different backends in one name
            backend = named
            if word["word"] in _VARIANT_WORDS:
                variant.append(word["word"])
            if word["version"] is not None:
                version = word["version"]
        elif _is_version_of(token, backend, version):
            version = token
        elif token in VARIANT_TOKENS:
            variant.append(token)
        else:
            return None
    return _Parts(backend or default, version, "-".join(variant) or None)


def _default_backend(os: OS, arch: Arch) -> str:
    # macos-arm64 is the CPU+Metal build; macos-x64 is built with GGML_METAL=OFF.
    return "metal" if (os, arch) == ("macos", "arm64") else "cpu"


def _platform_parts(rest: str) -> tuple[OS, Arch, list[str]] | None:
    """Split ``<platform>-…-<arch>-…`` into OS, arch and the remaining tokens."""
    tokens = rest.split("-")
    os = _OS_TOKENS.get(tokens[0])
    if os is None:
        return None
    others = tokens[1:]
    arches: list[Arch] = [_ARCH_TOKENS[t] for t in others if t in _ARCH_TOKENS]
    # "win-arm64-x64" (b2399-b2895): the template appended "-x64" to the ARM build.
    # Only that exact pair is the anomaly; any other double arch is not understood.
    if os == "windows" and arches == ["arm64", "x64"]:
        arch: Arch = "arm64"
    elif len(arches) == 1:
        arch = arches[0]
    else:
        return None
    return os, arch, [t for t in others if t not in _ARCH_TOKENS]


def _from_rest(name: str, rest: str, archive: Archive, tag: str | None, companion: bool) -> AssetInfo | None:
    split = _platform_parts(rest)
    if split is None:
        return None
    os, arch, tokens = split
    # A qualifier on a plain build (macos-arm64-kleidiai) makes it a CPU variant.
    default = "cuda" if companion else _default_backend(os, arch) if not tokens else "cpu"
    parts = _classify(tokens, default)
    if parts is None or (companion and parts.backend != "cuda"):
        return None
    return AssetInfo(name, os, arch, parts.backend, parts.version, parts.variant, archive, companion, tag)


def not_runtime_reason(name: str) -> str | None:
    """Why ``name`` is a known release file that holds no runtime (web UI, XCFramework, source), else ``None``."""
    split = _split_extension(name) if isinstance(name, str) else None
    m = _NOT_RUNTIME.match(split[0]) if split is not None else None
    return _NOT_RUNTIME_WHY[m["kind"]] if m is not None else None


def parse_asset_name(name: str) -> AssetInfo | None:
    """Read OS, arch, backend and archive type from a release asset name.

    Args:
        name: The asset file name, e.g. ``llama-b7000-bin-win-cuda-12.4-x64.zip``.

    Returns:
        The parsed info, or ``None`` for assets that are not an installable
        runtime (web UI, xcframework, source) or whose name is not understood.
    """
    info = _parse(name) if isinstance(name, str) else None
    if info is None and (why := not_runtime_reason(name)) is not None:
        _log.debug("asset_not_runtime", asset=name, why=why)
    elif info is None:
        _log.debug("asset_name_ignored", asset=name)
    return info


def _parse(name: str) -> AssetInfo | None:
    split = _split_extension(name)
    if split is None:
        return None
    stem, archive = split
    if _NOT_RUNTIME.match(stem):
        return None
    if m := _COMPANION.match(stem):
        return _from_rest(name, m["rest"], archive, m["tag"], companion=True)
    if m := _OPENEULER.match(stem):
        variant = m["chip"] + ("-aclgraph" if m["graph"] else "")
        arch: Arch = _OPENEULER_ARCH[m["arch"]]
        return AssetInfo(name, "linux", arch, "cann", None, variant, archive, False, m["tag"])
    if m := _ATOMIC.match(stem):
        rest = "-".join(p for p in (m["os"], m["arch"], m["rest"]) if p)
        return _from_rest(name, rest, archive, None, companion=False)
    if m := _UPSTREAM.match(stem):
        return _from_rest(name, m["rest"], archive, m["tag"], companion=False)
    if m := _UNSLOTH.match(stem):
        rest = f"{m['os']}-{m['arch']}-{m['rest']}"
        return _from_rest(name, rest, archive, m["tag"], companion=False)
    if m := _LEMONADE.match(stem):
        rest = f"{m['os']}-{m['arch']}-{m['rest']}"
        return _from_rest(name, rest, archive, m["tag"], companion=False)
    return None
