"""A registry as the source: update, check, plan, list --available and provenance from a real registry
(Debian's docker-registry, Distribution 2.8) filled by ``mirror sync --dest oci://…``, upstream stopped."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llama_runtime.updater.sources.oci.client import RegistryClient
from llama_runtime.updater.sources.oci.reference import parse_reference
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, cli_json
from tests.registry import Registry
from tests.test_mirror import publish

pytestmark = pytest.mark.e2e


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    # Beside the test's tmp_path, not in it: HomeGuard watches tmp_path, and a registry writes its own files.
    with Registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture
def filled(capsys: pytest.CaptureFixture[str], registry: Registry, tmp_path: Path) -> dict[str, Any]:
    """b7000 and b7001 (v0.1.0, v0.2.0) pushed for linux-x64 cpu; upstream stopped afterwards."""
    (tmp_path / "src").mkdir()
    with FakeGitHub() as github:
        publish(github, tmp_path, "b7000")
        publish(github, tmp_path, "b7001")
        code, report = cli_json(
            capsys, "mirror", "sync", "--dest", registry.url(), "--api-url", github.api_url,
            "--platform", "linux-x64", "--backend", "cpu", "--newest", "2",
        )  # fmt: skip
        assert code == 0, report
    return report


def requests_seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    original = RegistryClient.request

    def counting(self: RegistryClient, method: str, url: str, **kw: Any) -> Any:
        seen.append((method, url))
        return original(self, method, url, **kw)

    monkeypatch.setattr(RegistryClient, "request", counting)
    return seen


def test_update_installs_stable_from_the_registry_and_the_marker_keeps_upstream_identity_and_origin(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path
) -> None:
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", registry.url(), "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert (marker["repo"], marker["tag"], marker["release_version"]) == (REPO, "b7001", "v0.2.0")
    assert marker["digest_verified"] is True
    assert marker["source"] == f"{registry.url()}@{filled['manifests']['b7001']}"
    assert_runs(Path(payload["active"]["binary"]))
    code, status = cli_json(capsys, "status", "--home", str(home))
    assert code == 0 and status["active"]["source"] == marker["source"], status
    assert (status["active"]["repo"], status["active"]["tag"]) == (REPO, "b7001")


def test_tags_semver_names_plan_list_and_check_read_the_registry(
    capsys: pytest.CaptureFixture[str],
    registry: Registry,
    filled: dict[str, Any],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = registry.url()
    code, plan = cli_json(capsys, "plan", "--api-url", url, "--backend", "cpu", "--platform", "linux-x64")
    assert code == 0 and (plan["tag"], plan["asset"]) == ("b7001", CPU_TAR.format(tag="b7001")), plan
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "v0.1.0")
    assert code == 0 and payload["active"]["tag"] == "b7000", payload
    code, unpinned = cli_json(capsys, "unpin", "--home", str(home))
    assert code == 0, unpinned  # `update --tag` pins; the checks below follow the registry's stable again
    code, listed = cli_json(capsys, "list", "--available", "--home", str(home), "--api-url", url)
    assert code == 0, listed
    assert {"b7000", "b7001"} <= {r["tag"] for r in listed["available"]}
    code, checked = cli_json(capsys, "check", "--home", str(home), "--api-url", url)
    assert code == 0 and (checked["latest"], checked["update_available"]) == ("b7001", True), checked
    seen = requests_seen(monkeypatch)
    code, checked = cli_json(capsys, "check", "--home", str(home), "--api-url", url)
    assert code == 0 and checked["latest"] == "b7001", checked
    assert seen == [("HEAD", f"http://{registry.host}/v2/fleet/llama.cpp/manifests/stable")]
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b6999")
    assert code == 7 and "does not exist" in payload["error"]["message"], payload


def test_the_registry_answers_for_its_own_tags_and_invents_no_pointer_file(
    registry: Registry, filled: dict[str, Any], home: Path
) -> None:
    """Proves: stable, nightly, a build tag, a semver tag and a digest pin resolve from the registry's tags
    alone; its newest builds carry the semver tags naming them; nothing it offers is a nightly-tag.txt."""
    from llama_runtime.updater.config import resolve_settings
    from llama_runtime.updater.engine import Engine

    engine = Engine(resolve_settings(home=str(home), api_url=registry.url(), backend="cpu"))
    pin = f"b7000@{filled['manifests']['b7000']}"
    with engine.open_source() as source:
        answers = {
            "stable": source.resolve("stable"),
            "nightly": source.resolve("nightly"),
            "b7000": source.resolve(tag="b7000"),
            "v0.1.0": source.resolve(tag="v0.1.0"),
            pin: source.resolve(tag=pin),
        }
        builds = source.builds(10)
    assert {asked: (r.build_tag, r.version) for asked, r in answers.items()} == {
        "stable": ("b7001", "v0.2.0"),
        "nightly": ("b7001", None),
        "b7000": ("b7000", None),
        "v0.1.0": ("b7000", "v0.1.0"),
        pin: ("b7000", None),
    }
    assert [(b.tag, b.versions) for b in builds] == [("b7001", ("v0.2.0",)), ("b7000", ("v0.1.0",))]
    offered = [a.name for r in [*(x.release for x in answers.values()), *(b.release for b in builds)] for a in r.assets]
    assert offered and "nightly-tag.txt" not in offered
    assert answers["b7000"].release.origin == f"{registry.url()}@{filled['manifests']['b7000']}"


def test_a_layer_whose_bytes_are_not_its_digest_is_exit_8_and_the_runtime_is_untouched(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    url = registry.url()
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7001")
    assert code == 0, payload
    (manifest,) = [p for p in registry.blob_files() if b"b7000" in p.read_bytes() and b'"layers"' in p.read_bytes()]
    (layer,) = json.loads(manifest.read_text())["layers"]
    hexdigest = layer["digest"].removeprefix("sha256:")
    data = registry.root / "data/docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
    data.write_bytes(b"\0" * data.stat().st_size)  # same size, other bytes: a hostile registry
    guard = HomeGuard(tmp_path, home)
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7000")
    assert code == 8, payload
    guard.assert_intact("b7001", capsys=capsys)


def test_basic_auth_registry_serves_clients_with_the_tools_variables_and_refuses_others(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_USERNAME", "ci")
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "pw")
    (tmp_path / "src").mkdir()
    with Registry(tmp_path_factory.mktemp("basic"), users={"ci": "pw"}) as registry:
        with FakeGitHub() as github:
            publish(github, tmp_path, "b7001")
            code, report = cli_json(
                capsys, "mirror", "sync", "--dest", registry.url(), "--api-url", github.api_url,
                "--platform", "linux-x64", "--backend", "cpu",
            )  # fmt: skip
            assert code == 0, report
        code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", registry.url())
        assert code == 0 and payload["active"]["tag"] == "b7001", payload
        monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "wrong")
        guard = HomeGuard(tmp_path, home)
        code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", registry.url(), "--tag", "b7000")
        assert code == 7 and "refused the credential" in payload["error"]["message"], payload
        assert "wrong" not in json.dumps(payload)
        guard.assert_intact("b7001", capsys=capsys)


def test_require_provenance_verifies_offline_from_the_referrer_bundles(
    capsys: pytest.CaptureFixture[str], registry: Registry, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_provenance_e2e import BEACON, BEACON_WORKFLOW, real_bundle, remap_subject, sha256_of
    from tests.test_provenance_offline import DATA, archive

    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(DATA / "staging_trusted_root.json"))
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    tarball = archive(tmp_path)
    with FakeGitHub() as upstream:
        upstream.add_release(BEACON, "b7001", {tarball.name: tarball})
        upstream.add_attestation(BEACON, sha256_of(tarball), real_bundle())
        argv = ["mirror", "sync", "--dest", registry.url(), "--api-url", upstream.api_url, "--repo", BEACON]
        code, report = cli_json(capsys, *argv)
        assert code == 0, report
    remap_subject(monkeypatch, sha256_of(tarball))
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", registry.url(), "--repo", BEACON,
        "--tag", "b7001", "--require-provenance",
    )  # fmt: skip
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert (provenance["status"], provenance["workflow"]) == ("verified", BEACON_WORKFLOW)
    # The registry's word about the repository never counts: a fork's default branch is unknown here.
    assert "default branch unknown: accepted refs/heads/master or main" in provenance["reason"]


def test_require_provenance_without_referrers_is_exit_8_and_the_runtime_is_untouched(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    url = registry.url()
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7001")
    assert code == 0, payload
    guard = HomeGuard(tmp_path, home)
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7000", "--require-provenance"
    )
    assert code == 8, payload
    guard.assert_intact("b7001", capsys=capsys)


def test_a_registry_holding_another_repositorys_builds_is_refused(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path
) -> None:
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", registry.url(), "--repo", "someone/fork", "--tag", "b7001"
    )
    assert code == 7 and "holds builds of ggml-org/llama.cpp" in payload["error"]["message"], payload
    assert not (home / "active.json").exists()


def test_pin_by_digest_installs_that_manifest_and_a_moved_tag_is_exit_8_with_the_runtime_untouched(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    url, b7000, b7001 = registry.url(), filled["manifests"]["b7000"], filled["manifests"]["b7001"]
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", f"b7001@{b7001}")
    assert code == 0, payload
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert (marker["tag"], marker["source"]) == ("b7001", f"{url}@{b7001}")
    # The registry's b7000 tag is moved to other bytes (re-pushed with b7001's manifest): the pin refuses it.
    client = RegistryClient(parse_reference(url), httpx.Client(timeout=10))
    moved = client.get_manifest(b7001)
    assert moved is not None
    client.put_manifest("b7000", moved.raw, moved.media_type)
    guard = HomeGuard(tmp_path, home)
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", f"b7000@{b7000}")
    assert code == 8 and f"now names {b7001}, not the pinned {b7000}" in payload["error"]["message"], payload
    guard.assert_intact("b7001", capsys=capsys)


def test_a_digest_pin_needs_a_registry_and_a_well_formed_digest(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    pin = "sha256:" + "a" * 64
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", github.api_url, "--tag", f"b7000@{pin}"
    )
    assert code == 2 and "only a registry source has" in payload["error"]["message"], payload
    code, payload = cli_json(capsys, "update", "--home", str(home), "--tag", "b7000@sha256:xyz")
    assert code == 2 and "is not a manifest digest" in payload["error"]["message"], payload


def test_a_promoted_channel_tag_is_installed_by_name_and_records_the_build(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path
) -> None:
    url = registry.url()
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "canary")
    assert code == 0, moved
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "canary")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7000"
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7001", "--to", "canary")
    assert code == 0, moved
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "canary")
    assert code == 0 and payload["active"]["tag"] == "b7001", payload


def test_a_registry_behind_a_token_service_is_pushed_with_a_credential_and_pulled_anonymously(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.token_server import TokenServer

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    (tmp_path / "src").mkdir()
    tokens = TokenServer(tmp_path_factory.mktemp("token"), {"ci": "pw"}, anonymous_pull=True)
    try:
        with Registry(tmp_path_factory.mktemp("bearer"), auth=tokens.registry_auth()) as registry:
            monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_USERNAME", "ci")
            monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "pw")
            with FakeGitHub() as github:
                publish(github, tmp_path, "b7001")
                code, report = cli_json(
                    capsys, "mirror", "sync", "--dest", registry.url(), "--api-url", github.api_url,
                    "--platform", "linux-x64", "--backend", "cpu",
                )  # fmt: skip
                assert code == 0, report
            monkeypatch.delenv("LLAMA_RUNTIME_REGISTRY_USERNAME")
            monkeypatch.delenv("LLAMA_RUNTIME_REGISTRY_PASSWORD")
            code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", registry.url())
            assert code == 0 and payload["active"]["tag"] == "b7001", payload
            assert_runs(Path(payload["active"]["binary"]))
            assert any(a is None for _p, a in tokens.requests)  # the client asked for an anonymous pull token
    finally:
        tokens.close()


def test_a_directory_mirror_can_be_synced_from_the_registry(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    code, report = cli_json(capsys, "mirror", "sync", "--dest", str(dest), "--api-url", registry.url())
    assert code == 0, report
    assert report["releases"] == ["b7001"] and report["latest_version"] == "v0.2.0"
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", dest.as_uri())
    assert code == 0 and payload["active"]["tag"] == "b7001", payload
    assert_runs(Path(payload["active"]["binary"]))


def test_a_referrer_of_other_bytes_is_not_used_and_required_provenance_is_exit_8(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    from llama_runtime.updater.sources.oci.artifact import BUNDLE_ARTIFACT_TYPE, bundle_manifest
    from llama_runtime.updater.sources.oci.client import MANIFEST_MEDIA_TYPE, Descriptor, sha256_digest

    url = registry.url()
    client = RegistryClient(parse_reference(url), httpx.Client(timeout=10))
    b7000, b7001 = filled["manifests"]["b7000"], filled["manifests"]["b7001"]
    # A bundle manifest whose subject is b7001, listed in b7000's referrers index: a referrer of other bytes.
    bundle = b'{"verificationMaterial":{},"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}'
    client.push_blob(sha256_digest(bundle), len(bundle), lambda offset: iter([bundle[offset:]]))
    client.push_blob(sha256_digest(b"{}"), 2, lambda offset: iter([b"{}"[offset:]]))
    blob = Descriptor(BUNDLE_ARTIFACT_TYPE, sha256_digest(bundle), len(bundle))
    raw = bundle_manifest(blob, Descriptor(MANIFEST_MEDIA_TYPE, b7001, 1), "sha256:" + "0" * 64, "x")
    digest, _ = client.put_manifest(sha256_digest(raw), raw, MANIFEST_MEDIA_TYPE)
    client.add_referrer_to_tag(b7000, Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw), BUNDLE_ARTIFACT_TYPE))
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7001")
    assert code == 0, payload
    guard = HomeGuard(tmp_path, home)
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7000", "--require-provenance"
    )
    assert code == 8 and payload["error"]["code"] == "provenance_missing", payload  # not "provenance_failed"
    guard.assert_intact("b7001", capsys=capsys)


def test_doctor_repair_reinstalls_a_damaged_runtime_from_the_registry(
    capsys: pytest.CaptureFixture[str],
    registry: Registry,
    filled: dict[str, Any],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = registry.url()
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7001")
    assert code == 0, payload
    binary = Path(payload["active"]["binary"])
    binary.write_bytes(b"\0" * binary.stat().st_size)  # damaged in place
    shutil.rmtree(home / "cache" / "assets")  # nothing at hand: the repair must ask the registry
    seen = requests_seen(monkeypatch)
    code, report = cli_json(capsys, "doctor", "--home", str(home), "--api-url", url, "--repair")
    assert code == 0, report
    assert any(method == "HEAD" and "/manifests/b7001" in u for method, u in seen), seen  # asked the registry
    code, status = cli_json(capsys, "status", "--home", str(home))
    assert code == 0 and status["active"]["tag"] == "b7001", status
    assert_runs(Path(status["active"]["binary"]))
    assert status["active"]["source"] == f"{url}@{filled['manifests']['b7001']}"


def test_canary_hosts_follow_a_promoted_channel_and_check_apply_moves_with_it(
    capsys: pytest.CaptureFixture[str], registry: Registry, filled: dict[str, Any], home: Path
) -> None:
    url = registry.url()
    assert cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "candidate")[0] == 0
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--channel", "candidate")
    assert code == 0 and payload["active"]["tag"] == "b7000", payload
    code, checked = cli_json(capsys, "check", "--home", str(home), "--api-url", url)
    assert code == 0 and checked["update_available"] is False, checked  # the channel is remembered: b7000
    assert cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7001", "--to", "candidate")[0] == 0
    code, applied = cli_json(capsys, "check", "--apply", "--home", str(home), "--api-url", url)
    assert code == 0 and applied["update_available"] is True, applied
    code, status = cli_json(capsys, "status", "--home", str(home))
    assert code == 0 and status["active"]["tag"] == "b7001", status
    assert_runs(Path(status["active"]["binary"]))


def test_a_registry_channel_asked_of_github_is_exit_2_saying_where_channels_live(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    code, payload = cli_json(
        capsys, "update", "--home", str(home), "--api-url", github.api_url, "--channel", "candidate"
    )
    assert code == 2, payload
    assert "registry source (--api-url oci://" in payload["error"]["message"], payload
    assert github.requests == []
