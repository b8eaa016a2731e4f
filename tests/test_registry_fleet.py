"""A fleet's registry as its admins run it, against real Distribution 2.8 (Debian's docker-registry):
pushes that merge and never move a digest, channels that hold once promoted, provenance that survives
copies, garbage collection and second backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llama_runtime.updater.sources.oci.client import INDEX_MEDIA_TYPE, RegistryClient
from llama_runtime.updater.sources.oci.reference import parse_reference
from tests.fakegithub import FakeGitHub
from tests.helpers import CLI_PROCESS_TIMEOUT_SECONDS, CPU_TAR, REPO, VULKAN_TAR, cli_json
from tests.registry import Registry
from tests.test_mirror import publish

pytestmark = pytest.mark.e2e

BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    (tmp_path / "src").mkdir()
    with FakeGitHub() as server:
        publish(server, tmp_path, "b7000")
        publish(server, tmp_path, "b7001")
        yield server


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry"), access_log=True) as reg:
        yield reg


def sync(capsys: pytest.CaptureFixture[str], api: str, dest: str, *extra: str) -> dict[str, Any]:
    code, report = cli_json(capsys, "mirror", "sync", "--dest", dest, "--api-url", api, *extra)
    assert code == 0, report
    return report


def cpu(*extra: str) -> tuple[str, ...]:
    return ("--platform", "linux-x64", "--backend", "cpu", *extra)


def client(registry: Registry, name: str = "fleet/llama.cpp") -> RegistryClient:
    return RegistryClient(parse_reference(registry.url(name)), httpx.Client(timeout=10))


def digests(reg: RegistryClient) -> dict[str, str]:
    """Every tag of the repository -> the manifest digest it names."""
    found = {}
    for tag in reg.tags():
        head = reg.head_manifest(tag)
        assert head is not None
        found[tag] = head.digest
    return found


def layer_names(reg: RegistryClient, tag: str) -> list[str]:
    manifest = reg.get_manifest(tag)
    assert manifest is not None
    return sorted(layer["annotations"]["org.opencontainers.image.title"] for layer in manifest.doc["layers"])


def bundle_assets(reg: RegistryClient, tag: str) -> list[str]:
    """The asset digests the bundles listed as referrers of ``tag``'s manifest attest (each bundle readable)."""
    head = reg.head_manifest(tag)
    assert head is not None
    found = []
    for referrer in reg.referrers(head.digest, BUNDLE_TYPE):
        manifest = reg.get_manifest(referrer.digest)
        assert manifest is not None and manifest.doc["subject"]["digest"] == head.digest
        found.append(manifest.doc["annotations"]["dev.llama-runtime.asset.digest"])
    return sorted(found)


def fake_bundle(name: str) -> dict[str, Any]:
    """A bundle-shaped document (what a push carries; never verified in these tests)."""
    return {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {"for": name}}


def attest_both(github: FakeGitHub, tmp_path: Path, tag: str) -> dict[str, str]:
    """Upstream attestations for the cpu and vulkan assets of ``tag``; asset name -> sha256."""
    import hashlib

    shas = {
        CPU_TAR.format(tag=tag): hashlib.sha256((tmp_path / "src" / CPU_TAR.format(tag=tag)).read_bytes()).hexdigest(),
        VULKAN_TAR.format(tag=tag): hashlib.sha256(b"vulkan build bytes").hexdigest(),
    }
    for name, sha in shas.items():
        github.add_attestation(REPO, sha, fake_bundle(name))
    return shas


def nightly_build(github: FakeGitHub, tmp_path: Path, tag: str) -> None:
    """Publish ``tag`` as upstream publishes a build no semver release names (yet)."""
    from tests.helpers import stand_in_tarball
    from tests.test_mirror import WIN

    cpu_tar = stand_in_tarball(tmp_path / "src" / CPU_TAR.format(tag=tag), tag=tag)
    archives = {CPU_TAR.format(tag=tag): cpu_tar, VULKAN_TAR.format(tag=tag): b"vk", WIN.format(tag=tag): b"w"}
    github.add_release(REPO, tag, archives, stable=False)


# -- pushes that merge ------------------------------------------------------------------------------------------


def test_two_concurrent_syncs_of_two_backends_end_with_both_layers_and_both_bundles(
    github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    env = {**os.environ, "LLAMA_RUNTIME_HOME": str(tmp_path / "home")}
    for run, tag in enumerate(("b7001", "b7002", "b7003")):
        if tag != "b7001":
            publish(github, tmp_path, tag)
        shas = attest_both(github, tmp_path, tag)
        base = [sys.executable, "-m", "llama_runtime", "--json", "mirror", "sync", "--dest", registry.url()]
        base += ["--api-url", github.api_url, "--tag", tag, "--platform", "linux-x64"]
        children = [
            subprocess.Popen([*base, "--backend", backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            for backend in ("cpu", "vulkan")
        ]
        for child in children:
            out, err = child.communicate(timeout=CLI_PROCESS_TIMEOUT_SECONDS)
            assert child.returncode == 0, (run, out, err)
        reg = client(registry)
        assert layer_names(reg, tag) == sorted(shas), run
        # (upstream lists a bundle per build for the vulkan bytes, which are the same in every build)
        assert set(bundle_assets(reg, tag)) == {f"sha256:{s}" for s in shas.values()}, run


def test_a_second_backend_keeps_the_first_ones_layer_and_bundle(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    shas = attest_both(github, tmp_path, "b7001")
    sync(capsys, github.api_url, registry.url(), "--tag", "b7001", *cpu())
    reg = client(registry)
    assert bundle_assets(reg, "b7001") == [f"sha256:{shas[CPU_TAR.format(tag='b7001')]}"]
    sync(capsys, github.api_url, registry.url(), "--tag", "b7001", "--platform", "linux-x64", "--backend", "vulkan")
    assert layer_names(reg, "b7001") == sorted(shas)
    assert bundle_assets(reg, "b7001") == sorted(f"sha256:{s}" for s in shas.values())
    # Each bundle's layer is titled (`oras pull` names the file by it), and each bundle manifest has its tag.
    head = reg.head_manifest("b7001")
    assert head is not None
    kept = [t for t in reg.tags() if t.startswith(head.digest.replace(":", "-") + ".") and t.endswith(".att")]
    assert len(kept) == 2
    for referrer in reg.referrers(head.digest, BUNDLE_TYPE):
        manifest = reg.get_manifest(referrer.digest)
        assert manifest is not None
        (layer,) = manifest.doc["layers"]
        assert layer["annotations"]["org.opencontainers.image.title"].endswith(".tar.gz.sigstore.json")


def test_a_tagged_sync_after_a_newest_sync_leaves_every_digest_unchanged_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry
) -> None:
    sync(capsys, github.api_url, registry.url(), "--newest", "2", *cpu())
    before = digests(client(registry))
    writes = len(registry.writes())
    for extra in (("--tag", "b7001"), ("--tag", "v0.2.0"), ("--newest", "2"), ("--newest", "1")):
        report = sync(capsys, github.api_url, registry.url(), *extra, *cpu())
        assert report["written"] == [], (extra, report)
        assert digests(client(registry)) == before, extra
    assert registry.writes()[writes:] == []  # the registry's own log: no PUT, POST or PATCH at all


def test_the_same_build_gets_the_same_digest_through_github_a_directory_and_another_registry(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    first = sync(capsys, github.api_url, registry.url(), "--newest", "2", *cpu())
    github.stop()
    directory = tmp_path / "airgap-dir"
    sync(capsys, registry.url(), str(directory), "--newest", "2")
    inner = registry.url("airgap/llama.cpp")
    through_dir = sync(capsys, directory.as_uri(), inner, "--newest", "2")
    assert through_dir["manifests"] == first["manifests"]
    copy = registry.url("copy/llama.cpp")
    direct = sync(capsys, registry.url(), copy, "--newest", "2")
    assert direct["manifests"] == first["manifests"]
    # A digest pin taken on the connected side holds on the far side.
    assert digests(client(registry, "airgap/llama.cpp"))["v0.2.0"] == first["manifests"]["b7001"]


# -- channels belong to the admin once promoted -----------------------------------------------------------------


def test_a_promotion_holds_across_syncs_until_handed_back_and_the_rollout_holds(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    url = registry.url()
    first = sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    assert first["channels"] == {"stable": "b7001"}
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "stable")
    assert code == 0, moved
    publish(github, tmp_path, "b7002")  # upstream cuts v0.3.0 at b7002
    for _hourly in range(2):
        report = sync(capsys, github.api_url, url, *cpu())
        assert report["channels"] == {} and "stable" in report["channels_held"], report
        assert client(registry).head_manifest("stable").digest == first["manifests"]["b7000"]  # type: ignore[union-attr]
    # The documented rollout: canary first, then stable; both hold across the next sync.
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7002", "--to", "canary")
    assert code == 0, moved
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7002", "--to", "stable")
    assert code == 0, moved
    publish(github, tmp_path, "b7003")
    report = sync(capsys, github.api_url, url, *cpu())
    now = digests(client(registry))
    assert now["stable"] == now["canary"] == now["b7002"] != now["b7003"]
    # Handed back, the next sync moves it again.
    code, back = cli_json(capsys, "mirror", "promote", "--dest", url, "--to", "stable", "--to-sync")
    assert code == 0 and back["to_sync"] is True, back
    report = sync(capsys, github.api_url, url, *cpu())
    assert report["channels"] == {"stable": "b7003"}, report
    assert digests(client(registry))["stable"] == digests(client(registry))["b7003"]


def test_a_channel_moved_by_another_tool_is_left_alone_and_channels_none_moves_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    url = registry.url()
    sync(capsys, github.api_url, url, "--tag", "b7000", *cpu())
    first = sync(capsys, github.api_url, url, "--newest", "1", *cpu())
    reg = client(registry)
    manifest = reg.get_manifest("b7000")
    assert manifest is not None
    reg.put_manifest("stable", manifest.raw, manifest.media_type)  # `crane tag`, `skopeo copy`: no record
    publish(github, tmp_path, "b7002")
    report = sync(capsys, github.api_url, url, *cpu())
    assert "stable" in report["channels_held"] and "another tool" in report["channels_held"]["stable"]
    assert digests(reg)["stable"] == manifest.digest != first["manifests"]["b7001"]
    report = sync(capsys, github.api_url, url, "--channels", "none", "--tag", "b7001", *cpu())
    assert report["channels"] == {} and report["channels_held"] == {}
    code, err = cli_json(capsys, "mirror", "sync", "--dest", url, "--api-url", github.api_url, "--channels", "canary")
    assert code == 2 and "--channels" in err["error"]["message"], err


@pytest.mark.parametrize(
    ("channel", "says"),
    [
        ("sha256-" + "ab" * 32, "referrers tag"),
        ("sha256-" + "ab" * 32 + ".0123456789abcdef.att", "referrers tag"),
        ("b7001.att", "attestation"),
        ("llama-runtime.channels", "record"),
        ("nightly", "newest build tag"),
        ("b7001", "not a channel name"),
    ],
)
def test_promote_refuses_reserved_tags_and_nightly_with_exit_2_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, channel: str, says: str
) -> None:
    sync(capsys, github.api_url, registry.url(), "--newest", "2", *cpu())
    before, writes = digests(client(registry)), len(registry.writes())
    code, err = cli_json(capsys, "mirror", "promote", "--dest", registry.url(), "--tag", "b7000", "--to", channel)
    assert code == 2 and says in err["error"]["message"], err
    assert registry.writes()[writes:] == [] and digests(client(registry)) == before


def test_promote_quiet_prints_nothing_and_ca_bundle_is_accepted_after_the_verb(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    from llama_runtime.updater.cli.main import main

    sync(capsys, github.api_url, registry.url(), "--newest", "2", *cpu())
    capsys.readouterr()
    pem = tmp_path / "none.pem"
    pem.write_text("")
    argv = ["mirror", "promote", "--dest", registry.url(), "--tag", "b7000", "--to", "canary", "-q"]
    assert main([*argv, "--ca-bundle", str(pem)]) == 0
    assert capsys.readouterr().out == ""
    assert digests(client(registry))["canary"] == digests(client(registry))["b7000"]


# -- provenance that survives -----------------------------------------------------------------------------------


@pytest.fixture
def attested(
    capsys: pytest.CaptureFixture[str], registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A fork's b7001 with a real Sigstore bundle, synced to the registry; the verification remapped to it."""
    from tests.test_provenance_e2e import BEACON, BEACON_WORKFLOW, real_bundle, remap_subject, sha256_of
    from tests.test_provenance_offline import DATA, archive

    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(DATA / "staging_trusted_root.json"))
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    tarball = archive(tmp_path)
    with FakeGitHub() as upstream:
        upstream.add_release(BEACON, "b7001", {tarball.name: tarball})
        upstream.add_attestation(BEACON, sha256_of(tarball), real_bundle())
        sync(capsys, upstream.api_url, registry.url(), "--repo", BEACON)
    remap_subject(monkeypatch, sha256_of(tarball))
    return BEACON


def update(capsys: pytest.CaptureFixture[str], home: Path, url: str, repo: str, *extra: str) -> tuple[int, Any]:
    return cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--repo", repo, "--tag", "b7001", *extra)


def test_garbage_collection_of_untagged_manifests_keeps_every_attestation(
    capsys: pytest.CaptureFixture[str], registry: Registry, attested: str, home: Path
) -> None:
    reg = client(registry)
    assert any(t.endswith(".att") for t in reg.tags())
    registry.garbage_collect()
    code, payload = update(capsys, home, registry.url(), attested, "--require-provenance")
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"


def test_a_listed_bundle_the_registry_no_longer_holds_is_unverified_saying_so(
    capsys: pytest.CaptureFixture[str], registry: Registry, attested: str, home: Path, tmp_path: Path
) -> None:
    reg = client(registry)
    subject = reg.head_manifest("b7001")
    assert subject is not None
    (referrer,) = reg.referrers(subject.digest, BUNDLE_TYPE)
    assert reg.delete_manifest(referrer.digest)  # what GC of an untagged bundle did to older pushes
    code, payload = update(capsys, home, registry.url(), attested)
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "unverified" and "no longer holds" in provenance["reason"], provenance


def test_an_index_listing_bundles_without_artifact_type_still_verifies(
    capsys: pytest.CaptureFixture[str], registry: Registry, attested: str, home: Path
) -> None:
    reg = client(registry)
    subject = reg.head_manifest("b7001")
    assert subject is not None
    tag = subject.digest.replace(":", "-")
    index = reg.get_manifest(tag)
    assert index is not None
    stripped = [{k: v for k, v in d.items() if k != "artifactType"} for d in index.doc["manifests"]]
    doc = {**index.doc, "manifests": stripped}
    reg.put_manifest(tag, json.dumps(doc).encode(), INDEX_MEDIA_TYPE)  # as `skopeo copy --all` rewrites it
    code, payload = update(capsys, home, registry.url(), attested, "--require-provenance")
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"


@pytest.mark.parametrize("how", ["sync --all", "copy --all of every tag"])
def test_skopeo_across_an_air_gap_keeps_provenance_and_digests(
    capsys: pytest.CaptureFixture[str], registry: Registry, attested: str, home: Path, tmp_path: Path, how: str
) -> None:
    import shutil

    skopeo = shutil.which("skopeo")
    if skopeo is None:
        pytest.skip("skopeo is not installed (apt-get install skopeo)")
    plain = ["--src-tls-verify=false", "--dest-tls-verify=false"]
    with Registry(tmp_path / "inner") as inner:
        source = f"{registry.host}/fleet/llama.cpp"
        if how.startswith("sync"):
            commands = [[skopeo, "sync", "--all", *plain, "--src", "docker", "--dest", "docker", source,
                         f"{inner.host}/airgap"]]  # fmt: skip
        else:
            commands = [
                [
                    skopeo,
                    "copy",
                    "--all",
                    *plain,
                    f"docker://{source}:{tag}",
                    f"docker://{inner.host}/airgap/llama.cpp:{tag}",
                ]
                for tag in client(registry).tags()
            ]
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, timeout=CLI_PROCESS_TIMEOUT_SECONDS)
            assert done.returncode == 0, done.stderr
        inner.garbage_collect()
        outer_digests = digests(client(registry))
        assert digests(client(inner, "airgap/llama.cpp"))["b7001"] == outer_digests["b7001"]
        code, payload = update(capsys, home, inner.url("airgap/llama.cpp"), attested, "--require-provenance")
        assert code == 0, payload
        assert payload["active"]["provenance"]["status"] == "verified"


def test_a_directory_air_gap_keeps_provenance(
    capsys: pytest.CaptureFixture[str], registry: Registry, attested: str, home: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "carried"
    sync(capsys, registry.url(), str(directory), "--repo", attested)
    with Registry(tmp_path / "inner") as inner:
        sync(capsys, directory.as_uri(), inner.url(), "--repo", attested)
        code, payload = update(capsys, home, inner.url(), attested, "--require-provenance")
        assert code == 0, payload
        assert payload["active"]["provenance"]["status"] == "verified"


# -- what an interrupted or starved sync says -------------------------------------------------------------------


def test_an_interrupted_registry_sync_says_the_mirror_keeps_complete_builds_not_a_backend_error(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.updater.offline import registry_push

    def interrupted(*_args: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(registry_push._BuildPush, "push", interrupted)
    code, err = cli_json(capsys, "mirror", "sync", "--dest", registry.url(), "--api-url", github.api_url, *cpu())
    assert code == 130, err
    message = err["error"]["message"]
    assert "keeps every build that was complete" in message and "Unknown backend" not in message, message


def test_a_full_tmpdir_during_a_registry_sync_is_exit_4_about_tmpdir_not_the_runtime(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from llama_runtime.updater.offline import registry_push

    def full(*_args: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(registry_push._BuildPush, "_download", full)
    code, err = cli_json(capsys, "mirror", "sync", "--dest", registry.url(), "--api-url", github.api_url, *cpu())
    assert code == 4, err
    message = err["error"]["message"] + err["error"].get("hint", "")
    assert "TMPDIR" in message and "gc" not in message and "active runtime" not in message, message
    assert client(registry).tags() == []  # nothing tagged


# -- canaries follow, fleets roll back --------------------------------------------------------------------------


def test_a_canary_machine_follows_its_channel_with_check_apply(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, home: Path
) -> None:
    url = registry.url()
    sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    code, _ = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "canary")
    assert code == 0
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--channel", "canary")
    assert code == 0 and payload["active"]["tag"] == "b7000", payload
    code, _ = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7001", "--to", "canary")
    assert code == 0
    code, checked = cli_json(capsys, "check", "--home", str(home), "--api-url", url, "--apply")
    assert code == 0 and checked["latest"] == "b7001" and checked["applied"] is True, checked
    code, status = cli_json(capsys, "status", "--home", str(home))
    assert code == 0 and status["active"]["tag"] == "b7001", status


def test_a_fleet_rolled_back_by_one_promote_is_followed_only_by_follow_exact_reusing_the_previous_runtime(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, home: Path
) -> None:
    from tests.helpers import assert_runs

    url = registry.url()
    first = sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    base = ("--home", str(home), "--api-url", url)
    code, payload = cli_json(capsys, "update", *base, "--tag", "b7000")
    assert code == 0, payload
    code, _ = cli_json(capsys, "unpin", "--home", str(home))
    assert code == 0
    code, checked = cli_json(capsys, "check", *base, "--apply")
    assert code == 0 and checked["applied"] is True, checked
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "stable")
    assert code == 0 and moved["digest"] == first["manifests"]["b7000"], moved
    # The default: never a downgrade.
    code, checked = cli_json(capsys, "check", *base, "--apply")
    assert code == 0 and checked["update_available"] is False and "never downgrading" in checked["reason"], checked
    # --follow exact: the channel is followed down, to the runtime already installed (nothing downloaded).
    layer = json.loads(client(registry).get_manifest("b7000").raw)["layers"][0]["digest"]  # type: ignore[union-attr]
    seen = len(registry.requests())
    code, checked = cli_json(capsys, "check", *base, "--apply", "--follow", "exact")
    assert code == 0 and checked["applied"] is True, checked
    code, status = cli_json(capsys, "status", "--home", str(home))
    assert code == 0 and status["active"]["tag"] == "b7000", status
    assert not [p for m, p in registry.requests()[seen:] if m == "GET" and layer in p]
    assert_runs(Path(status["active"]["binary"]))
    code, err = cli_json(capsys, "check", *base, "--follow", "down")
    assert code == 2 and "--follow" in err["error"]["message"], err


def test_channels_names_which_channel_tags_a_sync_moves(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, tmp_path: Path
) -> None:
    from tests.test_mirror import WIN

    archives = {
        CPU_TAR.format(tag="b7002"): b"cpu",
        VULKAN_TAR.format(tag="b7002"): b"vk",
        WIN.format(tag="b7002"): b"w",
    }
    github.add_release(REPO, "b7002", archives, stable=False)  # a nightly build no release names yet
    url = registry.url()
    flags = ("--channel", "nightly", "--channels", "stable,nightly", "--newest", "2")
    report = sync(capsys, github.api_url, url, *flags, *cpu())
    assert report["channels"] == {"nightly": "b7002", "stable": "b7001"}, (report["releases"], report["warnings"])
    now = digests(client(registry))
    assert (now["nightly"], now["stable"]) == (now["b7002"], now["b7001"])


# -- the same, on the registries a company runs: TLS from a private CA with htpasswd, and a token service --------


@pytest.fixture(params=["tls-htpasswd", "bearer"])
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Registry, str]]:
    """A registry as a company runs it, and its URL; the sync job's credential in the environment."""
    from tests.test_oci_tls import make_ca_and_server
    from tests.token_server import TokenServer

    root = tmp_path_factory.mktemp(request.param)
    monkeypatch.setenv("DOCKER_CONFIG", str(root / "nodocker"))
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_USERNAME", "ci")
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "pw")
    if request.param == "tls-htpasswd":
        ca, cert, key = make_ca_and_server(root / "pki")
        monkeypatch.setenv("LLAMA_RUNTIME_CA_BUNDLE", str(ca))
        with Registry(root / "registry", users={"ci": "pw"}, tls=(cert, key), access_log=True) as registry:
            yield registry, f"oci+https://{registry.host}/fleet/llama.cpp"
        return
    tokens = TokenServer(root / "token", {"ci": "pw"}, anonymous_pull=True)
    try:
        with Registry(root / "registry", auth=tokens.registry_auth(), access_log=True) as registry:
            yield registry, registry.url()
    finally:
        tokens.close()


def test_on_a_secured_registry_a_no_op_sync_writes_nothing_and_a_promotion_holds(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, secured: tuple[Registry, str], tmp_path: Path
) -> None:
    registry, url = secured
    first = sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    writes = len(registry.writes())
    again = sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    assert again["written"] == [] and again["manifests"] == first["manifests"], again
    assert registry.writes()[writes:] == []
    code, moved = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7000", "--to", "stable")
    assert code == 0, moved
    publish(github, tmp_path, "b7002")
    report = sync(capsys, github.api_url, url, *cpu())
    assert report["channels"] == {} and "stable" in report["channels_held"], report
    assert report["manifests"]["b7002"] and moved["digest"] == first["manifests"]["b7000"]


def test_a_release_cut_after_its_build_was_pushed_adds_a_tag_and_moves_no_digest(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry, home: Path, tmp_path: Path
) -> None:
    url = registry.url()
    nightly_build(github, tmp_path, "b7002")
    nightly = sync(capsys, github.api_url, url, "--channel", "nightly", "--channels", "none", *cpu())
    assert nightly["releases"] == ["b7002"]
    github.cut_version(REPO, "v0.3.0", "b7002")  # make-release.yml, a day later
    stable = sync(capsys, github.api_url, url, *cpu())
    assert stable["manifests"]["b7002"] == nightly["manifests"]["b7002"], stable
    assert stable["versions"] == ["v0.3.0"] and stable["channels"] == {"stable": "b7002"}
    assert sorted(stable["written"]) == ["llama-runtime.channels", "stable", "v0.3.0"]
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url)
    assert code == 0 and payload["active"]["tag"] == "b7002", payload
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["release_version"] == "v0.3.0"  # read from the registry's v0.3.0 tag, not the config


def test_tags_naming_a_build_follow_it_when_it_gains_a_backend(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, registry: Registry
) -> None:
    url = registry.url()
    sync(capsys, github.api_url, url, "--newest", "2", *cpu())
    code, _ = cli_json(capsys, "mirror", "promote", "--dest", url, "--tag", "b7001", "--to", "canary")
    assert code == 0
    report = sync(capsys, github.api_url, url, "--tag", "b7001", "--platform", "linux-x64", "--backend", "vulkan")
    now = digests(client(registry))
    assert now["b7001"] == report["manifests"]["b7001"]
    assert now["v0.2.0"] == now["stable"] == now["canary"] == now["b7001"]  # vulkan machines get vulkan
    both = sorted([CPU_TAR.format(tag="b7001"), VULKAN_TAR.format(tag="b7001")])
    assert layer_names(client(registry), "stable") == both
    assert now["v0.1.0"] == now["b7000"]
