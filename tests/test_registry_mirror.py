"""``mirror sync --dest oci://…`` and ``mirror promote`` against a real registry (Distribution 2.8)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llama_runtime.updater.sources.oci.artifact import ARTIFACT_TYPE, CONFIG_MEDIA_TYPE
from llama_runtime.updater.sources.oci.client import RegistryClient
from llama_runtime.updater.sources.oci.reference import parse_reference
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, cli_json
from tests.registry import Registry
from tests.test_mirror import WIN, publish

pytestmark = pytest.mark.e2e


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    (tmp_path / "src").mkdir()
    with FakeGitHub() as server:
        publish(server, tmp_path, "b7000")
        publish(server, tmp_path, "b7001")
        yield server


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(tmp_path / "registry") as reg:
        yield reg


def push(capsys: pytest.CaptureFixture[str], github: FakeGitHub, dest: str, *extra: str) -> tuple[int, dict[str, Any]]:
    return cli_json(
        capsys, "mirror", "sync", "--dest", dest, "--api-url", github.api_url,
        "--platform", "linux-x64", "--backend", "cpu", *extra,
    )  # fmt: skip


def client(registry: Registry) -> RegistryClient:
    return RegistryClient(parse_reference(registry.url()), httpx.Client(timeout=10))


def test_sync_pushes_each_build_as_one_artifact_with_upstream_digests_and_tags(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    code, report = push(capsys, github, registry.url(), "--newest", "2")
    assert code == 0, report
    assert sorted(report["releases"]) == ["b7000", "b7001"]
    assert report["channels"] == {"stable": "b7001"}
    reg = client(registry)
    assert sorted(reg.tags()) == ["b7000", "b7001", "llama-runtime.channels", "stable", "v0.1.0", "v0.2.0"]
    manifest = reg.get_manifest("b7001")
    assert manifest is not None and manifest.digest == report["manifests"]["b7001"]
    doc = manifest.doc
    assert doc["artifactType"] == ARTIFACT_TYPE and doc["config"]["mediaType"] == CONFIG_MEDIA_TYPE
    (layer,) = doc["layers"]
    name = CPU_TAR.format(tag="b7001")
    assert layer["annotations"]["org.opencontainers.image.title"] == name
    upstream = (tmp_path / "src" / name).read_bytes()
    assert layer["digest"] == "sha256:" + hashlib.sha256(upstream).hexdigest()
    assert reg.get_blob(layer["digest"], len(upstream)) == upstream
    config = json.loads(reg.get_blob(doc["config"]["digest"], 100_000))
    assert (config["repo"], config["tag"]) == (REPO, "b7001")
    # Only the build's own facts: which release names it is the v0.2.0 tag, the branch is no mirror's word.
    assert "versions" not in config and "default_branch" not in config
    assert [a["name"] for a in config["assets"]] == [name]
    # The semver release and the channel tag name the same bytes as the build tag.
    for tag in ("v0.2.0", "stable"):
        head = reg.head_manifest(tag)
        assert head is not None and head.digest == manifest.digest
    assert VULKAN_TAR.format(tag="b7001") not in json.dumps(doc) and WIN.format(tag="b7001") not in json.dumps(doc)


def test_second_sync_uploads_no_blob_and_downloads_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry
) -> None:
    code, first = push(capsys, github, registry.url(), "--newest", "2")
    assert code == 0 and len(first["uploaded"]) == 2, first
    blobs = registry.blob_files()
    downloads = len(github.requests_to("blob", ".tar.gz"))
    code, second = push(capsys, github, registry.url(), "--newest", "2")
    assert code == 0, second
    assert second["uploaded"] == [] and second["uploaded_bytes"] == 0
    assert sorted(second["reused"]) == sorted(first["uploaded"])
    assert len(github.requests_to("blob", ".tar.gz")) == downloads  # upstream's digest was enough: nothing fetched
    assert registry.blob_files() == blobs
    assert second["manifests"] == first["manifests"]


def test_two_builds_with_identical_assets_store_the_bytes_once(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    same = b"identical bytes in two builds"
    github.add_release(REPO, "b7100", {"llama-b7100-bin-ubuntu-x64.tar.gz": same})
    github.add_release(REPO, "b7101", {"llama-b7101-bin-ubuntu-x64.tar.gz": same})
    for tag in ("b7100", "b7101"):
        code, report = push(capsys, github, registry.url(), "--tag", tag)
        assert code == 0, report
    sizes = [p.stat().st_size for p in registry.blob_files()]
    assert sizes.count(len(same)) == 1
    assert report["uploaded"] == [] and report["reused"] == ["b7101/llama-b7101-bin-ubuntu-x64.tar.gz"]


def test_promote_moves_a_channel_tag_to_a_pushed_build_and_refuses_unknown_ones(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry
) -> None:
    code, report = push(capsys, github, registry.url(), "--newest", "2")
    assert code == 0, report
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", registry.url(), "--tag", "b7000", "--to", "canary")
    assert code == 0, moved
    assert moved["digest"] == report["manifests"]["b7000"]
    head = client(registry).head_manifest("canary")
    assert head is not None and head.digest == report["manifests"]["b7000"]
    code, err = cli_json(capsys, "mirror", "promote", "--dest", registry.url(), "--tag", "b6999", "--to", "canary")
    assert code == 7 and "holds no build b6999" in err["error"]["message"]
    code, err = cli_json(capsys, "mirror", "promote", "--dest", registry.url(), "--tag", "b7000", "--to", "b7001")
    assert code == 2 and "not a channel name" in err["error"]["message"]


def test_sync_to_a_registry_refusing_anonymous_pushes_is_exit_7_naming_the_401(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    with Registry(tmp_path / "basic", users={"ci": "pw"}) as registry:
        code, err = push(capsys, github, registry.url())
        assert code == 7 and "refused anonymous access" in err["error"]["message"], err
        monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_USERNAME", "ci")
        monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "pw")
        code, report = push(capsys, github, registry.url())
        assert code == 0, report
        assert report["channels"] == {"stable": "b7001"}


def test_attestation_bundles_are_pushed_as_referrers_listed_through_the_tag_schema(
    capsys: pytest.CaptureFixture[str], registry: Registry, tmp_path: Path
) -> None:
    from tests.test_provenance_e2e import BEACON, real_bundle, sha256_of
    from tests.test_provenance_offline import archive

    tarball = archive(tmp_path)
    with FakeGitHub() as upstream:
        upstream.add_release(BEACON, "b7001", {tarball.name: tarball})
        upstream.add_attestation(BEACON, sha256_of(tarball), real_bundle())
        argv = ["mirror", "sync", "--dest", registry.url(), "--api-url", upstream.api_url, "--repo", BEACON]
        code, report = cli_json(capsys, *argv)
        assert code == 0, report
        code, again = cli_json(capsys, *argv)
        assert code == 0, again
    assert report["attestations"] == [f"b7001/{tarball.name}"]
    reg = client(registry)
    subject = report["manifests"]["b7001"]
    (referrer,) = reg.referrers(subject, "application/vnd.dev.sigstore.bundle.v0.3+json")
    assert referrer.annotations == {"dev.llama-runtime.asset.digest": f"sha256:{sha256_of(tarball)}"}
    manifest = reg.get_manifest(referrer.digest)
    assert manifest is not None and manifest.doc["subject"]["digest"] == subject
    (layer,) = manifest.doc["layers"]
    assert json.loads(reg.get_blob(layer["digest"], 1_000_000)) == real_bundle()


def test_registry_to_registry_sync_mounts_blobs_and_carries_tags_and_versions(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry
) -> None:
    code, first = push(capsys, github, registry.url(), "--newest", "2")
    assert code == 0, first
    github.stop()
    second = registry.url("fleet/copy")
    code, report = cli_json(capsys, "mirror", "sync", "--dest", second, "--api-url", registry.url(), "--newest", "2")
    assert code == 0, report
    assert sorted(report["mounted"]) == sorted(first["uploaded"]) and report["uploaded"] == []
    copy = RegistryClient(parse_reference(second), httpx.Client(timeout=10))
    assert {"b7000", "b7001", "v0.1.0", "v0.2.0", "stable"} <= set(copy.tags())
    head = copy.head_manifest("v0.2.0")
    assert head is not None and head.digest == report["manifests"]["b7001"]
