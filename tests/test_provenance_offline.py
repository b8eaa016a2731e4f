"""Provenance without a network: a mirror, an export, and ``install-file --bundle``.

The attestation is the real Sigstore staging bundle of tests/data/sigstore (see
tests/test_provenance_e2e.py for why releases come from its signer's repository
and where the one digest substitution, ``remap_subject``, is used). The trust
root is the staging root file, so nothing here can reach the internet; the
mirror tests also stop the upstream hub before installing.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.sandbox import Sandbox
from llama_runtime.updater.offline.export import SOURCE_PREFIX
from tests.fakegithub import BUNDLE_URL_SIGNATURE, FakeGitHub, Fault
from tests.helpers import CPU_TAR, assert_runs, cli_json, serves_the_compute_check, snapshot_tree, stand_in_tarball
from tests.test_provenance_e2e import BEACON, BEACON_WORKFLOW, real_bundle, remap_subject, sha256_of

DATA = Path(__file__).parent / "data" / "sigstore"


@pytest.fixture(autouse=True)
def beacon_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The staging trust root, and the real bundle's release workflow as the configured one."""
    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(DATA / "staging_trusted_root.json"))
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    monkeypatch.delenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", raising=False)


def archive(tmp_path: Path, tag: str = "b7001") -> Path:
    return stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag)


# -- a mirror ---------------------------------------------------------------------------


def synced_mirror(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bundle: dict[str, Any] | None, *, by_url: bool = False
) -> tuple[Path, str, dict[str, Any]]:
    """A mirror of BEACON b7001 synced from a hub that is stopped afterwards: (dir, sha256, report)."""
    tarball = archive(tmp_path)
    dest = tmp_path / "mirror"
    with FakeGitHub() as upstream:
        upstream.add_release(BEACON, "b7001", {tarball.name: tarball})
        if bundle is not None:
            upstream.add_attestation(BEACON, sha256_of(tarball), bundle, by_url=by_url)
        code, report = cli_json(
            capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, "--repo", BEACON
        )
        assert code == 0, report
    return dest, sha256_of(tarball), report


def test_mirror_stores_the_attestation_on_the_api_route_and_installs_verify_it_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest, digest, report = synced_mirror(capsys, tmp_path, real_bundle())
    assert report["attestations"] == [f"b7001/{CPU_TAR.format(tag='b7001')}"]
    stored = dest / "repos" / BEACON / "attestations" / f"sha256:{digest}"
    assert json.loads(stored.read_text())["attestations"][0]["bundle"] == real_bundle()
    remap_subject(monkeypatch, digest)
    home = tmp_path / "home"
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--repo", BEACON, "--tag", "b7001"
    )
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"
    assert payload["active"]["provenance"]["workflow"] == BEACON_WORKFLOW
    # The mirror stored the repository's default branch at GET /repos/{owner}/{repo}; what a mirror says
    # about itself does not key the signer policy, so a fork's default branch is unknown here.
    assert json.loads((dest / "repos" / BEACON / "index.json").read_text())["default_branch"] == "main"
    assert "default branch unknown" in payload["active"]["provenance"]["reason"]


def test_mirror_stores_a_bundle_url_bundle_inline_without_the_url_and_installs_verify_it_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest, digest, report = synced_mirror(capsys, tmp_path, real_bundle(), by_url=True)
    assert report["attestations"] == [f"b7001/{CPU_TAR.format(tag='b7001')}"]
    stored = json.loads((dest / "repos" / BEACON / "attestations" / f"sha256:{digest}").read_text())
    assert stored["attestations"] == [{"bundle": real_bundle(), "repository_id": 612354784, "initiator": "user"}]
    assert [p for p in dest.rglob("*") if p.is_file() and BUNDLE_URL_SIGNATURE.encode() in p.read_bytes()] == []
    remap_subject(monkeypatch, digest)
    home = tmp_path / "home"
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--repo", BEACON, "--tag", "b7001"
    )
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"


def test_mirror_sync_whose_bundle_url_fails_publishes_nothing_for_the_release(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tarball = archive(tmp_path)
    dest = tmp_path / "mirror"
    with FakeGitHub() as upstream:
        upstream.add_release(BEACON, "b7001", {tarball.name: tarball})
        path = upstream.add_attestation(BEACON, sha256_of(tarball), real_bundle(), by_url=True)
        upstream.inject(str(path), Fault(status=500, times=None))
        code, report = cli_json(
            capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, "--repo", BEACON
        )
    assert code == 7, report
    assert "could not be fetched (HTTP 500)" in report["error"]["message"]
    assert BUNDLE_URL_SIGNATURE not in json.dumps(report)
    assert not (dest / "repos" / BEACON / "releases" / "tags" / "b7001").exists()
    assert not (dest / "repos" / BEACON / "attestations").exists()


def test_a_forged_attestation_on_a_mirror_is_exit_8_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest, digest, _ = synced_mirror(capsys, tmp_path, None)
    forged = copy.deepcopy(real_bundle())
    forged["dsseEnvelope"]["signatures"][0]["sig"] = forged["dsseEnvelope"]["signatures"][0]["sig"][::-1]
    route = dest / "repos" / BEACON / "attestations" / f"sha256:{digest}"
    route.parent.mkdir(parents=True)
    route.write_text(json.dumps({"attestations": [{"bundle": forged, "repository_id": 1}]}))
    remap_subject(monkeypatch, digest)
    home = tmp_path / "home"
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--repo", BEACON, "--tag", "b7001"
    )
    assert code == 8, payload
    assert not (home / "active.json").exists()


# -- an export --------------------------------------------------------------------------


def verified_home(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose active b7001 was installed verified (with --bundle)."""
    tarball = archive(tmp_path)
    remap_subject(monkeypatch, sha256_of(tarball))
    (tmp_path / "a.sigstore.json").write_text(json.dumps(real_bundle()))
    home = tmp_path / "source-home"
    args = [
        "install-file",
        str(tarball),
        "--home",
        str(home),
        "--repo",
        BEACON,
        "--bundle",
        str(tmp_path / "a.sigstore.json"),
    ]
    code, payload = cli_json(capsys, *args)
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"
    assert "default branch unknown: accepted refs/heads/master or main" in payload["active"]["provenance"]["reason"]
    return home


def test_export_carries_the_bundle_and_install_file_verifies_it_again_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = verified_home(capsys, tmp_path, monkeypatch)
    bundle_file = tmp_path / "runtime.tar.gz"
    code, _ = cli_json(capsys, "export", "--home", str(source), "--output", str(bundle_file))
    assert code == 0
    target = tmp_path / "fleet-home"
    code, payload = cli_json(capsys, "install-file", str(bundle_file), "--home", str(target), "--require-provenance")
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified" and provenance["workflow"] == BEACON_WORKFLOW
    assert "re-verified from the release archive the export carries" in provenance["reason"]
    assert_runs(Path(payload["active"]["binary"]))


def test_export_whose_recorded_bundle_was_tampered_with_is_exit_8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = verified_home(capsys, tmp_path, monkeypatch)
    good = tmp_path / "runtime.tar.gz"
    assert cli_json(capsys, "export", "--home", str(source), "--output", str(good))[0] == 0
    bad = tmp_path / "tampered.tar.gz"
    with tarfile.open(good, "r:gz") as src, tarfile.open(bad, "w:gz") as dst:
        for info in src:
            data = src.extractfile(info).read() if info.isreg() else None  # type: ignore[union-attr]
            if info.name == "llama-runtime.json":
                marker = json.loads(data or b"")
                envelope = marker["provenance"]["bundle"]["dsseEnvelope"]
                envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"][::-1]
                data = json.dumps(marker).encode()
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    target = tmp_path / "fleet-home"
    code, payload = cli_json(capsys, "install-file", str(bad), "--home", str(target))
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_failed"
    assert not (target / "active.json").exists()


# -- install-file --bundle ----------------------------------------------------------------


@pytest.fixture
def active_b7000(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (tmp_path / "old").mkdir()
    code, payload = cli_json(capsys, "install-file", str(archive(tmp_path / "old", "b7000")), "--home", str(home))
    assert code == 0, payload
    return home


def failing_install_file(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    before, pointer = snapshot_tree(home / "runtimes"), (home / "active.json").read_bytes()
    code, payload = cli_json(capsys, "install-file", *args, "--home", str(home))
    assert snapshot_tree(home / "runtimes") == before and (home / "active.json").read_bytes() == pointer
    code_status, status = cli_json(capsys, "status", "--home", str(home))
    assert code_status == 0 and status["active"]["tag"] == "b7000"
    assert_runs(Path(status["active"]["binary"]))
    return code, payload


def test_install_file_with_gh_attestation_download_json_lines_verifies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    tarball = archive(tmp_path)
    remap_subject(monkeypatch, sha256_of(tarball))
    lines = tmp_path / f"sha256:{sha256_of(tarball)}.jsonl"
    lines.write_text(json.dumps(real_bundle()) + "\n")
    args = ["install-file", str(tarball), "--home", str(active_b7000), "--repo", BEACON, "--bundle", str(lines)]
    code, payload = cli_json(capsys, *args)
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"


def test_install_file_bundle_from_another_repository_is_exit_8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    tarball = archive(tmp_path)
    remap_subject(monkeypatch, sha256_of(tarball))
    (tmp_path / "b.json").write_text(json.dumps(real_bundle()))
    code, payload = failing_install_file(capsys, active_b7000, str(tarball), "--bundle", str(tmp_path / "b.json"))
    assert code == 8, payload
    assert f"built in {BEACON}, not in ggml-org/llama.cpp" in payload["error"]["message"]


def test_install_file_without_bundle_is_unverified_or_refused_when_required(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, active_b7000: Path
) -> None:
    code, payload = failing_install_file(capsys, active_b7000, str(archive(tmp_path)), "--require-provenance")
    assert code == 8 and payload["error"]["code"] == "provenance_missing"
    code, payload = cli_json(capsys, "install-file", str(archive(tmp_path)), "--home", str(active_b7000))
    assert code == 0
    assert payload["active"]["provenance"] == {
        "status": "unverified",
        "reason": "installed from a file without --bundle",
    }


def test_install_file_with_a_file_that_is_no_bundle_is_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, active_b7000: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    code, payload = failing_install_file(
        capsys, active_b7000, str(archive(tmp_path)), "--bundle", str(tmp_path / "notes.txt")
    )
    assert code == 2, payload
    assert "holds no Sigstore bundle" in payload["error"]["message"]


# -- a forged export: "verified" means these bytes ------------------------------


def forged_server(sentinel: Path) -> bytes:
    """A llama-server that passes for b7001 and leaves ``sentinel`` behind whenever it runs."""
    return (
        "#!/bin/sh\n"
        f"touch '{sentinel}'\n"
        'case "$1" in\n'
        "  --version) echo 'version: 7001 (stand-in)' >&2; exit 0 ;;\n"
        "  --list-devices) printf 'Available devices:\\n'; exit 0 ;;\n"
        "esac\n"
        f"{serves_the_compute_check()}"
        "exit 0\n"
    ).encode()


def forge(good: Path, bad: Path, script: bytes, *, keep_archive: bool) -> Path:
    """``good`` with llama-server swapped for ``script``, its marker record rewritten to match, attestation kept."""
    with tarfile.open(good, "r:gz") as src:
        members = [(info, src.extractfile(info).read() if info.isreg() else None) for info in src]  # type: ignore[union-attr]
    marker = json.loads(next(data for info, data in members if info.name == "llama-runtime.json") or b"")
    binary = marker["binary"]
    marker["files"][binary].update(size=len(script), sha256=hashlib.sha256(script).hexdigest())
    with tarfile.open(bad, "w:gz") as dst:
        for info, data in members:
            if info.name.startswith(SOURCE_PREFIX) and not keep_archive:
                continue
            if info.name == "llama-runtime.json":
                data = json.dumps(marker).encode()
            elif info.name == binary:
                data = script
            if data is not None:
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return bad


def exported(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    source = verified_home(capsys, tmp_path, monkeypatch)
    good = tmp_path / "runtime.tar.gz"
    code, payload = cli_json(capsys, "export", "--home", str(source), "--output", str(good))
    assert code == 0 and payload["carries_archive"] is True, payload
    return good


def test_forged_export_without_its_archive_is_refused_under_require_provenance_and_never_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    sentinel = tmp_path / "forged-binary-ran"
    bad = forge(
        exported(capsys, tmp_path, monkeypatch), tmp_path / "forged.tar.gz", forged_server(sentinel), keep_archive=False
    )
    # A run in the sandbox could not leave the sentinel: every run of a new build is counted where it starts.
    runs: list[list[str]] = []
    original = Sandbox.wrap
    monkeypatch.setattr(
        Sandbox, "wrap", lambda self, argv, rules: runs.append(list(argv)) or original(self, argv, rules)
    )
    code, payload = failing_install_file(capsys, active_b7000, str(bad), "--require-provenance")
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_missing"
    assert "repacked" in payload["error"]["message"]
    assert runs == [], "the forged llama-server ran during install"
    assert not sentinel.exists()


def test_forged_export_without_its_archive_installs_unverified_as_repacked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    sentinel = tmp_path / "forged-binary-ran"
    bad = forge(
        exported(capsys, tmp_path, monkeypatch), tmp_path / "forged.tar.gz", forged_server(sentinel), keep_archive=False
    )
    code, payload = cli_json(capsys, "install-file", str(bad), "--home", str(active_b7000))
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "unverified" and provenance["reason"].startswith("repacked"), provenance
    code, status = cli_json(capsys, "status", "--home", str(active_b7000))
    assert code == 0 and status["active"]["provenance"]["status"] == "unverified"


def test_forged_export_that_keeps_its_archive_installs_the_attested_bytes_and_never_runs_the_forgery(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    sentinel = tmp_path / "forged-binary-ran"
    good = exported(capsys, tmp_path, monkeypatch)
    bad = forge(good, tmp_path / "forged.tar.gz", forged_server(sentinel), keep_archive=True)
    code, payload = cli_json(capsys, "install-file", str(bad), "--home", str(active_b7000), "--require-provenance")
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"
    installed = Path(payload["active"]["binary"]).read_bytes()
    assert installed != forged_server(sentinel) and b"stand-in" in installed
    assert not sentinel.exists(), "the forged llama-server ran during install"
    assert_runs(Path(payload["active"]["binary"]))


# -- a forged export: every archive that reaches a runtime is judged --------------------------


def gomp_archive(path: Path) -> Path:
    """A companion archive dropping ``libgomp.so.1``, a library llama-server loads from beside itself."""
    payload = b"\x7fELF not really a library\n"
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo("libgomp.so.1")
        info.size, info.mode = len(payload), 0o755
        tf.addfile(info, io.BytesIO(payload))
    return path


def with_companion(good: Path, bad: Path, extra: Path, recorded: dict[str, Any] | None) -> Path:
    """``good`` with ``extra`` carried as a companion its marker lists, recording ``recorded`` as its provenance."""
    with tarfile.open(good, "r:gz") as src:
        members = [(info, src.extractfile(info).read() if info.isreg() else None) for info in src]  # type: ignore[union-attr]
    marker = json.loads(next(data for info, data in members if info.name == "llama-runtime.json") or b"")
    data = extra.read_bytes()
    entry: dict[str, Any] = {"name": extra.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if recorded is not None:
        entry["provenance"] = recorded
    marker["extra_assets"] = [*marker.get("extra_assets", []), entry]
    with tarfile.open(bad, "w:gz") as dst:
        for info, payload in members:
            if info.name == "llama-runtime.json":
                payload = json.dumps(marker).encode()
                info.size = len(payload)
            dst.addfile(info, io.BytesIO(payload) if payload is not None else None)
            if info.name == "llama-runtime.json":
                carried = tarfile.TarInfo(SOURCE_PREFIX + extra.name)
                carried.size = len(data)
                dst.addfile(carried, io.BytesIO(data))
    return bad


def no_gomp_under(home: Path) -> bool:
    return not any(p.name == "libgomp.so.1" for p in home.rglob("*"))


def test_export_with_an_added_unattested_companion_is_refused_under_require_provenance_before_extraction(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    good = exported(capsys, tmp_path, monkeypatch)
    bad = with_companion(good, tmp_path / "forged.tar.gz", gomp_archive(tmp_path / "libs.tar.gz"), None)
    code, payload = failing_install_file(capsys, active_b7000, str(bad), "--require-provenance")
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_missing"
    assert "libs.tar.gz" in payload["error"]["message"]
    assert no_gomp_under(active_b7000), "the unattested companion was extracted"


def test_export_with_an_added_unattested_companion_installs_unverified_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    good = exported(capsys, tmp_path, monkeypatch)
    bad = with_companion(good, tmp_path / "forged.tar.gz", gomp_archive(tmp_path / "libs.tar.gz"), None)
    code, payload = cli_json(capsys, "install-file", str(bad), "--home", str(active_b7000))
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "unverified", provenance
    assert provenance["reason"].startswith("libs.tar.gz: "), provenance
    code, status = cli_json(capsys, "status", "--home", str(active_b7000))
    assert code == 0 and status["active"]["provenance"]["status"] == "unverified"
    assert "signed by" not in json.dumps(status["active"]["provenance"])


def test_export_whose_companion_records_a_bundle_for_other_bytes_is_exit_8_before_extraction(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    good = exported(capsys, tmp_path, monkeypatch)
    claimed = {"status": "verified", "reason": "verified against the staging root", "bundle": real_bundle()}
    bad = with_companion(good, tmp_path / "forged.tar.gz", gomp_archive(tmp_path / "libs.tar.gz"), claimed)
    code, payload = failing_install_file(capsys, active_b7000, str(bad))
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_failed"
    assert "libs.tar.gz" in payload["error"]["message"]
    assert no_gomp_under(active_b7000), "the companion was extracted though its attestation failed"


def test_export_whose_companion_bundle_attests_its_bytes_installs_verified_and_keeps_that_bundle(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active_b7000: Path
) -> None:
    # A companion whose recorded bundle does attest its bytes verifies, and the runtime stays verified.
    good = exported(capsys, tmp_path, monkeypatch)
    extra = gomp_archive(tmp_path / "libs.tar.gz")
    recorded = {"status": "verified", "reason": "verified against the staging root", "bundle": real_bundle()}
    real = __import__("llama_runtime.updater.verify.signer", fromlist=["verify_bundle"])
    remapped = real.verify_bundle
    extra_sha = sha256_of(extra)

    def verify(bundle: dict[str, Any], sha256: str, policy: Any, trust: Any) -> Any:
        # The companion is "attested" by the same real bundle: the one substitution, as remap_subject does.
        from tests.test_provenance_e2e import ATTESTED_SHA256

        return remapped(bundle, ATTESTED_SHA256 if sha256 == extra_sha else sha256, policy, trust)

    monkeypatch.setattr(real, "verify_bundle", verify)
    bad = with_companion(good, tmp_path / "with-companion.tar.gz", extra, recorded)
    code, payload = cli_json(capsys, "install-file", str(bad), "--home", str(active_b7000), "--require-provenance")
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"
    binary = Path(payload["active"]["binary"])
    [marker_file] = [p / "llama-runtime.json" for p in binary.parents if (p / "llama-runtime.json").is_file()]
    marker = json.loads(marker_file.read_text())
    [entry] = marker["extra_assets"]
    assert entry["provenance"]["status"] == "verified" and entry["provenance"]["bundle"] == real_bundle()
