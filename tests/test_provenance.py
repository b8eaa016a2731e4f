"""Provenance decisions and the real Sigstore verification path, without a network.

The cryptographic tests verify a real Sigstore staging bundle (tests/data/sigstore/README.md)
with sigstore-python. Its signer cannot be a llama.cpp workflow, so those tests configure
the policy for that bundle's identity; the llama.cpp values of the policy (repository,
release workflow, issuer, the ref it runs at) are tested on their own, on the pure
policy function, with the identity a llama.cpp release certificate carries.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.errors import ProvenanceError, ProvenanceMissingError, RateLimitError
from llama_runtime.runtime.marker import InstallMarker, provenance_summary
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.verify.provenance import Provenance, ProvenanceCheck, combine, parse_attestations
from llama_runtime.updater.verify.signer import (
    EXT_BUILD_SIGNER_URI,
    EXT_ISSUER,
    EXT_RUN_INVOCATION_URI,
    EXT_SOURCE_REPOSITORY_DIGEST,
    EXT_SOURCE_REPOSITORY_REF,
    EXT_SOURCE_REPOSITORY_URI,
    GITHUB_ACTIONS_ISSUER,
    SLSA_PROVENANCE_V1,
    UPSTREAM_RELEASE_WORKFLOW,
    Signer,
    SignerPolicy,
    _der_utf8,
    policy_violation,
    signer_from_extensions,
    statement_violation,
)
from tests.fakegithub import FakeGitHub, Fault

DATA = Path(__file__).parent / "data" / "sigstore"
BEACON = "sigstore-conformance/extremely-dangerous-public-oidc-beacon"
BEACON_WORKFLOW = ".github/workflows/extremely-dangerous-oidc-beacon.yml"
ATTESTED = "a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"
LLAMA = "ggml-org/llama.cpp"


def llama_signer(repo: str = LLAMA, workflow: str = UPSTREAM_RELEASE_WORKFLOW, **changes: str) -> Signer:
    """The identity a llama.cpp release certificate carries (release.yml runs on pushes to master)."""
    values = {
        EXT_ISSUER: GITHUB_ACTIONS_ISSUER,
        EXT_SOURCE_REPOSITORY_URI: f"https://github.com/{repo}",
        EXT_BUILD_SIGNER_URI: f"https://github.com/{repo}/{workflow}@refs/heads/master",
        EXT_SOURCE_REPOSITORY_DIGEST: "4f1a2b3c" * 5,
        EXT_SOURCE_REPOSITORY_REF: "refs/heads/master",
        EXT_RUN_INVOCATION_URI: f"https://github.com/{repo}/actions/runs/32202403598/attempts/1",
    }
    return dataclasses.replace(signer_from_extensions(values), **changes)


def bundle() -> dict[str, Any]:
    return json.loads((DATA / "a.dsse.staging-rekor-v2.txt.sigstore.json").read_text())


def beacon_check(root: str = "staging_trusted_root.json", **kw: Any) -> ProvenanceCheck:
    return ProvenanceCheck(workflow=BEACON_WORKFLOW, trusted_root=DATA / root, **kw)


# -- the llama.cpp policy (pure) ------------------------------------------------------


def test_llama_cpp_release_workflow_on_master_satisfies_the_upstream_policy() -> None:
    signer = llama_signer()
    assert (signer.repository, signer.workflow, signer.ref) == (
        LLAMA,
        ".github/workflows/release.yml",
        "refs/heads/master",
    )
    assert policy_violation(signer, SignerPolicy(LLAMA)) is None


def test_repository_names_compare_case_insensitively_as_on_github() -> None:
    assert policy_violation(llama_signer(repo="GGML-org/Llama.cpp"), SignerPolicy(LLAMA)) is None


@pytest.mark.parametrize(
    ("signer", "policy", "why"),
    [
        (llama_signer(repo="someone/llama.cpp"), SignerPolicy(LLAMA), "built in someone/llama.cpp, not in ggml-org"),
        (llama_signer(), SignerPolicy("someone/llama.cpp"), "built in ggml-org/llama.cpp, not in someone"),
        (
            llama_signer(workflow=".github/workflows/docker.yml"),
            SignerPolicy(LLAMA, workflow=UPSTREAM_RELEASE_WORKFLOW),  # an opt-in pin
            "the workflow .github/workflows/docker.yml, not by ggml-org/llama.cpp's .github/workflows/release.yml",
        ),
        (llama_signer(issuer="https://accounts.google.com"), SignerPolicy(LLAMA), "from https://accounts.google.com"),
        (llama_signer(issuer=""), SignerPolicy(LLAMA), "from no issuer"),
        # A reusable workflow of another repository signed it: the signer URI names that repository.
        (
            llama_signer(build_signer_uri="https://github.com/evil/x/.github/workflows/release.yml@refs/heads/main"),
            SignerPolicy(LLAMA),
            "of another repository",
        ),
        (llama_signer(source_ref="refs/heads/feature"), SignerPolicy(LLAMA, "master"), "the ref refs/heads/feature"),
    ],
)
def test_signers_outside_the_policy_are_named_with_the_reason(signer: Signer, policy: SignerPolicy, why: str) -> None:
    violation = policy_violation(signer, policy)
    assert violation is not None and why in violation


def test_a_fork_is_checked_against_its_own_repository_with_the_same_rules() -> None:
    fork = "someone/llama.cpp"
    check = ProvenanceCheck()
    assert check.policy_for(fork) == SignerPolicy(fork, None, None, None, GITHUB_ACTIONS_ISSUER)
    assert policy_violation(llama_signer(repo=fork), check.policy_for(fork)) is None


def test_certificate_without_extensions_names_no_signer_and_fails_the_policy() -> None:
    signer = signer_from_extensions({})
    assert signer == Signer("", "", "", "", "", "", "", "", "")
    assert policy_violation(signer, SignerPolicy(LLAMA)) is not None


def test_fulcio_extension_values_decode_from_der_utf8_short_and_long_form() -> None:
    assert _der_utf8(b"\x0c\x05hello") == "hello"
    long_text = "x" * 200
    assert _der_utf8(b"\x0c\x81\xc8" + long_text.encode()) == long_text
    assert _der_utf8(b"https://token.actions.githubusercontent.com") == GITHUB_ACTIONS_ISSUER  # the v1 raw form


# -- the statement and the API answer (pure) ------------------------------------------


def statement(**changes: Any) -> dict[str, Any]:
    base = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "llama-b7000-bin-ubuntu-x64.tar.gz", "digest": {"sha256": "AB" * 32}}],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {},
    }
    return {**base, **changes}


def test_statement_naming_the_file_sha256_is_accepted_case_insensitively() -> None:
    assert statement_violation(statement(), "ab" * 32) is None


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (statement(predicateType="https://spdx.dev/Document/v2.3"), "not SLSA build provenance"),
        (statement(_type="https://example.com/Statement"), "not an in-toto statement"),
        (statement(subject=[{"name": "x", "digest": {"sha512": "00"}}]), "no sha256 subject"),
        (statement(subject=[{"name": "x", "digest": {"sha256": "cd" * 32}}]), "it attests cdcdcdcdcdcd…"),
        ("not a statement", "not an in-toto statement"),
    ],
)
def test_statements_that_do_not_attest_this_file_are_refused(payload: object, why: str) -> None:
    violation = statement_violation(payload, "ab" * 32)
    assert violation is not None and why in violation


def test_attestations_parse_from_the_api_answer_a_bundle_file_or_json_lines() -> None:
    one = bundle()
    api = {"attestations": [{"bundle": one, "repository_id": 1}, {"bundle": None, "bundle_url": "https://x"}]}
    assert parse_attestations(api) == [one]
    assert parse_attestations(one) == [one]
    assert parse_attestations([one, one]) == [one, one]
    assert parse_attestations({"attestations": []}) == []
    assert parse_attestations([]) == []
    assert parse_attestations({"message": "Not Found"}) == []


# -- the real cryptographic path ------------------------------------------------------


def test_real_staging_bundle_verifies_offline_and_names_its_signer() -> None:
    result = beacon_check().evaluate("a.txt", ATTESTED, BEACON, [bundle()])
    assert result.status == "verified"
    assert result.signer is not None
    assert result.signer.workflow == BEACON_WORKFLOW
    assert result.signer.commit == "977e8d08554ca9bda279c96e91be2119fb67c730"
    assert result.signer.run_url.endswith("/actions/runs/25821282059/attempts/1")
    assert result.signer.trigger == "workflow_dispatch"
    assert "staging_trusted_root.json" in result.reason
    assert result.bundle == bundle()


def refused(check: ProvenanceCheck, bundles: list[dict[str, Any]], sha256: str = ATTESTED, repo: str = BEACON) -> str:
    with pytest.raises(ProvenanceError) as caught:
        check.evaluate("a.txt", sha256, repo, bundles)
    assert caught.value.exit_code == 8
    return caught.value.message


def test_real_bundle_from_another_repository_is_refused() -> None:
    assert f"built in {BEACON}, not in {LLAMA}" in refused(beacon_check(), [bundle()], repo=LLAMA)


def test_real_bundle_from_a_workflow_pinned_away_is_refused() -> None:
    pinned = {BEACON: UPSTREAM_RELEASE_WORKFLOW}
    message = refused(ProvenanceCheck(trusted_root=DATA / "staging_trusted_root.json", workflows=pinned), [bundle()])
    assert f"signed by the workflow {BEACON_WORKFLOW}, not by {BEACON}'s .github/workflows/release.yml" in message


def test_real_bundle_for_other_bytes_is_refused() -> None:
    assert "it attests a0cfc71271d6…, not this file (sha256 000000000000…)" in refused(
        beacon_check(), [bundle()], "0" * 64
    )


def test_bundle_with_a_rewritten_subject_fails_its_signature() -> None:
    tampered = copy.deepcopy(bundle())
    inner = json.loads(base64.b64decode(tampered["dsseEnvelope"]["payload"]))
    inner["subject"][0]["digest"]["sha256"] = "0" * 64
    tampered["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(inner).encode()).decode()
    assert "DSSE: invalid signature" in refused(beacon_check(), [tampered], "0" * 64)


def test_bundle_with_a_changed_certificate_is_refused() -> None:
    tampered = copy.deepcopy(bundle())
    raw = bytearray(base64.b64decode(tampered["verificationMaterial"]["certificate"]["rawBytes"]))
    raw[-10] ^= 0x01  # inside the CA's signature over the certificate
    tampered["verificationMaterial"]["certificate"]["rawBytes"] = base64.b64encode(bytes(raw)).decode()
    assert refused(beacon_check(), [tampered])


def test_stale_trust_root_refuses_and_says_how_to_refresh() -> None:
    with pytest.raises(ProvenanceError) as caught:
        beacon_check("staging_trusted_root.stale.json").evaluate("a.txt", ATTESTED, BEACON, [bundle()])
    assert "SCT" in caught.value.message and "staging_trusted_root.stale.json" in caught.value.message
    assert caught.value.hint is not None and "LLAMA_RUNTIME_TRUSTED_ROOT" in caught.value.hint


def test_something_that_is_not_a_bundle_is_refused_not_skipped() -> None:
    assert "not a valid Sigstore bundle" in refused(beacon_check(), [{"verificationMaterial": {}}])


def test_one_valid_bundle_among_invalid_ones_verifies() -> None:
    broken = copy.deepcopy(bundle())
    broken["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(b"\x00" * 70).decode()
    assert beacon_check().evaluate("a.txt", ATTESTED, BEACON, [broken, bundle()]).status == "verified"


def test_unreadable_configured_trust_root_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "root.json").write_text("{}")
    check = ProvenanceCheck(workflow=BEACON_WORKFLOW, trusted_root=tmp_path / "root.json")
    with pytest.raises(Exception) as caught:
        check.evaluate("a.txt", ATTESTED, BEACON, [bundle()])
    assert getattr(caught.value, "exit_code", None) == 2


# -- absent, unverified, required -----------------------------------------------------


def test_no_attestation_is_absent_or_refused_when_required() -> None:
    assert ProvenanceCheck().evaluate("x.tar.gz", "ab" * 32, LLAMA, []).status == "absent"
    with pytest.raises(ProvenanceMissingError) as caught:
        ProvenanceCheck(require=True).evaluate("x.tar.gz", "ab" * 32, LLAMA, [])
    assert caught.value.exit_code == 8


def test_attestations_listed_only_by_url_are_unverified_not_absent() -> None:
    answer = {"attestations": [{"bundle": None, "bundle_url": "https://example.com/x", "repository_id": 1}]}
    result = ProvenanceCheck().evaluate_answer("x.tar.gz", "ab" * 32, LLAMA, answer)
    assert result == Provenance("unverified", f"{LLAMA} lists 1 attestation(s) by bundle_url that were not fetched")
    assert ProvenanceCheck().evaluate_answer("x.tar.gz", "ab" * 32, LLAMA, []).status == "absent"


def test_not_checked_is_unverified_with_the_reason_or_refused_when_required() -> None:
    assert ProvenanceCheck().not_checked("x", "installed from a file") == Provenance(
        "unverified", "installed from a file"
    )
    with pytest.raises(ProvenanceMissingError):
        ProvenanceCheck(require=True).not_checked("x", "installed from a file")


def test_runtime_provenance_is_verified_only_when_every_asset_is() -> None:
    ok = Provenance("verified", "v", llama_signer())
    absent = Provenance("absent", "none published")
    assert combine([("main", ok), ("cudart", ok)]) is ok
    assert combine([("main", ok), ("cudart", absent)]) == Provenance("absent", "cudart: none published")
    assert combine([("main", absent), ("cudart", Provenance("unverified", "u"))]).status == "unverified"


def test_environment_configures_require_trust_root_workflow_and_offline(tmp_path: Path) -> None:
    (tmp_path / "root.json").write_text("{}")  # named roots are checked to exist when the settings are read
    env = {
        "LLAMA_RUNTIME_REQUIRE_PROVENANCE": "1",
        "LLAMA_RUNTIME_TRUSTED_ROOT": str(tmp_path / "root.json"),
        "LLAMA_RUNTIME_PROVENANCE_WORKFLOW": ".github/workflows/build.yml",
        "LLAMA_RUNTIME_TRUST_ROOT_OFFLINE": "yes",
    }
    assert ProvenanceCheck.from_env(env) == ProvenanceCheck(
        True, ".github/workflows/build.yml", tmp_path / "root.json", True
    )  # the bare workflow: deprecated, for forks only (tests/test_provenance_policy.py)
    assert ProvenanceCheck.from_env({}) == ProvenanceCheck()
    assert ProvenanceCheck.from_env({}, require=True, offline=True) == ProvenanceCheck(require=True, offline=True)


def test_runtimes_installed_before_provenance_checks_report_unverified() -> None:
    marker = InstallMarker("r", "b1", "cpu", "cpu", "a", 1, "0" * 64, True, "t", "llama-server")
    assert provenance_summary(marker)["status"] == "unverified"
    with_bundle = InstallMarker(
        "r", "b1", "cpu", "cpu", "a", 1, "0" * 64, True, "t", "s", provenance={"status": "verified", "bundle": {}}
    )
    assert provenance_summary(with_bundle) == {"status": "verified"}


# -- the attestations endpoint through the GitHub client ------------------------------


def test_client_fetches_attestations_with_the_token_and_treats_404_as_none(github: FakeGitHub) -> None:
    github.add_attestation(LLAMA, "ab" * 32, bundle())
    with GitHubClient(github.api_url, LLAMA, token="t0k") as client:
        answer = client.attestations("ab" * 32)
        assert parse_attestations(answer) == [bundle()]
        assert client.attestations("cd" * 32) == []
    asked = github.requests_to("api", "/attestations/sha256:")
    assert [r.headers.get("authorization") for r in asked] == ["Bearer t0k", "Bearer t0k"]


def test_client_reports_a_spent_rate_limit_on_the_attestations_endpoint(github: FakeGitHub) -> None:
    path = f"/api/repos/{LLAMA}/attestations/sha256:{'ab' * 32}"
    github.inject(path, Fault(status=403, rate_limited=True))
    with GitHubClient(github.api_url, LLAMA) as client, pytest.raises(RateLimitError):
        client.attestations("ab" * 32)


# -- the cost stays off the status path -----------------------------------------------


def test_status_never_imports_sigstore_or_the_snappy_decoder(tmp_path: Path) -> None:
    code = (
        "import sys; from llama_runtime.updater.cli.main import main; "
        f"rc = main(['status', '--json', '--home', {str(tmp_path)!r}]); "
        "sys.stderr.write(repr(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('sigstore', 'tuf', 'pydantic', 'cramjam'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("[]"), done.stderr
