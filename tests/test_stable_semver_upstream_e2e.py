"""End to end against upstream as it publishes today (its stable semver releases, its nightly builds).

The fake carries tests/upstream_today.py's shape: hand-cut semver releases (v0.5.0 -> b11146, stable
v0.6.0 -> b11429) behind the newest nightly b11541, every build with today's 36 asset names in
upstream's layouts (small stand-in contents), each file attested the way release-publish.yml
attests (one SLSA statement per build, signed by that era's workflow: release.yml/push before
about b11300, release-publish.yml/workflow_run after) and listed by ``bundle_url`` (snappy on the
blob host). The bundles are minted under a private trust root (tests/sigstore_mint.py, through
``LLAMA_RUNTIME_TRUSTED_ROOT``): no bundle with a ggml-org identity can be had offline, so these
prove the pipeline and the policy end to end, not Sigstore's production keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, run_json
from tests.sigstore_mint import private_sigstore
from tests.upstream_today import STABLE_TAG, STABLE_VERSION, attest_minted, publish_today

REPO = "ggml-org/llama.cpp"
#: A Linux x64 machine with no GPU: the CPU build is the one that fits (plan --platform's view of it).
CPU_HOST = ("--backend", "cpu")


@pytest.mark.e2e
def test_plain_update_against_todays_upstream_installs_stable_with_provenance_verified(
    github: FakeGitHub, home: Path, capsys: pytest.CaptureFixture[str], private_root_env: Path
) -> None:
    attest_minted(github, REPO, publish_today(github), private_sigstore())
    code, payload = run_json(capsys, home, github.api_url, "update", *CPU_HOST, "--require-provenance")
    assert code == 0, payload
    active = payload["active"]
    assert (active["tag"], active["asset"]) == (STABLE_TAG, f"llama-{STABLE_TAG}-bin-ubuntu-x64.tar.gz")
    provenance = active["provenance"]
    assert provenance["status"] == "verified", provenance
    assert (provenance["workflow"], provenance["trigger"]) == (".github/workflows/release-publish.yml", "workflow_run")
    blob = github.requests_to("blob", "/attestations/")
    assert blob and all("authorization" not in r.headers for r in blob)  # the bundle came by URL, no token


@pytest.mark.e2e
def test_stable_mid_release_installs_the_previous_stable_with_its_warning_and_nothing_changes_after(
    github: FakeGitHub, home: Path, capsys: pytest.CaptureFixture[str], private_root_env: Path
) -> None:
    """v0.6.0 is created but its nightly-tag.txt not uploaded yet: stable is v0.5.0's build, and says why."""
    attest_minted(github, REPO, publish_today(github, latest_pointer=False), private_sigstore())
    code, payload = run_json(capsys, home, github.api_url, "update", *CPU_HOST)
    assert code == 0, payload
    assert payload["active"]["tag"] == "b11146" and payload["active"]["provenance"]["status"] == "verified"
    assert (payload["active"]["provenance"]["workflow"], payload["active"]["provenance"]["trigger"]) == (
        ".github/workflows/release.yml",
        "push",
    )  # b11146 is of the release.yml era
    [warning] = [w for w in payload["warnings"] if STABLE_VERSION in w]
    assert "no nightly-tag.txt" in warning and "b11146" in warning
    guard = HomeGuard(None, home)
    code, check = run_json(capsys, home, github.api_url, "check", *CPU_HOST)
    assert code == 0, check
    assert any(STABLE_VERSION in w for w in check["warnings"])
    guard.assert_intact(expected_tag="b11146")
