"""ggml-org/llama.cpp as it publishes today (b11541, 2026-10-10), on :class:`tests.fakegithub.FakeGitHub`.

One build is the 36 assets upstream's ``release-publish.yml`` uploads
(ggml-org/llama.cpp ``.github/workflows/release-publish.yml`` @5641289ad: its
release body links every one; shared reference ``upstream-2026-10.md`` "The 36
assets of one build"; a third-party pin lists b11541's 36 names with their
digests), each in its real layout with small stand-in contents:

* Linux, macOS and Android tarballs: one top directory ``llama-bN/`` (release.yml's
  ``--transform "s,^\\.,llama-bN,"``, asset_naming.md §4), ``llama-server`` beside
  ``libllama-server-impl.so`` (b9253+) and soname chains (b7021+);
* Windows zips: flat, ``llama-server.exe`` (a small launcher) beside
  ``llama-server-impl.dll`` (b9253+; release-publish.yml merges the CPU zip into each);
* Linux cudart companions ``cudart-llama-bN-bin-ubuntu-cuda-<v>-<arch>.tar.gz``: tagged,
  one top directory of the archive's own name (PRs #28186, #29202);
* Windows cudart zips: untagged and flat, only ``cudart64_*.dll``, ``cublas64_*.dll``,
  ``cublasLt64_*.dll``; the same bytes in every build (12.4-x64 ``8c79a9b2…`` from b10015 to b11541);
* ``llama-bN-ui.tar.gz``: the web UI only (release-publish.yml "Package UI");
* ``llama-bN-xcframework.zip``: ``build-apple/llama.xcframework`` (no server).

Every archive is built lazily (FakeGitHub's callable assets): only when a client
first reads its release, so publishing a build costs nothing until a test uses it.
The binaries are shell scripts printing ``version: 0.6.0-dev (build N, commit …)``
(the format since b10394); they never run a model.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tests.archives import build_release_archive
from tests.fakegithub import AssetSource, FakeGitHub

if TYPE_CHECKING:
    from tests.sigstore_mint import PrivateSigstore

REPO: Final = "ggml-org/llama.cpp"
#: The newest build seen (upstream-2026-10.md) and the build stable named on 2026-10-10 (v0.6.0).
NIGHTLY_TAG: Final = "b11541"
STABLE_TAG: Final = "b11429"
STABLE_VERSION: Final = "v0.6.0"
#: The stable release before it (upstream-2026-10.md, "Stable lags nightly"): v0.5.0 -> b11146.
PREVIOUS_TAG: Final = "b11146"
PREVIOUS_VERSION: Final = "v0.5.0"
#: What the binaries of these builds print: the last bumped version plus ``-dev`` (b11424 printed 0.5.0-dev).
DEV_VERSION: Final = "0.6.0-dev"

# release-publish.yml @5641289ad, release body (and the b11541 listing): Linux, macOS, Android tarballs.
_TARBALLS: Final = (
    "macos-arm64",
    "macos-x64",
    "ubuntu-x64",
    "ubuntu-arm64",
    "ubuntu-s390x",
    "ubuntu-vulkan-x64",
    "ubuntu-vulkan-arm64",
    "ubuntu-cuda-12.8-x64",
    "ubuntu-cuda-13.4-x64",
    "ubuntu-cuda-13.4-arm64",
    "ubuntu-rocm-10.0-x64",
    "ubuntu-openvino-2026.4.1-x64",
    "ubuntu-sycl-fp32-x64",
    "ubuntu-sycl-fp16-x64",
    "linux-arm64-snapdragon",
    "android-arm64",
    "android-arm64-snapdragon",
)
# Windows zips (win-vulkan-arm64 is in the b11459/b11541 listings though not in the release body).
_ZIPS: Final = (
    "win-cpu-x64",
    "win-cpu-arm64",
    "win-cuda-12.4-x64",
    "win-cuda-13.4-x64",
    "win-cuda-13.4-arm64",
    "win-vulkan-x64",
    "win-vulkan-arm64",
    "win-opencl-adreno-arm64",
    "win-openvino-2026.4.1-x64",
    "win-rocm-10.0-x64",
    "win-sycl-x64",
)
#: CUDA builds and their companions' platform part: Linux ones carry the tag, Windows ones do not.
_LINUX_CUDART: Final = ("ubuntu-cuda-12.8-x64", "ubuntu-cuda-13.4-x64", "ubuntu-cuda-13.4-arm64")
_WINDOWS_CUDART: Final = ("win-cuda-12.4-x64", "win-cuda-13.4-x64", "win-cuda-13.4-arm64")
_MTIME: Final = 1_760_000_000  # fixed: the same archive bytes on every run


def asset_names(tag: str = NIGHTLY_TAG) -> list[str]:
    """The 36 asset names of one build ``tag`` (sorted, as GitHub lists them)."""
    names = [f"llama-{tag}-bin-{p}.tar.gz" for p in _TARBALLS]
    names += [f"llama-{tag}-bin-{p}.zip" for p in _ZIPS]
    names += [f"cudart-llama-{tag}-bin-{p}.tar.gz" for p in _LINUX_CUDART]
    names += [f"cudart-llama-bin-{p}.zip" for p in _WINDOWS_CUDART]
    names += [f"llama-{tag}-ui.tar.gz", f"llama-{tag}-xcframework.zip"]
    return sorted(names)


def stand_in_script(tag: str) -> bytes:
    """A ``llama-server`` that answers ``--version`` like a build of this era and lists no device."""
    from tests.helpers import serves_the_compute_check  # helpers imports the fake GitHub, which imports this

    version = f"version: {DEV_VERSION} (build {tag[1:]}, commit 6c59c40)"
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo '{version}' >&2; exit 0 ;;\n"
        "  --list-devices) printf 'Available devices:\\n'; exit 0 ;;\n"
        "esac\n"
        f"{serves_the_compute_check()}"
        "exit 0\n"
    ).encode()


def _archive(
    layout: str, files: Mapping[str, bytes | Path], symlinks: Mapping[str, str] | None = None, tag: str = ""
) -> bytes:
    """The bytes tests/archives.py writes for ``layout`` (``tar-tagdir``: ``llama-<tag>/``; ``zip-root``: flat)."""
    suffix = ".zip" if layout.startswith("zip") else ".tar.gz"
    with tempfile.TemporaryDirectory(prefix="upstream-today-") as tmp:
        path = Path(tmp) / f"asset{suffix}"
        return build_release_archive(path, layout, files, symlinks=symlinks, tag=tag).read_bytes()


def _tar(top: str, files: Mapping[str, bytes], symlinks: Mapping[str, str] | None = None) -> bytes:
    """A tarball with one top directory ``top`` (the Linux cudart companions name theirs after the archive)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        entries: list[tuple[str, bytes | None, str]] = [(top, None, "")]
        entries += [(f"{top}/{n}", data, "") for n, data in files.items()]
        entries += [(f"{top}/{n}", None, target) for n, target in (symlinks or {}).items()]
        for name, data, target in entries:
            info = tarfile.TarInfo(name)
            info.mtime = _MTIME
            if target:
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, target
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _libs(names: Iterable[str], build: str) -> tuple[dict[str, bytes], dict[str, str]]:
    """``libX.so -> libX.so.0 -> libX.so.0.0.N`` for each name (b7021+ versioned sonames) of ``build``.

    ``build`` (``<tag> <platform>``) is part of every library's bytes: no two assets share a digest,
    as no two real builds do (only the untagged cudart zips keep theirs from build to build).
    """
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    for lib in names:
        files[f"lib{lib}.so.0.0.11541"] = f"\x7fELF stand-in {lib} of {build}".encode()
        links[f"lib{lib}.so.0"] = f"lib{lib}.so.0.0.11541"
        links[f"lib{lib}.so"] = f"lib{lib}.so.0"
    return files, links


def _backend_word(platform: str) -> str:
    """``ubuntu-cuda-12.8-x64`` -> ``cuda``; a plain CPU build (``ubuntu-x64``) -> ``cpu``."""
    plain = {"ubuntu", "linux", "macos", "android", "win", "x64", "arm64", "s390x"}
    words = [t for t in platform.split("-") if t not in plain and not t[0].isdigit()]
    return words[0] if words else "cpu"


def _unix_build(tag: str, platform: str) -> bytes:
    backend = _backend_word(platform)
    libs = ("llama", "ggml", "ggml-base", "llama-common", "llama-server-impl", f"ggml-{backend}")
    files, links = _libs(libs, f"{tag} {platform}")
    entries: dict[str, bytes | Path] = {"llama-server": stand_in_script(tag), "llama": stand_in_script(tag), **files}
    return _archive("tar-tagdir", entries, links, tag)


def _windows_build(tag: str, platform: str) -> bytes:
    backend = _backend_word(platform)
    launcher = b"MZ stand-in launcher: loads llama-server-impl.dll"  # 9,216 bytes in b11146
    dlls = ("llama", "llama-common", "llama-server-impl", "ggml", "ggml-base", "ggml-cpu-haswell", f"ggml-{backend}")
    files: dict[str, bytes | Path] = {"llama-server.exe": launcher, "llama.exe": launcher}
    files.update({f"{d}.dll": f"MZ stand-in {d} of {tag} {platform}".encode() for d in dlls})
    return _archive("zip-root", files)


def _cuda_major(platform: str) -> str:
    return next(t for t in platform.split("-") if t[0].isdigit()).split(".")[0]


#: The CUDA runtime libraries a companion holds (asset_naming.md §4: cudart, cublas, cublasLt).
_CUDA_LIBS: Final = ("cudart", "cublas", "cublasLt")


def _linux_cudart(tag: str, platform: str) -> bytes:
    major = _cuda_major(platform)
    files = {f"lib{n}.so.{major}.0.1": f"\x7fELF stand-in {n} for {platform}".encode() for n in _CUDA_LIBS}
    links = {f"lib{n}.so.{major}": f"lib{n}.so.{major}.0.1" for n in _CUDA_LIBS}
    return _tar(f"cudart-llama-{tag}-bin-{platform}", files, links)


def _windows_cudart(platform: str) -> bytes:
    major = _cuda_major(platform)
    # Untagged and the same bytes in every build: nothing of the build goes into them.
    return _archive("zip-root", {f"{n}64_{major}.dll": f"MZ stand-in {n} for {platform}".encode() for n in _CUDA_LIBS})


def _ui(tag: str) -> bytes:
    return _archive(
        "tar-tagdir", {"index.html": b"<!doctype html><title>llama.cpp</title>", "bundle.js": b"//"}, tag=tag
    )


def _xcframework(tag: str) -> bytes:
    plist = f"<?xml version='1.0'?><plist><!-- {tag} --></plist>".encode()
    return _archive("zip-root", {"build-apple/llama.xcframework/Info.plist": plist})


def builder(name: str, tag: str) -> Callable[[], bytes]:
    """The lazy builder of asset ``name`` of build ``tag`` (any name of :func:`asset_names`, or an extra one)."""
    stem = name.removesuffix(".tar.gz").removesuffix(".zip")
    if name.startswith("cudart-llama-bin-"):
        return lambda: _windows_cudart(stem.removeprefix("cudart-llama-bin-"))
    if name.startswith(f"cudart-llama-{tag}-bin-"):
        return lambda: _linux_cudart(tag, stem.removeprefix(f"cudart-llama-{tag}-bin-"))
    if stem == f"llama-{tag}-ui":
        return lambda: _ui(tag)
    if stem == f"llama-{tag}-xcframework":
        return lambda: _xcframework(tag)
    platform = stem.removeprefix(f"llama-{tag}-bin-")
    if name.endswith(".zip"):
        return lambda: _windows_build(tag, platform)
    return lambda: _unix_build(tag, platform)


def build_assets(tag: str, names: Iterable[str]) -> dict[str, AssetSource]:
    """``names`` of build ``tag`` as lazy FakeGitHub assets."""
    return {name: builder(name, tag) for name in names}


def publish_today(
    github: FakeGitHub,
    repo: str = REPO,
    *,
    names: Callable[[str], list[str]] = asset_names,
    latest_pointer: bool = True,
    build_prerelease: bool = True,
) -> dict[str, dict[str, object]]:
    """Publish today's upstream shape: v0.5.0 -> b11146, stable v0.6.0 -> b11429, and the newer nightly b11541.

    Releases are published oldest first, as upstream does: each build (a
    prerelease) then the semver release cut from it by hand, whose only asset
    ``nightly-tag.txt`` names it; v0.6.0 holds nothing with ``latest_pointer=False``
    (make-release.yml's window between creating the release and uploading the
    pointer, or a release whose commit no build tag names); b11541 is newest.

    Args:
        github: The fake to publish on.
        repo: Where (a fork-like repository for the beacon scenario).
        names: The asset names of a build tag (a drifted shape passes its own).
        latest_pointer: Give v0.6.0 its ``nightly-tag.txt``.
        build_prerelease: Builds are prereleases (today); ``False`` is a pointer-scheme drift.

    Returns:
        Tag -> the release JSON the fake serves.
    """
    published: dict[str, dict[str, object]] = {}
    cuts = {PREVIOUS_TAG: PREVIOUS_VERSION, STABLE_TAG: STABLE_VERSION}
    for tag in (PREVIOUS_TAG, STABLE_TAG, NIGHTLY_TAG):
        assets = build_assets(tag, names(tag))
        published[tag] = github.add_release(repo, tag, assets, stable=False, prerelease=build_prerelease)
        version = cuts.get(tag)
        if version == STABLE_VERSION and not latest_pointer:
            published[version] = github.add_release(repo, version, {}, prerelease=False)
        elif version is not None:
            published[version] = github.add_version(repo, version, tag)
    return published


#: An attestation listing entry this version cannot verify: a bundle without verification material.
#: It stands in for upstream's real bundles (signed by ggml-org's workflows on Sigstore's production
#: instance; no such bundle exists offline) until minted ggml-org bundles replace it.
UNVERIFIABLE_BUNDLE: Final[dict[str, object]] = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}


def attest_builds(
    github: FakeGitHub, repo: str, releases: Mapping[str, dict[str, object]], bundle: Mapping[str, object]
) -> int:
    """Publish ``bundle`` as the attestation of every asset of the build releases in ``releases``.

    Upstream attests every file of a build (release-publish.yml: ``actions/attest@v4`` with
    ``subject-path: 'release/*'``), not the semver release's ``nightly-tag.txt`` (404 at the API).
    Builds each lazy asset (its digest is the key). Returns how many digests got one.
    """
    digests: set[str] = set()
    for tag, release in releases.items():
        if not tag.startswith("b"):
            continue
        assets = release["assets"]
        assert isinstance(assets, list)
        for asset in assets:
            digest = github.materialise(asset)["digest"]
            if isinstance(digest, str) and digest not in digests:
                digests.add(digest)
                github.add_attestation(repo, digest.removeprefix("sha256:"), dict(bundle))
    return len(digests)


#: Where upstream's signing workflow moved (upstream-2026-10.md "Who signs": release.yml up to about
#: b11300, release-publish.yml from then; b11222 and b11424 are the nearest builds seen).
SIGNING_SWITCH_BUILD: Final = 11300


def attest_minted(
    github: FakeGitHub, repo: str, releases: Mapping[str, dict[str, object]], sigstore: PrivateSigstore
) -> None:
    """Attest every build in ``releases`` the way upstream does, with bundles minted by tests/sigstore_mint.py.

    One SLSA statement per build naming all its files (release-publish.yml: ``actions/attest@v4``,
    ``subject-path: 'release/*'``), signed by the era's identity (``release.yml``/push before
    :data:`SIGNING_SWITCH_BUILD`, ``release-publish.yml``/workflow_run from it), listed for each
    file's digest by ``bundle_url`` as the API answers today. An untagged companion has the same
    digest in every build, so its digest lists one attestation per build, as on GitHub.
    Verify with ``LLAMA_RUNTIME_TRUSTED_ROOT`` set to ``sigstore``'s trust root.
    """
    from tests.sigstore_mint import release_publish_identity, release_yml_identity, slsa_statement

    for tag, release in releases.items():
        if not tag.startswith("b"):
            continue
        assets = release["assets"]
        assert isinstance(assets, list)
        subjects = {a["name"]: str(github.materialise(a)["digest"]).removeprefix("sha256:") for a in assets}
        era = release_yml_identity if int(tag[1:]) < SIGNING_SWITCH_BUILD else release_publish_identity
        identity = era(repo)
        bundle = sigstore.mint(slsa_statement(subjects, identity), identity)
        for digest in subjects.values():
            github.add_attestation(repo, digest, bundle, by_url=True)


__all__ = [
    "DEV_VERSION",
    "NIGHTLY_TAG",
    "PREVIOUS_TAG",
    "PREVIOUS_VERSION",
    "REPO",
    "SIGNING_SWITCH_BUILD",
    "STABLE_TAG",
    "STABLE_VERSION",
    "UNVERIFIABLE_BUNDLE",
    "asset_names",
    "attest_builds",
    "attest_minted",
    "build_assets",
    "builder",
    "publish_today",
    "stand_in_script",
]
