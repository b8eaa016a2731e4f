"""A CUDA build installs together with its CUDA runtime companion archive."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from llama_runtime.runtime.binary import ProcessResult, run_process
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.activate.installer import Installer
from llama_runtime.updater.choice.decide import UpdateRequest
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.sources.github import GitHubClient
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, assert_runs, stand_in_tarball

CUDA_12_8_HOST = HostFacts(os="linux", arch="x64", cuda_driver_version="12.8", nvidia_driver="570.86")


def _lists_a_cuda_device(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> ProcessResult:
    """What a CUDA build prints on a machine with an NVIDIA GPU."""
    if argv[-1] == "--list-devices":
        return ProcessResult(0, "Available devices:\n  CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)\n")
    return run_process(argv, timeout, env)


def test_linux_cuda_build_gets_its_tagged_cudart_libraries_beside_llama_server(
    github: FakeGitHub, tmp_path: Path
) -> None:
    tag = "b11026"
    build = stand_in_tarball(tmp_path / "cuda.tar.gz", tag=tag, libs=("ggml-base", "ggml-cuda"))
    cudart = build_release_archive(
        tmp_path / "cudart.tar.gz",
        "tar-tagdir",
        {"libcudart.so.12.8.57": b"\x7fELF cudart", "libcublas.so.12.8.4.1": b"\x7fELF cublas"},
        symlinks={"libcudart.so.12": "libcudart.so.12.8.57", "libcublas.so.12": "libcublas.so.12.8.4.1"},
        tag=tag,
    )
    github.add_release(
        REPO,
        tag,
        {
            f"llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": build,
            f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": cudart,
            f"llama-{tag}-bin-ubuntu-x64.tar.gz": stand_in_tarball(tmp_path / "cpu.tar.gz", tag=tag),
        },
    )
    installer = Installer(
        Home(tmp_path / "home"),
        source=GitHubClient(github.api_url, REPO),
        host=lambda: CUDA_12_8_HOST,
        runner=_lists_a_cuda_device,
    )
    outcome = installer.update(UpdateRequest(repo=REPO, tag=tag))  # auto picks CUDA on this host
    marker = outcome.active.marker
    assert (marker.backend, marker.backend_request) == ("cuda", "auto")
    assert [e["name"] for e in marker.extra_assets] == [f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"]
    bin_dir = outcome.active.binary.parent
    assert (bin_dir / "libcudart.so.12.8.57").read_bytes() == b"\x7fELF cudart"
    assert os.readlink(bin_dir / "libcudart.so.12") == "libcudart.so.12.8.57"
    assert f"llama-{tag}/libcublas.so.12.8.4.1" in marker.files
    assert marker.devices == ("CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)",)
    recorded = json.loads((outcome.active.path / "llama-runtime.json").read_text())
    assert recorded["host"]["cuda_driver_version"] == "12.8"
    assert_runs(outcome.active.binary)


# -- a companion is fetched once ------------------------------------------------------------------------

CUDART_FILES = {"libcudart.so.12.8.57": b"\x7fELF cudart", "libcublas.so.12.8.4.1": b"\x7fELF cublas"}


def _publish_cuda(github: FakeGitHub, tmp_path: Path, tag: str, cudart_files: dict[str, bytes] | None = None) -> None:
    """``tag`` with a CUDA 12.8 build and its tagged cudart companion (a new top directory, new digest)."""
    build = stand_in_tarball(tmp_path / f"{tag}-cuda.tar.gz", tag=tag, libs=("ggml-base", "ggml-cuda"))
    cudart = build_release_archive(
        tmp_path / f"{tag}-cudart.tar.gz",
        "tar-tagdir",
        dict(cudart_files or CUDART_FILES),
        symlinks={"libcudart.so.12": "libcudart.so.12.8.57", "libcublas.so.12": "libcublas.so.12.8.4.1"},
        tag=f"cudart-{tag}",
    )
    github.add_release(
        REPO,
        tag,
        {
            f"llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": build,
            f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz": cudart,
        },
    )


def _installer(github: FakeGitHub, home: Path, runner=_lists_a_cuda_device, **storage: bool) -> Installer:  # type: ignore[no-untyped-def]
    from llama_runtime.updater.activate.pipeline import StoragePolicy

    return Installer(
        Home(home),
        source=GitHubClient(github.api_url, REPO),
        host=lambda: CUDA_12_8_HOST,
        runner=runner,
        storage=StoragePolicy(**storage),
    )


def _cudart_downloads(github: FakeGitHub, tag: str) -> int:
    return len(github.requests_to("blob", f"cudart-llama-{tag}-"))


def test_a_second_cuda_build_of_the_same_cuda_version_reuses_the_installed_companion_files(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    first = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026")).active
    _publish_cuda(github, tmp_path, "b11130")
    outcome = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11130"))
    marker = outcome.active.marker
    assert _cudart_downloads(github, "b11130") == 0
    assert marker.companion_from == "b11026"
    (entry,) = marker.extra_assets
    assert entry["name"] == "cudart-llama-b11130-bin-ubuntu-cuda-12.8-x64.tar.gz"
    assert (entry["from"], entry["from_asset"]) == ("b11026", "cudart-llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz")
    bin_dir = outcome.active.binary.parent
    assert (bin_dir / "libcudart.so.12.8.57").read_bytes() == b"\x7fELF cudart"
    assert os.readlink(bin_dir / "libcudart.so.12") == "libcudart.so.12.8.57"
    assert (bin_dir / "libcudart.so.12.8.57").stat().st_ino == (
        first.binary.parent / "libcudart.so.12.8.57"
    ).stat().st_ino
    assert "llama-b11130/libcublas.so.12.8.4.1" in marker.files
    assert marker.provenance["status"] == first.marker.provenance["status"]
    assert "reused from b11026" in marker.provenance["reason"] or marker.provenance["status"] != "verified"
    assert marker.devices == ("CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)",)
    assert_runs(outcome.active.binary)


def test_fresh_companion_downloads_it_even_when_an_installed_copy_fits(github: FakeGitHub, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026"))
    _publish_cuda(github, tmp_path, "b11130")
    outcome = _installer(github, home, fresh_companion=True).update(UpdateRequest(repo=REPO, tag="b11130"))
    assert _cudart_downloads(github, "b11130") == 1
    assert outcome.active.marker.companion_from == ""


def test_a_damaged_installed_companion_file_is_not_reused_and_the_companion_is_downloaded(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    first = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026")).active
    lib = first.binary.parent / "libcublas.so.12.8.4.1"
    lib.chmod(0o644)
    lib.write_bytes(b"\x7fELF cublaX")  # same size, other bytes
    _publish_cuda(github, tmp_path, "b11130")
    outcome = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11130"))
    assert _cudart_downloads(github, "b11130") == 1
    assert outcome.active.marker.companion_from == ""
    assert (outcome.active.binary.parent / "libcublas.so.12.8.4.1").read_bytes() == b"\x7fELF cublas"


def _sees_the_gpu_only_with(cudart: bytes):  # type: ignore[no-untyped-def]
    """A CUDA build that lists its device only beside ``cudart`` (the runtime it was built against)."""

    def runner(argv, timeout, env):  # type: ignore[no-untyped-def]
        if argv[-1] == "--list-devices" and (Path(argv[0]).parent / "libcudart.so.12.8.57").read_bytes() != cudart:
            return ProcessResult(0, "Available devices:\n")
        return _lists_a_cuda_device(argv, timeout, env)

    return runner


def test_a_build_that_fails_its_device_check_with_reused_files_gets_its_own_companion_and_installs(
    github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026"))
    newer = {**CUDART_FILES, "libcudart.so.12.8.57": b"\x7fELF cudarT"}
    _publish_cuda(github, tmp_path, "b11130", newer)
    outcome = _installer(github, home, runner=_sees_the_gpu_only_with(b"\x7fELF cudarT")).update(
        UpdateRequest(repo=REPO, tag="b11130", backend="cuda")
    )
    assert _cudart_downloads(github, "b11130") == 1
    assert outcome.active.marker.tag == "b11130" and outcome.active.marker.companion_from == ""
    assert (outcome.active.binary.parent / "libcudart.so.12.8.57").read_bytes() == b"\x7fELF cudarT"
    assert any("reused from b11026" in w for w in outcome.warnings)
    assert len(github.requests_to("blob", "/llama-b11130-bin")) == 1  # the main archive came once, then from the cache


def test_a_build_that_fails_with_reused_and_fresh_companion_fails_and_the_previous_runtime_stays(
    github: FakeGitHub, tmp_path: Path
) -> None:
    from llama_runtime import VerificationError
    from tests.helpers import HomeGuard

    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026"))
    _publish_cuda(github, tmp_path, "b11130")
    guard = HomeGuard(tmp_path, home)
    installer = _installer(github, home, runner=_sees_the_gpu_only_with(b"never"))
    try:
        installer.update(UpdateRequest(repo=REPO, tag="b11130", backend="cuda"))
    except VerificationError:
        pass
    else:
        raise AssertionError("the update should have failed")
    assert _cudart_downloads(github, "b11130") == 1  # the fresh companion was tried before failing
    guard.assert_intact("b11026")


def test_under_require_provenance_only_a_donor_whose_install_verified_it_serves_and_reads_verified(
    github: FakeGitHub, tmp_path: Path
) -> None:
    import dataclasses

    from llama_runtime.runtime.marker import write_marker
    from llama_runtime.runtime.snapshot import HomeSnapshot
    from llama_runtime.updater.activate.companions import find_reusable
    from llama_runtime.updater.verify.provenance import Provenance, combine

    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    donor = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026")).active
    _publish_cuda(github, tmp_path, "b11130")
    release = GitHubClient(github.api_url, REPO).get_release("b11130")
    (companion,) = [a for a in release.assets if a.name.startswith("cudart-")]
    snapshot = HomeSnapshot.read(Home(home))
    assert donor.marker.provenance["status"] != "verified"
    assert find_reusable((companion,), snapshot.runtimes, snapshot.sha256, require_verified=True) == []
    (unrequired,) = find_reusable((companion,), snapshot.runtimes, snapshot.sha256, require_verified=False)
    assert unrequired.provenance().status != "verified"  # never better than the donor's own install

    verified = {"status": "verified", "reason": "signed by the release workflow"}
    write_marker(donor.path, dataclasses.replace(donor.marker, provenance=verified))
    snapshot = HomeSnapshot.read(Home(home))
    (reuse,) = find_reusable((companion,), snapshot.runtimes, snapshot.sha256, require_verified=True)
    assert reuse.donor.marker.tag == "b11026"
    assert reuse.provenance().status == "verified"
    main = Provenance("verified", "signed")
    assert combine([("main", main), (reuse.name, reuse.provenance())]).status == "verified"


def test_a_tampered_companion_record_naming_paths_outside_the_runtime_is_never_reused(
    github: FakeGitHub, tmp_path: Path
) -> None:
    import dataclasses

    from llama_runtime.runtime.marker import write_marker

    home = tmp_path / "home"
    _publish_cuda(github, tmp_path, "b11026")
    donor = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11026")).active
    (entry,) = donor.marker.extra_assets
    outside = tmp_path / "secret"
    outside.write_bytes(b"\x7fELF cudart")
    tampered = {**entry, "files": {"../../../secret": {"size": 11, "sha256": "0" * 64}}}
    write_marker(donor.path, dataclasses.replace(donor.marker, extra_assets=(tampered,)))
    _publish_cuda(github, tmp_path, "b11130")
    outcome = _installer(github, home).update(UpdateRequest(repo=REPO, tag="b11130"))
    assert _cudart_downloads(github, "b11130") == 1
    assert outcome.active.marker.companion_from == ""
    assert not any("secret" in rel for rel in outcome.active.marker.files)


# -- every archive that reaches a runtime is judged by its own attestation ---------------------------------------


def _attest_cuda(github: FakeGitHub, tmp_path: Path, tag: str) -> dict[str, dict[str, object]]:
    """Publish ``tag``'s CUDA build and companion, each attested by a minted bundle of its own sha256."""
    import hashlib

    from tests.sigstore_mint import private_sigstore, release_yml_identity, slsa_statement

    _publish_cuda(github, tmp_path, tag)
    bundles: dict[str, dict[str, object]] = {}
    for name in (f"llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz", f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"):
        kind = "cudart" if name.startswith("cudart") else "cuda"
        digest = hashlib.sha256((tmp_path / f"{tag}-{kind}.tar.gz").read_bytes()).hexdigest()
        identity = release_yml_identity()
        bundles[name] = private_sigstore().mint(slsa_statement({name: digest}, identity), identity)
        github.add_attestation(REPO, digest, bundles[name])
    return bundles


def test_each_companion_records_its_own_verified_bundle_and_an_export_of_it_verifies_offline(
    github: FakeGitHub, tmp_path: Path, minted_root: Path
) -> None:
    from llama_runtime.updater.offline.export import export_bundle
    from llama_runtime.updater.offline.offline import InstallFileRequest, install_file
    from llama_runtime.updater.verify.provenance import ProvenanceCheck

    tag = "b11026"
    bundles = _attest_cuda(github, tmp_path, tag)
    check = ProvenanceCheck(require=True, trusted_root=minted_root, offline=True)
    installer = _installer(github, tmp_path / "home")
    installer.provenance = installer.pipeline.acquirer.provenance_check = check
    marker = installer.update(UpdateRequest(repo=REPO, tag=tag)).active.marker
    assert marker.provenance["status"] == "verified"
    (entry,) = marker.extra_assets
    assert entry["provenance"]["status"] == "verified"
    assert entry["provenance"]["bundle"] == bundles[entry["name"]]
    exported = export_bundle(installer.home, tmp_path / "runtime.tar.gz")
    assert exported.carries_archive
    fleet = Installer(
        Home(tmp_path / "fleet"), host=lambda: CUDA_12_8_HOST, runner=_lists_a_cuda_device, provenance=check
    )
    outcome = install_file(fleet, InstallFileRequest(exported.path, default_repo=REPO))
    assert outcome.active.marker.provenance["status"] == "verified"
    assert outcome.active.marker.extra_assets[0]["provenance"]["bundle"] == bundles[entry["name"]]
    assert (outcome.active.binary.parent / "libcudart.so.12.8.57").read_bytes() == b"\x7fELF cudart"
