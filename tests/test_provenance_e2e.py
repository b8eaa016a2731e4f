"""End to end: build attestations served by the GitHub-like hub, checked before activation.

The bundle is real: a Sigstore staging bundle from sigstore-python's test data
(tests/data/sigstore/README.md), verified by sigstore-python against the
staging trust root with no network. Its signer is a GitHub Actions workflow of
``sigstore-conformance/extremely-dangerous-public-oidc-beacon``, so the hub
publishes releases under that repository (a fork, as far as llama-runtime can
tell). Its certificate's source ref is ``refs/heads/main``, the beacon's
default branch (the hub answers ``GET /repos/{owner}/{repo}`` with ``main`` for
it), so the default policy accepts it; several tests also set the deprecated
bare ``LLAMA_RUNTIME_PROVENANCE_WORKFLOW`` to its workflow, as a fork configured
before per-repository pins would, and it keeps working there (with a warning).
The llama.cpp identities are tested on minted certificates in
tests/test_provenance_policy.py.

No real bundle attests the test archives, so the one test that installs a
``verified`` runtime re-maps the archive's digest to the digest the real
bundle attests (``remap_subject``); everything else in the check runs as in
production. Every failure asserts that b7000 stays active, unchanged, and runs.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.verify import signer as attestation
from tests.fakegithub import BUNDLE_URL_SIGNATURE, FakeGitHub, Fault
from tests.helpers import REPO, VULKAN_TAR, run_json
from tests.test_update_e2e import failing_update, installed_b7000

# Every test starts from b7000 (the real Vulkan build, unattested) installed and active.
pytestmark = pytest.mark.usefixtures(installed_b7000.__name__)

DATA = Path(__file__).parent / "data" / "sigstore"
BUNDLE = DATA / "a.dsse.staging-rekor-v2.txt.sigstore.json"
BEACON = "sigstore-conformance/extremely-dangerous-public-oidc-beacon"
BEACON_WORKFLOW = ".github/workflows/extremely-dangerous-oidc-beacon.yml"
#: ``update`` arguments that install b7001 from the real bundle's signer repository.
FROM_BEACON = ("--repo", BEACON, "--tag", "b7001", "--backend", "vulkan")
#: What the real bundle attests (its statement's subject "a.txt").
ATTESTED_SHA256 = "a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"


@pytest.fixture(autouse=True)
def staging_trust_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify against the shipped staging root: never a network refresh in tests."""
    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(DATA / "staging_trusted_root.json"))
    monkeypatch.delenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", raising=False)


def real_bundle() -> dict[str, Any]:
    return json.loads(BUNDLE.read_text())


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish(
    github: FakeGitHub, repo: str, tag: str, tarball: Path, bundle: dict[str, Any] | None, *, by_url: bool = False
) -> str:
    github.add_release(repo, tag, {VULKAN_TAR.format(tag=tag): tarball})
    digest = sha256_of(tarball)
    if bundle is not None:
        github.add_attestation(repo, digest, bundle, by_url=by_url)
    return digest


def remap_subject(monkeypatch: pytest.MonkeyPatch, archive_sha256: str) -> None:
    """Verify the real bundle as if it attested the test archive (the one substitution in this file)."""
    real = attestation.verify_bundle

    def verify(bundle: dict[str, Any], sha256: str, policy: Any, trust: Any) -> Any:
        return real(bundle, ATTESTED_SHA256 if sha256 == archive_sha256 else sha256, policy, trust)

    monkeypatch.setattr(attestation, "verify_bundle", verify)


def test_attested_release_installs_verified_with_the_signer_in_marker_and_status(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    remap_subject(monkeypatch, digest)
    code, payload = run_json(capsys, home, github.api_url, "update", *FROM_BEACON)
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified"
    assert provenance["repository"] == BEACON
    assert provenance["workflow"] == BEACON_WORKFLOW
    assert provenance["commit"] == provenance["signer_commit"] == "977e8d08554ca9bda279c96e91be2119fb67c730"
    assert provenance["trigger"] == "workflow_dispatch" and provenance["source_ref"] == "refs/heads/main"
    [deprecated] = [w for w in payload["warnings"] if "LLAMA_RUNTIME_PROVENANCE_WORKFLOW" in w]
    assert f"LLAMA_RUNTIME_PROVENANCE_WORKFLOW={BEACON}={BEACON_WORKFLOW}" in deprecated
    assert provenance["run_url"] == f"https://github.com/{BEACON}/actions/runs/25821282059/attempts/1"
    assert provenance["issuer"] == "https://token.actions.githubusercontent.com"
    assert "bundle" not in provenance
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["provenance"]["status"] == "verified"
    assert marker["provenance"]["bundle"] == real_bundle()  # kept for an offline re-check of an export
    asked = github.requests_to("api", f"/repos/{BEACON}/attestations/sha256:{digest}")
    assert len(asked) == 1
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0 and status["active"]["provenance"]["status"] == "verified"
    assert status["active"]["provenance"]["workflow"] == BEACON_WORKFLOW
    assert [r["provenance"]["status"] for r in status["installed"]] == ["absent", "verified"]


def test_attestation_from_another_repository_is_exit_8_and_nothing_changes(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path
) -> None:
    publish(github, REPO, "b7001", real_vulkan_tarball, real_bundle())
    code, payload = failing_update(capsys, home, github, "--tag", "b7001", "--backend", "vulkan")
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_failed"
    assert f"built in {BEACON}, not in {REPO}" in payload["error"]["message"]


def test_attestation_from_a_workflow_pinned_away_is_exit_8_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", f"{BEACON}=.github/workflows/release.yml")
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    remap_subject(monkeypatch, digest)  # only the pin refuses it
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    message = payload["error"]["message"]
    assert f"signed by the workflow {BEACON_WORKFLOW}, not by {BEACON}'s .github/workflows/release.yml" in message


def test_default_policy_verifies_any_workflow_of_the_repository_on_its_default_branch(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No configuration: the beacon's own workflow at refs/heads/main, main being what the hub says is its default."""
    monkeypatch.delenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", raising=False)
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    remap_subject(monkeypatch, digest)
    code, payload = run_json(capsys, home, github.api_url, "update", *FROM_BEACON)
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified" and provenance["source_ref"] == "refs/heads/main"
    assert "default branch unknown" not in provenance["reason"]
    assert provenance["signer_commit"] == "977e8d08554ca9bda279c96e91be2119fb67c730"
    asked = [r for r in github.requests_to("api", f"/api/repos/{BEACON}") if r.path == f"/api/repos/{BEACON}"]
    assert len(asked) == 1  # the default branch, asked once
    assert not [w for w in payload["warnings"] if "PROVENANCE" in w]


def test_attestation_from_a_branch_that_is_not_the_default_is_exit_8_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    github.set_default_branch(BEACON, "release")
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    remap_subject(monkeypatch, digest)  # only the ref refuses it
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    assert "built from the ref refs/heads/main, not from refs/heads/release or a tag" in payload["error"]["message"]


def test_attestation_for_other_bytes_is_exit_8_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())  # genuine, but for a0cfc712…
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    assert "it attests a0cfc71271d6…, not this file" in payload["error"]["message"]
    assert list((home / "downloads").glob("*")) == []  # rejected bytes are not kept for a resume


def test_tampered_bundle_is_exit_8_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    bundle = copy.deepcopy(real_bundle())
    signature = bundle["dsseEnvelope"]["signatures"][0]["sig"]
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = (
        signature[:20] + ("A" if signature[20] != "A" else "B") + signature[21:]
    )
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, bundle)
    remap_subject(monkeypatch, digest)  # only the signature is wrong
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_failed"


def test_stale_trust_root_is_exit_8_naming_the_root_and_the_refresh(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = DATA / "staging_trusted_root.stale.json"
    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(stale))
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    remap_subject(monkeypatch, digest)
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    error = payload["error"]
    assert "SCT" in error["message"] and str(stale) in error["message"]
    assert "LLAMA_RUNTIME_TRUSTED_ROOT" in error["hint"]


def test_unattested_release_installs_as_absent(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path
) -> None:
    publish(github, REPO, "b7001", real_vulkan_tarball, None)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "absent"
    assert "publishes no build attestation" in payload["active"]["provenance"]["reason"]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_require_provenance_refuses_an_unattested_release(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    publish(github, REPO, "b7001", real_vulkan_tarball, None)
    args = ["--tag", "b7001", "--backend", "vulkan"]
    if how == "flag":
        args.append("--require-provenance")
    else:
        monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", "1")
    code, payload = failing_update(capsys, home, github, *args)
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_missing"
    assert "no build attestation" in payload["error"]["message"]


def test_require_provenance_refuses_switching_to_an_installed_unattested_build(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path
) -> None:
    publish(github, REPO, "b7001", real_vulkan_tarball, None)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0 and payload["active"]["tag"] == "b7001"
    pointer = (home / "active.json").read_bytes()
    args = ["update", "--tag", "b7000", "--backend", "vulkan", "--require-provenance"]
    code, payload = run_json(capsys, home, github.api_url, *args)  # b7000 is installed: a switch, no download
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_missing" and "nothing was switched" in payload["error"]["message"]
    assert (home / "active.json").read_bytes() == pointer


# -- bundles GitHub lists by bundle_url (snappy on a blob host) -------------------------------


def run_with_logs(capsys: pytest.CaptureFixture[str], home: Path, api_url: str, *args: str) -> tuple[int, Any, str]:
    """``update ARGS -vv --json``: exit code, the JSON object, and everything written to stdout and stderr."""
    from llama_runtime.updater.cli.main import main

    code = main(["update", *args, "-vv", "--home", str(home), "--api-url", api_url, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), out + err


def files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("framing", ["block", "framed"])
def test_bundle_url_answer_installs_verified_like_an_inline_one_and_no_token_or_signature_leaks(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    framing: str,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_TOKEN", "t0k-for-the-api-only")
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, None)
    github.add_release_attestation(BEACON, digest, by_url=True)  # an immutable release's: set aside
    github.add_attestation(BEACON, digest, real_bundle(), by_url=True, framing=framing)
    remap_subject(monkeypatch, digest)
    code, payload, output = run_with_logs(capsys, home, github.api_url, *FROM_BEACON)
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified"
    assert (provenance["repository"], provenance["workflow"]) == (BEACON, BEACON_WORKFLOW)
    assert provenance["commit"] == "977e8d08554ca9bda279c96e91be2119fb67c730"
    assert provenance["run_url"] == f"https://github.com/{BEACON}/actions/runs/25821282059/attempts/1"
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["provenance"]["bundle"] == real_bundle()
    api = github.requests_to("api", f"/repos/{BEACON}/attestations/")
    assert [r.headers.get("authorization") for r in api] == ["Bearer t0k-for-the-api-only"]
    blob = github.requests_to("blob", "/attestations/")
    assert len(blob) == 2 and all(r.status == 200 for r in blob)
    assert all("authorization" not in r.headers for r in blob)
    assert "attestation bundle fetched" in output  # -vv shows the fetch, with the URL redacted
    assert BUNDLE_URL_SIGNATURE not in output
    assert files_holding(home, BUNDLE_URL_SIGNATURE) == []


#: Ways a 200 attestations answer can be unusable: (how, what the reason says).
UNUSABLE = [
    ("decompression bomb", "declares 1073741824 bytes once decoded"),
    ("wrong shape", "with neither a bundle nor a bundle_url"),
    ("no list", "holds no list of attestations"),
    ("blob host refuses", "could not be fetched (HTTP 403)"),
    ("not snappy", "is not valid snappy"),
]


def serve_unusable(github: FakeGitHub, digest: str, how: str) -> None:
    if how == "decompression bomb":  # a snappy block whose preamble claims 1 GiB
        github.add_attestation(BEACON, digest, real_bundle(), by_url=True, payload=b"\x80\x80\x80\x80\x04" + b"\0" * 64)
    elif how == "wrong shape":
        github.set_attestations_answer(BEACON, digest, {"attestations": [{"bundle": None, "repository_id": 1}]})
    elif how == "no list":
        github.set_attestations_answer(BEACON, digest, {"attestations": {"bundle": real_bundle()}})
    elif how == "blob host refuses":
        path = github.add_attestation(BEACON, digest, real_bundle(), by_url=True)
        github.inject(str(path), Fault(status=403, times=None))
    else:
        github.add_attestation(BEACON, digest, real_bundle(), by_url=True, payload=b"\x40" + b"\xff" * 64)


@pytest.mark.parametrize(("how", "why"), UNUSABLE, ids=[how for how, _ in UNUSABLE])
def test_unusable_attestations_answer_is_exit_8_when_required_and_unverified_otherwise(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    why: str,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, None)
    serve_unusable(github, digest, how)
    code, payload = failing_update(capsys, home, github, *FROM_BEACON, "--require-provenance")
    assert code == 8, payload
    assert payload["error"]["code"] == "provenance_missing"
    assert why in payload["error"]["message"] and BUNDLE_URL_SIGNATURE not in json.dumps(payload)
    code, payload = run_json(capsys, home, github.api_url, "update", *FROM_BEACON)
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "unverified"
    assert why in payload["active"]["provenance"]["reason"]
    assert files_holding(home, BUNDLE_URL_SIGNATURE) == []


def test_only_a_release_attestation_installs_as_absent_not_refused(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path
) -> None:
    digest = publish(github, REPO, "b7001", real_vulkan_tarball, None)
    github.add_release_attestation(REPO, digest, by_url=True)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "vulkan")
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "absent"
    assert "only attestations of another kind: https://in-toto.io/attestation/release/v0.1" in provenance["reason"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", f"{BEACON}=release.yml"),
        ("LLAMA_RUNTIME_PROVENANCE_SIGNER", f"{BEACON}=.github/workflows/x.yml"),
    ],
)
def test_malformed_signer_opt_in_is_exit_2_naming_the_form_and_nothing_changes(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
) -> None:
    monkeypatch.setenv(name, value)
    publish(github, BEACON, "b7001", real_vulkan_tarball, real_bundle())
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 2, payload
    assert payload["error"]["code"] == "bad_input"
    assert f"{name}=OWNER/NAME=" in payload["error"]["message"]


# -- attack pass of this round: answers that used to end in exit 1 or leak a signature ---------------


def bundle_with_a_malformed_timestamp() -> dict[str, Any]:
    """The real bundle with an empty RFC 3161 timestamp: sigstore refuses it while *parsing*."""
    bundle = real_bundle()
    bundle["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]["signedTimestamp"] = ""
    return bundle


@pytest.mark.parametrize("by_url", [False, True], ids=["inline", "bundle_url"])
def test_a_bundle_sigstore_cannot_even_parse_is_exit_8_not_an_internal_error_and_nothing_changes(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path, by_url: bool
) -> None:
    publish(github, BEACON, "b7001", real_vulkan_tarball, bundle_with_a_malformed_timestamp(), by_url=by_url)
    code, payload = failing_update(capsys, home, github, *FROM_BEACON)
    assert code == 8, payload
    assert "not a valid Sigstore bundle" in payload["error"]["message"]


def test_a_bundle_sigstore_cannot_parse_listed_before_a_good_one_does_not_hide_it(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, bundle_with_a_malformed_timestamp())
    github.add_attestation(BEACON, digest, real_bundle())
    remap_subject(monkeypatch, digest)
    code, payload = run_json(capsys, home, github.api_url, "update", *FROM_BEACON)
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "verified"


@pytest.mark.parametrize(
    "url",
    [
        "https://h:abc/x.json.sn?sig=SIGNATURE",  # a port httpx cannot use: it used to raise InvalidURL
        "https://\u2603.example/x.json.sn?sig=SIGNATURE",
        "/attestations/1.json.sn?sig=SIGNATURE",  # relative: it used to be shown with its query string
        "https://[::1/x.json.sn?sig=SIGNATURE",
    ],
)
def test_an_unusable_bundle_url_is_unverified_with_its_query_hidden_and_exit_8_when_required(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], real_vulkan_tarball: Path, url: str
) -> None:
    digest = publish(github, BEACON, "b7001", real_vulkan_tarball, None)
    github.set_attestations_answer(BEACON, digest, {"attestations": [{"bundle": None, "bundle_url": url}]})
    code, payload = failing_update(capsys, home, github, *FROM_BEACON, "--require-provenance")
    assert code == 8, payload
    assert "SIGNATURE" not in json.dumps(payload)
    assert files_holding(home, "SIGNATURE") == []
    code, payload = run_json(capsys, home, github.api_url, "update", *FROM_BEACON)
    assert code == 0, payload
    assert payload["active"]["provenance"]["status"] == "unverified"
    assert "SIGNATURE" not in json.dumps(payload) and files_holding(home, "SIGNATURE") == []
