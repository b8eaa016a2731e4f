"""Fully minted Sigstore bundles: a private trust root, verified end to end as production bundles are.

Each bundle here is minted by tests/sigstore_mint.py under a private trust
root (its own Fulcio CA, CT log and Rekor keys, with real transparency-log
proofs) and verified by the project's own code: ``attestation.load_trust_root``
on a ``LLAMA_RUNTIME_TRUSTED_ROOT`` file and ``attestation.verify_bundle``
(sigstore-python's ``Verifier.verify_dsse`` with no network, then the
statement check). The claims, fixture by fixture:

* ``minted_root`` / ``sigstore``: the verification pipeline and the signer
  policy accept a bundle with upstream's identity and refuse each kind of
  damage, for sigstore's own reason. They say nothing about Sigstore's
  production or staging keys; the real staging bundle in tests/data/sigstore
  (tests/test_provenance.py, tests/test_provenance_e2e.py) proves that path.
* ``attested_b7001``: a plain ``update`` of a ggml-org/llama.cpp build whose
  real archive (the real Vulkan llama-server) is attested by its own sha256,
  with no substitution anywhere, installs ``verified`` and records the signer.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.errors import ProvenanceError
from llama_runtime.updater.verify.signer import SignerPolicy, TrustRoot, load_trust_root, verify_bundle
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, run_json
from tests.sigstore_mint import (
    DEFAULT_SIGNED_AT,
    GitHubIdentity,
    PrivateSigstore,
    private_sigstore,
    release_publish_identity,
    release_yml_identity,
    slsa_statement,
)
from tests.test_update_e2e import failing_update, installed_b7000

ARTIFACT = b"llama-b7001-bin-ubuntu-vulkan-x64.tar.gz stand-in bytes\n"
ARTIFACT_NAME = VULKAN_TAR.format(tag="b7001")
UPSTREAM = SignerPolicy(repository=REPO)  # the default: any workflow of ggml-org/llama.cpp, master or a tag


@pytest.fixture(scope="session")
def sigstore() -> PrivateSigstore:
    """The private Sigstore instance (proves the pipeline and policy, never Sigstore's real keys)."""
    return private_sigstore()


@pytest.fixture(scope="session")
def trust(minted_root: Path) -> TrustRoot:
    """The private root loaded as production code loads ``LLAMA_RUNTIME_TRUSTED_ROOT`` (offline, no TUF)."""
    return load_trust_root(minted_root, offline=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def minted(sigstore: PrivateSigstore, identity: GitHubIdentity | None = None, **options: Any) -> dict[str, Any]:
    """A bundle attesting ``ARTIFACT`` (SLSA provenance v1), signed as ``identity`` (release.yml by default)."""
    identity = identity or release_yml_identity()
    return sigstore.mint(slsa_statement({ARTIFACT_NAME: sha256(ARTIFACT)}, identity), identity, **options)


def refusal(bundle: dict[str, Any], trust: TrustRoot, data: bytes = ARTIFACT, policy: SignerPolicy = UPSTREAM) -> str:
    with pytest.raises(ProvenanceError) as caught:
        verify_bundle(bundle, sha256(data), policy, trust)
    return str(caught.value)


# -- the minted bundle verifies ------------------------------------------------------------


def test_minted_bundle_verifies_offline_through_the_trusted_root_file_and_names_its_signer(
    sigstore: PrivateSigstore, minted_root: Path
) -> None:
    trust = load_trust_root(minted_root, offline=True)
    assert "LLAMA_RUNTIME_TRUSTED_ROOT" in trust.description and str(minted_root) in trust.description
    signer = verify_bundle(minted(sigstore), sha256(ARTIFACT), UPSTREAM, trust)
    identity = release_yml_identity()
    assert signer.to_json() == {
        "issuer": "https://token.actions.githubusercontent.com",
        "repository": REPO,
        "workflow": ".github/workflows/release.yml",
        "ref": "refs/heads/master",
        "source_ref": "refs/heads/master",
        "signer_commit": identity.commit,
        "commit": identity.commit,
        "run_url": identity.run_url,
        "trigger": "push",
        "build_signer_uri": f"https://github.com/{REPO}/.github/workflows/release.yml@refs/heads/master",
    }


def test_release_publish_era_bundle_verifies_where_the_policy_names_that_workflow(
    sigstore: PrivateSigstore, trust: TrustRoot
) -> None:
    # The era's e2e below waits for the prov-policy branch; this shows only the policy stands in its way.
    identity = release_publish_identity()
    policy = SignerPolicy(repository=REPO, workflow=".github/workflows/release-publish.yml")
    signer = verify_bundle(minted(sigstore, identity), sha256(ARTIFACT), policy, trust)
    assert (signer.workflow, signer.trigger, signer.ref) == (identity.workflow, "workflow_run", "refs/heads/master")
    assert signer.commit == identity.commit


def test_minted_bundle_carries_a_dsse_entry_proof_and_promise_inside_the_certificate_window(
    sigstore: PrivateSigstore,
) -> None:
    from cryptography import x509

    bundle = minted(sigstore)
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    assert entry["kindVersion"] == {"kind": "dsse", "version": "0.0.1"}
    assert entry["inclusionPromise"]["signedEntryTimestamp"] and entry["inclusionProof"]["hashes"]
    assert entry["inclusionProof"]["checkpoint"]["envelope"].startswith("rekor.llama-runtime.test - ")
    body = json.loads(base64.b64decode(entry["canonicalizedBody"]))
    payload = base64.b64decode(bundle["dsseEnvelope"]["payload"])
    assert body["spec"]["payloadHash"] == {"algorithm": "sha256", "value": sha256(payload)}
    cert = x509.load_der_x509_certificate(base64.b64decode(bundle["verificationMaterial"]["certificate"]["rawBytes"]))
    integrated = int(entry["integratedTime"])
    assert cert.not_valid_before_utc.timestamp() < integrated < cert.not_valid_after_utc.timestamp()
    assert cert.not_valid_before_utc == DEFAULT_SIGNED_AT


def test_minting_is_deterministic_and_fast(sigstore: PrivateSigstore) -> None:
    started = time.perf_counter()
    fresh = PrivateSigstore.create()  # not the cached instance: keys and CA certificates rebuilt
    first = minted(fresh)
    elapsed = time.perf_counter() - started
    assert first == minted(sigstore)  # same name, same bytes: a cached bundle can be compared byte for byte
    assert fresh.trusted_root() == sigstore.trusted_root()
    assert elapsed < 1.0, f"minting a trust root and a bundle took {elapsed:.2f} s"


def test_minted_trusted_root_has_the_shape_of_sigstores_staging_root(sigstore: PrivateSigstore) -> None:
    staging = json.loads((Path(__file__).parent / "data" / "sigstore" / "staging_trusted_root.json").read_text())
    ours = sigstore.trusted_root()
    assert ours.keys() == staging.keys()
    for section in ("tlogs", "ctlogs", "certificateAuthorities"):
        assert ours[section][0].keys() == staging[section][0].keys(), section
    assert len(ours["certificateAuthorities"][0]["certChain"]["certificates"]) == 2  # intermediate, root


# -- tampering fails, for sigstore's reason ---------------------------------------------------


def test_one_byte_of_the_artifact_changed_is_refused_as_another_subject(
    sigstore: PrivateSigstore, trust: TrustRoot
) -> None:
    changed = bytes([ARTIFACT[0] ^ 1]) + ARTIFACT[1:]
    message = refusal(minted(sigstore), trust, changed)
    assert message == f"it attests {sha256(ARTIFACT)[:12]}…, not this file (sha256 {sha256(changed)[:12]}…)"


def test_a_changed_statement_is_refused_by_the_envelope_signature(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    bundle = minted(sigstore)
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    statement["subject"][0]["digest"]["sha256"] = sha256(b"other bytes")
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    assert refusal(bundle, trust, b"other bytes") == "DSSE: invalid signature"


def test_a_certificate_from_another_ca_is_refused_by_the_chain(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    foreign = minted(sigstore.with_other_ca("another CA"))  # same CT log and Rekor keys: only the CA differs
    assert refusal(foreign, trust).startswith("failed to build timestamp certificate chain")


def test_a_broken_inclusion_proof_is_refused_by_the_merkle_check(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    bundle = minted(sigstore)
    hashes = bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["hashes"]
    hashes[0] = base64.b64encode(bytes(32)).decode()
    assert refusal(bundle, trust).startswith("invalid log entry: inclusion proof contains invalid root hash")


def test_a_certificate_without_an_sct_is_refused(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    assert refusal(minted(sigstore, embed_sct=False), trust) == (
        "failed to verify SCT on signing certificate: "
        "Certificate does not contain a signed certificate timestamp extension"
    )


def test_an_sct_from_a_ct_log_outside_the_trust_root_is_refused(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    other_log = dataclasses.replace(sigstore, ct_key=PrivateSigstore.create("another CT log").ct_key)
    assert refusal(minted(other_log), trust) == (
        "failed to verify SCT on signing certificate: SCT verify failed: keyring: invalid signature"
    )


def test_a_moved_integration_time_is_refused_by_the_inclusion_promise(
    sigstore: PrivateSigstore, trust: TrustRoot
) -> None:
    bundle = minted(sigstore)
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    entry["integratedTime"] = str(int(entry["integratedTime"]) + 60)  # still inside the certificate's 10 minutes
    assert refusal(bundle, trust).startswith("invalid log entry: SET: invalid inclusion promise")


def test_another_bundles_log_entry_is_refused_as_inconsistent(sigstore: PrivateSigstore, trust: TrustRoot) -> None:
    bundle = minted(sigstore)
    other = sigstore.mint(slsa_statement({"x": sha256(b"x")}, release_yml_identity()), release_yml_identity())
    bundle["verificationMaterial"]["tlogEntries"] = other["verificationMaterial"]["tlogEntries"]  # valid on its own
    assert refusal(bundle, trust) == "log entry payload hash does not match bundle"


def test_a_minted_bundle_fails_against_sigstores_staging_root(sigstore: PrivateSigstore) -> None:
    staging = load_trust_root(Path(__file__).parent / "data" / "sigstore" / "staging_trusted_root.json", offline=True)
    assert refusal(minted(sigstore), staging).startswith("failed to build timestamp certificate chain")


@pytest.mark.parametrize(
    ("identity", "policy", "reason"),
    [
        (release_yml_identity("someone/llama.cpp"), UPSTREAM, f"built in someone/llama.cpp, not in {REPO}"),
        (
            GitHubIdentity(REPO, ".github/workflows/build.yml", "refs/heads/master", "push", "ab" * 20, 7),
            SignerPolicy(REPO, workflow=".github/workflows/release.yml"),  # an opt-in pin
            f"signed by the workflow .github/workflows/build.yml, not by {REPO}'s .github/workflows/release.yml",
        ),
    ],
    ids=["another-repository", "a-workflow-pinned-away"],
)
def test_a_genuine_bundle_of_another_signer_is_refused_by_the_policy(
    sigstore: PrivateSigstore, trust: TrustRoot, identity: GitHubIdentity, policy: SignerPolicy, reason: str
) -> None:
    assert refusal(minted(sigstore, identity), trust, policy=policy) == reason


# -- end to end: a plain update of an attested ggml-org/llama.cpp build -------------------------


def publish_attested(
    github: FakeGitHub,
    sigstore: PrivateSigstore,
    tarball: Path,
    identity: GitHubIdentity,
    tag: str = "b7001",
    *,
    by_url: bool = False,
) -> tuple[str, dict[str, Any]]:
    """Publish ``tag`` of ggml-org/llama.cpp with the real archive, attested by its own sha256.

    ``by_url``: listed as GitHub lists newer attestations (``"bundle": null`` and a
    pre-signed, snappy-compressed ``bundle_url`` on the blob host), beside the
    release attestation an immutable release also gets (which must be set aside).
    """
    name = VULKAN_TAR.format(tag=tag)
    github.add_release(REPO, tag, {name: tarball})
    digest = sha256(tarball.read_bytes())
    bundle = sigstore.mint(slsa_statement({name: digest}, identity), identity)
    if by_url:
        github.add_release_attestation(REPO, digest, by_url=True)
    github.add_attestation(REPO, digest, bundle, by_url=by_url)
    return digest, bundle


def assert_installed_verified(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, identity: GitHubIdentity, root: Path
) -> dict[str, Any]:
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified", provenance
    assert str(root) in provenance["reason"]
    assert (provenance["repository"], provenance["workflow"], provenance["trigger"]) == (
        REPO,
        identity.workflow,
        identity.trigger,
    )
    assert (provenance["commit"], provenance["run_url"]) == (identity.commit, identity.run_url)
    assert provenance["build_signer_uri"] == identity.build_signer_uri
    return dict(payload)


@pytest.mark.e2e
@pytest.mark.usefixtures(installed_b7000.__name__, "private_root_env")
def test_plain_update_of_a_release_yml_attested_build_installs_verified_with_the_signer(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
    minted_root: Path,
) -> None:
    identity = release_yml_identity()
    digest, bundle = publish_attested(github, sigstore, real_vulkan_tarball, identity)
    payload = assert_installed_verified(capsys, home, github, identity, minted_root)
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["provenance"]["bundle"] == bundle  # kept for an offline re-check of an export
    asked = github.requests_to("api", f"/repos/{REPO}/attestations/sha256:{digest}")
    assert [r.status for r in asked] == [404, 200]  # b7000 is the same archive, published unattested
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and status["active"]["provenance"]["status"] == "verified"
    assert status["active"]["provenance"]["trigger"] == "push"


@pytest.mark.e2e
@pytest.mark.usefixtures(installed_b7000.__name__, "private_root_env")
def test_update_of_a_build_attested_under_a_foreign_ca_is_exit_8_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
) -> None:
    publish_attested(github, sigstore.with_other_ca("another CA"), real_vulkan_tarball, release_yml_identity())
    code, payload = failing_update(capsys, home, github)
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_failed"
    assert "failed to build timestamp certificate chain" in payload["error"]["message"]


@pytest.mark.e2e
@pytest.mark.parametrize("by_url", [False, True], ids=["inline", "bundle_url"])
@pytest.mark.usefixtures(installed_b7000.__name__, "private_root_env")
def test_plain_update_of_a_release_publish_attested_build_installs_verified_with_the_signer(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
    minted_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    by_url: bool,
) -> None:
    """Upstream today: release-publish.yml (workflow_run) signs, the API lists the bundle inline or by URL."""
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "t0k-api-only")
    identity = release_publish_identity()  # workflow_run of "Release": upstream since about b11300
    _, bundle = publish_attested(github, sigstore, real_vulkan_tarball, identity, by_url=by_url)
    payload = assert_installed_verified(capsys, home, github, identity, minted_root)
    provenance = payload["active"]["provenance"]
    assert provenance["signer_commit"] == identity.commit  # the publisher's commit, named as the signer's
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["provenance"]["bundle"] == bundle  # stored decoded, whichever way it was listed
    blob = github.requests_to("blob", "/attestations/")
    assert len(blob) == (2 if by_url else 0)  # the provenance bundle and the release attestation
    assert all(r.status == 200 and "authorization" not in r.headers for r in blob)
